"""The 1024-GPU scenario alone, several times in one process (not a test).

    python validation/perf/large_run.py               # Megatron 1F1B, 1024 GPUs, 4096 sequences
    python validation/perf/large_run.py --chunkflow   # the quickstart's ChunkFlow on that cluster

bench_engine.py's scale row without its dp rows: ``simulate(load_scenario(...))`` of the
scenario of phases.py, with the strategies' memos and the shared prices cleared before each run
(bench_engine._cold), four runs; prints each run's seconds and the best. Run it alternately in
two checkouts (it times the one it sits in) to compare them on a shared machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import bench_engine  # noqa: E402
import phases  # noqa: E402
from ltsim.runner import simulate  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunkflow", action="store_true")
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    seconds = []
    with phases.scenario_path(chunkflow=args.chunkflow) as path:
        for _ in range(args.runs):
            bench_engine._cold()
            start = time.perf_counter()
            simulate(load_scenario(path, phases.SETS))
            seconds.append(time.perf_counter() - start)
    name = "chunkflow 8K/K=2" if args.chunkflow else "megatron-1f1b"
    print(f"{name}, 1024 GPUs: {' '.join(f'{s:.3f}' for s in seconds)} s; best {min(seconds):.3f}")


if __name__ == "__main__":
    main()
