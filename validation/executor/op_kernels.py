"""The kernels inside the executor's own F and B ops on a GPU: what ltsim's kernel tables must add up to.

For a middle stage of ``--layers`` layers of ``--model`` (the executor's Transformer, as eager.csv
builds it), one sequence of each ``--tokens`` count, this records with torch.profiler the CUDA
kernels of three F ops and of three F+B ops (parameters with gradients already set, as from the
second micro-batch on), and times the same ops whole three ways:

- ``wall``: CUDA events around each op, as the executor's trace times it;
- ``kernels``: the kernels alone, launches queued behind a GPU sleep (the profiler's kernel
  tables, ltsim/profiler/timing.py);
- the profiler's sum of kernel durations per kernel name (``kernels_by_name``, microseconds per op).

B is FB - F. Written to ``--out`` as JSON; `validation/executor/gpu_notes.md` reads it.

    python validation/executor/op_kernels.py --out op_kernels.json [--tokens 1024,8192]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim.profiler.eager import _op_run, _stage  # noqa: E402
from ltsim.profiler.timing import TimingPlan, sample, summarize  # noqa: E402

REPS = 3


def _kernels(run) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Microseconds per call of each CUDA kernel name, over REPS calls."""
    activity = ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(REPS):
            run()
        if activity is ProfilerActivity.CUDA:
            torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA or activity is ProfilerActivity.CPU:
            totals[event.name] += event.device_time / REPS
    return dict(totals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", default="1024,8192")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script")
    args = parser.parse_args()
    device = torch.device(args.device)
    stage = _stage(args.model, args.layers, "bf16", device)
    for param in stage.parameters():
        param.requires_grad_(True)
        param.grad = torch.zeros_like(param)  # accumulate, as from the second micro-batch on
    plan = TimingPlan(warmup=2, min_repeats=5, max_repeats=20, target_s=0.2)
    rows = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for op in ("F", "FB"):
            run = _op_run(op, stage, tokens, device)
            wall = summarize(sample(run, plan=plan, device=device)).time_s
            kernels = summarize(sample(run, plan=plan, device=device, kernels_only=True)).time_s
            by_name = _kernels(run)
            rows.append({"tokens": tokens, "op": op, "layers": args.layers, "wall_s": wall,
                         "kernels_s": kernels, "profiler_sum_s": sum(by_name.values()) / 1e6,
                         "kernels_by_name_us": dict(sorted(by_name.items(),
                                                           key=lambda kv: -kv[1]))})
            print(f"{tokens:6d} {op:3s} wall {wall * 1e3:8.3f} ms  kernels {kernels * 1e3:8.3f} ms"
                  f"  profiler {rows[-1]['profiler_sum_s'] * 1e3:8.3f} ms", flush=True)
    meta = {"model": args.model, "layers": args.layers, "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "command": " ".join(sys.argv)}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
