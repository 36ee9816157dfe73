"""The engine's replay against two references, on every strategy and random batches (issue 13):

- a plain list-scheduling recurrence over the same compiled plan (validation/perf/recurrence.py,
  the benchmark's reference): the same start and end for every op;
- the replay of every DP replica (identical replicas not shared, mirrored replicas written out):
  the same trace, memory included, when replicas are identical and the engine replays one per
  class, or the plan names them as mirrors of one (ltsim/mirrors.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.costs import UnitCostModel
from ltsim.mirrors import expand_trace
from ltsim.sim import engine, replicas
from ltsim.strategies import REGISTRY
from ltsim.trace import Event, EventTable
from tests.property.test_conformance import SMALL_OPTIONS, conformance_ctx

_PATH = Path(__file__).resolve().parents[2] / "validation" / "perf" / "recurrence.py"
_SPEC = importlib.util.spec_from_file_location("recurrence", _PATH)
recurrence = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(recurrence)


def _plan(name, options, pp, dp, cp, lengths, recompute):
    strategy = REGISTRY[name]
    ctx = conformance_ctx(name, pp, dp, cp, recompute)
    return strategy.plan(tuple(lengths), ctx, strategy.parse(options))


def _cases():
    for name in sorted(REGISTRY):
        yield pytest.param(name, SMALL_OPTIONS.get(name, [{}])[0], id=name)


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=15, deadline=None)
@given(pp=st.integers(1, 4), dp=st.integers(1, 3), cp=st.sampled_from([1, 2]),
       lengths=st.lists(st.integers(1, 200), min_size=2, max_size=12),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_replay_times_every_op_as_the_plain_recurrence(name, options, pp, dp, cp, lengths,
                                                       recompute):
    compiled = engine.compile_plan(_plan(name, options, pp, dp, cp, lengths, recompute).expand(),
                                   UnitCostModel())
    start, finish, _, _ = engine.replay(compiled)
    recurrence.check(compiled, start, finish)


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=15, deadline=None)
@given(pp=st.integers(1, 4), dp=st.integers(2, 4), cp=st.sampled_from([1, 2]),
       base=st.lists(st.integers(1, 200), min_size=1, max_size=4), copies=st.integers(2, 6),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_identical_replicas_replayed_once_give_the_full_trace(name, options, pp, dp, cp, base,
                                                              copies, recompute):
    plan = _plan(name, options, pp, dp, cp, base * copies, recompute)
    cost = UnitCostModel()
    compiled = engine.compile_plan(plan.expand(), cost)
    full = engine.build_trace(compiled, *engine.replay(compiled))
    shared = expand_trace(engine.Engine(cost).run(plan), plan)
    assert shared.events == full.events
    assert shared.memory == full.memory and shared.host_memory == full.host_memory


def test_equal_replicas_are_found_and_replayed_once():
    """Megatron, dp 4 over 8 equal sequences, written out (the strategy names them as mirrors of
    one, ltsim/mirrors.py): one class of four replicas, one replayed."""
    plan = _plan("megatron-1f1b", {}, 2, 4, 1, [64] * 8, "selective").expand()
    compiled = engine.compile_plan(plan, UnitCostModel())
    classes = replicas.replica_classes(plan, compiled)
    assert classes is not None and len(classes) == 1 and len(classes[0]) == 4
    distinct = _plan("megatron-1f1b", {}, 2, 4, 1, [64] * 7 + [65], "selective").expand()
    classes = replicas.replica_classes(distinct, engine.compile_plan(distinct, UnitCostModel()))
    assert classes is not None and sorted(len(c) for c in classes) == [1, 3]


def test_replicas_with_distinct_chunk_layouts_skip_the_op_by_op_comparison():
    """Every replica's chunks differ: no class is looked for (the replay is the full one)."""
    plan = _plan("megatron-1f1b", {}, 2, 4, 1, [64, 65, 66, 67, 68, 69, 70, 71], "selective")
    assert replicas._all_distinct(plan, {d.replica for d in plan.devices})
    compiled = engine.compile_plan(plan, UnitCostModel())
    assert replicas.replica_classes(plan, compiled) is None
    equal = _plan("megatron-1f1b", {}, 2, 4, 1, [64] * 8, "selective").expand()
    assert not replicas._all_distinct(equal, {d.replica for d in equal.devices})


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=10, deadline=None)
@given(pp=st.integers(1, 4), dp=st.integers(1, 3), cp=st.sampled_from([1, 2]),
       lengths=st.lists(st.integers(1, 200), min_size=2, max_size=12),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_the_lazy_event_table_is_the_sorted_events_and_gives_their_metrics(name, options, pp, dp,
                                                                           cp, lengths, recompute):
    """The engine's trace keeps its events as columns (trace.EventTable): written out they are the
    Events of every op sorted by (start, device, stream), and the makespan and busy seconds read
    from the columns equal those summed over the written-out events."""
    plan = _plan(name, options, pp, dp, cp, lengths, recompute)
    cost = UnitCostModel()
    lazy = engine.Engine(cost).run(plan)
    assert isinstance(lazy.events, EventTable)
    compiled = engine.compile_plan(plan, cost)
    # a mirrored replica's members of a collective do not arrive (the engine's own sizes)
    sizes = (replicas.barrier_sizes(compiled, set(range(len(compiled.programs))))
             if plan.mirrors else None)
    start, finish, _, _ = engine.replay(compiled, barrier_sizes=sizes)
    ops = compiled.ops
    expected = sorted((Event(device, stream, ops[i].token, ops[i].kind.value, ops[i].stage,
                             ops[i].chunk, start[i], finish[i])
                       for device, stream, rows in compiled.programs for i in rows),
                      key=lambda e: (e.start_s, e.device, e.stream))
    written = replace(lazy, events=tuple(lazy.events))
    assert lazy.events == tuple(expected) and len(lazy.events) == len(expected)
    assert lazy == written and lazy.makespan_s == written.makespan_s
    for kinds, stream in ((frozenset({"F", "B", "R", "W", "OPT"}), "compute"), (frozenset({"R"}), None)):
        assert lazy.seconds_by_device(kinds, stream) == written.seconds_by_device(kinds, stream)
        naive = {}
        for e in expected:
            if e.kind in kinds and (stream is None or e.stream == stream):
                naive[e.device] = naive.get(e.device, 0.0) + e.duration_s
        got = lazy.seconds_by_device(kinds, stream)
        assert got.keys() == naive.keys()
        assert all(got[d] == pytest.approx(naive[d], rel=1e-12) for d in naive)


def test_pipeline_sends_ride_their_producers_process():
    # every SEND waits only for the compute op that made its tensor, in producer order: the
    # compute process computes it (engine._riders), so no SEND stream has a process of its own
    plan = _plan("megatron-1f1b", {}, 4, 1, 1, [64] * 6, "selective")
    compiled = engine.compile_plan(plan, UnitCostModel())
    riders = engine._riders(compiled, None)
    sends = {i for i, op in enumerate(compiled.ops) if op.stream == "comm"}
    after = [riders.after(i) for i in range(len(compiled.ops))]
    assert sends and {j for rows in after for j in rows} == sends
    for trigger, rows in enumerate(after):
        if rows:
            assert compiled.ops[trigger].stream == "compute"
            assert all(compiled.steps[j][5] == (trigger,) for j in rows)
    start, finish, _, _ = engine.replay(compiled)
    recurrence.check(compiled, start, finish)


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=8, deadline=None)
@given(pp=st.integers(1, 4), dp=st.integers(1, 3), cp=st.sampled_from([1, 2]),
       lengths=st.lists(st.integers(1, 200), min_size=2, max_size=10))
def test_riders_change_no_time_and_no_memory_change(name, options, pp, dp, cp, lengths):
    # the same replay with every program in a process of its own: identical starts, ends and
    # device and host memory deltas, replicas shared or not
    from unittest import mock

    compiled = engine.compile_plan(_plan(name, options, pp, dp, cp, lengths, "selective").expand(),
                                   UnitCostModel())
    with_riders = engine.replay(compiled)
    with mock.patch.object(engine, "_riders", lambda compiled, only: engine.Riders.none(len(compiled.dur))):
        alone = engine.replay(compiled)
    assert with_riders == alone
