"""The executor's small decoder (Llama or GPT shape from a ModelSpec) over packed varlen chunks.

A chunk is a tuple of slices (seq, start, stop) of token sequences, packed into one row of tokens
(`PackedBatch`). RoPE positions are absolute positions within each sequence, so a slice of a long
sequence computes exactly what the same tokens compute inside the whole sequence. A slice with
start > 0 attends to the K/V of tokens [0, start) of its sequence, which the caller supplies through
a `kv` hook (see ltsim/executor/state.py); the model itself keeps no state between chunks.

A `Transformer` can hold a layer range [a, b) of the model (one pipeline stage): the first stage
embeds tokens, the last one applies the LM head and returns the cross-entropy loss summed over
tokens. Attention uses flash-attn's `flash_attn_varlen_func` on CUDA in fp16/bf16 when it imports,
and torch SDPA per slice otherwise (is_causal on the diagonal, `kernels.context_attention` for a
slice with context, or a boolean mask with backend "sdpa_boolmask"); all compute the same function.

Architecture: karpathy/nanoGPT model.py (sizes, init std 0.02) and the Llama reference
(meta-llama/llama model.py: RMSNorm, rotate-half RoPE, GQA, SwiGLU).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ltsim.errors import ConfigError
from ltsim.executor import kernels
from ltsim.model import ModelSpec

IGNORE_INDEX = -100  # target of a sequence's last token (nothing to predict)
TORCH_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16,
                "fp16": torch.float16}

# kv hook: (layer, k post-RoPE (T, Hkv, D), v (T, Hkv, D)) -> per slice (k_past, v_past) or None
PastKV = tuple[torch.Tensor, torch.Tensor] | None
KVHook = Callable[[int, torch.Tensor, torch.Tensor], Sequence[PastKV]]


def as_slice(item: object) -> tuple[int, int, int]:
    """(seq, start, stop) from a plan Slice (attributes seq/start/stop) or a plain triple."""
    if hasattr(item, "seq"):
        return int(item.seq), int(item.start), int(item.stop)
    seq, start, stop = item  # type: ignore[misc]
    return int(seq), int(start), int(stop)


@dataclass(frozen=True, slots=True, kw_only=True)
class PackedBatch:
    """One chunk's tokens packed into a row; slice i occupies rows offsets[i]:offsets[i + 1]."""

    slices: tuple[tuple[int, int, int], ...]
    continues: tuple[bool, ...]  # slice i's sequence goes on after stop (later chunks need its K/V)
    input_ids: torch.Tensor  # (T,) int64
    targets: torch.Tensor  # (T,) int64, IGNORE_INDEX at each sequence's last token
    positions: torch.Tensor  # (T,) int64, absolute position within the sequence
    offsets: tuple[int, ...]  # len(slices) + 1 cumulative token counts

    @property
    def num_tokens(self) -> int:
        return self.offsets[-1]

    def to(self, device: torch.device | str) -> "PackedBatch":
        return PackedBatch(slices=self.slices, continues=self.continues, offsets=self.offsets,
                           input_ids=self.input_ids.to(device), targets=self.targets.to(device),
                           positions=self.positions.to(device))


def pack_chunk(chunk: Iterable[object], tokens: Mapping[int, torch.Tensor]) -> PackedBatch:
    """Pack a chunk's slices; `tokens[seq]` is the whole sequence (1-D int64).

    Raises ConfigError for a slice out of range or two slices of one sequence.
    """
    slices = tuple(as_slice(s) for s in chunk)
    if len({s[0] for s in slices}) != len(slices):
        raise ConfigError("chunk", "at most one slice per sequence", slices)
    ids, targets, positions, continues, offsets = [], [], [], [], [0]
    for seq, start, stop in slices:
        seq_tokens = tokens[seq]
        if not 0 <= start < stop <= len(seq_tokens):
            raise ConfigError("chunk.slice", f"0 <= start < stop <= {len(seq_tokens)}",
                              (seq, start, stop))
        ids.append(seq_tokens[start:stop])
        nxt = seq_tokens[start + 1:stop + 1]
        targets.append(F.pad(nxt, (0, stop - start - len(nxt)), value=IGNORE_INDEX))
        positions.append(torch.arange(start, stop, dtype=torch.long, device=seq_tokens.device))
        continues.append(stop < len(seq_tokens))
        offsets.append(offsets[-1] + stop - start)
    return PackedBatch(slices=slices, continues=tuple(continues), offsets=tuple(offsets),
                       input_ids=torch.cat(ids).long(), targets=torch.cat(targets).long(),
                       positions=torch.cat(positions))


@functools.cache
def _flash_varlen() -> Callable | None:
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


# "auto": flash-attn where it runs, else SDPA; "sdpa_boolmask": SDPA with a boolean mask for slices
# with context (the executor up to 1acdf9d: profiles.SDPA_BOOL_MASK_KERNEL)
ATTENTION_BACKENDS = ("auto", "sdpa", "flash", "sdpa_boolmask")


