"""A small plan is lowered, checked, priced and replayed op by op, a large one over arrays
(``ltsim.optable.SMALL``): both give the same plan, the same check results, the same prices and
the same trace, on every strategy and random batches."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim import optable
from ltsim.costs import UnitCostModel
from ltsim.errors import PlanError
from ltsim.plan import OpKind
from ltsim.sim import engine
from ltsim.strategies import REGISTRY
from tests.property.test_conformance import SMALL_OPTIONS, conformance_ctx


def _cases():
    for name in sorted(REGISTRY):
        yield pytest.param(name, SMALL_OPTIONS.get(name, [{}])[0], id=name)


def _both(fn):
    """``fn()`` with every plan taken op by op, then over arrays."""
    out = []
    saved = optable.SMALL
    try:
        for small in (10**9, 0):
            optable.SMALL = small
            out.append(fn())
    finally:
        optable.SMALL = saved
    return out


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=12, deadline=None)
@given(pp=st.integers(1, 4), dp=st.integers(1, 3), cp=st.sampled_from([1, 2]),
       lengths=st.lists(st.integers(1, 200), min_size=2, max_size=12),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_op_by_op_and_over_arrays_agree(name, options, pp, dp, cp, lengths, recompute):
    strategy = REGISTRY[name]
    ctx = conformance_ctx(name, pp, dp, cp, recompute)

    def run():
        plan = strategy.plan(tuple(lengths), ctx, strategy.parse(options))
        cost = UnitCostModel()
        compiled = engine.compile_plan(plan, cost)
        trace = engine.Engine(cost).run(plan)
        return (plan.programs, compiled.steps, tuple(trace.events), trace.memory,
                trace.host_memory, trace.peak_memory_bytes(),
                trace.seconds_by_device(frozenset({"F", "B", "R", "W", "OPT"}), "compute"))

    rows, arrays = _both(run)
    assert rows == arrays


def _megatron():
    strategy = REGISTRY["megatron-1f1b"]
    return strategy.plan((4, 2, 1, 1), conformance_ctx("megatron-1f1b", 2, 1, 1, "selective"),
                         strategy.parse({}))


def _edit(plan, token, **changes):
    return plan.with_programs(tuple(dataclasses.replace(p, ops=tuple(
        o.evolve(**changes) if o.token == token else o for o in p.ops)) for p in plan.programs))


@pytest.mark.parametrize("token,changes", [
    ("s1F2", {"chunk": 1}), ("s1F2", {"stage": 0}), ("s1F2", {"stream": "comm"}),
    ("s1F2", {"work": None}), ("s0SEND_F2", {"comm": None}), ("s0B1", {"frees": ()}),
    ("s1B2", {"kind": OpKind.F})])
def test_both_ways_report_one_problem(token, changes):
    rows, arrays = _both(lambda: _problem(_edit(_megatron(), token, **changes)))
    assert rows == arrays


def _problem(bad) -> str:
    with pytest.raises(PlanError) as info:
        bad.validate()
    return str(info.value)


def _bad_slices():
    """A plan whose first chunk holds a sequence not in the batch; one whose batch says other
    lengths than its chunks' slices cover; one whose second chunk has more tokens than its ops
    cover."""
    plan = _megatron()
    first, second = plan.chunks[0], plan.chunks[1]
    outside = first._replace(slices=(first.slices[0]._replace(seq=9),))
    longer = second._replace(slices=(second.slices[0]._replace(stop=3),))
    return [dataclasses.replace(plan, chunks=(outside, *plan.chunks[1:])),
            dataclasses.replace(plan, seq_lengths=(4, 2, 1, 2)),
            dataclasses.replace(plan, chunks=(first, longer, *plan.chunks[2:]))]


@pytest.mark.parametrize("case", range(3))
def test_both_ways_report_one_coverage_problem(case):
    bad = _bad_slices()[case]
    rows, arrays = _both(lambda: _problem(bad))
    assert rows == arrays
    assert ("not in the batch", "slices cover", "token-layers")[case] in rows


def _renumbered(plan, old: int, new: int):
    """``plan`` with chunk ``old`` called ``new`` everywhere: the chunk, its ops, their works,
    buffers, comms and the dependencies on them."""
    def work(w):
        return dataclasses.replace(w, chunk=new) if w is not None and w.chunk == old else w

    def keys(ks):
        return tuple(k._replace(chunk=new) if k.chunk == old else k for k in ks)

    def op(o):
        return o.evolve(
            chunk=new if o.chunk == old else o.chunk, work=work(o.work),
            comm=o.comm._replace(work=work(o.comm.work)) if o.comm is not None else None,
            allocs=tuple(b._replace(work=work(b.work)) for b in o.allocs),
            frees=tuple(b._replace(work=work(b.work)) for b in o.frees),
            deps=keys(o.deps), start_deps=keys(o.start_deps))

    chunks = tuple(c._replace(index=new) if c.index == old else c for c in plan.chunks)
    return dataclasses.replace(plan, chunks=chunks).with_programs(tuple(
        dataclasses.replace(p, ops=tuple(map(op, p.ops))) for p in plan.programs))


def test_a_chunk_index_far_past_the_others_is_checked_and_replayed_alike():
    """Chunk indices are names, not array sizes: one of 10**12 costs no memory (review of issue
    13: the array paths had sized arrays by the largest index)."""
    def run():
        plan = _renumbered(_megatron(), 3, 10**12)
        plan.validate()
        return tuple(engine.Engine(UnitCostModel()).run(plan).events)

    rows, arrays = _both(run)
    assert rows == arrays
    assert {e.chunk for e in rows} >= {10**12}


def test_both_ways_refuse_a_negative_chunk_index():
    """The op table keeps -1 for an op of no chunk, so chunks count from 0."""
    rows, arrays = _both(lambda: _problem(_renumbered(_megatron(), 3, -5)))
    assert rows == arrays and "chunk -5 has a negative index" in rows
    rows, arrays = _both(lambda: _problem(_edit(_megatron(), "s1F2", chunk=-5)))
    assert rows == arrays and "names chunk -5" in rows


def test_a_sequence_outside_the_batch_beside_mirrored_replicas_is_reported():
    """A chunk of no mirror that holds a sequence the batch lacks: the coverage rule's message,
    not an IndexError in the mirrors' rule (review of issue 13)."""
    strategy = REGISTRY["megatron-1f1b"]
    plan = strategy.plan((4, 5, 4, 2, 3, 2), conformance_ctx("megatron-1f1b", 1, 3, 1, "selective"),
                         strategy.parse({}))
    assert plan.mirrors and 2 not in {c for m in plan.mirrors for pair in m.chunks for c in pair}
    chunk = plan.chunks[2]
    bad = dataclasses.replace(plan, chunks=(*plan.chunks[:2], chunk._replace(
        slices=(chunk.slices[0]._replace(seq=9),)), *plan.chunks[3:]))
    rows, arrays = _both(lambda: _problem(bad))
    assert rows == arrays and "chunk 2 holds sequence 9, not in the batch" in rows


