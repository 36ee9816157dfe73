"""The plan IR's capabilities, each on a toy plan built with the strategy toolkit and the lowering
passes: (a) ranks of one CP group doing different work, (b) host offload on the copy stream,
(c) layer-range checkpointing, (d) gradients for some chunks only. (e), a cost query with no plan,
is in test_costs.py; CP and DP traffic as their own comm-stream ops at the end of this file."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.costs import UnitCostModel
from ltsim.costs.table import TableCostModel
from ltsim.errors import PlanError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.plan import Chunk, Device, Keep, OpKind, Slice, Split, op_key
from ltsim.sim.engine import Engine
from ltsim.strategies.lowering import DEFAULT_PASSES, lower
from ltsim.strategies.offload import offload
from ltsim.strategies.pipeline import interleave_1f1b, kept_actions, one_f_one_b
from ltsim.strategies.base import PlanContext
from ltsim.strategies.schedule import Action, Layout, Mem, Schedule, mems

TINY = get_model("llama-tiny")


def _schedule(layout, chunks, orders, **kw):
    lengths = {}
    for chunk in chunks:
        for s in chunk.slices:
            lengths[s.seq] = max(lengths.get(s.seq, 0), s.stop)
    return Schedule(strategy="toy", options={}, seq_lengths=tuple(lengths[i] for i in sorted(lengths)),
                    chunks=tuple(chunks), devices=kw.pop("devices", layout.devices()), orders=orders,
                    **kw)


def _events(trace, device, stream=None):
    return [e for e in trace.events if e.device == device and (stream is None or e.stream == stream)]


# (a) -------------------------------------------------------------------------------------------
def test_ranks_of_one_cp_group_do_different_local_work_and_share_a_sharded_sequence():
    """Rank 0 holds sequence 0 whole (6 tokens), rank 1 sequence 1 (2 tokens); sequence 2 (8 tokens)
    is sharded over both. Unit costs: each rank forwards its local sequence, then its half of the
    shared one, which needs the other rank (a CP collective of the two devices)."""
    layout = Layout.of(ParallelConfig(cp=2, zero_stage=0), TINY.num_layers)
    chunk = Chunk(0, (Slice(0, 0, 6), Slice(1, 0, 2), Slice(2, 0, 8)))
    devices = tuple(Device(index=r, stage=0, replica=0, layers=(0, TINY.num_layers), embed=True,
                           head=True, cp_width=1, cp_rank=r, zero_stage=0, num_shards=2)
                    for r in range(2))
    whole, shared = Split(), Split(cp=2)

    def rank_actions(local):
        return [Action(OpKind.F, 0, Keep.ALL, allocs=mems("act"), slices=(local,), split=whole,
                       name="local"),
                Action(OpKind.F, 0, Keep.ALL, allocs=mems("act"), slices=chunk.slices[2:],
                       split=shared, name="shared"),
                Action(OpKind.B, 0, Keep.ALL, frees=mems("act"), slices=chunk.slices[2:],
                       split=shared, name="shared"),
                Action(OpKind.B, 0, Keep.ALL, frees=mems("act"), slices=(local,), split=whole,
                       name="local")]

    plan = lower(_schedule(layout, [chunk], {0: rank_actions(chunk.slices[0]),
                                             1: rank_actions(chunk.slices[1])}, devices=devices),
                 layout).validate()
    trace = Engine(UnitCostModel()).run(plan)
    assert trace.peak_memory_bytes() == [6 + 4, 2 + 4]  # per-rank memory: local + its shard
    starts = {(e.device, e.token): e.start_s for e in trace.events}
    # Skrull's Eq. 2: the shared sequence's exchange runs beside the local work (both ranks start
    # it at t=0). The backward runs the shared part first, so its exchange starts with its
    # attention, once both ranks are there (rank 1 at 6, rank 0 at 10): rank 1 waits for rank 0.
    assert starts[(0, "s0COLL0[cp-F-shared]")] == starts[(1, "s0COLL0[cp-F-shared]")] == 0.0
    assert starts[(0, "s0COLL0[cp-B-shared]")] == starts[(1, "s0COLL0[cp-B-shared]")] == 10.0
    assert starts[(1, "s0B0[attn-shared]")] == 6.0 and starts[(1, "s0B0[shared]")] >= 10.0
    assert plan.program(0, "cp").ops[0].group == (0, 1)
    # every token forwarded and backwarded once: dropping rank 1's shard breaks coverage
    broken = plan.with_programs(tuple(
        dataclasses.replace(p, ops=tuple(o for o in p.ops if not (o.device == 1 and o.kind is OpKind.F
                                                                   and "shared" in o.name)))
        for p in plan.programs))
    with pytest.raises(PlanError, match="chunk 0 has 48 of 64 token-layers of F"):
        broken.validate(check_cycles=False)


# (b) -------------------------------------------------------------------------------------------
def _full_recompute_plan(passes):
    """Four chunks forwarded with full recompute (layer inputs kept), then backwarded last-first."""
    layout = Layout.of(ParallelConfig(pp=1, recompute="full", zero_stage=0), TINY.num_layers)
    chunks = [Chunk(i, (Slice(i, 0, 2048),)) for i in range(4)]
    pairs = [kept_actions(c.index, Keep.INPUT) for c in chunks]
    orders = {0: [a for f, _ in pairs for a in f] + [a for _, b in reversed(pairs) for a in b]}
    return lower(_schedule(layout, chunks, orders), layout, passes)


def test_host_offload_runs_on_the_copy_stream_beside_compute_with_host_memory_apart():
    cost = TableCostModel(TINY, ClusterSpec(device=get_device("cpu"), num_nodes=1, gpus_per_node=1))
    plain = Engine(cost).run(_full_recompute_plan(DEFAULT_PASSES))
    plan = _full_recompute_plan(DEFAULT_PASSES + (offload(("ckpt",)),)).validate()
    trace = Engine(cost).run(plan)
    copies = _events(trace, 0, "copy")
    assert [e.token for e in copies[:2]] == ["s0COPY0[d2h-ckpt-L0]", "s0COPY1[d2h-ckpt-L0]"]
    events = {e.token: e for e in trace.events}
    first_copy, f1 = events["s0COPY0[d2h-ckpt-L0]"], events["s0F1"]
    assert first_copy.start_s == f1.start_s and first_copy.end_s > first_copy.start_s  # side by side
    r3 = events["s0R3"]  # the last chunk's inputs come straight back: its recompute waits for them
    assert r3.start_s >= events["s0COPY3[h2d-ckpt-L0]"].end_s
    ckpt = cost.buffer_bytes(plan.program(0).ops[0].allocs[0])
    assert max(trace.peak_host_memory_bytes()) == 4 * ckpt  # every chunk's layer inputs on the host
    assert [lvl for *_, lvl in trace.host_memory][-1] == 0
    assert trace.peak_memory_bytes()[0] < plain.peak_memory_bytes()[0]


# (c) -------------------------------------------------------------------------------------------
def test_a_forward_checkpoints_some_layers_on_one_stage_and_none_on_another():
    """Stage 0 (layers 0-1) checkpoints layer 0 only: its forward is two ops, a recompute rebuilds
    layer 0 before the backward. Stage 1 keeps everything. Priced and stored accordingly."""
    layout = Layout.of(ParallelConfig(pp=2, zero_stage=0), TINY.num_layers)  # 2 layers per stage
    first, mid = layout.stage_layers[0]
    low, high = (first, first + 1), (first + 1, mid)
    chunk = Chunk(0, (Slice(0, 0, 1024),))
    stage0 = [Action(OpKind.F, 0, Keep.INPUT, allocs=mems("ckpt"), layers=low, name="L0"),
              Action(OpKind.F, 0, Keep.ALL, allocs=mems("act"), layers=high, name="L1"),
              Action(OpKind.R, 0, Keep.ALL, allocs=mems("act"), frees=mems("ckpt"), layers=low),
              Action(OpKind.B, 0, Keep.ALL, frees=(Mem("act", layers=low), Mem("act", layers=high)))]
    orders = {0: stage0, 1: one_f_one_b([0], 1, 2, Keep.ALL)}
    plan = lower(_schedule(layout, [chunk], orders), layout).validate()
    ops = {op.token: op for op in plan.ops()}
    # kernels only (on the synchronous cpu preset each op adds its own measured host residual)
    device = dataclasses.replace(get_device("cpu"), synchronous=False)
    cost = TableCostModel(TINY, ClusterSpec(device=device, num_nodes=1, gpus_per_node=2))
    whole = dataclasses.replace(ops["s0F0[L0]"].work, layers=(first, mid))
    assert (cost.compute_s(OpKind.F, ops["s0F0[L0]"].work) + cost.compute_s(OpKind.F, ops["s0F0[L1]"].work)
            == pytest.approx(cost.compute_s(OpKind.F, whole)))
    assert ops["s0R0"].work.num_layers == 1 and ops["s1F0"].work.num_layers == 2
    ckpt, act = ops["s0F0[L0]"].allocs[0], ops["s0F0[L1]"].allocs[0]
    assert (ckpt.kind, ckpt.work.num_layers, act.kind, act.work.num_layers) == ("ckpt", 1, "act", 1)
    assert op_key(0, 0, OpKind.SEND_F, 0) in ops["s1F0"].deps
    assert ops["s0SEND_F0"].deps == (ops["s0F0[L1]"].key,)  # after the op covering the last layer
    trace = Engine(cost).run(plan)
    r = next(e for e in trace.events if e.token == "s0R0")
    assert r.end_s - r.start_s == pytest.approx(cost.compute_s(OpKind.R, ops["s0R0"].work))
    # stored accordingly: stage 0 holds one layer's checkpoint and one layer's activations
    static = trace.static_bytes
    stage1_act = cost.buffer_bytes(ops["s1F0"].allocs[0])
    loss = cost.working_bytes(OpKind.B, ops["s1B0"].work)  # the LM head's loss while it runs
    assert loss > 0 and trace.peak_memory_bytes()[1] - static[1] == stage1_act + loss
    # both layers' activations at the end: beside the checkpoint while R rebuilds layer 0, then
    # beside the backward's gradients (one layer at a time)
    grads = cost.working_bytes(OpKind.B, ops["s0B0"].work)
    assert grads > 0 and (trace.peak_memory_bytes()[0] - static[0]
                          == cost.buffer_bytes(act) + cost.buffer_bytes(ops["s0R0"].allocs[0])
                          + max(cost.buffer_bytes(ckpt), grads))


# (d) -------------------------------------------------------------------------------------------
def test_only_some_chunks_get_a_backward():
    layout = Layout.of(ParallelConfig(pp=2, zero_stage=0), TINY.num_layers)
    chunks = [Chunk(i, (Slice(i, 0, 4),)) for i in range(3)]

    def stage_order(stage):
        fwd, bwd = [], []
        for c in (0, 1, 2):
            if c == 1:  # no gradient: a no-grad forward that keeps nothing
                fwd.append([Action(OpKind.F, c, Keep.NOTHING)])
                continue
            f, b = kept_actions(c, Keep.ALL)
            fwd.append(f)
            bwd.append(b)
        return interleave_1f1b(fwd, bwd, stage, 2)

    orders = {d: stage_order(d) for d in (0, 1)}
    plan = lower(_schedule(layout, chunks, orders, grad_chunks=frozenset({0, 2})), layout).validate()
    assert not plan.gets_grad(1) and "s1SEND_B1" not in plan.grid()
    trace = Engine(UnitCostModel()).run(plan)
    # unit costs (F 4 s, B 8 s); chunk 1 does not count as in flight, so stage 0 runs F0 F1 F2 B0
    # B2 and stage 1 F0 B0 F1 F2 B2: s1B0 8-16, s1F1 16-20, s1F2 20-24, s1B2 24-32, s0B2 32-40
    assert plan.program(0).tokens.startswith("s0F0 s0F1 s0F2 s0B0 s0B2")
    assert trace.makespan_s == 40
    with pytest.raises(PlanError, match="each chunk needs exactly one per stage"):
        lower(_schedule(layout, chunks, orders), layout)  # without grad_chunks chunk 1 lacks a B


# CP and DP as comm-stream ops ------------------------------------------------------------------
def test_ring_cp_exchange_and_dp_reduction_are_ops_that_overlap_in_the_engine():
    layout = Layout.of(ParallelConfig(tp=2, cp=2, dp=2, zero_stage=1), TINY.num_layers)
    chunks = [Chunk(i, (Slice(i, 0, 8192),), replica=i % 2) for i in range(4)]
    orders = {layout.device(r, 0): one_f_one_b([c.index for c in chunks if c.replica == r], 0, 1,
                                               Keep.SELECTIVE) for r in (0, 1)}
    plan = lower(_schedule(layout, chunks, orders), layout).validate()
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=1, gpus_per_node=8)
    trace = Engine(TableCostModel(dataclasses.replace(TINY, dtype="bf16"), cluster)).run(plan)
    events = {e.token: e for e in _events(trace, 0)}
    attn, ring, dense = events["s0F0[attn]"], events["s0COLL0[cp-F]"], events["s0F0"]
    assert ring.stream == "cp" and ring.start_s == attn.start_s  # the exchange starts with attention
    assert dense.start_s == pytest.approx(max(attn.end_s, ring.end_s))
    reduce, last_b = events["s0COLL[dp-grad]"], events["s0B2[attn]"]
    assert reduce.stream == "coll" and reduce.start_s == pytest.approx(last_b.start_s)
    assert events["s0OPT"].start_s >= max(reduce.end_s, events["s0B2"].end_s)
    assert events["s0COLL[dp-params]"].start_s >= events["s0OPT"].end_s


def test_without_overlap_the_dp_reduction_starts_after_the_last_backward():
    """parallel.overlap_grad_reduce = false (Megatron's and DeepSpeed's own default): the step-end
    reduction starts when the device's last op has finished, and OPT waits the whole reduction
    after it; each per-micro-step reduction (ZeRO-2, no pipeline) starts at its backward's end."""
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=1, gpus_per_node=8)
    cost = TableCostModel(dataclasses.replace(TINY, dtype="bf16"), cluster)
    traces = {}
    for overlap in (True, False):
        layout = Layout.of(ParallelConfig(dp=2, zero_stage=1, overlap_grad_reduce=overlap),
                           TINY.num_layers)
        chunks = [Chunk(i, (Slice(i, 0, 8192),), replica=i % 2) for i in range(4)]
        orders = {layout.device(r, 0): one_f_one_b([c.index for c in chunks if c.replica == r],
                                                   0, 1, Keep.SELECTIVE) for r in (0, 1)}
        plan = lower(_schedule(layout, chunks, orders), layout).validate()
        traces[overlap] = {e.token: e for e in _events(Engine(cost).run(plan), 0)}
    on, off = traces[True], traces[False]
    assert on["s0COLL[dp-grad]"].start_s == pytest.approx(on["s0B2"].start_s)
    reduce = off["s0COLL[dp-grad]"]
    assert reduce.start_s == pytest.approx(off["s0B2"].end_s) and reduce.end_s > reduce.start_s
    assert off["s0OPT"].start_s == pytest.approx(reduce.end_s)
    # the same ops take the same time: the step is longer by the part the overlap hid
    hidden = on["s0B2"].end_s - on["s0COLL[dp-grad]"].start_s
    assert off["s0OPT"].start_s - on["s0OPT"].start_s == pytest.approx(
        min(hidden, reduce.end_s - reduce.start_s))

    from ltsim.strategies import get_strategy
    from tests.conftest import unit_engine

    strategy = get_strategy("deepspeed-cp")
    for overlap in (True, False):
        ctx = PlanContext(model=get_model("qwen2.5-7b"), cost=UnitCostModel(), parallel=ParallelConfig(
            dp=2, zero_stage=2, overlap_grad_reduce=overlap))
        plan = strategy.plan((64, 32, 16, 8), ctx, strategy.parse({"bucket_size": 64}))
        steps = [op for op in plan.program(0, "coll").ops if op.name.startswith("dp-grad-")]
        assert len(steps) >= 2
        for op in steps:  # with overlap the last part of each comes after its backward
            started = overlap and not op.name.endswith("-last")
            assert bool(op.start_deps) == started and bool(op.deps) != started
        unit_engine().run(plan)  # no deadlock


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["deepspeed-cp", "skrull", "sorted-batching"]),
       dp=st.integers(1, 2), cp=st.sampled_from([1, 2, 4]), bucket=st.integers(8, 64),
       lengths=st.lists(st.integers(1, 128), min_size=1, max_size=8))
