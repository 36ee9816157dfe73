"""Tests for ltsim.model: catalog, parameter counts against published sizes, FLOPs conventions."""

from __future__ import annotations

import pytest

from ltsim.errors import ConfigError
from ltsim.model import (CATALOG, FlopsBreakdown, attended_tokens, embedding_parameters,
                         forward_flops, get_model, head_flops, head_parameters,
                         layer_forward_flops, layer_matmul_parameters, layer_parameters,
                         num_parameters, training_flops, vocab_parameters)

# Transcribed from data/flexsp_costmodel_constants.json (FlexSP, Hetu-Galvatron branch flexsp,
# galvatron/flexsp_solver/solver.py): hidden_size, layer_num, param_size_B_by_seq_limit_k.
FLEXSP = {
    "gpt-7b": (4096, 32, {"4": 6.51, "192": 7.1174468994140625, "384": 7.8498687744140625}),
    "gpt-13b": (5120, 40, {"4": 12.3568, "192": 13.11605453491211, "384": 14.03158187866211}),
    "gpt-30b": (6656, 60, {"4": 30.538, "192": 31.52513885498047, "384": 32.71532440185547}),
}

# Sizes on the model cards (billions, rounded as published).
PUBLISHED_B = {
    "qwen2.5-0.5b": 0.49, "qwen2.5-1.5b": 1.54, "qwen2.5-3b": 3.09, "qwen2.5-7b": 7.61,
    "qwen2.5-14b": 14.7, "qwen2.5-32b": 32.5, "qwen2.5-72b": 72.7,
    "llama-2-7b": 6.74, "llama-3.1-8b": 8.03, "llama-3.1-70b": 70.6,
}

# Exact totals of the checkpoints' safetensors shapes (tied matrices once).
EXACT = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    "llama-2-7b": 6_738_415_616,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_parameters_match_published_size(name: str) -> None:
    # Qwen2.5-14B/32B cards round down (14.77B, 32.76B): residual 0.5% and 0.8%.
    assert num_parameters(CATALOG[name]) / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_parameters_match_checkpoint_exactly(name: str) -> None:
    assert num_parameters(CATALOG[name]) == EXACT[name]


@pytest.mark.parametrize("name", ["gpt-7b", "gpt-13b", "gpt-30b"])
@pytest.mark.parametrize("limit_k", ["192", "384"])
def test_gpt_parameters_match_flexsp_long_limits(name: str, limit_k: str) -> None:
    # FlexSP's param_size_B is params / 2**30 with a position table of limit_k * 1000 rows and an
    # untied head; with that reading the count matches to the parameter (residual 0).
    expected = FLEXSP[name][2][limit_k] * 2**30
    spec = get_model(name, max_position_embeddings=int(limit_k) * 1000)
    assert num_parameters(spec) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", ["gpt-7b", "gpt-13b", "gpt-30b"])
def test_gpt_parameters_near_flexsp_4k_entry(name: str) -> None:
    # The 4k entries come from another source in FlexSP: residuals -1.7% (7b), -1.1% (13b), -0.6%.
    expected = FLEXSP[name][2]["4"] * 2**30
    spec = get_model(name, max_position_embeddings=4000)
    assert num_parameters(spec) == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("name", ["gpt-7b", "gpt-13b", "gpt-30b"])
def test_gpt_shapes_follow_flexsp_json(name: str) -> None:
    spec, (hidden, layers, _) = CATALOG[name], FLEXSP[name]
    assert (spec.hidden_size, spec.num_layers) == (hidden, layers)
    assert spec.head_dim == 128 and spec.num_kv_heads == spec.num_attention_heads
    assert spec.ffn_hidden_size == 4 * spec.hidden_size and spec.vocab_size == 50257


def test_gpt_layer_has_biases_and_layernorm() -> None:
    h = CATALOG["gpt-7b"].hidden_size
    # 12h^2 weights + 13h: qkv bias 3h, out bias h, fc1 bias 4h, fc2 bias h, two LayerNorms 4h.
    assert layer_parameters(CATALOG["gpt-7b"]).total == 12 * h * h + 13 * h


def test_layer_parameters_match_megatron_formula() -> None:
    # megatron/training/theoretical_memory_usage.py: 2h(1.5 f + 1) + 2h^2 (1 + g/a) without biases.
    spec = CATALOG["llama-3.1-70b"]
    h, f, a, g = (spec.hidden_size, spec.ffn_hidden_size, spec.num_attention_heads,
                  spec.num_kv_heads)
    megatron = 2 * h * (1.5 * f + 1) + 2 * h * h * (1 + g / a)
    assert layer_parameters(spec).total == megatron


