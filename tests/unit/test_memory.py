"""Tests for ltsim.memory against Megatron-LM's published memory formulas, Korthikanti et al. 2022
Table 2, FlexSP's constants and InfiniPipe's memory terms; ZeRO stages; monotonicity."""

from __future__ import annotations

import math

import pytest

from ltsim.errors import ConfigError
from ltsim.memory import (ALLOCATOR_OVERHEAD, NO_ALLOCATOR_OVERHEAD, AllocatorOverhead,
                          activation_bytes_per_token, attention_output_copy_bytes_per_token,
                          attention_scores_bytes_per_token,
                          embedding_bytes_per_token, kv_grad_bytes_per_token,
                          kv_state_bytes_per_token, layer_activation_parts,
                          layer_parameters_per_gpu, logits_bytes_per_token,
                          recompute_working_bytes_per_token,
                          stage_parameters_per_gpu, static_memory_bytes,
                          with_allocator_overhead)
from ltsim.model import (CATALOG, ModelSpec, get_model, layer_parameters, num_parameters,
                         vocab_parameters)
from ltsim.parallel import ParallelConfig
from ltsim.units import GiB, MiB

# ---------------------------------------------------------------------------------------------
# Independent re-implementation of NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py
# (compute_weight_and_optimizer_memory, compute_activation_memory), dense models, no MoE/MTP, no
# interleaving, num_microbatches=None, padded_vocab_size = vocab_size
# (--make-vocab-size-divisible-by 1), kv_channels * heads = hidden.


def megatron_weight_and_optimizer_bytes(m: ModelSpec, *, tp: int, pp: int, dp: int,
                                        distributed: bool) -> float:
    h, a, g, f = m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.ffn_hidden_size
    norm_size = 1 if m.arch == "llama" else 2
    gated = 1.5 if m.arch == "llama" else 1.0
    self_attn = 2 * h * h * (1 + g / a)
    layer = 2 * h * (f * gated + norm_size) + self_attn
    embedding = h * m.vocab_size
    block = layer * m.num_layers + norm_size * h
    most_loaded = (block / pp + embedding) / tp
    if not m.tied_embeddings and pp == 1:
        most_loaded += embedding / tp
    bytes_per_param = 6 + 12 / dp if distributed else 18
    return most_loaded * bytes_per_param


def megatron_activation_bytes(m: ModelSpec, *, seq: int, tp: int, pp: int) -> float:
    """First stage, selective recompute + sequence parallelism, micro-batch 1."""
    s, b, h, f, v = seq, 1, m.hidden_size, m.ffn_hidden_size, m.vocab_size
    memory = s * b * h * (18 + 4 * f / h) * m.num_layers
    memory += 8 * s * b * pp  # input to embedding
    memory += s * b * h * pp  # dropout in embedding layer
    if pp == 1:
        memory += s * b * h * 4 * (1 + v / h)  # inputs to output layer and CE loss
    return memory / tp


MEGATRON_MODELS = ["llama-2-7b", "qwen2.5-7b"]


@pytest.mark.parametrize("name", MEGATRON_MODELS)
@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("pp", [1, 2, 4])
@pytest.mark.parametrize("dp,distributed", [(1, False), (8, False), (8, True), (64, True)])
def test_static_memory_matches_megatron(name: str, tp: int, pp: int, dp: int,
                                        distributed: bool) -> None:
    # Megatron's distributed optimizer is ZeRO-1 with fp32 main grads: zero_stage=1. Residuals:
    # Megatron divides norms by tp and spreads the final norm over stages, omits Qwen's qkv bias.
    m = CATALOG[name]
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, zero_stage=1)
    ours = static_memory_bytes(m, parallel, num_layers=m.num_layers // pp, has_embedding=True,
                               has_head=pp == 1, distributed_optimizer=distributed)
    expected = megatron_weight_and_optimizer_bytes(m, tp=tp, pp=pp, dp=dp, distributed=distributed)
    assert ours.total_bytes == pytest.approx(expected, rel=0.01)