def test_zero3_gathers_and_per_step_reductions_never_deadlock(name, dp, cp, bucket, lengths):
    """ZeRO-3's prefetched gathers and ZeRO-2/3's per-micro-step reductions share the coll stream;
    appended after every gather, a reduction that the next micro-step waits for sat behind gathers
    that wait for that micro-step (found with deepspeed-cp, cp 2, lengths 64 8 8 64 100)."""
    from ltsim.strategies import get_strategy
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy(name)
    plan = strategy.plan(tuple(lengths), unit_ctx(dp=dp, cp=cp, zero_stage=3),
                         strategy.parse({"bucket_size": bucket})).validate()
    trace = unit_engine().run(plan)
    assert len(trace.events) == sum(len(p.ops) for p in plan.programs)


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["seq1f1b", "infinipipe", "chunkflow"]), zero_stage=st.sampled_from([2, 3]),
       lengths=st.lists(st.integers(1, 160), min_size=2, max_size=8))
def test_per_step_reductions_without_pipeline_follow_backwards_run_last_chunk_first(
        name, zero_stage, lengths):
    """Seq1F1B, InfiniPipe and ChunkFlow back-propagate a sequence's chunks last chunk first. With
    no pipeline and ZeRO-2/3 (a reduction per micro-step, which the next micro-step waits for), a
    forward waited for the reduction of a chunk whose backward, and the reductions queued before
    it, came after that forward: a deadlock (found on scenarios/infinipipe/gpt-7b-64k-seq1f1b.toml
    with parallel.pp = 1)."""
    from ltsim.strategies import get_strategy
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy(name)
    options = {"chunk_size": 32} if name != "infinipipe" else {}
    plan = strategy.plan(tuple(lengths), unit_ctx(pp=1, dp=2, zero_stage=zero_stage,
                                                  recompute="selective"),
                         strategy.parse(options)).validate()
    trace = unit_engine().run(plan)  # a deadlock raises PlanError
    assert len(trace.events) == sum(len(p.ops) for p in plan.programs)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["megatron-1f1b", "seq1f1b", "infinipipe", "chunkflow", "seco",
                             "spaco"]),
       zero_stage=st.sampled_from([2, 3]), pp=st.integers(2, 3), dp=st.integers(2, 3),
       overlap=st.booleans(), lengths=st.lists(st.integers(1, 160), min_size=2, max_size=9))
