"""Run scenario plans on one CUDA GPU with ltsim's executor; write what was measured.

    python validation/executor/gpu_run.py --out measurements.csv SCENARIO.toml [...]

For each scenario, the first global batch's plan (as `ltsim simulate` builds it) runs with
``warmup`` untimed and ``repeats`` timed iterations (default 1 and 3), in a fresh process per plan
(the executor spawns one). A row per plan, in the columns of validation/executor/h100-dev/
measurements.csv: the median iteration time and all of them, the allocator peak
(``max_memory_allocated``), the static bytes before the first op, and the CUDA-event seconds of
each op kind summed over the median iteration. Nothing is predicted here (gpu_dev.py does that),
so the measurements do not depend on the profile.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim.runner import run  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.validate import kind_totals_s  # noqa: E402

COLUMNS = ("plan", "strategy", "fixed_length", "global_batch_size", "chunk_size", "k",
           "num_chunks", "num_ops", "exec_warmup", "exec_repeats", "meas_iter_time_s",
           "meas_iter_times_s", "meas_peak_mem_bytes", "meas_static_mem_bytes", "meas_F_s",
           "meas_B_s", "meas_R_s", "meas_OPT_s", "wall_s")


def measure(path: Path, warmup: int, repeats: int) -> dict:
    from ltsim.executor.runtime import execute_plan

    scenario = load_scenario(path).with_overrides({"workload.num_batches": 1})
    plan = run(scenario).plans[0]
    started = time.perf_counter()
    measured = execute_plan(plan, scenario.model, scenario.parallel, backend="nccl",
                            device="cuda", warmup=warmup, repeats=repeats)
    times = measured.iteration_times_s
    median = statistics.median(times)
    trace = min(measured.traces, key=lambda t: abs(t.makespan_s - median))
    kinds = kind_totals_s(trace)
    options = scenario.strategy_options
    return {"plan": path.stem, "strategy": scenario.strategy,
            "fixed_length": scenario.workload.fixed_length,
            "global_batch_size": scenario.workload.global_batch_size,
            "chunk_size": options.get("chunk_size", ""), "k": options.get("k", ""),
            "num_chunks": len(plan.chunks), "num_ops": sum(len(p.ops) for p in plan.programs),
            "exec_warmup": warmup, "exec_repeats": repeats, "meas_iter_time_s": median,
            "meas_iter_times_s": " ".join(f"{t:.6f}" for t in times),
            "meas_peak_mem_bytes": max(measured.peak_memory_bytes_per_device),
            "meas_static_mem_bytes": max(measured.static_memory_bytes_per_device),
            "meas_F_s": kinds["F"], "meas_B_s": kinds["B"], "meas_R_s": kinds["R"],
            "meas_OPT_s": kinds["OPT"], "wall_s": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for path in args.scenarios:
            row = measure(path, args.warmup, args.repeats)
            writer.writerow(row)
            handle.flush()
            print(f"{row['plan']:24s} {row['meas_iter_time_s'] * 1e3:8.1f} ms  peak "
                  f"{row['meas_peak_mem_bytes'] / 2**30:6.2f} GiB  ({row['wall_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