def _megatron_shape(m: ModelSpec) -> ModelSpec:
    # Megatron's activation formula assumes dropout, a 2-matrix MLP (it ignores --swiglu) and K/V
    # of width h (its TODO about query_projection_size): configure our model the same way.
    return get_model(m.name, arch="gpt", num_kv_heads=m.num_attention_heads)


@pytest.mark.parametrize("name", MEGATRON_MODELS)
@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_activation_memory_matches_megatron(name: str, tp: int, pp: int) -> None:
    # Megatron's first stage holds pp micro-batches of L/pp layers each. Residuals: it divides the
    # int64 ids by tp too, and has no fp32 loss term.
    m, seq = _megatron_shape(CATALOG[name]), 4096
    parallel = ParallelConfig(tp=tp, pp=pp, sequence_parallel=True)
    per_token = activation_bytes_per_token(m, parallel, num_layers=m.num_layers // pp,
                                           recompute="selective")
    ours = pp * seq * (per_token + embedding_bytes_per_token(m, parallel))
    if pp == 1:
        ours += seq * logits_bytes_per_token(m, parallel)
    assert ours == pytest.approx(megatron_activation_bytes(m, seq=seq, tp=tp, pp=pp), rel=0.01)


@pytest.mark.parametrize("name", MEGATRON_MODELS + ["llama-3.1-8b"])
def test_native_llama_layer_differs_from_megatron_by_documented_terms(name: str) -> None:
    # Llama: no dropout masks (-2h), K/V of width kv_hidden (-4h + 4 kv), SwiGLU (+2f).
    m = CATALOG[name]
    h, f, kv = m.hidden_size, m.ffn_hidden_size, m.kv_hidden_size
    ours = activation_bytes_per_token(m, ParallelConfig(), num_layers=1, recompute="selective")
    assert ours == (18 * h + 4 * f) - 2 * h - 4 * h + 4 * kv + 2 * f


# ---------------------------------------------------------------------------------------------
# Korthikanti et al. 2022, Table 2 (per layer, per token, bytes, 2-byte activations), gpt shape.

