"""The collector pause (ltsim/gcpause.py) restores what it found, also on an error."""

from __future__ import annotations

import gc
import weakref

import pytest

from ltsim.gcpause import paused


def test_pause_restores_the_collector_state():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves the outer one in force
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


class _Node:
    def __init__(self) -> None:
        self.other = None


def test_resuming_moves_what_the_pause_made_to_the_oldest_generation():
    gc.collect()
    with paused():
        made = [_Node() for _ in range(2000)]
    # not young: the next young collection does not traverse them
    assert not any(gc.is_tracked(x) and x in gc.get_objects(0) for x in made[:3])
    assert any(x is made[0] for x in gc.get_objects(2))
    assert gc.get_freeze_count() == 0  # nothing left frozen


def test_cycles_made_in_the_pause_are_still_collected():
    with paused():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    assert ref() is not None  # a cycle: reference counting alone does not free it
    gc.collect()
    assert ref() is None


def test_a_freeze_made_by_someone_else_is_left_in_force():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with paused():
            _ = [_Node() for _ in range(100)]
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
