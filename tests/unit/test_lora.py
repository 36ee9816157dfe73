"""LoRA fine-tuning (model.lora_rank): adapter counts, static memory, backward time, DP reduction
bytes, model FLOPs, scenario key and the executor's refusal."""

from __future__ import annotations

import dataclasses

import pytest

from ltsim.costs.table import TableCostModel
from ltsim.errors import ConfigError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.memory import static_memory_bytes
from ltsim.model import get_model, lora_layer_parameters, num_parameters
from ltsim.parallel import ParallelConfig
from ltsim.plan import Chunk, Comm, OpKind, Slice, Split, Work
from ltsim.scenario import load_scenario
from tests.conftest import REPO

BASE = get_model("llama-3.1-8b")
LORA = dataclasses.replace(BASE, lora_rank=8)


def test_adapter_count_matches_hand_count():
    # Llama-3.1-8B: h 4096, K/V 1024, ffn 14336; A (in x r) + B (r x out) on q, k, v, o, gate, up, down
    h, kv, f = 4096, 1024, 14336
    by_hand = 8 * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + f) + (f + h))
    assert lora_layer_parameters(LORA) == by_hand
    assert 32 * by_hand / num_parameters(BASE) < 0.003  # r = 8 adapters: ~0.3% of the model


def test_static_memory_keeps_all_weights_but_trains_only_adapters():
    full = static_memory_bytes(BASE, ParallelConfig(), num_layers=32, has_embedding=True,
                               has_head=True)
    lora = static_memory_bytes(LORA, ParallelConfig(), num_layers=32, has_embedding=True,
                               has_head=True)
    adapters = 32 * lora_layer_parameters(LORA)
    assert lora.num_parameters == adapters
    assert lora.weights_bytes == pytest.approx(full.weights_bytes + 2 * adapters)
    assert lora.grads_bytes == pytest.approx(4 * adapters)  # fp32 main gradients
    assert lora.optimizer_bytes == pytest.approx(12 * adapters)  # fp32 master + two moments
    assert lora.total_bytes < 0.12 * full.total_bytes  # 2 B/param of weights against 18


def _cost(model):
    return TableCostModel(model, ClusterSpec(device=get_device("h100-sxm5-80gb"), gpus_per_node=8))


def test_backward_drops_weight_gradient_gemms_and_reduces_adapter_grads():
    work = Work(chunk=0, slices=(Slice(0, 0, 8192),), layers=(0, 4), split=Split(tp=1))
    full, lora = _cost(BASE), _cost(LORA)
    assert lora.compute_s(OpKind.F, work) == full.compute_s(OpKind.F, work)
    assert lora.compute_s(OpKind.B, work) < 0.8 * full.compute_s(OpKind.B, work)
    params = Work(chunk=-1, slices=(), layers=(0, 4), split=Split(tp=1))
    grads = Comm("all_reduce", "grads", params, group_size=8, gpus=(0, 7))
    assert lora.comm_s(grads) < 0.05 * full.comm_s(grads)
    gather = Comm("all_gather", "params", params, group_size=8, gpus=(0, 7))
    assert lora.comm_s(gather) == full.comm_s(gather)  # ZeRO-3 still gathers every weight
    chunk = Chunk(0, (Slice(0, 0, 8192),))
    assert lora.model_flops(chunk) == pytest.approx(2 / 3 * full.model_flops(chunk))
    assert full.model_flops(chunk, backward=False) == pytest.approx(full.model_flops(chunk) / 3)


def test_scenario_key_and_bad_values():
    path = REPO / "scenarios" / "seco" / "rtx3090-llama3-8b-lora.toml"
    assert load_scenario(path).model.lora_rank == 8
    for bad in (-1, "8", True):
        with pytest.raises(ConfigError, match="model.lora_rank"):
            load_scenario(path, {"model.lora_rank": bad})


def test_executor_refuses_lora():
    pytest.importorskip("torch")
    from ltsim.executor.runtime import execute_plan
    from ltsim.strategies import get_strategy
    from tests.conftest import unit_ctx

    spec = dataclasses.replace(get_model("llama-tiny"), lora_rank=4)
    strategy = get_strategy("megatron-1f1b")
    plan = strategy.plan((16,), unit_ctx(), strategy.parse({}))
    with pytest.raises(ConfigError, match="model.lora_rank"):
        execute_plan(plan, spec, ParallelConfig(zero_stage=0))
