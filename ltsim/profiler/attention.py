"""attention.csv and attention_varlen.csv: causal attention forward and backward.

attention.csv: one slice of q_tokens queries that are the *last* q_tokens of a kv_tokens-long causal
sequence (a dependent chunk with kv_tokens - q_tokens tokens of context), heads per TP rank.
attention_varlen.csv: num_seqs whole sequences of equal length packed into one call (a standalone
chunk), each attending causally to itself only.

Kernels, chosen as the executor (ltsim/executor/model.py `attention`) chooses them:
- CUDA with fp16/bf16 and flash-attn importable: `flash_attn_varlen_func(causal=True)`, which
  aligns the causal mask bottom-right when kv > q (flash-attn >= 2.1); packed batches in one call.
- otherwise torch SDPA on (1, heads, tokens, head_dim) views, K/V expanded to the query heads with
  `repeat_interleave`; `is_causal=True` when q == kv, the executor's
  `kernels.context_attention` when q < kv (CUDA: torch's lower-right causal bias, mask
  "causal_lower_right"; CPU: the CPU flash kernel with a bottom-right mask built in the call,
  mask "cpu_flash_bottom_right"; profiles made before this measured a boolean mask,
  "bool_bottom_right"); packed batches are one SDPA call per sequence (the executor's per-slice
  loop).
The `kernel` column names what ran (`flash_attn_varlen` or `torch_sdpa`, one name for all rows of
a kernel so lookups group them), the `mask` column how the causal mask was applied. `bwd` rows time
the backward alone: the forward builds the graph once, untimed, and
`torch.autograd.grad(..., retain_graph=True)` is timed on it repeatedly; `fwd` rows time the
forward without autograd state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ltsim.executor.kernels import CONTEXT_MASK, context_attention
from ltsim.profiler.shapes import ShardShape
from ltsim.profiler.tables import Point, make_point
from ltsim.profiler.timing import TORCH_DTYPES, Bench, Case
from ltsim.profiles import SDPA_KERNEL

PASSES = ("fwd", "bwd")
KEY_FIELDS = ("q_tokens", "kv_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype", "pass_")
VARLEN_KEY_FIELDS = ("num_seqs", "total_tokens", "num_heads", "num_kv_heads", "head_dim", "dtype",
                     "pass_")

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
FLASH_KERNEL = "flash_attn_varlen"


def flash_varlen() -> Callable[..., torch.Tensor] | None:
    """flash-attn's varlen function, or None when flash-attn does not import."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def uses_flash(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether attention on this device and dtype runs flash-attn (as the executor decides)."""
    return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and (
        flash_varlen() is not None)


def _heads_key(shard: ShardShape) -> tuple[int, int, int, str]:
    return shard.num_heads, shard.num_kv_heads, shard.head_dim, shard.dtype


def attention_points(shards: Sequence[ShardShape], pairs: Sequence[tuple[int, int]]
                     ) -> tuple[Point, ...]:
    """One point per distinct (q, kv, heads, kv heads, head_dim, dtype, pass)."""
    points: dict[str, Point] = {}
    for shard in shards:
        heads, kv_heads, head_dim, dtype = _heads_key(shard)
        for q_tokens, kv_tokens in pairs:
            for pass_ in PASSES:
                point = make_point(KEY_FIELDS, q_tokens=q_tokens, kv_tokens=kv_tokens,
                                   num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                                   dtype=dtype, pass_=pass_)
                points.setdefault(point.key, point)
    return tuple(points.values())


def varlen_points(shards: Sequence[ShardShape], totals: Sequence[int], num_seqs: Sequence[int]
                  ) -> tuple[Point, ...]:
    """Packed batches of num_seqs equal sequences totalling total_tokens (when it divides)."""
    points: dict[str, Point] = {}
    for shard in shards:
        heads, kv_heads, head_dim, dtype = _heads_key(shard)
        for total in totals:
            for count in num_seqs:
                if total % count or total // count < 1:
                    continue
                for pass_ in PASSES:
                    point = make_point(VARLEN_KEY_FIELDS, num_seqs=count, total_tokens=total,
                                       num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                                       dtype=dtype, pass_=pass_)
                    points.setdefault(point.key, point)
    return tuple(points.values())


