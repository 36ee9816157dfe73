"""Per-rank shapes of one transformer layer under tensor parallelism, and the GEMMs the cost model asks for.

Megatron-style TP (Shoeybi et al. 2019, "Megatron-LM", section 3): QKV and MLP-up are column-parallel
(output width / tp), the attention output and MLP-down projections are row-parallel (input width / tp),
the LM head is split over the vocabulary. Attention heads are split over ranks; K/V heads are split
too, or replicated when there are fewer K/V heads than ranks (Megatron's GQA rule).

Every linear layer costs three GEMMs: forward Y = X W^T, data gradient dX = dY W and weight gradient
dW = dY^T X. Rows name them `fwd`, `dgrad`, `wgrad`. The MLP up and gate projections of a SwiGLU
(llama) layer are one fused GEMM of width 2 * ffn / tp, as the executor runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsim.errors import ConfigError
from ltsim.model import ModelSpec

GEMM_PASSES = ("fwd", "dgrad", "wgrad")
# layouts of C = A @ B: n = A plain, t = A (or B) a transposed view of a row-major tensor
PASS_LAYOUT = {"fwd": "nt", "dgrad": "nn", "wgrad": "tn"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardShape:
    """One TP rank's share of a model layer."""

    model: str
    arch: str
    tp: int
    dtype: str
    hidden_size: int
    num_heads: int  # query heads on this rank
    num_kv_heads: int  # K/V heads on this rank
    head_dim: int
    ffn_hidden_size: int  # this rank's ffn width
    vocab_size: int  # this rank's vocabulary slice

    @property
    def label(self) -> str:
        return f"{self.model}/tp{self.tp}"

    @property
    def qkv_width(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_dim

    @property
    def up_width(self) -> int:
        """MLP up (+ gate for SwiGLU) output width on this rank."""
        return 2 * self.ffn_hidden_size if self.arch == "llama" else self.ffn_hidden_size

    def linears(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in_features, out_features) of every linear layer of the layer and the LM head."""
        up = "mlp_up_gate" if self.arch == "llama" else "mlp_up"
        return (("qkv", self.hidden_size, self.qkv_width),
                ("attn_out", self.num_heads * self.head_dim, self.hidden_size),
                (up, self.hidden_size, self.up_width),
                ("mlp_down", self.ffn_hidden_size, self.hidden_size),
                ("lm_head", self.hidden_size, self.vocab_size))


def shard(spec: ModelSpec, tp: int) -> ShardShape:
    """The per-rank shape of `spec` at TP degree `tp`; raises ConfigError when tp does not divide it."""
    if not isinstance(tp, int) or tp < 1:
        raise ConfigError("--tp", "positive integers", tp)
    if spec.num_attention_heads % tp:
        raise ConfigError("--tp", f"divisors of {spec.name}'s num_attention_heads "
                          f"({spec.num_attention_heads})", tp)
    if spec.ffn_hidden_size % tp:
        raise ConfigError("--tp", f"divisors of {spec.name}'s ffn_hidden_size "
                          f"({spec.ffn_hidden_size})", tp)
    kv = spec.num_kv_heads
    if kv % tp and tp % kv:
        raise ConfigError("--tp", f"a divisor or a multiple of {spec.name}'s num_kv_heads ({kv})", tp)
    return ShardShape(model=spec.name, arch=spec.arch, tp=tp, dtype=spec.dtype,
                      hidden_size=spec.hidden_size, num_heads=spec.num_attention_heads // tp,
                      num_kv_heads=max(1, kv // tp), head_dim=spec.head_dim,
                      ffn_hidden_size=spec.ffn_hidden_size // tp,
                      vocab_size=-(-spec.vocab_size // tp))


def gemm_dims(pass_: str, num_tokens: int, in_features: int, out_features: int
              ) -> tuple[int, int, int]:
    """(m, n, k) of C[m, n] = A[m, k] @ B[k, n] for one pass of a linear layer over num_tokens."""
    if pass_ == "fwd":
        return num_tokens, out_features, in_features
    if pass_ == "dgrad":
        return num_tokens, in_features, out_features
    if pass_ == "wgrad":
        return out_features, in_features, num_tokens
    raise ValueError(pass_)
