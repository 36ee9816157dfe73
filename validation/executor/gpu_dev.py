"""Predictions for the H100 executor development set against what was measured.

    python validation/executor/gpu_dev.py --data h100-run2   # or h100-dev (the default)
    python validation/executor/gpu_dev.py --profile h100-sxm5-80gb-public   # the old default

The set is validation/executor/h100-dev (copied from ../shared/data/h100-executor-dev): seven plans that ltsim's
executor ran on one H100 on 2026-11-22 (4-layer Llama-2-7B slice, bf16, Megatron 1F1B and
ChunkFlow). The scenario copies in validation/executor/h100-dev/ state the precision that executor
ran (bf16 weights, gradients and Adam state: ``grad_dtype = optimizer_dtype = "model"``) and its
attention for slices with context (SDPA with a boolean mask: ``hardware.attention_kernel =
"torch_sdpa_boolmask"``, that kernel's measured rows). Predictions
use the h100-sxm5-80gb preset's default profile (measured tables, published collectives) without the allocator allowance, as ``ltsim validate`` does, since the executor's peak
is torch's ``max_memory_allocated``.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim  # noqa: E402
from ltsim.runner import run  # noqa: E402
from ltsim.validate import bare_cost_model  # noqa: E402

SETS = {"h100-dev": "`validation/executor/h100-dev` (copied from `../shared/data/h100-executor-dev`: "
                    "measured 2026-11-22 by ltsim 1acdf9d's executor, boolean-mask attention for "
                    "slices with context (the scenarios name that kernel, "
                    "`torch_sdpa_boolmask`), torch 2.11, cuDNN SDPA)",
        "h100-run2": "`validation/executor/h100-run2` (measured 2026-11-23 by "
                     "`validation/executor/gpu_run.py` with this executor: lower-right causal "
                     "SDPA for slices with context; torch 2.11)",
        "h100-run3": "`validation/executor/h100-run3` (measured 2026-11-24 by "
                     "`validation/executor/gpu_run.py` with this executor, 5 timed iterations: "
                     "small chunks and SeCO/SpaCO, on the machine that measured "
                     "`validation/profiles/h100-2026-11-24-eager2`; torch 2.11)"}
GIB = 2**30


def rows(data: Path, profile: str | None = None) -> list[dict]:
    out = []
    sets = [f'hardware.profile="{profile}"'] if profile else []
    for meas in csv.DictReader(open(data / "measurements.csv")):
        scenario = ltsim.load_scenario(data / f"{meas['plan']}.toml", sets)
        sim = run(scenario, cost=bare_cost_model(scenario))
        trace = sim.traces[0]
        kinds: dict[str, float] = {}
        for e in trace.events:
            if e.stream == "compute":
                kinds[e.kind] = kinds.get(e.kind, 0.0) + e.end_s - e.start_s
        out.append({"plan": meas["plan"], "meas_t": float(meas["meas_iter_time_s"]),
                    "pred_t": trace.makespan_s, "meas_peak": int(meas["meas_peak_mem_bytes"]),
                    "pred_peak": max(trace.peak_memory_bytes()),
                    "meas_static": int(meas["meas_static_mem_bytes"]),
                    "pred_static": trace.static_bytes[0], "kinds": kinds, "meas": meas})
    return out


def err(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def main() -> None:
    profile = sys.argv[sys.argv.index("--profile") + 1] if "--profile" in sys.argv else None
    name = sys.argv[sys.argv.index("--data") + 1] if "--data" in sys.argv else "h100-dev"
    data = rows(ROOT / "validation" / "executor" / name, profile)
    print(f"## {name}\n")
    print(f"`python validation/executor/gpu_dev.py --data {name}` on {SETS[name]}, predicted with "
          f"the `{profile or 'h100-sxm5-80gb'}` profile. Errors are (predicted - measured) / "
          "measured.\n")
    print("| plan | time meas (s) | time pred (s) | error | peak meas (GiB) | peak pred (GiB) | error "
          "| static meas / pred (GiB) | above static meas / pred (GiB) | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in data:
        above_m, above_p = r["meas_peak"] - r["meas_static"], r["pred_peak"] - r["pred_static"]
        print(f"| {r['plan']} | {r['meas_t']:.3f} | {r['pred_t']:.3f} | {err(r['pred_t'], r['meas_t']):+.1%}"
              f" | {r['meas_peak'] / GIB:.2f} | {r['pred_peak'] / GIB:.2f} | "
              f"{err(r['pred_peak'], r['meas_peak']):+.1%} | {r['meas_static'] / GIB:.2f} / "
              f"{r['pred_static'] / GIB:.2f} | {above_m / GIB:.2f} / {above_p / GIB:.2f} | "
              f"{err(above_p, above_m):+.1%} |")
    t = [abs(err(r["pred_t"], r["meas_t"])) for r in data]
    m = [abs(err(r["pred_peak"], r["meas_peak"])) for r in data]
    a = [abs(err(r["pred_peak"] - r["pred_static"], r["meas_peak"] - r["meas_static"])) for r in data]
    print("\n| summary | median | worst | target |\n|---|---:|---:|---|")
    print(f"| iteration time error | {100 * statistics.median(t):.1f}% | {100 * max(t):.1f}% | 5% / 10% |")
    print(f"| peak memory error | {100 * statistics.median(m):.1f}% | {100 * max(m):.1f}% | 5% |")
    print(f"| peak above static error | {100 * statistics.median(a):.1f}% | {100 * max(a):.1f}% | 5% |")
    print("\n## Time by op kind (compute stream, seconds, measured / predicted)\n")
    print("| plan | F | B | R | OPT |\n|---|---:|---:|---:|---:|")
    for r in data:
        cells = [f"{float(r['meas'][f'meas_{k}_s']):.3f} / {r['kinds'].get(k, 0.0):.3f}"
                 for k in ("F", "B", "R", "OPT")]
        print(f"| {r['plan']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