GPT = CATALOG["gpt-7b"]
H, A = GPT.hidden_size, GPT.num_attention_heads


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_table2_selective_with_sequence_parallel(tp: int) -> None:
    parallel = ParallelConfig(tp=tp, sequence_parallel=True)
    got = activation_bytes_per_token(GPT, parallel, num_layers=1, recompute="selective")
    assert got == pytest.approx(34 * H / tp, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_table2_selective_tensor_parallel_only(tp: int) -> None:
    parallel = ParallelConfig(tp=tp, sequence_parallel=False)
    got = activation_bytes_per_token(GPT, parallel, num_layers=1, recompute="selective")
    assert got == pytest.approx(H * (10 + 24 / tp), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("seq", [2048, 32768])
def test_table2_no_recompute_without_flash_attention(tp: int, seq: int) -> None:
    # sbh(34 + 5as/h) / t, plus FlashAttention's log-sum-exp 4a/t that "none" keeps.
    parallel = ParallelConfig(tp=tp, sequence_parallel=True)
    got = (activation_bytes_per_token(GPT, parallel, num_layers=1, recompute="none")
           + attention_scores_bytes_per_token(GPT, parallel, num_layers=1, kv_tokens=seq))
    assert got == pytest.approx(H * (34 + 5 * A * seq / H) / tp + 4 * A / tp, rel=1e-12)


@pytest.mark.parametrize("sp", [False, True])
def test_table2_full_recompute_keeps_layer_input(sp: bool) -> None:
    parallel = ParallelConfig(tp=4, sequence_parallel=sp)
    got = activation_bytes_per_token(GPT, parallel, num_layers=32, recompute="full")
    assert got == 32 * 2 * H / (4 if sp else 1)


def test_flexsp_gpt7b_activation_per_token() -> None:
    # FlexSP's profiled act_per_token_MB = 4.480441895 MiB for gpt-7b (whole model, one GPU);
    # ours: 32 layers without recompute + embedding + logits = 4.465 MiB (residual -0.3%).
    # Its 13b/30b values (21.6 and 9.0 bytes per h per layer) imply partial recompute: not compared.
    parallel = ParallelConfig()
    ours = (activation_bytes_per_token(GPT, parallel, num_layers=32, recompute="none")
            + embedding_bytes_per_token(GPT, parallel) + logits_bytes_per_token(GPT, parallel))
    assert ours / MiB == pytest.approx(4.480441895, rel=0.01)


# ---------------------------------------------------------------------------------------------
# Static memory: ZeRO stages, TP, PP, tied embeddings


@pytest.mark.parametrize("stage,expected", [
    (0, lambda n: 18), (1, lambda n: 6 + 12 / n), (2, lambda n: 2 + 16 / n), (3, lambda n: 18 / n)])
@pytest.mark.parametrize("dp,cp", [(1, 1), (8, 1), (2, 4)])
def test_zero_stage_bytes_per_parameter(stage: int, expected, dp: int, cp: int) -> None:
    m = CATALOG["llama-3.1-8b"]
    parallel = ParallelConfig(dp=dp, cp=cp, zero_stage=stage)
    got = static_memory_bytes(m, parallel, num_layers=32, has_embedding=True, has_head=True)
    assert got.num_parameters == num_parameters(m)
    sharded = got.total_bytes - got.gathered_bytes  # ZeRO-3's gathered module: its own test
    assert sharded / got.num_parameters == pytest.approx(expected(dp * cp), rel=1e-12)
    assert (got.gathered_bytes > 0) == (stage == 3 and dp * cp > 1)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt-13b", "qwen2.5-7b"])
@pytest.mark.parametrize("gpus", [8, 64])
def test_zero3_matches_deepspeeds_estimate(name: str, gpus: int) -> None:
    # DeepSpeed's estimate_zero3_model_states_mem_needs without offload: 4 * largest_layer_params
    # + 18 * total_params / total_gpus, largest_layer_params the most parameters one module holds
    # itself (model_to_params), here the vocab table (embedding or LM head) of one pipeline stage
    m = CATALOG[name]
    got = static_memory_bytes(m, ParallelConfig(dp=gpus, zero_stage=3), num_layers=m.num_layers,
                              has_embedding=True, has_head=True)
    assert got.total_bytes == pytest.approx(4 * vocab_parameters(m) + 18 * num_parameters(m) / gpus,
                                            rel=1e-12)
    # a stage of layers only: the largest projection in Megatron-LM's layout, the MLP's up
    # projection fused with its gate (an HF model keeps them apart: DeepSpeed would find half)
    inner = static_memory_bytes(m, ParallelConfig(dp=gpus, zero_stage=3, tp=2), num_layers=4,
                                has_embedding=False, has_head=False)
    up = (2 if m.arch == "llama" else 1) * m.hidden_size * m.ffn_hidden_size + (
        0 if m.arch == "llama" else m.ffn_hidden_size)  # gpt's up projection has a bias
    assert inner.gathered_bytes == pytest.approx(4 * up / 2, rel=1e-12)
    assert inner.gathered_grads_bytes == inner.gathered_bytes / 2  # bf16 weights and gradients


@pytest.mark.parametrize("stage,ratio", [
    (1, lambda n: 6 / 8 / n + 2 / 8), (2, lambda n: 7 / 8 / n + 1 / 8), (3, lambda n: 1 / n)])
def test_flexsp_model_states_with_bf16_grads(stage: int, ratio) -> None:
    # FlexSP: model_states_MB = param_size_B * 16 * zero_ratio * 1024 (16 B/param, bf16 grads).
    m = get_model("gpt-7b", max_position_embeddings=192000)
    parallel = ParallelConfig(dp=64, zero_stage=stage)
    got = static_memory_bytes(m, parallel, num_layers=32, has_embedding=True, has_head=True,
                              fp32_grads=False)
    expected_mib = 7.1174468994140625 * 16 * ratio(64) * 1024
    # FlexSP's planner does not count ZeRO-3's gathered module (DeepSpeed's estimate does: above)
    assert (got.total_bytes - got.gathered_bytes) / MiB == pytest.approx(expected_mib, rel=1e-9)


def test_distributed_optimizer_off_replicates_everything() -> None:
    m = CATALOG["llama-2-7b"]
    got = static_memory_bytes(m, ParallelConfig(dp=8, zero_stage=3), num_layers=32,
                              has_embedding=True, has_head=True, distributed_optimizer=False)
    assert got.total_bytes == 18 * num_parameters(m)


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.1-8b", "gpt-13b"])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_stages_add_up_to_the_model(name: str, pp: int) -> None:
    # A tied head on the last stage keeps a second copy of the vocab matrix when pp > 1.
    m = CATALOG[name]
    per_stage = m.num_layers // pp
    total = sum(stage_parameters_per_gpu(m, 1, num_layers=per_stage, has_embedding=s == 0,
                                         has_head=s == pp - 1) for s in range(pp))
    extra = vocab_parameters(m) if m.tied_embeddings and pp > 1 else 0
    assert total == num_parameters(m) + extra


@pytest.mark.parametrize("name", ["llama-3.1-70b", "qwen2.5-7b", "gpt-30b"])
def test_static_memory_decreases_with_tp_zero_and_dp(name: str) -> None:
    m = CATALOG[name]

    def total(**kw: int) -> float:
        return static_memory_bytes(m, ParallelConfig(**kw), num_layers=m.num_layers // 4,
                                   has_embedding=True, has_head=False).total_bytes

    tps = [total(tp=tp, dp=8) for tp in (1, 2, 4, 8)]
    stages = [total(dp=8, zero_stage=z) for z in (0, 1, 2, 3)]
    dps = [total(dp=dp, zero_stage=1) for dp in (1, 2, 8, 64)]
    for series in (tps, stages, dps):
        assert all(a > b for a, b in zip(series, series[1:]))


def test_kv_replicated_past_kv_heads() -> None:
    # Qwen2.5-7B has 4 KV heads: at tp=8 each GPU holds a full KV head, as at tp=4.
    m = CATALOG["qwen2.5-7b"]
    params = layer_parameters(m)
    non_kv = params.num_q + params.num_out + params.num_mlp
    assert layer_parameters_per_gpu(m, 8) == non_kv / 8 + params.num_kv / 4 + params.num_replicated
    assert kv_state_bytes_per_token(m, ParallelConfig(tp=8), num_layers=1) == \
        kv_state_bytes_per_token(m, ParallelConfig(tp=4), num_layers=1)


def test_bad_num_layers_rejected() -> None:
    with pytest.raises(ConfigError, match=r"'num_layers' must be an integer in \[0, 32\]"):
        static_memory_bytes(CATALOG["llama-2-7b"], ParallelConfig(), num_layers=33,
                            has_embedding=False, has_head=False)


# ---------------------------------------------------------------------------------------------
# Activations: monotonicity, K/V terms, logits, recompute


@pytest.mark.parametrize("name", ["llama-2-7b", "qwen2.5-7b", "qwen2.5-72b", "gpt-7b"])
@pytest.mark.parametrize("tp,sp", [(1, True), (4, True), (4, False)])
def test_recompute_orders_activation_memory(name: str, tp: int, sp: bool) -> None:
    m, parallel = CATALOG[name], ParallelConfig(tp=tp, sequence_parallel=sp)
    none, selective, full = (activation_bytes_per_token(m, parallel, num_layers=4, recompute=r)
                             for r in ("none", "selective", "full"))
    assert none > selective > full > 0
    # With FlashAttention "none" and "selective" differ only by the fp32 log-sum-exp.
    assert none - selective == pytest.approx(4 * 4 * m.num_attention_heads / tp)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activation_linear_in_layers_and_decreasing_in_tp_and_cp(recompute: str) -> None:
    m = CATALOG["llama-3.1-8b"]
    one = activation_bytes_per_token(m, ParallelConfig(), num_layers=1, recompute=recompute)
    assert activation_bytes_per_token(m, ParallelConfig(), num_layers=7,
                                      recompute=recompute) == pytest.approx(7 * one)
    assert activation_bytes_per_token(m, ParallelConfig(), num_layers=0, recompute=recompute) == 0
    by_tp = [activation_bytes_per_token(m, ParallelConfig(tp=t), num_layers=1, recompute=recompute)
             for t in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(by_tp, by_tp[1:]))
    for kind in ("ring", "ulysses"):
        by_cp = [activation_bytes_per_token(m, ParallelConfig(cp=c, cp_kind=kind), num_layers=1,
                                            recompute=recompute) for c in (1, 2, 4, 8)]
        # Ulysses keeps the attention output in both layouts (head- and sequence-parallel)
        both = kind == "ulysses" and recompute != "full"
        copy = [attention_output_copy_bytes_per_token(m, ParallelConfig(cp=c)) if both and c > 1
                else 0.0 for c in (1, 2, 4, 8)]
        assert by_cp == pytest.approx([one / c + x for c, x in zip((1, 2, 4, 8), copy)])
        if both:
            assert copy[1] == 2 * m.num_attention_heads * m.head_dim / 2  # bf16, cp 2


def test_kv_state_and_grad_match_infinipipe() -> None:
    # InfiniPipe eq. 5: M_dkv = 2 e L D / N per token (MHA, D = hidden, N = Ulysses degree).
    parallel = ParallelConfig(cp=8, cp_kind="ulysses")
    expected = 2 * 2 * 32 * H / 8
    assert kv_grad_bytes_per_token(GPT, parallel, num_layers=32) == expected
    assert kv_state_bytes_per_token(GPT, parallel, num_layers=32) == expected


def test_kv_state_is_inside_stored_activations() -> None:
    m = CATALOG["llama-3.1-8b"]
    _, _, kv = layer_activation_parts(m, "selective")
    assert kv == kv_state_bytes_per_token(m, ParallelConfig(), num_layers=1) == 2 * 2 * 1024


def test_infinipipe_checkpoint_term() -> None:
    # InfiniPipe eq. 9: a checkpointed layer of a dependent chunk keeps (3 - 2 I_k) e D per token:
    # the input plus K and V.
    parallel = ParallelConfig(cp=4, cp_kind="ulysses")
    full = activation_bytes_per_token(GPT, parallel, num_layers=1, recompute="full")
    kv = kv_state_bytes_per_token(GPT, parallel, num_layers=1)
    assert full + kv == 3 * 2 * H / 4


def test_logits_match_megatron_output_layer_term() -> None:
    m = CATALOG["llama-3.1-8b"]
    for tp in (1, 8):
        ours = logits_bytes_per_token(m, ParallelConfig(tp=tp))
        assert ours == pytest.approx(4 * m.hidden_size * (1 + m.vocab_size / m.hidden_size) / tp
                                     + 4)


def test_embedding_bytes() -> None:
    assert embedding_bytes_per_token(CATALOG["llama-2-7b"], ParallelConfig(tp=4)) == 8
    assert embedding_bytes_per_token(GPT, ParallelConfig(tp=4)) == 8 + H / 4


def test_recompute_working_memory() -> None:
    m, parallel = CATALOG["qwen2.5-7b"], ParallelConfig(tp=2)
    assert recompute_working_bytes_per_token(m, parallel, recompute="selective") == 0
    assert recompute_working_bytes_per_token(m, parallel, recompute="full") == \
        activation_bytes_per_token(m, parallel, num_layers=1, recompute="none")


def test_bad_recompute_rejected() -> None:
    with pytest.raises(ConfigError, match=r"'parallel.recompute' must be one of none, selective"):
        activation_bytes_per_token(GPT, ParallelConfig(), num_layers=1, recompute="some")


def test_allocator_overhead() -> None:
    assert with_allocator_overhead(10 * GiB) == 10 * GiB * 1.05 + 1 * GiB
    assert with_allocator_overhead(10 * GiB, NO_ALLOCATOR_OVERHEAD) == 10 * GiB
    custom = AllocatorOverhead(fragmentation_fraction=0.1, fixed_bytes=0.0)
    assert custom.apply(100.0) == pytest.approx(110.0)
    assert ALLOCATOR_OVERHEAD.apply(0.0) == 1 * GiB
    assert math.isclose(ALLOCATOR_OVERHEAD.fragmentation_fraction, 0.05)
