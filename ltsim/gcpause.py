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
