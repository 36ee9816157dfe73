"""ALST (strategies/alst.py): per-layer ops, Ulysses all-to-alls, tiling, checkpoint and optimizer
offload, and the refusals; against the memory model's closed forms (PAPERS.md 6.2, 6.4)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import ltsim.memory as mem
from ltsim.costs.host import HostLink
from ltsim.costs.table import TableCostModel
from ltsim.errors import ConfigError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.maxlen import find_max_length
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.plan import Keep, OpKind, Tiling
from ltsim.scenario import load_scenario
from ltsim.sim.engine import Engine
from ltsim.strategies import get_strategy
from ltsim.strategies.base import PlanContext

LLAMA = get_model("llama-3.1-8b")
SMALL = replace(LLAMA, num_layers=4)
ALST = get_strategy("alst")
SCENARIO = "scenarios/alst/h100x8-llama3.1-8b.toml"


def _cost(gpus: int = 8) -> TableCostModel:
    return TableCostModel(SMALL, ClusterSpec(device=get_device("h100-sxm5-80gb"),
                                             gpus_per_node=gpus))


def _plan(lengths=(65536,), cp: int = 8, recompute: str = "full", zero_stage: int = 3, **options):
    par = ParallelConfig(cp=cp, dp=8 // cp, zero_stage=zero_stage,
                         recompute=recompute)
    ctx = PlanContext(model=SMALL, parallel=par, cost=_cost())
    return ALST.plan(tuple(lengths) * par.dp, ctx, ALST.parse(options)).validate()


def test_layer_by_layer_forward_then_head_then_recompute_and_backward_from_the_last_layer():
    plan = _plan(cp=8)
    tokens = [op.token for op in plan.program(0).ops if op.part != "attn"]
    layers = [f"L{i}" for i in range(SMALL.num_layers)]
    assert tokens == ([f"s0F0[{l}]" for l in layers] + ["s0F0[head]", "s0B0[head]"]
                      + [t for l in reversed(layers) for t in (f"s0R0[{l}]", f"s0B0[{l}]")]
                      + ["s0OPT"])
    # Ulysses: one all-to-all (q, k, v in, the output back) before every layer op's attention,
    # none for the head; K/V heads replicated up to SP
    a2a = [op for op in plan.program(0, "cp").ops]
    assert len(a2a) == 3 * SMALL.num_layers and all(op.comm.tensor == "qkvo" for op in a2a)
    assert all(op.work.split.cp_kind == "ulysses" for op in plan.ops() if op.work is not None)
    nbytes, _ = _cost()._comm.payload(a2a[0].comm)
    assert nbytes == 65536 / 8 * (2 * LLAMA.hidden_size + 2 * max(8, 8) * LLAMA.head_dim) * 2
    work32 = replace(a2a[0].comm.work, split=a2a[0].comm.work.split._replace(cp=32))
    nbytes32, _ = _cost()._comm.payload(a2a[0].comm._replace(work=work32))
    assert nbytes32 == 65536 / 32 * (2 * 4096 + 2 * 32 * 128) * 2  # 8 K/V heads -> 32
    # ZeRO-3 gathers the parameters of each op's layers only
    gathers = [op for op in plan.program(0, "coll").ops if op.name.startswith("z3-")]
    assert {op.comm.work.layers for op in gathers} == (
        {(i, i + 1) for i in range(SMALL.num_layers)} | {(4, 4)})


def test_checkpoints_go_to_host_after_each_layer_and_come_back_before_its_recompute():
    cost = _cost()
    plain, offloaded = (Engine(cost).run(_plan(offload_checkpoints=flag))
                        for flag in (False, True))
    plan = _plan()
    ckpt = cost.buffer_bytes(next(b for op in plan.program(0).ops for b in op.allocs
                                  if b.kind == "ckpt"))
    assert ckpt == 65536 / 8 * LLAMA.hidden_size * 2  # one layer's input, bf16, s_local tokens
    host = offloaded.peak_host_memory_bytes()[0] - offloaded.host_static_bytes[0]
    assert host == SMALL.num_layers * ckpt  # every layer's input, on the host at the end of forward
    saved = plain.peak_memory_bytes()[0] - offloaded.peak_memory_bytes()[0]
    assert (SMALL.num_layers - 1) * ckpt <= saved <= SMALL.num_layers * ckpt  # at most one back
    events = {e.token: e for e in offloaded.events}
    for i in range(SMALL.num_layers):  # back in time for its own recompute, not earlier
        assert events[f"s0R0[attn-L{i}]"].start_s >= events[f"s0COPY0[h2d-ckpt-L{i}]"].end_s
    # synchronous, as ALST's code: the next layer waits for the copy to the host
    assert events["s0F0[L1]"].start_s >= events["s0COPY0[d2h-ckpt-L0]"].end_s
    asynchronous = Engine(cost).run(_plan(offload_async=True))
    assert asynchronous.makespan_s < offloaded.makespan_s


def test_tiled_mlp_and_loss_keep_less_and_recompute_forward_in_backward():
    cost = _cost()
    par = ParallelConfig(cp=8, cp_kind="ulysses")
    plain = _plan(cp=8, tiled_mlp=False, tiled_loss=False)
    tiled = _plan(cp=8)
    act = {name: next(b for op in p.program(0).ops if op.token == "s0R0[attn-L1]" for b in op.allocs)
           for name, p in (("plain", plain), ("tiled", tiled))}
    per_token = mem.mlp_activation_bytes_per_token(SMALL, par)
    assert cost.buffer_bytes(act["plain"]) - cost.buffer_bytes(act["tiled"]) == 65536 * per_token
    work = {name: next(op.work for op in p.program(0).ops if op.token == "s0B0[L1]")
            for name, p in (("plain", plain), ("tiled", tiled))}
    extra = cost.compute_s(OpKind.B, work["tiled"]) - cost.compute_s(OpKind.B, work["plain"])
    assert extra > 0  # each shard's MLP forward re-run before its backward
    # a shard of ceil(s_local / hidden) tokens: the MLP working set is one shard's, not s_local's
    shard = mem.mlp_tile_tokens(SMALL, 65536 // 8)
    assert shard == math.ceil(8192 / math.ceil(8192 / 4096)) == 4096
    # the loss: logits are not kept, only the head's inputs and the loss; working set of a tile
    head = {name: next(b for op in p.program(0).ops if op.token == "s0F0[head]" for b in op.allocs)
            for name, p in (("plain", plain), ("tiled", tiled))}
    kept = cost.buffer_bytes(head["plain"]) - cost.buffer_bytes(head["tiled"])
    assert kept == pytest.approx(65536 * 4 * LLAMA.vocab_size / 8, rel=1e-6)
    head_work = next(op.work for op in tiled.program(0).ops if op.token == "s0B0[head]")
    tile = mem.loss_tile_tokens(SMALL, ParallelConfig(), 8192)
    assert cost.working_bytes(OpKind.B, head_work) == int(tile * LLAMA.vocab_size * (4 + 8))
    assert Tiling(mlp=True, loss=True) == head_work.tiling


def test_optimizer_offload_moves_gradients_and_optimizer_state_to_host_memory():
    cost = _cost()
    on, off = (_plan(offload_optimizer=flag).devices[0] for flag in (True, False))
    assert on.offload_optimizer and not off.offload_optimizer
    device, kept = cost.static_memory(on), cost.static_memory(off)
    assert device.grads_bytes == device.optimizer_bytes == 0
    assert device.weights_bytes == kept.weights_bytes
    params = kept.num_parameters / on.num_shards
    assert device.host_bytes == pytest.approx(params * (4 + 12))  # fp32 grads, master, 2 moments
    spec = get_device("h100-sxm5-80gb")
    # the step at host memory bandwidth, the new bf16 weights back through pinned buffers
    link = HostLink(cost.profile.host_copies, spec.host_link_bytes_per_s)
    assert link.measured("h2d", pinned=True)  # the shipped profile's host_copy.csv
    assert cost.optimizer_s(on) == pytest.approx(
        params * 30 / spec.host_dram_bytes_per_s + link.time_s("h2d", params * 2, pinned=True))
    trace = Engine(cost).run(_plan(offload_checkpoints=False))
    assert trace.peak_host_memory_bytes()[0] == trace.host_static_bytes[0] == int(device.host_bytes)


def test_without_checkpoints_each_layer_keeps_its_activations():
    plan = _plan(recompute="selective", offload_checkpoints=False)
    ops = [op for op in plan.program(0).ops if op.part != "attn"]
    assert not any(op.kind is OpKind.R for op in ops)
    assert all(b.kind == "act" and b.keep is Keep.SELECTIVE
               for op in ops if op.kind is OpKind.F and op.name != "head" for b in op.allocs)


@pytest.mark.parametrize("sets,key", [
    ({"parallel.recompute": "selective"}, "parallel.recompute"),  # nothing to offload
    ({"strategy.ulysses": False}, "parallel.cp"),  # cp = 8 without sequence parallelism
    ({"parallel.cp": 4, "parallel.pp": 2}, "parallel.pp"),
])
def test_refusals_name_the_key_and_a_fix(sets, key):
    scenario = load_scenario(SCENARIO, sets)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        ALST.plan((4096,), PlanContext(model=scenario.model, parallel=scenario.parallel,
                                       cost=_cost()), ALST.parse(scenario.strategy_options))
    assert "Fix:" in str(info.value)


def test_heads_must_divide_over_the_ulysses_ranks():
    par = ParallelConfig(cp=8, zero_stage=3, recompute="full")
    odd = replace(SMALL, num_attention_heads=36, num_kv_heads=4)
    with pytest.raises(ConfigError, match="divides the heads"):
        ALST.plan((4096,), PlanContext(model=odd, parallel=par, cost=_cost()), ALST.parse({}))


def test_each_feature_raises_the_longest_sequence_on_eight_gpus():
    """The blog's ablation (seeds/alst.md Fig. 6): every added feature reaches further."""
    off = {"strategy.tiled_mlp": False, "strategy.tiled_loss": False,
           "strategy.offload_checkpoints": False}
    rows = [{"parallel.cp": 1, "strategy.ulysses": False, **off}, off,
            {"strategy.tiled_mlp": False, "strategy.offload_checkpoints": False},
            {"strategy.offload_checkpoints": False}, {}]
    reach = [find_max_length(load_scenario(SCENARIO, sets, any_workload=True), step=65536,
                             max_length=1 << 24).max_length for sets in rows]
    assert reach == sorted(reach) and len(set(reach)) == len(reach), reach
    assert reach[0] < 65536 * 2 and reach[-1] > 1 << 21


