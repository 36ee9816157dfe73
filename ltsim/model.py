"""Model shapes (ModelSpec), the model catalog, parameter counts and FLOPs.

Shapes come from each model's published config.json (Hugging Face model cards); the GPT shapes come
from FlexSP / InfiniPipe (data/flexsp_costmodel_constants.json).

FLOPs convention (used for MFU everywhere in ltsim):

- A matmul of an (m x k) by a (k x n) matrix costs 2*m*k*n FLOPs. Dense FLOPs of one forward pass
  are 2 * (matmul weights of QKV, output projection and MLP) * tokens; biases, norms, RoPE, softmax
  and activation functions are not counted (Megatron-LM and Skrull eq. 13 do the same).
- Attention FLOPs are the QK^T and AV matmuls: 4 * q * kv * hidden per layer. With a causal mask, a
  slice of q tokens after ``context`` earlier tokens of its sequence attends to kv = context + q/2
  tokens on average (``causal_halving=True``: Megatron-LM's MFU and FlashAttention's benchmarks);
  without halving kv = context + q, which is Skrull eq. 13's 4*b*h*S^2 term.
- Backward = 2 x forward. ``training_flops`` = 3 x forward, LM head included, recompute NOT counted
  (model FLOPs, not hardware FLOPs: PaLM's MFU definition, Chowdhery et al. 2022, Appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ltsim.errors import ConfigError

ARCHES = ("llama", "gpt")
DTYPES = ("bf16", "fp16", "fp32", "fp64")


MAX_DIMENSION = 2**24  # a model's widths, depth, heads and vocabulary (the largest are ~10^6)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer's shape.

    arch "llama": RMSNorm, RoPE, grouped-query attention, SwiGLU MLP (three ffn matrices), no
    dropout, biases only on Q/K/V when ``qkv_bias``.
    arch "gpt": LayerNorm (weight and bias), learned positions, multi-head attention, GELU MLP (two
    ffn matrices), biases on every linear layer, dropout (GPT-2/3 and Megatron-LM GPT).
    """

    name: str
    arch: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    dtype: str = "bf16"
    tied_embeddings: bool = False
    qkv_bias: bool = False
    max_position_embeddings: int = 0  # gpt only: learned position table rows (0 = none counted)
    lora_rank: int = 0  # > 0: LoRA fine-tuning, base weights frozen (see lora_layer_parameters)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_hidden_size(self) -> int:
        """Width of K (or V): num_kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU (gate, up, down matrices) for llama; GELU (up, down) for gpt."""
        return self.arch == "llama"

    @property
    def has_dropout(self) -> bool:
        """GPT keeps dropout masks (Megatron-LM's default dropout); Llama has none."""
        return self.arch == "gpt"

    def positions_short_of(self, tokens: int) -> bool:
        """Whether a learned position table is counted (only a GPT's: ``validate`` refuses one
        on another arch) with fewer rows than ``tokens``: a run that long needs more."""
        return 0 < self.max_position_embeddings < tokens

    @property
    def norm_size(self) -> int:
        """Parameters per norm per hidden unit: RMSNorm 1 (weight), LayerNorm 2 (weight, bias)."""
        return 2 if self.arch == "gpt" else 1

    def validate(self) -> "ModelSpec":
        """Check the shape; raises ConfigError naming the bad model.* key."""
        if self.arch not in ARCHES:
            raise ConfigError("model.arch", f"one of {', '.join(ARCHES)}", self.arch)
        if self.dtype not in DTYPES:
            raise ConfigError("model.dtype", f"one of {', '.join(DTYPES)}", self.dtype)
        for key in ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
                    "ffn_hidden_size", "vocab_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{key}", "a positive integer", value)
            if value > MAX_DIMENSION:
                raise ConfigError(f"model.{key}", f"at most {MAX_DIMENSION:,} (no model comes "
                                  "near)", value, f"give model.{key} a realistic value")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError("model.num_attention_heads", "a divisor of model.hidden_size",
                              self.num_attention_heads, "set model.num_attention_heads to a "
                              "divisor of model.hidden_size, or hidden_size to a multiple of it",
                              context=f"hidden_size is {self.hidden_size}")
        if self.arch == "llama" and self.head_dim % 2:  # RoPE rotates channel pairs
            raise ConfigError("model.num_attention_heads", "a count that leaves an even head "
                              "dimension (RoPE rotates pairs of channels)",
                              self.num_attention_heads, "choose num_attention_heads so that "
                              "hidden_size / num_attention_heads is even",
                              context=f"hidden_size / num_attention_heads is "
                              f"{self.hidden_size // self.num_attention_heads}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError("model.num_kv_heads", "a divisor of model.num_attention_heads",
                              self.num_kv_heads, "set model.num_kv_heads to a divisor of "
                              "model.num_attention_heads (1 for MQA, equal for MHA)",
                              context=f"num_attention_heads is {self.num_attention_heads}")
        for key in ("max_position_embeddings", "lora_rank"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"model.{key}", "a non-negative integer", value)
        # read for GPT only: on another arch it would change nothing but unmatch the profile's
        # catalog shapes (costs/eager.py), dropping their whole-op times
        if self.max_position_embeddings and self.arch != "gpt":
            raise ConfigError("model.max_position_embeddings", "absent (or 0) unless model.arch = "
                              f"\"gpt\" ({self.arch}'s rotary positions need no table)",
                              self.max_position_embeddings, "remove it")
        narrowest = min(self.kv_hidden_size, self.hidden_size, self.ffn_hidden_size)
        if self.lora_rank > narrowest:  # every linear layer is adapted; K/V are usually narrowest
            raise ConfigError("model.lora_rank", "at most the narrowest adapted matrix's width "
                              f"({narrowest})", self.lora_rank,
                              "LoRA ranks are small, e.g. 8-64; 0 trains every weight")
        return self


