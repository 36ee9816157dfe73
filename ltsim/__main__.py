"""``python -m ltsim``: the command line."""

import sys

from ltsim.cli import main

sys.exit(main())