def test_pipelines_with_sharded_gradients_reduce_after_every_backward(name, zero_stage, pp, dp,
                                                                       overlap, lengths):
    """ZeRO-2/3 within pipeline stages (FSDP, InfiniPipe's setup): a reduce-scatter of the stage's
    gradients per backward on the device, as many on every member of the stage's group (replicas
    with fewer backwards join the rest idle), started with the backward (or after it without
    overlap); the optimizer step waits for the last; ZeRO-3's gathers share the coll stream
    without a deadlock, also where forward-only chunks follow a device's last backward (SpaCO:
    its idle reductions once sat ahead of those chunks' gathers, found by a review's fuzzing)."""
    from ltsim.strategies import get_strategy
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy(name)
    options = ({"chunk_size": 16, "budget": 2} if name == "spaco" else {"chunk_size": 32}
               if name in ("seq1f1b", "chunkflow", "seco") else {})
    ctx = unit_ctx(pp=pp, dp=dp, zero_stage=zero_stage, recompute="selective")
    ctx = PlanContext(model=ctx.model, cost=ctx.cost,
                      parallel=dataclasses.replace(ctx.parallel, overlap_grad_reduce=overlap))
    plan = strategy.plan(tuple(lengths), ctx, strategy.parse(options)).expand().validate()
    counts = {}
    for device in plan.devices:
        compute = plan.program(device.index).ops
        backwards = [op for op in compute if op.kind is OpKind.B]
        reduces = [op for op in plan.program(device.index, "coll").ops
                   if op.name.startswith("dp-grad")]
        counts.setdefault(device.stage, set()).add(len(reduces))
        assert len(reduces) >= len({op.chunk for op in backwards})
        for op in reduces[:len({op.chunk for op in backwards})]:
            assert bool(op.start_deps) == overlap and bool(op.deps) != overlap
        assert compute[-1].kind is OpKind.OPT and compute[-1].deps == (reduces[-1].key,)
    assert all(len(n) == 1 for n in counts.values())  # matched across the stage's replicas
    trace = unit_engine().run(plan)  # a deadlock raises PlanError
    assert len(trace.events) == sum(len(p.ops) for p in plan.programs)


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("zero_stage", [2, 3])
def test_sharded_gradients_with_no_backward_at_all_reduce_once_at_the_step_end(pp, zero_stage):
    # SpaCO's Bernoulli draw can pick no chunk (seed 7 here): no chunk backpropagates, and the
    # per-backward reductions of a pipeline had none to make (the step's wait on the last one
    # crashed, found by a review); every member joins one reduction after its last op
    from ltsim.strategies import get_strategy
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy("spaco")
    ctx = unit_ctx(pp=pp, dp=2, zero_stage=zero_stage, recompute="selective")
    plan = strategy.plan((160, 160), ctx, strategy.parse(
        {"chunk_size": 16, "budget": 1, "sampling": "bernoulli", "seed": 7})).expand().validate()
    assert plan.grad_chunks == frozenset()
    for device in plan.devices if pp > 1 else ():  # (one stage: a reduction per micro-step)
        compute = plan.program(device.index).ops
        reduces = [op for op in plan.program(device.index, "coll").ops
                   if op.name.startswith("dp-grad")]
        assert len(reduces) == 1 and reduces[0].deps == (compute[-2].key,)
        assert compute[-1].kind is OpKind.OPT and compute[-1].deps == (reduces[0].key,)
    trace = unit_engine().run(plan)
    assert len(trace.events) == sum(len(p.ops) for p in plan.programs)
