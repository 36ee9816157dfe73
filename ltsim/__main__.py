"""``python -m ltsim``: the command line."""

from ltsim.cli import program

program()
