"""Hypothesis invariants of the 1F1B pipeline on the unit preset (closed forms, determinism)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.costs import UnitCostModel
from ltsim.sim.engine import Engine
from ltsim.sim.metrics import batch_metrics
from ltsim.strategies import get_strategy
from tests.conftest import unit_ctx, unit_engine

MEGATRON = get_strategy("megatron-1f1b")


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 32), length=st.integers(1, 5),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_equal_microbatches_bubble_is_closed_form(p, m, length, recompute):
    """With equal micro-batches, bubble = (p-1)/(m+p-1) and makespan = (m+p-1)(F+B), or with
    full recompute (m+p-1)(F+R+B): Megatron recomputes inside the backward step, after the
    output gradient has arrived (the recompute ran ahead of it, in the bubble: 3s(m+p-1) + ms).
    Stage s holds at most min(m, p - s) micro-batches' activations (1F1B's warm-up depth); the
    unit preset charges a token's activations one byte and keeps nothing static, and under full
    recompute only one micro-batch's one-layer working set is live at a time."""
    ctx = unit_ctx(pp=p, recompute=recompute)
    plan = MEGATRON.plan((length,) * m, ctx, MEGATRON.parse({}))
    trace = unit_engine().run(plan)
    metrics = batch_metrics(plan, trace, 0.0)
    assert metrics.bubble_ratio == pytest.approx((p - 1) / (m + p - 1))
    per_microbatch = (4 if recompute == "full" else 3) * length
    assert trace.makespan_s == pytest.approx((m + p - 1) * per_microbatch)
    held = [1] * p if recompute == "full" else [min(m, p - s) for s in range(p)]
    assert list(trace.peak_memory_bytes()) == [n * length for n in held]


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), dp=st.integers(1, 3),
       lengths=st.lists(st.integers(1, 50), min_size=3, max_size=24),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_random_batches_same_trace_twice(p, dp, lengths, recompute):
    ctx = unit_ctx(pp=p, dp=dp, recompute=recompute)
    plan = MEGATRON.plan(tuple(lengths), ctx, MEGATRON.parse({}))
    first = Engine(UnitCostModel()).run(plan)
    second = Engine(UnitCostModel()).run(MEGATRON.plan(tuple(lengths), ctx, MEGATRON.parse({})))
    assert first == second


@settings(max_examples=200, deadline=None)
@given(m=st.integers(0, 40), num_stages=st.integers(1, 10), data=st.data())
def test_the_steady_1f1b_order_is_the_general_one(m, num_stages, data):
    """interleave_1f1b writes Megatron's order at once when every chunk is one forward and one
    backward in forward order (pipeline._steady); the loop gives the same order."""
    from ltsim.plan import Keep, OpKind
    from ltsim.strategies import pipeline
    from ltsim.strategies.schedule import Action

    stage = data.draw(st.integers(0, num_stages - 1))
    fwd = [[Action(OpKind.F, c, Keep.ALL)] for c in range(m)]
    bwd = [[Action(OpKind.B, c, Keep.ALL)] for c in range(m)]
    written = pipeline.interleave_1f1b(fwd, bwd, stage, num_stages)
    assert pipeline._steady(fwd, bwd, num_stages - stage) == written
    original = pipeline._steady
    pipeline._steady = lambda *args: None
    try:
        assert pipeline.interleave_1f1b(fwd, bwd, stage, num_stages) == written
    finally:
        pipeline._steady = original


SEQ1F1B = get_strategy("seq1f1b")


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 12), k=st.integers(1, 6), unit=st.integers(1, 3),
       split=st.sampled_from(["average", "uniform_comp"]),
       checkpointing=st.sampled_from(["none", "uniform"]))
def test_seq1f1b_equal_segments_are_closed_form(p, m, k, unit, split, checkpointing):
    """Seq1F1B's original variant cuts each of m equal sequences into k segments of L/k tokens
    (equal tokens, and on the linear unit preset equal compute too) and pipelines the k m
    segments as 1F1B does micro-batches, with a warm-up of p - s + k - 1 forwards on stage s:
    makespan (k m + p - 1) 3L/k, bubble (p - 1)/(k m + p - 1), and stage s holds at most
    min(k m, p - s + k - 1) segments' activations (p = k = 4: stage 0 holds 7/16 of 1F1B's)."""
    length = k * unit
    ctx = unit_ctx(pp=p, recompute="selective")
    options = SEQ1F1B.parse({"variant": "original", "num_splits": k, "split": split,
                             "checkpointing": checkpointing})
    plan = SEQ1F1B.plan((length,) * m, ctx, options)
    trace = unit_engine().run(plan)
    metrics = batch_metrics(plan, trace, 0.0)
    assert trace.makespan_s == pytest.approx((k * m + p - 1) * 3 * unit)
    assert metrics.bubble_ratio == pytest.approx((p - 1) / (k * m + p - 1))
    assert list(trace.peak_memory_bytes()) == [min(k * m, p - s + k - 1) * unit for s in range(p)]
