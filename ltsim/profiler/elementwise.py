"""elementwise.csv: the bandwidth-bound ops of a layer, forward and backward, over token counts.

Ops, each the very function the executor's layer calls (ltsim/executor/model.py), so that a
row times the kernels the executor launches, forward and backward:
- `rmsnorm` (llama): ``kernels.rms_norm``, x * rsqrt(mean(x^2) + eps) * w over hidden_size, an
  autograd Function that keeps x and rstd and computes its gradient in closed form (more kernels
  in backward than plain autograd's); `layernorm` (gpt): F.layer_norm with weight and bias.
- `swiglu` (llama): ``kernels.swiglu``, silu(gate) * up, input 2 * ffn / tp wide, `hidden` =
  ffn / tp (the output); it keeps only its input, so its backward recomputes sigmoid(gate) and
  concatenates the two halves' gradients. `gelu` (gpt): F.gelu (erf form) over ffn / tp.
- `rope` (llama): ``kernels.rope``, rotate-half RoPE with the cos/sin tables cached per positions
  tensor (computed once per chunk, as in the executor); `hidden` = (heads + kv_heads) * head_dim
  on this rank.
- `residual_add`: x + y over hidden_size.
`head_dim` is 0 except for rope (whose cost depends on the head split).
`bwd` rows time the backward alone on a retained graph, like attention.csv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ltsim.executor import kernels  # time exactly what the executor runs
from ltsim.profiler.shapes import ShardShape
from ltsim.profiler.tables import Point, make_point
from ltsim.profiler.timing import TORCH_DTYPES, Bench, Case

KEY_FIELDS = ("op", "num_tokens", "hidden", "head_dim", "dtype", "pass_")
PASSES = ("fwd", "bwd")


def _ops(shard: ShardShape) -> tuple[tuple[str, int], ...]:
    """(op, hidden) of every elementwise op of one layer on one rank."""
    attn_width = (shard.num_heads + shard.num_kv_heads) * shard.head_dim
    if shard.arch == "llama":
        return (("rmsnorm", shard.hidden_size), ("swiglu", shard.ffn_hidden_size),
                ("rope", attn_width), ("residual_add", shard.hidden_size))
    return (("layernorm", shard.hidden_size), ("gelu", shard.ffn_hidden_size),
            ("residual_add", shard.hidden_size))


def elementwise_points(shards: Sequence[ShardShape], tokens: Sequence[int]) -> tuple[Point, ...]:
    points: dict[str, Point] = {}
    for shard in shards:
        for op, hidden in _ops(shard):
            for num_tokens in tokens:
                for pass_ in PASSES:
                    point = make_point(KEY_FIELDS, op=op, num_tokens=num_tokens, hidden=hidden,
                                       dtype=shard.dtype, pass_=pass_,
                                       head_dim=shard.head_dim if op == "rope" else 0)
                    points.setdefault(point.key, point)
    return tuple(points.values())


def _op_inputs(p: dict[str, Any], dtype: torch.dtype, device: torch.device
               ) -> tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]:
    """The op as a function of its differentiable inputs, and those inputs."""
    tokens, hidden, op = p["num_tokens"], p["hidden"], p["op"]
    gen = torch.Generator(device=device).manual_seed(0)
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)
    if op == "rmsnorm":
        return (lambda x, w: kernels.rms_norm(x, w, kernels.RMS_EPS),
                (randn(tokens, hidden), torch.ones(hidden, device=device, dtype=dtype)))
    if op == "layernorm":
        return (lambda x, w, b: F.layer_norm(x, (hidden,), w, b, 1e-5),
                (randn(tokens, hidden), torch.ones(hidden, device=device, dtype=dtype),
                 torch.zeros(hidden, device=device, dtype=dtype)))
    if op == "swiglu":
        return kernels.swiglu, (randn(tokens, 2 * hidden),)
    if op == "gelu":
        return F.gelu, (randn(tokens, hidden),)
    if op == "rope":
        head_dim = p["head_dim"]
        positions = torch.arange(tokens, device=device)
        return (lambda x: kernels.rope(x, positions),
                (randn(tokens, hidden // head_dim, head_dim),))
    if op == "residual_add":
        return torch.add, (randn(tokens, hidden), randn(tokens, hidden))
    raise ValueError(op)


def prepare_elementwise(point: Point, bench: Bench) -> Case:
    """One elementwise op, forward (no autograd state) or backward alone on a retained graph."""
    p = point.values
    fn, inputs = _op_inputs(p, TORCH_DTYPES[p["dtype"]], bench.device)
    if p["pass_"] == "fwd":
        def run() -> object:
            with torch.no_grad():
                return fn(*inputs)
    else:
        leaves = tuple(x.detach().requires_grad_(True) for x in inputs)
        out = fn(*leaves)
        grad = torch.ones_like(out)
        def run() -> object:
            return torch.autograd.grad(out, leaves, grad, retain_graph=True)
    return Case(run=run, columns={"op": p["op"], "num_tokens": p["num_tokens"], "hidden": p["hidden"],
                                  "head_dim": p["head_dim"], "dtype": p["dtype"], "pass": p["pass_"]},
                extras={"kernel": "aten", "method": "measured"})