def uses_flash(q: torch.Tensor, backend: str = "auto") -> bool:
    """Whether `attention` takes the flash-attn path for this query tensor."""
    if backend in ("sdpa", "sdpa_boolmask"):
        return False
    ok = q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and _flash_varlen() is not None
    if backend == "flash" and not ok:
        raise ConfigError("executor.attention", "usable (flash-attn installed, CUDA, fp16/bf16)",
                          f"{q.device}/{q.dtype}", "use backend 'sdpa' or 'auto'")
    return ok


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: PackedBatch,
              past: Sequence[tuple[torch.Tensor, torch.Tensor] | None], backend: str = "auto"
              ) -> torch.Tensor:
    """Causal attention of each slice over its sequence's past K/V and its own tokens.

    q: (T, Hq, D); k, v: (T, Hkv, D) post-RoPE; past[i]: K/V of tokens [0, start) of slice i, or
    None.
    Slices never see each other (block-diagonal). Returns (T, Hq, D).
    """
    off = batch.offsets
    keys = [k[off[i]:off[i + 1]] if p is None else torch.cat([p[0], k[off[i]:off[i + 1]]])
            for i, p in enumerate(past)]
    values = [v[off[i]:off[i + 1]] if p is None else torch.cat([p[1], v[off[i]:off[i + 1]]])
              for i, p in enumerate(past)]
    if uses_flash(q, backend):
        # causal=True aligns the mask bottom-right when seqlen_k > seqlen_q (flash-attn >= 2.1)
        lens_k = [len(x) for x in keys]
        cu_q = torch.tensor(off, dtype=torch.int32, device=q.device)
        cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32,
                            device=q.device)
        return _flash_varlen()(q, torch.cat(keys), torch.cat(values), cu_q, cu_k,
                               max(b - a for a, b in zip(off, off[1:])), max(lens_k), causal=True)
    gqa = q.shape[1] != k.shape[1]
    outs = []
    for i in range(len(batch.slices)):
        # 4-D (1, H, L, D): torch picks its fused flash kernel on CPU only for 4-D inputs; 3-D ones
        # take the math path, which stores the (H, L, L) probabilities. enable_gqa instead of
        # repeat_interleave: the kernel then keeps K/V at num_kv_heads, as FlashAttention does.
        qi = q[off[i]:off[i + 1]].transpose(0, 1)[None]  # (1, Hq, L, D)
        ki = keys[i].transpose(0, 1)[None]  # (1, Hkv, L_kv, D)
        vi = values[i].transpose(0, 1)[None]
        num_q, num_k = qi.shape[2], ki.shape[2]
        if num_q == num_k:
            out = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=gqa)
        elif backend == "sdpa_boolmask":  # query j sees keys up to num_k - num_q + j
            mask = torch.ones(num_q, num_k, dtype=torch.bool, device=q.device).tril(num_k - num_q)
            out = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=gqa)
        else:  # query j sits at key index num_k - num_q + j: causal, aligned bottom-right
            out = kernels.context_attention(qi, ki, vi)
        outs.append(out[0].transpose(0, 1))
    return torch.cat(outs)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = kernels.RMS_EPS) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)  # keeps x and rstd only


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int, backend: str) -> None:
        super().__init__()
        self.layer, self.backend, self.rope = layer, backend, spec.arch == "llama"
        self.num_heads, self.num_kv_heads, self.head_dim = (
            spec.num_attention_heads, spec.num_kv_heads, spec.head_dim)
        qkv_width = spec.hidden_size + 2 * spec.kv_hidden_size
        self.qkv = nn.Linear(spec.hidden_size, qkv_width, bias=spec.qkv_bias or spec.arch == "gpt")
        self.proj = nn.Linear(spec.hidden_size, spec.hidden_size, bias=spec.arch == "gpt")

    def forward(self, x: torch.Tensor, batch: PackedBatch, kv: KVHook | None) -> torch.Tensor:
        num_tokens = x.shape[0]
        q, k, v = self.qkv(x).split(
            [self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim,
             self.num_kv_heads * self.head_dim], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.rope:  # v copied so that no saved view pins the whole QKV output
            q, k = kernels.rope(q, batch.positions), kernels.rope(k, batch.positions)
            v = v.contiguous()
        past = kv(self.layer, k, v) if kv is not None else _no_past(batch)
        out = attention(q, k, v, batch, past, self.backend)
        return self.proj(out.reshape(num_tokens, -1))


def _no_past(batch: PackedBatch) -> list[None]:
    if any(start > 0 for _, start, _ in batch.slices):
        raise ConfigError("chunk.slice.start", "0 without a state store (kv hook)", batch.slices,
                          "run dependent chunks through ltsim.executor.state.forward_chunk")
    return [None] * len(batch.slices)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.swiglu = spec.arch == "llama"
        h, f = spec.hidden_size, spec.ffn_hidden_size
        self.up = nn.Linear(h, 2 * f if self.swiglu else f, bias=not self.swiglu)
        self.down = nn.Linear(f, h, bias=not self.swiglu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(kernels.swiglu(self.up(x)))  # keeps its input only
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int, backend: str) -> None:
        super().__init__()
        norm = RMSNorm if spec.arch == "llama" else nn.LayerNorm
        self.norm1, self.norm2 = norm(spec.hidden_size), norm(spec.hidden_size)
        self.attn, self.mlp = Attention(spec, layer, backend), MLP(spec)

    def forward(self, x: torch.Tensor, batch: PackedBatch, kv: KVHook | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), batch, kv)
        return x + self.mlp(self.norm2(x))


