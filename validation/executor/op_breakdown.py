"""Where the CPU time of one chunk goes: executor (torch.profiler) vs the table cost model, by part.

For a standalone chunk of T tokens on a whole llama-tiny stage (pp=1, fp32, one torch thread), the
executor's forward and backward (ltsim.executor.state.forward_chunk / backward_chunk) are profiled
with torch.profiler, and the self CPU time of every aten op is put into a part:
GEMM (mm, addmm, linear's matmuls), attention (SDPA and its flash kernels), loss (log_softmax, nll),
and everything else ("elementwise": norms, RoPE, SwiGLU, residual adds, copies, autograd glue).
The cost model's parts for the same chunk come from ltsim/costs/compute.py's own pieces: the four
layer GEMMs and the LM head from gemm.csv, attention from attention.csv (the op's "attn" part),
elementwise from elementwise.csv or bytes moved / hardware.hbm_bytes_per_s, the loss analytic
(ltsim/costs/compute.py module docstring).

    python validation/executor/op_breakdown.py --tokens 256 1024 [--profile profiles/cpu-ci]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

import torch

from ltsim.costs.table import TableCostModel
from ltsim.executor.model import Transformer, pack_chunk
from ltsim.executor.runtime import make_tokens
from ltsim.executor.state import StateStore, backward_chunk, forward_chunk
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.plan import OpKind, Slice, Split, Work

PARTS = ("GEMM", "attention", "loss", "elementwise")


def part_of(name: str) -> str | None:
    if name in ("aten::mm", "aten::addmm", "aten::bmm"):
        return "GEMM"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if any(k in name for k in ("log_softmax", "nll_loss", "cross_entropy")):
        return "loss"
    return "elementwise"


def profile_chunk(model: Transformer, tokens: int, seed: int, repeats: int) -> dict:
    """Median wall time of F and B, and the self CPU time per part of one profiled F + B."""
    data = make_tokens((tokens,), model.spec.vocab_size, seed)
    batch = pack_chunk([Slice(0, 0, tokens)], data)
    walls = defaultdict(list)
    for _ in range(repeats + 1):
        store = StateStore()
        start = time.perf_counter()
        handle = forward_chunk(model, batch, store, chunk_id=0)
        mid = time.perf_counter()
        backward_chunk(handle, store)
        walls["F"].append(mid - start)
        walls["B"].append(time.perf_counter() - mid)
    store = StateStore()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as fwd:
        handle = forward_chunk(model, batch, store, chunk_id=0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as bwd:
        backward_chunk(handle, store)
    parts = {"F": _self_times(fwd), "B": _self_times(bwd)}
    model.zero_grad(set_to_none=True)
    return {"wall": {k: statistics.median(v[1:]) for k, v in walls.items()}, "parts": parts}


def _self_times(prof: torch.profiler.profile) -> dict[str, float]:
    totals = dict.fromkeys(PARTS, 0.0)
    for event in prof.key_averages():
        part = part_of(event.key)
        if part is not None and event.self_cpu_time_total > 0:
            totals[part] += event.self_cpu_time_total / 1e6
    return totals


def predicted_parts(cost: TableCostModel, tokens: int) -> dict:
    """The cost model's F and B of the chunk, split as ltsim/costs/compute.py adds them up."""
    m = cost.model
    pieces = cost._compute
    work = Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=(0, m.num_layers), split=Split(),
                embed=True, head=True)
    (gemm, dgrad, wgrad), elem_fwd, elem_bwd, _, _ = pieces.layer_s(tokens, 1, True)
    head = pieces._gemm_passes(tokens, m.vocab_size, m.hidden_size)
    loss = tokens * m.vocab_size * 4 * 3 / cost.cluster.device.hbm_bytes_per_s
    out = {}
    for kind, layer_gemm, head_gemm, elementwise in (
            (OpKind.F, gemm, head[0], elem_fwd), (OpKind.B, dgrad + wgrad, head[1] + head[2], elem_bwd)):
        out[kind.value] = {"GEMM": m.num_layers * layer_gemm + head_gemm,
                           "attention": cost.compute_s(kind, work, part="attn"),
                           "loss": loss, "elementwise": m.num_layers * elementwise,
                           "total": cost.compute_s(kind, work)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-tiny")
    p.add_argument("--profile", default="profiles/cpu-ci")
    p.add_argument("--tokens", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    spec = get_model(args.model)
    cluster = ClusterSpec(device=get_device("cpu"), gpus_per_node=1, profile=args.profile)
    cost = TableCostModel(spec, cluster)
    model = Transformer(spec, seed=0)
    print("| tokens | pass | part | predicted ms | measured ms (self CPU) | error |")
    print("|---|---|---|---|---|---|")
    for tokens in args.tokens:
        measured = profile_chunk(model, tokens, 0, args.repeats)
        predicted = predicted_parts(cost, tokens)
        for kind in ("F", "B"):
            for part in PARTS:
                pred, meas = predicted[kind][part], measured["parts"][kind][part]
                print(f"| {tokens} | {kind} | {part} | {pred * 1e3:.2f} | {meas * 1e3:.2f} | "
                      f"{100 * (meas - pred) / meas:+.0f}% |")
            overhead = measured["wall"][kind] - sum(measured["parts"][kind].values())
            print(f"| {tokens} | {kind} | outside aten ops (Python, autograd) | 0.00 | "
                  f"{overhead * 1e3:.2f} | - |")
            pred, meas = predicted[kind]["total"], measured["wall"][kind]
            print(f"| {tokens} | {kind} | **total (wall)** | {pred * 1e3:.2f} | {meas * 1e3:.2f} | "
                  f"{100 * (meas - pred) / meas:+.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
