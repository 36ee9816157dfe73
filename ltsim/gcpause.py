"""The cyclic garbage collector paused around plan building and replay (validation/perf/README.md).

A plan is 10^5-10^6 small acyclic objects (ops, works, buffers, trace events). With the collector
on, building one triggers young- and old-generation passes over all of them; re-enabling it
between phases makes the next allocation traverse everything allocated meanwhile, so the runner
pauses it once per batch (2-3% of a 1024-GPU simulation beyond pausing each phase:
validation/perf/gc_pause.py). Reference counting still frees everything; cycles made meanwhile
(none on these paths) wait for the next collection.
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
            gc.enable()
