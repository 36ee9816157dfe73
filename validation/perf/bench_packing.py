"""ChunkFlow's chunk construction on large batches: first-fit decreasing by scanning the bins (as
printed, O(n x bins)) against the max-tree in ltsim.strategies.packing (O(n log n), the same
packing), in one run: the packing alone and the whole ChunkFlow plan of the quickstart at 2048 to
8192 sequences per global batch. Best of 3, seconds.

    python validation/perf/bench_packing.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ltsim.runner import make_cost_model
from ltsim.scenario import load_scenario
from ltsim.strategies import REGISTRY, packing
from ltsim.strategies.packing import ffd_by_scanning
from ltsim.strategies.base import PlanContext

ROOT = Path(__file__).resolve().parents[2]


def best(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    strategy = REGISTRY["chunkflow"]
    tree = packing.first_fit_decreasing
    print("| sequences | FFD scanning | FFD tree | ChunkFlow plan, scanning | ChunkFlow plan, tree |")
    print("|---:|---:|---:|---:|---:|")
    for size in (2048, 4096, 8192):
        scenario = load_scenario(ROOT / "scenarios" / "quickstart.toml").with_overrides(
            {"workload.global_batch_size": size})
        ctx = PlanContext(model=scenario.model, parallel=scenario.parallel,
                          cost=make_cost_model(scenario))
        batch = tuple(scenario.workload.sample(scenario.seed)[0])
        options = strategy.parse(scenario.strategy_options)
        capacity = options.chunk_size
        short = [n for n in batch if n <= capacity]
        cells = [best(lambda: ffd_by_scanning(short, capacity)), best(lambda: tree(short, capacity))]
        assert ffd_by_scanning(short, capacity) == tree(short, capacity)
        for ffd in (ffd_by_scanning, tree):
            packing.first_fit_decreasing = ffd
            cells.append(best(lambda: strategy.plan(batch, ctx, options)))
        packing.first_fit_decreasing = tree
        print(f"| {size:,} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