def sdpa_slice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA of q (L, Hq, D) as the last L positions of k, v (S, Hkv, D); returns (L, Hq, D)."""
    # (1, H, L, D): with a batch dimension CPU SDPA takes its flash kernel; 3-D inputs fall back
    # to the math kernel, which stores the (L x S) probabilities and runs 3-5x slower. The calls
    # are the executor's (executor/model.py): enable_gqa, no copy of K/V, for the diagonal.
    qh = q.transpose(0, 1).unsqueeze(0)
    kh = k.transpose(0, 1).unsqueeze(0)
    vh = v.transpose(0, 1).unsqueeze(0)
    if qh.shape[2] == kh.shape[2]:
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True,
                                             enable_gqa=qh.shape[1] != kh.shape[1])
    else:  # query j sits at key index num_k - num_q + j: the executor's kernel for context
        out = context_attention(qh, kh, vh)
    return out[0].transpose(0, 1)


def _packed_fn(seq_lens: Sequence[int], kv_lens: Sequence[int], device: torch.device,
               dtype: torch.dtype) -> tuple[AttentionFn, str, str]:
    """The attention function over packed (tokens, heads, head_dim) tensors, its kernel label and
    how it applies the causal mask."""
    if uses_flash(device, dtype):
        func = flash_varlen()
        cu_q = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32,
                            device=device)
        cu_k = torch.tensor([0, *torch.tensor(kv_lens).cumsum(0).tolist()], dtype=torch.int32,
                            device=device)
        def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return func(q, k, v, cu_q, cu_k, max(seq_lens), max(kv_lens), causal=True)
        return flash, FLASH_KERNEL, "causal_bottom_right"
    if len(seq_lens) == 1:
        mask = "is_causal" if seq_lens[0] == kv_lens[0] else CONTEXT_MASK[device.type]
        return sdpa_slice, SDPA_KERNEL, mask
    offsets = [0, *torch.tensor(seq_lens).cumsum(0).tolist()]
    def per_seq(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.cat([sdpa_slice(q[a:b], k[a:b], v[a:b])
                          for a, b in zip(offsets, offsets[1:])])
    return per_seq, SDPA_KERNEL, "per_seq_is_causal"


def _runner(bench: Bench, fn: AttentionFn, shapes: tuple[tuple[int, ...], ...], dtype: torch.dtype,
            pass_: str) -> Callable[[], object]:
    """fn's forward (no grad), or its backward alone on a graph built once and retained."""
    gen = torch.Generator(device=bench.device).manual_seed(0)
    q, k, v = (torch.randn(*s, generator=gen, device=bench.device, dtype=dtype) for s in shapes)
    if pass_ == "fwd":
        def forward() -> torch.Tensor:
            with torch.no_grad():
                return fn(q, k, v)
        return forward
    grad = torch.randn(*shapes[0], generator=gen, device=bench.device, dtype=dtype)
    leaves = tuple(x.detach().requires_grad_(True) for x in (q, k, v))
    out = fn(*leaves)
    return lambda: torch.autograd.grad(out, leaves, grad, retain_graph=True)


def prepare_attention(point: Point, bench: Bench) -> Case:
    """One attention.csv point."""
    p = point.values
    q_tokens, kv_tokens = p["q_tokens"], p["kv_tokens"]
    dtype = TORCH_DTYPES[p["dtype"]]
    fn, kernel, mask = _packed_fn([q_tokens], [kv_tokens], bench.device, dtype)
    shapes = ((q_tokens, p["num_heads"], p["head_dim"]),
              (kv_tokens, p["num_kv_heads"], p["head_dim"]),
              (kv_tokens, p["num_kv_heads"], p["head_dim"]))
    return Case(run=_runner(bench, fn, shapes, dtype, p["pass_"]),
                columns={"q_tokens": q_tokens, "kv_tokens": kv_tokens,
                         "num_heads": p["num_heads"], "num_kv_heads": p["num_kv_heads"],
                         "head_dim": p["head_dim"], "causal": True, "pass": p["pass_"]},
                extras={"dtype": p["dtype"], "kernel": kernel, "mask": mask, "method": "measured"})


def prepare_varlen(point: Point, bench: Bench) -> Case:
    """One attention_varlen.csv point."""
    p = point.values
    count, total = p["num_seqs"], p["total_tokens"]
    seq_len = total // count
    dtype = TORCH_DTYPES[p["dtype"]]
    fn, kernel, mask = _packed_fn([seq_len] * count, [seq_len] * count, bench.device, dtype)
    shapes = ((total, p["num_heads"], p["head_dim"]), (total, p["num_kv_heads"], p["head_dim"]),
              (total, p["num_kv_heads"], p["head_dim"]))
    return Case(run=_runner(bench, fn, shapes, dtype, p["pass_"]),
                columns={"num_seqs": count, "total_tokens": total, "max_seqlen": seq_len,
                         "sum_sq_tokens": count * seq_len**2, "num_heads": p["num_heads"],
                         "num_kv_heads": p["num_kv_heads"], "head_dim": p["head_dim"],
                         "causal": True, "pass": p["pass_"]},
                extras={"dtype": p["dtype"], "kernel": kernel, "mask": mask, "method": "measured"})