def _llama(name: str, h: int, layers: int, heads: int, kv: int, ffn: int, vocab: int,
           **kw: object) -> ModelSpec:
    return ModelSpec(name=name, arch="llama", hidden_size=h, num_layers=layers,
                     num_attention_heads=heads, num_kv_heads=kv, ffn_hidden_size=ffn,
                     vocab_size=vocab, **kw)


def _gpt(name: str, h: int, layers: int) -> ModelSpec:
    # FlexSP's GPT: MHA with head_dim 128, ffn = 4h, GPT-2 BPE vocab 50257, untied LM head (its
    # param_size_B at 192k/384k matches exactly only with an untied head: tests/unit/test_model.py).
    return ModelSpec(name=name, arch="gpt", hidden_size=h, num_layers=layers,
                     num_attention_heads=h // 128, num_kv_heads=h // 128, ffn_hidden_size=4 * h,
                     vocab_size=50257, max_position_embeddings=4096)


CATALOG: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        # Qwen/Qwen2.5-*/config.json (qkv bias, tied embeddings for 0.5B-3B).
        _llama("qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, tied_embeddings=True, qkv_bias=True),
        _llama("qwen2.5-1.5b", 1536, 28, 12, 2, 8960, 151936, tied_embeddings=True, qkv_bias=True),
        _llama("qwen2.5-3b", 2048, 36, 16, 2, 11008, 151936, tied_embeddings=True, qkv_bias=True),
        _llama("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, qkv_bias=True),
        _llama("qwen2.5-14b", 5120, 48, 40, 8, 13824, 152064, qkv_bias=True),
        _llama("qwen2.5-32b", 5120, 64, 40, 8, 27648, 152064, qkv_bias=True),
        _llama("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064, qkv_bias=True),
        # meta-llama/Llama-2-7b-hf and Meta-Llama-3.1-{8B,70B}/config.json.
        _llama("llama-2-7b", 4096, 32, 32, 32, 11008, 32000),
        _llama("llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256),
        _llama("llama-3.1-70b", 8192, 80, 64, 8, 28672, 128256),
        # GPT shapes of FlexSP / InfiniPipe: hidden and layers from flexsp_costmodel_constants.json
        # (hidden_size, layer_num); heads (h/128), ffn (4h), vocab and biases are the GPT-3 family's
        # (Brown et al. 2020, Table 2.1: the 6.7B model is 4096 x 32 with head_dim 128), since the
        # JSON is silent on them. 6656 x 60 is not a GPT-3 size; it is LLaMA-33B's width and depth.
        # The position table defaults to 4096 rows; FlexSP sizes it to the sequence limit
        # (override max_position_embeddings, e.g. 192000).
        _gpt("gpt-7b", 4096, 32),
        _gpt("gpt-13b", 5120, 40),
        _gpt("gpt-30b", 6656, 60),
        # Small shapes for the CPU executor and profile (profiles/cpu-ci); not a published model.
        _llama("llama-tiny", 256, 4, 8, 4, 704, 2048, dtype="fp32"),
        _llama("llama-small", 512, 8, 8, 4, 1408, 8192, dtype="fp32"),
    )
}


def get_model(name: str, **overrides: object) -> ModelSpec:
    """A catalog model by (case-insensitive) name, with any shape fields overridden."""
    spec = CATALOG.get(name.lower())
    if spec is None:
        raise ConfigError("model.preset", f"one of {', '.join(sorted(CATALOG))}", name,
                          "pick a catalog name or give the shape explicitly "
                          "(arch, hidden_size, ...)")
    if overrides and overrides.get("arch", spec.arch) != "gpt" and (
            "max_position_embeddings" not in overrides):  # a GPT preset made another arch
        overrides = {**overrides, "max_position_embeddings": 0}  # keeps no position table
    return replace(spec, **overrides).validate() if overrides else spec


# ---------------------------------------------------------------------------------------------
# Parameter counts. Per-layer terms follow Megatron-LM megatron/training/theoretical_memory_usage.py
# (compute_weight_and_optimizer_memory), extended with the biases it leaves out.


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerParameters:
    """One transformer layer's parameters, grouped by how tensor parallelism splits them.

    Megatron-LM's layout: Q/K/V and MLP-up are column-parallel (weights and biases split), the
    output projection and MLP-down are row-parallel (weights split, biases replicated), norms are
    replicated. K/V split by KV head, so they are replicated once tp exceeds num_kv_heads.
    """

    num_q: int  # Q weight (+ bias): hidden x hidden
    num_kv: int  # K and V weights (+ biases): 2 x hidden x kv_hidden
    num_out: int  # attention output projection weight: hidden x hidden
    num_mlp: int  # MLP weights (3 or 2 x hidden x ffn) and the up-projection bias
    num_replicated: int  # norms and row-parallel biases

    @property
    def total(self) -> int:
        return self.num_q + self.num_kv + self.num_out + self.num_mlp + self.num_replicated


def layer_parameters(spec: ModelSpec) -> LayerParameters:
    """Parameters of one transformer layer (count, not bytes)."""
    h, kv, ffn = spec.hidden_size, spec.kv_hidden_size, spec.ffn_hidden_size
    qkv_bias = spec.qkv_bias or spec.arch == "gpt"
    num_up = 2 if spec.gated_mlp else 1  # SwiGLU: gate and up; GELU: up
    up_bias = 0 if spec.gated_mlp else ffn
    # Row-parallel biases (attention out, MLP down) exist only in gpt.
    row_biases = 2 * h if spec.arch == "gpt" else 0
    return LayerParameters(
        num_q=h * h + (h if qkv_bias else 0),
        num_kv=2 * h * kv + (2 * kv if qkv_bias else 0),
        num_out=h * h,
        num_mlp=(num_up + 1) * h * ffn + up_bias,
        num_replicated=2 * spec.norm_size * h + row_biases,
    )


def lora_layer_parameters(spec: ModelSpec) -> int:
    """LoRA adapter parameters of one layer (Hu et al. 2021, arXiv 2106.09685): for each adapted
    matrix of shape (in, out), A (in x r) and B (r x out), r = ``lora_rank``. ltsim adapts every
    projection of the layer (Q, K, V, output, and the MLP's up/gate/down), an upper bound on the
    common choices (PEFT's Llama default adapts Q and V only); embedding and LM head stay frozen."""
    h, kv, ffn = spec.hidden_size, spec.kv_hidden_size, spec.ffn_hidden_size
    shapes = [(h, h), (h, kv), (h, kv), (h, h)] + [(h, ffn)] * (2 if spec.gated_mlp else 1) + [(ffn, h)]
    return spec.lora_rank * sum(a + b for a, b in shapes)


def layer_matmul_parameters(spec: ModelSpec) -> int:
    """Matmul weights of one layer (QKV, out, MLP; no biases or norms): what dense FLOPs count."""
    h, kv, ffn = spec.hidden_size, spec.kv_hidden_size, spec.ffn_hidden_size
    return h * (h + 2 * kv) + h * h + (3 if spec.gated_mlp else 2) * h * ffn


def vocab_parameters(spec: ModelSpec) -> int:
    """One vocab x hidden matrix (the token embedding, or the untied LM head)."""
    return spec.vocab_size * spec.hidden_size


def embedding_parameters(spec: ModelSpec) -> int:
    """Input embedding: token table, plus the learned position table for gpt."""
    positions = spec.max_position_embeddings if spec.arch == "gpt" else 0
    return vocab_parameters(spec) + positions * spec.hidden_size


def head_parameters(spec: ModelSpec) -> int:
    """Final norm plus the LM head matrix; the matrix counts 0 when tied to the embedding."""
    final_norm = spec.norm_size * spec.hidden_size
    return final_norm + (0 if spec.tied_embeddings else vocab_parameters(spec))


def num_parameters(spec: ModelSpec) -> int:
    """Total parameters of the model (count, each tied matrix once)."""
    return (spec.num_layers * layer_parameters(spec).total + embedding_parameters(spec)
            + head_parameters(spec))


# ---------------------------------------------------------------------------------------------
# FLOPs (see the module docstring for the convention).


@dataclass(frozen=True, slots=True, kw_only=True)
class FlopsBreakdown:
    """Forward FLOPs split into token-linear matmuls (dense) and the quadratic attention matmuls."""

    dense: float
    attention: float

    @property
    def total(self) -> float:
        return self.dense + self.attention

    def scaled(self, factor: float) -> "FlopsBreakdown":
        """Both parts times ``factor`` (e.g. a stage's number of layers, or 2 for backward)."""
        return FlopsBreakdown(dense=self.dense * factor, attention=self.attention * factor)

    def __add__(self, other: "FlopsBreakdown") -> "FlopsBreakdown":
        return FlopsBreakdown(dense=self.dense + other.dense,
                              attention=self.attention + other.attention)


def _check_tokens(key: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(key, "a non-negative number of tokens", value)


def attended_tokens(*, q_tokens: float, context_tokens: float = 0,
                    causal_halving: bool = True) -> float:
    """Mean keys each query of a slice attends to (times q_tokens: the QK^T area).

    Skrull eq. 13 counts the full q x (context + q) block; with the causal halving, the diagonal
    q x q block counts half (InfiniPipe eq. 1's (C + s)^2 - C^2 for a chunk after context C).
    """
    _check_tokens("q_tokens", q_tokens)
    _check_tokens("context_tokens", context_tokens)
    return context_tokens + (q_tokens / 2 if causal_halving else q_tokens)


def layer_forward_flops(spec: ModelSpec, *, q_tokens: float, context_tokens: float = 0,
                        causal_halving: bool = True) -> FlopsBreakdown:
    """Forward FLOPs of ONE layer for a slice of q_tokens after context_tokens earlier tokens.

    Dense: 2 * matmul weights * tokens; with ffn = 4h and MHA this is Skrull eq. 13's
    20*h^2*S + 4*h*h_kv*S. Attention: 4 * q * kv * hidden (QK^T and AV, Skrull eq. 13's 4*h*S^2).
    """
    kv_tokens = attended_tokens(q_tokens=q_tokens, context_tokens=context_tokens,
                                causal_halving=causal_halving)
    return FlopsBreakdown(dense=2.0 * layer_matmul_parameters(spec) * q_tokens,
                          attention=4.0 * q_tokens * kv_tokens * spec.hidden_size)


def forward_flops(spec: ModelSpec, *, q_tokens: float, context_tokens: float = 0,
                  causal_halving: bool = True) -> FlopsBreakdown:
    """Forward FLOPs of all layers for one slice (LM head excluded: see ``head_flops``)."""
    layer = layer_forward_flops(spec, q_tokens=q_tokens, context_tokens=context_tokens,
                                causal_halving=causal_halving)
    return layer.scaled(spec.num_layers)


def head_flops(spec: ModelSpec, num_tokens: float) -> float:
    """Forward FLOPs of the LM head (logits): 2 * hidden * vocab per token."""
    _check_tokens("num_tokens", num_tokens)
    return 2.0 * spec.hidden_size * spec.vocab_size * num_tokens


def training_flops(spec: ModelSpec, *, q_tokens: float, context_tokens: float = 0,
                   causal_halving: bool = True, include_head: bool = True) -> float:
    """Model FLOPs of forward + backward (3 x forward) for one slice; the MFU numerator."""
    forward = forward_flops(spec, q_tokens=q_tokens, context_tokens=context_tokens,
                            causal_halving=causal_halving).total
    if include_head:
        forward += head_flops(spec, q_tokens)
    return 3.0 * forward