@pytest.mark.parametrize("recompute, cp", [("selective", 1), ("selective", 2), ("full", 1)])
def test_both_ways_defer_the_same_context_gradients(recompute, cp):
    """The layer-by-layer deferral of context K/V gradients (sim/layerwise.layerwise_deferrals),
    on ChunkFlow's dependent chunks of one 32K sequence, with and without a CP split."""
    import numpy as np

    from ltsim.sim.layerwise import layerwise_deferrals
    from tests.unit.test_chunkflow import _last_backward_deferral

    _, _, cost, plan = _last_backward_deferral(recompute, cp)
    sizes = np.array([cost.buffer_bytes(b) for b in plan.table.buffers], dtype=np.int64)
    rows, arrays = _both(lambda: layerwise_deferrals(plan.table, sizes))
    assert rows == arrays and rows


def test_a_valid_plan_passes_the_buffer_check_by_counts_alone():
    """The buffer rule's shortcut (every (device, buffer) pair allocated once and freed once)
    holds for a strategy's plan, and fails for one that leaks a buffer, which the ordered pass
    then reports."""
    from ltsim.plan_check import _once_each

    def counts(plan):
        table = plan.table
        rows = table.order()
        return (table, rows, table.effects("allocs")[0][rows], table.effects("frees")[0][rows])

    assert _once_each(*counts(_megatron()))
    leaky = _edit(_megatron(), "s0B1", frees=())
    assert not _once_each(*counts(leaky))
    with pytest.raises(PlanError, match="is never freed"):
        leaky.validate()