def test_tied_embeddings_count_once() -> None:
    spec = CATALOG["qwen2.5-0.5b"]
    assert head_parameters(spec) == spec.hidden_size  # final RMSNorm only
    untied = get_model("qwen2.5-0.5b", tied_embeddings=False)
    assert num_parameters(untied) - num_parameters(spec) == vocab_parameters(spec)


def test_positions_count_only_for_gpt() -> None:
    import dataclasses

    # (a scenario cannot give a llama shape a table: test_a_position_table_belongs_to_gpt_...)
    llama = dataclasses.replace(CATALOG["llama-2-7b"], max_position_embeddings=4096)
    assert embedding_parameters(llama) == vocab_parameters(llama)
    gpt = CATALOG["gpt-7b"]
    assert embedding_parameters(gpt) == (gpt.vocab_size + 4096) * gpt.hidden_size


def test_qkv_bias_adds_q_and_kv_widths() -> None:
    spec = CATALOG["qwen2.5-7b"]
    plain = get_model("qwen2.5-7b", qkv_bias=False)
    diff = layer_parameters(spec).total - layer_parameters(plain).total
    assert diff == spec.hidden_size + 2 * spec.kv_hidden_size


def test_get_model_is_case_insensitive_and_overrides() -> None:
    assert get_model("Llama-3.1-8B") is CATALOG["llama-3.1-8b"]
    spec = get_model("llama-3.1-8b", num_layers=4)
    assert spec.num_layers == 4 and spec.hidden_size == 4096


def test_get_model_unknown_name_lists_catalog() -> None:
    with pytest.raises(ConfigError, match=r"'model.preset' must be one of .*gpt-13b.*llama-2-7b"):
        get_model("gpt-99b")


def test_override_validation_names_key() -> None:
    with pytest.raises(ConfigError, match=r"'model.max_position_embeddings' must be a non-neg"):
        get_model("gpt-7b", max_position_embeddings=-1)
    with pytest.raises(ConfigError, match=r"'model.num_kv_heads' must be a divisor"):
        get_model("llama-3.1-8b", num_kv_heads=5)
    # RoPE rotates channel pairs: a head of 511 channels was simulated without a word
    with pytest.raises(ConfigError, match=r"'model.num_attention_heads' must be .*even head dim"):
        get_model("llama-3.1-8b", hidden_size=3577, num_attention_heads=7, num_kv_heads=7)
    assert get_model("gpt-7b", hidden_size=4095, num_attention_heads=5, num_kv_heads=5)  # no RoPE


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_catalog_validates(name: str) -> None:
    assert CATALOG[name].validate() is CATALOG[name]


# ---------------------------------------------------------------------------------------------
# FLOPs


def skrull_eq13(h: int, h_kv: int, s: int, b: int = 1) -> float:
    """Skrull Appendix C.2, eq. 13 (per layer, forward, full q x s attention block)."""
    return 20 * b * h * h * s + 4 * b * h * h_kv * s + 4 * b * h * s * s


@pytest.mark.parametrize("kv_heads", [32, 8])
@pytest.mark.parametrize("seq", [1, 4096, 131072])
def test_layer_flops_equal_skrull_eq13(kv_heads: int, seq: int) -> None:
    # Eq. 13 assumes a 2-matrix MLP of 4h (gpt) and no causal halving.
    spec = get_model("gpt-7b", num_kv_heads=kv_heads)
    flops = layer_forward_flops(spec, q_tokens=seq, causal_halving=False)
    assert flops.total == pytest.approx(skrull_eq13(4096, spec.kv_hidden_size, seq), rel=1e-12)


def test_forward_flops_sum_all_layers() -> None:
    spec = CATALOG["qwen2.5-7b"]
    layer = layer_forward_flops(spec, q_tokens=1000, context_tokens=3000)
    whole = forward_flops(spec, q_tokens=1000, context_tokens=3000)
    assert whole == layer.scaled(spec.num_layers)


def test_causal_halving_halves_the_diagonal_block() -> None:
    spec = CATALOG["llama-3.1-8b"]
    full = layer_forward_flops(spec, q_tokens=8192, causal_halving=False).attention
    half = layer_forward_flops(spec, q_tokens=8192).attention
    assert half == full / 2
    assert attended_tokens(q_tokens=100, context_tokens=300) == 350
    assert attended_tokens(q_tokens=100, context_tokens=300, causal_halving=False) == 400


