"""The replay alone of one compiled plan, many times: bench_engine.py's Megatron case (256 equal
micro-batches, pp 8, unit preset), its ``replay`` timed 30 times after one compile. Not a test.

    python validation/perf/replay_only.py

Prints the best and the median in ms, and where the compiled plan has per-row memory tuples
(``Compiled.memory``) the best time of zipping the columns into the per-op steps the replay
reads, which it does at each replay. Run it alternately in two checkouts (it times the one it
sits in) to compare replays more finely than bench_engine.py's best of 7.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.sim.engine import compile_plan, replay  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def main() -> None:
    cost = UnitCostModel()
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=8, dp=1), cost=cost)
    strategy = get_strategy("megatron-1f1b")
    compiled = compile_plan(strategy.plan((1,) * 256, ctx, strategy.parse({})), cost)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        replay(compiled)
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"replay: best {1e3 * times[0]:.2f} ms, median {1e3 * times[len(times) // 2]:.2f} ms")
    if hasattr(compiled, "memory"):
        zips = []
        for _ in range(30):
            start = time.perf_counter()
            list(zip(compiled.dur, compiled.deps, compiled.start_deps, compiled.coll,
                     compiled.memory))
            zips.append(time.perf_counter() - start)
        print(f"of which the steps zipped: best {1e3 * min(zips):.2f} ms")


if __name__ == "__main__":
    main()
