"""The cyclic garbage collector paused around plan building and replay (validation/perf/README.md).

A plan is 10^5-10^6 small acyclic objects (ops, works, buffers, trace events). With the collector
on, building one triggers young- and old-generation passes over all of them; re-enabling it
between phases makes the next allocation traverse everything allocated meanwhile, so the runner
pauses it once per batch (2-3% of a 1024-GPU simulation beyond pausing each phase:
validation/perf/gc_pause.py). Reference counting still frees everything; cycles made meanwhile
(none on these paths) wait for the next full collection.

Resuming, the objects made during the pause and still alive are moved to the oldest generation
(``gc.freeze`` then ``gc.unfreeze``: list splices, no traversal) rather than left young: the
first young collection after the pause would otherwise traverse them all (0.15 s of a 1.5 s
1024-GPU simulation, validation/perf/README.md). Skipped when someone else has frozen objects
(``gc.get_freeze_count``), whose freeze ``unfreeze`` would undo.

The ``ltsim`` program also leaves its objects out of the collections that the interpreter's
own shutdown runs (``before_exit``): 20 of the 30-35 ms a command-line sweep took to exit after
its last line (validation/perf/README.md).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused() -> Iterator[None]:
    """Collector off inside, restored after (nested uses are free)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            promote()
            gc.enable()


def promote() -> None:
    """Every object the collector tracks into its oldest generation, without traversing them."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def before_exit() -> None:
    """For a process about to exit (the ``ltsim`` program's last step, never a library call):
    everything alive into the permanent generation, and the collector off, so that the
    interpreter's shutdown does not traverse it all again. Reference counting still frees
    objects and atexit handlers still run; only objects left in reference cycles at exit are
    not collected (Python promises no finalizer for objects alive at exit either), and the
    operating system takes back their memory."""
    gc.disable()
    gc.freeze()
