"""Mirrored DP replicas (ltsim/mirrors.py, issue 13): a strategy plans one replica of each token
layout; written out, the plan is the one it plans without mirrors, and the engine's trace of it,
written out, is the trace of that plan, memory included."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ltsim.costs import UnitCostModel
from ltsim.costs.table import TableCostModel
from ltsim.errors import PlanError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.mirrors import expand_trace
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.sim.engine import Engine
from ltsim.sim.metrics import batch_metrics
from ltsim.strategies import REGISTRY
from ltsim.strategies.base import PlanContext
from ltsim.strategies.schedule import Layout

CASES = [("megatron-1f1b", {}, 4, 4, 1, "selective"),
         ("megatron-1f1b", {"micro_batch_size": 2}, 2, 3, 2, "full"),
         ("chunkflow", {"chunk_size": 16, "k": 2}, 3, 2, 1, "selective"),
         ("chunkflow", {"chunk_size": 8, "k": 1}, 2, 4, 2, "none"),
         ("deepspeed-cp", {"bucket_size": 40}, 1, 3, 2, "selective"),  # ZeRO-2: a reduction per step
         ("sorted-batching", {"bucket_size": 64}, 1, 2, 4, "full")]
BASE = (40, 7, 23, 16, 3)


def _replicated(options, dp):
    """A batch in which every one of ``dp`` replicas gets BASE, as strategies deal a batch over
    the ranks (``deal_replicas``): each block of ``micro_batch_size`` sequences (one when packing)
    ``dp`` times in a row."""
    size = options.get("micro_batch_size") or 1
    base = BASE[:len(BASE) - len(BASE) % size]  # whole micro-batches, as Megatron's batches are
    blocks = [base[i:i + size] for i in range(0, len(base), size)]
    return tuple(x for block in blocks for _ in range(dp) for x in block)


def _ctx(pp, dp, cp, recompute, cost=None):
    """DeepSpeed's strategies (pp 1) run ZeRO-2, as in the conformance suite."""
    return PlanContext(model=get_model("qwen2.5-7b"), cost=cost or UnitCostModel(),
                       parallel=ParallelConfig(pp=pp, dp=dp, cp=cp, recompute=recompute,
                                               zero_stage=2 if pp == 1 else 1))


def _both(monkeypatch, name, options, lengths, ctx):
    """The plan as the strategy makes it, and as it makes it with no replica named a mirror."""
    strategy = REGISTRY[name]
    compact = strategy.plan(tuple(lengths), ctx, strategy.parse(options))
    with monkeypatch.context() as patch:
        patch.setattr(Layout, "mirrors", lambda self, replicas, seq_lengths, columns=None: ())
        full = strategy.plan(tuple(lengths), ctx, strategy.parse(options))
    return compact, full


@pytest.mark.parametrize("name,options,pp,dp,cp,recompute", CASES)
def test_a_mirrored_plan_written_out_is_the_plan_without_mirrors(monkeypatch, name, options, pp, dp,
                                                                  cp, recompute):
    ctx = _ctx(pp, dp, cp, recompute)
    compact, full = _both(monkeypatch, name, options, _replicated(options, dp), ctx)
    assert [m.replica for m in compact.mirrors] == list(range(1, dp))
    assert {p.device for p in compact.programs} == {d.index for d in compact.devices if d.replica == 0}
    assert not full.mirrors
    assert compact.expand() == full
    compact.validate()  # the full rule set, cycle search included


@pytest.mark.parametrize("name,options,pp,dp,cp,recompute", CASES)
def test_the_engine_replays_a_mirror_once_and_reports_every_device(monkeypatch, name, options, pp,
                                                                   dp, cp, recompute):
    ctx = _ctx(pp, dp, cp, recompute)
    compact, full = _both(monkeypatch, name, options, _replicated(options, dp), ctx)
    engine = Engine(ctx.cost)
    shared, whole = engine.run(compact), engine.run(full)
    assert len(shared.events) * dp == len(whole.events)
    assert shared.mirror_of == tuple(d.stage for d in compact.devices)  # replica 0's devices
    written = expand_trace(shared, compact)
    assert written.events == whole.events
    assert written.memory == whole.memory and written.host_memory == whole.host_memory
    assert shared.peak_memory_bytes() == whole.peak_memory_bytes()
    assert shared.final_memory_bytes() == whole.final_memory_bytes()
    a, b = batch_metrics(compact, shared, 1.0), batch_metrics(full, whole, 1.0)
    assert math.isclose(a.busy_s, b.busy_s, rel_tol=1e-12)
    assert math.isclose(a.bubble_ratio, b.bubble_ratio, rel_tol=1e-12, abs_tol=1e-15)
    assert replace(a, busy_s=0, bubble_ratio=0, recompute_s=0) == replace(
        b, busy_s=0, bubble_ratio=0, recompute_s=0)


def test_only_replicas_with_an_earlier_ones_layout_are_mirrors():
    """dp 3, the batch dealt (rank r gets sequences r and r + 3): replicas 0 and 2 get the same
    lengths, replica 1 others; sequence ids are renumbered in order (replica 2's first sequence
    plays replica 0's first)."""
    ctx = _ctx(2, 3, 1, "selective")
    strategy = REGISTRY["megatron-1f1b"]
    plan = strategy.plan((5, 6, 5, 9, 6, 9), ctx, strategy.parse({}))
    (mirror,) = plan.mirrors
    assert (mirror.replica, mirror.source) == (2, 0)
    assert mirror.chunks == ((0, 4), (1, 5))
    assert mirror.devices == ((0, 4), (1, 5))
    assert {p.device for p in plan.programs} == {0, 1, 2, 3}
    swapped = strategy.plan((5, 6, 9, 9, 6, 5), ctx, strategy.parse({}))
    assert not swapped.mirrors  # same lengths in another order: another schedule