def test_the_executor_runs_untiled_alst_plans_and_refuses_the_rest_naming_the_op():
    from ltsim.errors import PlanError
    from ltsim.executor.runtime import check_supported

    runs = dict(cp=1, zero_stage=0, tiled_mlp=False, tiled_loss=False, offload_optimizer=False)
    check_supported(_plan(**runs))  # per-layer ops and checkpoint copies: the executor runs them
    check_supported(_plan(**{**runs, "offload_checkpoints": False}, recompute="selective"))
    with pytest.raises(PlanError, match=r"0:s0F0\[L0\].*tiled_mlp = false"):
        check_supported(_plan(**{**runs, "tiled_mlp": True}))
    with pytest.raises(PlanError, match="ZeRO-Offload.*offload_optimizer = false"):
        check_supported(_plan(**{**runs, "offload_optimizer": True}))
    with pytest.raises(PlanError, match="COLL"):  # Ulysses' all-to-alls
        check_supported(_plan(**{**runs, "cp": 8}))
    # it copies as ALST's reference code does, synchronously through pageable memory
    with pytest.raises(PlanError, match=r"d2h-ckpt-L0.*asynchronous.*offload_async = false"):
        check_supported(_plan(**{**runs, "offload_async": True}))


@pytest.mark.parametrize("sp, tiled", [(1, True), (8, True), (8, False)])
def test_memory_model_holds_what_the_rebuilt_alst_layer_allocates(sp, tiled):
    """validation/papers/alst_layer_emulation.py rebuilds ALST's layer (Liger, Ulysses, FA2,
    TiledMLP) from its parts' allocations on fake tensors (the method reproduces the H100's HF-layer
    figures exactly). ltsim's one layer plus its backward working set must hold what that layer's
    recompute and backward peak at (with the incoming gradient), per local token, and not
    over-count it by more than a quarter."""
    pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "validation" / "papers" / "alst_layer_emulation.py"
    spec = importlib.util.spec_from_file_location("alst_layer_emulation", path)
    emulation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulation)
    hidden = LLAMA.hidden_size
    got = emulation.per_token(emulation.alst_layer(sp, tiled), hidden, (16384, 32768))
    rebuilt = got["bwd_peak_per_token"] + 2 * hidden  # plus dY, held before the backward
    par = ParallelConfig(cp=sp, cp_kind="ulysses")
    ltsim = sp * (mem.activation_bytes_per_token(LLAMA, par, num_layers=1, recompute="none",
                                                 tiled_mlp=tiled)
                  + mem.backward_working_bytes_per_token(LLAMA, par))
    assert 0.95 * rebuilt <= ltsim <= 1.25 * rebuilt


def test_each_ulysses_group_gets_its_ranks_consecutive_sequences():
    """ArcticTraining deals the batch over every GPU (DistributedSampler) and each Ulysses group
    runs the samples of its cp ranks one after another: on dp 2 x cp 2, group 0 (GPUs 0, 1) gets
    sequences 0, 1, 4, 5 and group 1 (GPUs 2, 3) 2, 3, 6, 7."""
    par = ParallelConfig(dp=2, cp=2, recompute="full", zero_stage=3)
    plan = ALST.plan((4096,) * 8, PlanContext(model=SMALL, parallel=par, cost=_cost(4)),
                     ALST.parse({}))
    assert [[s.seq for c in plan.chunks if c.replica == r for s in c.slices] for r in (0, 1)] == [
        [0, 1, 4, 5], [2, 3, 6, 7]]
