"""TableCostModel: monotone in tokens and context, consistent buffers, errors for bad profiles."""

from __future__ import annotations

import dataclasses

import pytest

from ltsim.cli import main
from ltsim.costs_table import TableCostModel
from ltsim.errors import ProfileError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.plan import Buffer, Chunk, Op, OpKind, Plan, Slice

CONFIGS = [("qwen2.5-7b", "h100-sxm5-80gb", ParallelConfig(tp=4, pp=2)),
           ("qwen2.5-14b", "a100-sxm4-80gb", ParallelConfig(tp=8, cp=2, pp=1)),
           ("llama-3.1-8b", "h200", ParallelConfig(tp=2, cp=4, cp_kind="ulysses", pp=1)),
           ("gpt-13b", "h100-sxm5-80gb", ParallelConfig(tp=4, pp=4, zero_stage=3, dp=2))]


def _model(name, device, par):
    cluster = ClusterSpec(device=get_device(device), num_nodes=4, gpus_per_node=8)
    return TableCostModel(get_model(name), par, cluster)


def _plan(chunks, par, model_name):
    layers = get_model(model_name).num_layers
    per = layers // par.pp
    stage_layers = tuple((s * per, layers if s == par.pp - 1 else (s + 1) * per) for s in range(par.pp))
    return Plan(strategy="t", options={}, seq_lengths=tuple(s.stop for c in chunks for s in c.slices),
                chunks=tuple(chunks), programs=(), num_stages=par.pp, stage_layers=stage_layers,
                device_stage=tuple(range(par.pp)))


@pytest.mark.parametrize("name,device,par", CONFIGS)
@pytest.mark.parametrize("kind", [OpKind.F, OpKind.B, OpKind.R])
def test_more_tokens_never_cost_less(name, device, par, kind):
    cost = _model(name, device, par)
    previous = 0.0
    for tokens in (1, 7, 64, 500, 2048, 8192, 32768, 131072, 262144):
        plan = _plan([Chunk(0, (Slice(0, 0, tokens),))], par, name)
        for stage in range(par.pp):
            op = Op(kind=kind, device=stage, stage=stage, chunk=0)
            if stage == par.pp - 1:
                value = cost.duration_s(op, plan)
                assert value >= previous, (tokens, value, previous)
                previous = value


@pytest.mark.parametrize("name,device,par", CONFIGS)
def test_context_costs_more_and_backward_costs_more(name, device, par):
    cost = _model(name, device, par)
    fresh = _plan([Chunk(0, (Slice(0, 0, 8192),))], par, name)
    later = _plan([Chunk(0, (Slice(0, 65536, 73728),))], par, name)
    f = Op(kind=OpKind.F, device=0, stage=0, chunk=0)
    b = Op(kind=OpKind.B, device=0, stage=0, chunk=0)
    assert cost.duration_s(f, later) > cost.duration_s(f, fresh)
    assert cost.duration_s(b, fresh) > 1.5 * cost.duration_s(f, fresh)


def test_buffers_scale_with_tokens_and_kv_is_smaller_than_activations():
    par = ParallelConfig(tp=4, pp=2)
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb", par)
    small = _plan([Chunk(0, (Slice(0, 0, 1000),))], par, "qwen2.5-7b")
    big = _plan([Chunk(0, (Slice(0, 0, 4000),))], par, "qwen2.5-7b")
    for kind in ("act", "ckpt", "kv", "kv_grad"):
        a, b = cost.buffer_bytes(Buffer(kind, 0, 0), small), cost.buffer_bytes(Buffer(kind, 0, 0), big)
        assert b == pytest.approx(4 * a, rel=1e-3)
    assert cost.buffer_bytes(Buffer("kv", 0, 0), big) < cost.buffer_bytes(Buffer("act", 0, 0), big) / 10


def test_zero_shards_static_memory_and_limit_leaves_allocator_allowance():
    one = _model("qwen2.5-7b", "h100-sxm5-80gb", ParallelConfig(tp=4, dp=1, zero_stage=1))
    eight = _model("qwen2.5-7b", "h100-sxm5-80gb", ParallelConfig(tp=4, dp=8, zero_stage=1))
    plan = _plan([Chunk(0, (Slice(0, 0, 10),))], ParallelConfig(tp=4), "qwen2.5-7b")
    assert eight.static_memory_bytes(0, plan) < 0.5 * one.static_memory_bytes(0, plan)
    assert one.memory_limit_bytes < 80 * 2**30 - 2**30


def test_dp_gradient_reduction_hides_behind_the_last_backward():
    par = ParallelConfig(tp=4, pp=1, dp=4)
    cost = _model("qwen2.5-7b", "h100-sxm5-80gb", par)
    chunks = [Chunk(0, (Slice(0, 0, 64),)), Chunk(1, (Slice(1, 0, 131072),))]
    plan = _plan(chunks, par, "qwen2.5-7b")
    program = (Op(kind=OpKind.B, device=0, stage=0, chunk=0),)
    coll = Op(kind=OpKind.COLL, device=0, stage=0, name="dp-grad", stream="comm", group=(0, 1, 2, 3))
    short = dataclasses.replace(plan, programs=(_prog(program),))
    long = dataclasses.replace(plan, programs=(_prog((Op(kind=OpKind.B, device=0, stage=0, chunk=1),)),))
    assert cost.duration_s(coll, short) > cost.duration_s(coll, long) >= 0.0


def _prog(ops):
    from ltsim.plan import Program

    return Program(0, "compute", ops)


def test_unknown_profile_is_a_clear_error(tmp_path, capsys, repo):
    with pytest.raises(ProfileError, match="unknown profile 'no-such-gpu'"):
        TableCostModel(get_model("qwen2.5-7b"), ParallelConfig(),
                       ClusterSpec(device=get_device("h100-sxm5-80gb"), profile="no-such-gpu"))
    scenario = repo / "scenarios" / "quickstart.toml"
    assert main(["simulate", str(scenario), "--set", 'hardware.profile="no-such-gpu"']) == 2
    assert "unknown profile 'no-such-gpu'" in capsys.readouterr().err
