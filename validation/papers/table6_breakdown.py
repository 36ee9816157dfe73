"""Why (8K, 4) beats (2K, 16) in ChunkFlow's Table 6 setting: the per-op breakdown of stage 0.

    python validation/papers/table6_breakdown.py [--batch-size N]

Qwen2.5-7B, 256K, <TP 4, PP 4>, selective recompute, the H100 preset (measured tables, FA2
attention), the first sampled batch of ``--batch-size`` sequences (the scenario's 256 unless
given). For each (ChunkSize, K): how many compute ops stage 0 runs, their summed time by kind,
the mean time of one forward, and the iteration time and bubble.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim  # noqa: E402
from ltsim.runner import run  # noqa: E402

CASES = [(2048, 16), (8192, 4), (32768, 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    batch = parser.parse_args().batch_size
    print("| (ChunkSize, K) | chunks | stage-0 F / B / R ops | stage-0 F + B + R time (s) | mean F (ms) "
          "| iteration (s) | bubble |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size, k in CASES:
        scenario = ltsim.load_scenario(ROOT / "scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml",
                                       [f"strategy.chunk_size={size}", f"strategy.k={k}",
                                        "workload.num_batches=1",
                                        f"workload.global_batch_size={batch}"])
        sim = run(scenario)
        plan, trace = sim.plans[0], sim.traces[0]
        stage0 = [e for e in trace.events if e.device == 0 and e.stream == "compute"]
        count = {kind: sum(e.kind == kind and "[" not in e.token for e in stage0) for kind in "FBR"}
        busy = sum(e.end_s - e.start_s for e in stage0 if e.kind in "FBR")
        forwards = [e.end_s - e.start_s for e in stage0 if e.kind == "F"]
        d = sim.result.to_dict()
        print(f"| ({size}, {k}) | {len(plan.chunks)} | {count['F']} / {count['B']} / {count['R']} | "
              f"{busy:.3f} | {1e3 * sum(forwards) / len(forwards):.2f} | "
              f"{d['iteration_time_s']:.3f} | {100 * d['bubble_ratio']:.1f}% |")


if __name__ == "__main__":
    main()