def test_a_mirror_that_does_not_repeat_its_source_is_refused():
    ctx = _ctx(2, 2, 1, "selective")
    strategy = REGISTRY["megatron-1f1b"]
    plan = strategy.plan((5, 5, 9, 9), ctx, strategy.parse({}))  # each rank (5, 9)
    (mirror,) = plan.mirrors
    bad_chunks = replace(plan, mirrors=(mirror._replace(chunks=((0, 3), (1, 2))),))
    with pytest.raises(PlanError, match="does not have chunk 0's token layout"):
        bad_chunks.validate()
    bad_devices = replace(plan, mirrors=(mirror._replace(devices=((0, 3), (1, 2))),))
    with pytest.raises(PlanError, match="cannot repeat device 0"):
        bad_devices.validate()
    missing_device = replace(plan, mirrors=(mirror._replace(devices=((0, 2),)),))
    with pytest.raises(PlanError, match="device 3 repeats no device"):
        missing_device.validate()
    same_replica = replace(plan, mirrors=(mirror._replace(chunks=((0, 1), (1, 3))),))
    with pytest.raises(PlanError, match="chunk 1 cannot repeat chunk 0"):
        same_replica.validate()


def _table_ctx(gpus_per_node):
    """tp 2, pp 2, dp 3 on the profile-backed model: replica r's stages start at GPUs 2r and
    2r + 6 (Megatron-LM's rank order), so its sends go from GPU 2r to 2r + 6."""
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=-(-12 // gpus_per_node),
                          gpus_per_node=gpus_per_node)
    model = get_model("qwen2.5-7b")
    return PlanContext(model=model, cost=TableCostModel(model, cluster),
                       parallel=ParallelConfig(tp=2, pp=2, dp=3))


@pytest.mark.parametrize("gpus_per_node,shared", [(8, False), (12, True), (2, True)])
def test_a_mirror_whose_sends_cross_other_node_boundaries_is_replayed_written_out(
        monkeypatch, gpus_per_node, shared):
    """With 8 GPUs a node replica 0 sends within node 0 (GPU 0 to 6) and replicas 1 and 2 across
    nodes (2 to 8, 4 to 10): their sends cost more, so the engine replays the plan written out.
    With 12 GPUs a node every send stays in one, with 2 every send crosses: the mirrors are
    replayed once. The trace is the full plan's either way."""
    ctx = _table_ctx(gpus_per_node)
    compact, full = _both(monkeypatch, "megatron-1f1b", {}, (4096,) * 6, ctx)
    assert len(compact.mirrors) == 2
    engine = Engine(ctx.cost)
    trace = engine.run(compact)
    assert bool(trace.mirror_of) == shared
    assert expand_trace(trace, compact).events == engine.run(full).events


@pytest.mark.parametrize("name,options,pp", [("megatron-1f1b", {}, 2),
                                             ("chunkflow", {"chunk_size": 16, "k": 1}, 2),
                                             ("deepspeed-cp", {"bucket_size": 40}, 1)])
def test_replicas_without_sequences_mirror_each_other(monkeypatch, name, options, pp):
    """dp 4 over two sequences: replicas 2 and 3 get none (they still reduce gradients)."""
    ctx = _ctx(pp, 4, 1, "selective")
    compact, full = _both(monkeypatch, name, options, (30, 30), ctx)
    assert [(m.replica, m.source) for m in compact.mirrors] == [(1, 0), (3, 2)]
    assert compact.expand() == full
    engine = Engine(ctx.cost)
    assert expand_trace(engine.run(compact), compact).events == engine.run(full).events


@pytest.mark.parametrize("options, extra", [({}, 0), ({}, 2), ({"micro_batch_size": 2}, 0),
                                            ({"pack_tokens": 4096}, 0)])
def test_the_slice_columns_a_strategy_hands_the_checks_are_its_chunks(options, extra):
    """Megatron makes its chunks' slice columns once, for Layout.mirrors and the plan's checks
    (Schedule.columns), from the dealt ids where each chunk is a whole sequence
    (work.whole_columns): they must be the columns of the plan's own chunks, of the same
    dtype, also with a short last round (``extra`` sequences), and a plan that breaks a rule
    the checks read them for is still refused."""
    import numpy as np

    from ltsim.chunk_check import _pieces
    from ltsim.work import slice_columns

    ctx = _ctx(2, 3, 1, "selective")
    strategy = REGISTRY["megatron-1f1b"]
    batch = _replicated(options, 3)
    plan = strategy.plan((*batch, *batch[:extra]), ctx, strategy.parse(options))
    assert plan.mirrors
    handed, made = _pieces(plan), slice_columns(plan.chunks)
    assert handed.keys() == made.keys()
    for name in made:
        assert np.array_equal(handed[name], made[name]), name
        assert handed[name].dtype == made[name].dtype, name
    broken = replace(plan, seq_lengths=(*plan.seq_lengths[:-1], plan.seq_lengths[-1] + 1))
    with pytest.raises(PlanError, match="token layout"):
        broken.validate()
