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
       recompute=st.sampled_from(["selective", "full"]))
def test_equal_microbatches_bubble_is_closed_form(p, m, length, recompute):
    """With equal micro-batches, bubble = (p-1)/(m+p-1) and makespan = (m+p-1)(F+B), or with
    full recompute (m+p-1)(F+R+B): Megatron recomputes inside the backward step, after the
    output gradient has arrived (the recompute ran ahead of it, in the bubble: 3s(m+p-1) + ms)."""
    ctx = unit_ctx(pp=p, recompute=recompute)
    plan = MEGATRON.plan((length,) * m, ctx, MEGATRON.parse({}))
    trace = unit_engine().run(plan)
    metrics = batch_metrics(plan, trace, 0.0)
    assert metrics.bubble_ratio == pytest.approx((p - 1) / (m + p - 1))
    per_microbatch = (4 if recompute == "full" else 3) * length
    assert trace.makespan_s == pytest.approx((m + p - 1) * per_microbatch)


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
