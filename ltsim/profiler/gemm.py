"""gemm.csv and gemm_bwd.csv: the GEMMs of every linear layer at a TP degree, over log-spaced tokens.

Shapes come from `ltsim.profiler.shapes` (QKV, attention output, fused MLP up/gate, MLP down, LM
head). gemm.csv holds the forward GEMMs (the shapes the cost model looks up; it charges backward as
two forward GEMMs), gemm_bwd.csv the data-gradient and weight-gradient GEMMs of the same layers, to
check that rule. Kept apart so the weight-gradient shapes (m = out_features, k = tokens) do not
join the forward lookup's (n, k) curves. Within a table a shape (m, n, k, dtype) used by several
layers or models is measured once; the `op` column lists every use
("llama-small/tp1/qkv.fwd;..."). The operands have the memory layout of the pass that first asked
for the shape (`layout`: nt = X @ W^T as in F.linear, nn = dY @ W, tn = dY^T @ X).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ltsim.profiler.shapes import PASS_LAYOUT, ShardShape, gemm_dims
from ltsim.profiler.tables import Point, make_point
from ltsim.profiler.timing import TORCH_DTYPES, Bench, Case

KEY_FIELDS = ("m", "n", "k", "dtype")


def gemm_points(shards: Sequence[ShardShape], tokens: Sequence[int], passes: Sequence[str]
                ) -> tuple[Point, ...]:
    """One point per distinct (m, n, k, dtype) of the given passes, in the order first asked for."""
    uses: dict[tuple[int, int, int, str], list[str]] = {}
    layouts: dict[tuple[int, int, int, str], tuple[str, str]] = {}
    for shard in shards:
        for num_tokens in tokens:
            for name, in_features, out_features in shard.linears():
                for pass_ in passes:
                    m, n, k = gemm_dims(pass_, num_tokens, in_features, out_features)
                    key = (m, n, k, shard.dtype)
                    uses.setdefault(key, []).append(f"{shard.label}/{name}.{pass_}")
                    layouts.setdefault(key, (pass_, PASS_LAYOUT[pass_]))
    points = []
    for key, labels in uses.items():
        m, n, k, dtype = key
        pass_, layout = layouts[key]
        points.append(make_point(KEY_FIELDS, m=m, n=n, k=k, dtype=dtype, pass_=pass_,
                                 layout=layout, op=";".join(dict.fromkeys(labels))))
    return tuple(points)


def _operands(m: int, n: int, k: int, layout: str, dtype: torch.dtype,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A (m x k) and B (k x n) with the strides of the given layout."""
    gen = torch.Generator(device=device).manual_seed(0)
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)
    a = randn(k, m).t() if layout[0] == "t" else randn(m, k)
    b = randn(n, k).t() if layout[1] == "t" else randn(k, n)
    return a, b


def prepare_gemm(point: Point, bench: Bench) -> Case:
    """C = A @ B for one point, operands allocated."""
    p: dict[str, Any] = point.values
    a, b = _operands(p["m"], p["n"], p["k"], p["layout"], TORCH_DTYPES[p["dtype"]], bench.device)
    return Case(run=lambda: torch.mm(a, b),
                columns={"m": p["m"], "n": p["n"], "k": p["k"], "dtype": p["dtype"]},
                extras={"pass": p["pass_"], "layout": p["layout"], "op": p["op"],
                        "kernel": "aten::mm", "method": "measured"})
