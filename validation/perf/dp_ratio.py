"""dp 32 (mirrored replicas) against dp 1, interleaved in one process (not a test).

    python validation/perf/dp_ratio.py

bench_engine.py's two scale rows (Megatron 1F1B, 256 equal micro-batches per replica, pp 8, unit
preset, at dp 1 and dp 32), timed alternately in one process, 15 times each: the build (with
its checks) and the engine, each the best of its 15, then the ratio of the totals. Interleaving
keeps a slow phase of a shared machine from landing on one row only, which bench_engine.py's
rows, timed one after the other, do not. It times the checkout it sits in.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import bench_engine  # noqa: E402
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.sim.engine import Engine  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def main() -> None:
    cost = UnitCostModel()
    strategy = get_strategy("megatron-1f1b")
    options = strategy.parse({})
    ctx = {dp: PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=8, dp=dp),
                           cost=cost) for dp in (1, 32)}
    times: dict[int, dict[str, list[float]]] = {dp: {"build": [], "engine": []} for dp in ctx}
    for _ in range(15):
        for dp in ctx:
            bench_engine._cold()
            start = time.perf_counter()
            plan = strategy.plan((1,) * (256 * dp), ctx[dp], options)
            times[dp]["build"].append(time.perf_counter() - start)
            bench_engine._cold()
            start = time.perf_counter()
            Engine(cost).run(plan)
            times[dp]["engine"].append(time.perf_counter() - start)
    total = {}
    for dp, row in times.items():
        build, engine = min(row["build"]), min(row["engine"])
        total[dp] = build + engine
        print(f"dp {dp}: build {1e3 * build:.1f} ms, engine {1e3 * engine:.1f} ms")
    print(f"dp 32 / dp 1: {total[32] / total[1]:.2f}x")


if __name__ == "__main__":
    main()
