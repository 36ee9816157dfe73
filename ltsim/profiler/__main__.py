"""`python -m ltsim.profiler --device cpu --out DIR [...]`: the profiler without the `ltsim` front end."""

from __future__ import annotations

import sys

from ltsim.cli_device import profile_main  # the command (messages, exit codes) is the front end's

if __name__ == "__main__":
    sys.exit(profile_main())
