"""`python -m ltsim.profiler --device cpu --out DIR [...]`: the profiler without the `ltsim` front end."""

from __future__ import annotations

import sys

from ltsim.profiler.cli import main

if __name__ == "__main__":
    sys.exit(main())