def check_tied_embeddings(spec: ModelSpec, layers: tuple[int, int]) -> None:
    """A tied embedding and head live on one stage: raises ConfigError for a stage of
    ``layers`` that holds only part of a tied model."""
    if spec.tied_embeddings and tuple(layers) != (0, spec.num_layers):
        raise ConfigError("model.tied_embeddings", "false when the layers are split over stages",
                          True, "use an untied model (e.g. llama-tiny) for pipeline runs")


class Transformer(nn.Module):
    """Layers [layers[0], layers[1]) of the model; embedding on the first stage, head on the last.

    Parameters depend only on (spec, seed, layer index), so stages built separately hold exactly the
    parameters of the whole model. Raises ConfigError for a bad layer range or tied embeddings split
    over stages.
    """

    def __init__(self, spec: ModelSpec, *, layers: tuple[int, int] | None = None, seed: int = 0,
                 dtype: torch.dtype | None = None, attention_backend: str = "auto") -> None:
        super().__init__()
        first, last = layers if layers is not None else (0, spec.num_layers)
        if not 0 <= first < last <= spec.num_layers:
            raise ConfigError("executor.layers", f"a range 0 <= a < b <= {spec.num_layers}", layers)
        self.spec, self.layers = spec, (first, last)
        self.has_embedding, self.has_head = first == 0, last == spec.num_layers
        check_tied_embeddings(spec, self.layers)
        if spec.arch == "gpt" and self.has_embedding and spec.max_position_embeddings <= 0:
            raise ConfigError("model.max_position_embeddings", "positive for arch 'gpt'",
                              spec.max_position_embeddings)
        gen = [torch.Generator().manual_seed(seed * 1_000_003 + i) for i in range(last + 2)]
        if self.has_embedding:
            self.embed = _init(nn.Embedding(spec.vocab_size, spec.hidden_size), gen[0])
            if spec.arch == "gpt":
                self.pos_embed = _init(nn.Embedding(spec.max_position_embeddings,
                                                    spec.hidden_size), gen[0])
        self.blocks = nn.ModuleList(_init(Block(spec, i, attention_backend), gen[i + 1])
                                    for i in range(first, last))
        if self.has_head:
            self.norm = RMSNorm(spec.hidden_size) if spec.arch == "llama" else nn.LayerNorm(
                spec.hidden_size)
            self.head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
            if spec.tied_embeddings:
                self.head.weight = self.embed.weight
            else:
                _init(self.head, gen[last + 1])
        self.to(dtype if dtype is not None else TORCH_DTYPES[spec.dtype])

    def forward(self, batch: PackedBatch, hidden: torch.Tensor | None = None,
                kv: KVHook | None = None) -> torch.Tensor:
        """The loss (sum over tokens) on the last stage, else the hidden state (T, hidden_size).

        `hidden` is the previous stage's output (required unless this stage embeds); `kv` supplies
        past K/V for slices with start > 0 and receives each layer's K/V.
        """
        if self.has_embedding:
            x = self.embed_tokens(batch)
        elif hidden is None:
            raise ConfigError("hidden", "the previous stage's output", None,
                              f"stage with layers {self.layers} does not embed tokens")
        else:
            x = hidden
        x = self.run_blocks(x, batch, kv, self.layers)
        return self.loss(x, batch) if self.has_head else x

    def embed_tokens(self, batch: PackedBatch) -> torch.Tensor:
        """The embedding's output (first stage only)."""
        x = self.embed(batch.input_ids)
        if self.spec.arch == "gpt":
            x = x + self.pos_embed(batch.positions)
        return x

    def run_blocks(self, x: torch.Tensor, batch: PackedBatch, kv: KVHook | None,
                   layers: tuple[int, int]) -> torch.Tensor:
        """Layers [layers[0], layers[1]) of this stage's over ``x`` (a per-layer op runs one)."""
        first = self.layers[0]
        for block in self.blocks[layers[0] - first:layers[1] - first]:
            x = block(x, batch, kv)
        return x

    def loss(self, x: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """The final norm, the LM head and the token-summed cross-entropy (last stage only)."""
        logits = self.head(self.norm(x))
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return F.cross_entropy(logits, batch.targets, ignore_index=IGNORE_INDEX, reduction="sum")


def _init(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """nanoGPT init: weights N(0, 0.02), biases 0, norms 1; drawn in fp32 so every dtype agrees."""
    for name, param in module.named_parameters():
        with torch.no_grad():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            elif name.endswith("bias"):
                param.zero_()
    return module