@pytest.mark.parametrize("splits", [(8192,), (4096, 4096), (1000, 3000, 4192), (1,) * 16])
def test_chunked_attention_sums_to_whole_sequence(splits: tuple[int, ...]) -> None:
    # Slices with their context add up to the whole causal sequence (ChunkFlow's premise;
    # InfiniPipe eq. 1's (C + s)^2 - C^2 per slice).
    spec = CATALOG["llama-2-7b"]
    total, context = FlopsBreakdown(dense=0.0, attention=0.0), 0
    for q in splits:
        total = total + forward_flops(spec, q_tokens=q, context_tokens=context)
        context += q
    whole = forward_flops(spec, q_tokens=context)
    assert total.dense == pytest.approx(whole.dense, rel=1e-12)
    assert total.attention == pytest.approx(whole.attention, rel=1e-12)


def test_dense_flops_follow_matmul_weights() -> None:
    spec = CATALOG["llama-3.1-8b"]
    h, kv, f = 4096, 1024, 14336
    assert layer_matmul_parameters(spec) == h * (h + 2 * kv) + h * h + 3 * h * f
    assert layer_forward_flops(spec, q_tokens=7).dense == 2 * 7 * layer_matmul_parameters(spec)


def test_head_flops() -> None:
    spec = CATALOG["llama-3.1-8b"]
    assert head_flops(spec, 10) == 2 * 4096 * 128256 * 10


@pytest.mark.parametrize("name", ["llama-2-7b", "qwen2.5-7b", "llama-3.1-70b"])
def test_training_flops_match_6n_rule_for_short_sequences(name: str) -> None:
    # Kaplan et al. 2020: training costs ~6 N FLOPs per token, N without the input embedding.
    # Residual: biases and norms (< 0.1%), attention of a single token (0 here).
    spec = CATALOG[name]
    n = num_parameters(spec) - embedding_parameters(spec)
    if spec.tied_embeddings:
        n += vocab_parameters(spec)
    assert training_flops(spec, q_tokens=1, causal_halving=False) == pytest.approx(
        6 * n + 12 * spec.num_layers * spec.hidden_size, rel=1e-3)


def test_training_flops_is_three_forwards() -> None:
    spec = CATALOG["qwen2.5-7b"]
    fwd = forward_flops(spec, q_tokens=4096, context_tokens=4096).total
    assert training_flops(spec, q_tokens=4096, context_tokens=4096) == 3 * (
        fwd + head_flops(spec, 4096))
    assert training_flops(spec, q_tokens=4096, context_tokens=4096, include_head=False) == 3 * fwd


def test_negative_tokens_rejected() -> None:
    with pytest.raises(ConfigError, match=r"'context_tokens' must be a non-negative number"):
        forward_flops(CATALOG["llama-tiny"], q_tokens=4, context_tokens=-1)
    with pytest.raises(ConfigError, match=r"'num_tokens' must be"):
        head_flops(CATALOG["llama-tiny"], -3)


def test_a_position_table_belongs_to_gpt_shapes_only():
    """model.max_position_embeddings became a scenario key (2026-11-29); on a llama shape it
    changed nothing but unmatched the profile's catalog shape, dropping its whole-op times (a
    review), so it is refused there, and a GPT preset made another arch drops its table."""
    from ltsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"max_position_embeddings' must be absent \(or 0\) unless "
                       r"model\.arch = \"gpt\""):
        get_model("llama-tiny", max_position_embeddings=4096)
    assert get_model("gpt-7b").max_position_embeddings == 4096
    assert get_model("gpt-7b", arch="llama").max_position_embeddings == 0
    assert get_model("gpt-7b", max_position_embeddings=192000).max_position_embeddings == 192000
    assert get_model("llama-tiny") is get_model("llama-tiny")  # no copy without overrides


def test_a_position_table_shorter_than_the_sequences_is_a_warning():
    """A fuzzing review: GPT with 16 learned positions simulated 64K-token sequences without a
    word (the executor refuses it; a run needs a table that long, whose weights count)."""
    from pathlib import Path

    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    path = Path(__file__).parents[2] / "scenarios/infinipipe/gpt-7b-64k-megatron.toml"
    sets = ["workload.lengths=[8192, 4096]", "workload.global_batch_size=2"]
    short = simulate(load_scenario(path, [*sets, "model.max_position_embeddings=16"]))
    assert any("max_position_embeddings = 16 is below the longest sequence (8,192" in w
               for w in short.warnings)
    enough = simulate(load_scenario(path, [*sets, "model.max_position_embeddings=8192"]))
    assert not any("max_position_embeddings" in w for w in enough.warnings)
