"""Where a plan stops being cheaper row by row than over arrays (``ltsim.optable.SMALL``). Not a
test.

    python validation/perf/small_plans.py

Megatron 1F1B and ChunkFlow (2K, K = 2) at pp 4 on batches of 8 to 128 sequences (unit preset):
each plan built, replayed and measured with every plan taken row by row, then with every plan
over arrays (``optable.SMALL`` set either way), best of 15 each, the engines' shared prices
emptied before each. Prints the plan's ops and both times in ms.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim.optable as optable  # noqa: E402
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.sim import engine  # noqa: E402
from ltsim.sim.metrics import batch_metrics  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def main() -> None:
    cost = UnitCostModel()
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=4), cost=cost)
    gc.disable()  # as the runner runs a batch (ltsim/gcpause.py)
    print("| strategy | sequences | ops | row by row (ms) | over arrays (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, raw in (("megatron-1f1b", {}), ("chunkflow", {"chunk_size": 2048, "k": 2})):
        strategy = get_strategy(name)
        options = strategy.parse(raw)
        for n in (8, 16, 32, 64, 128):
            rng = random.Random(n)
            batch = ((1,) * n if name == "megatron-1f1b"
                     else tuple(rng.choice([512, 1024, 4096]) for _ in range(n)))

            def one() -> tuple[float, int]:
                engine._SHARED.clear()
                start = time.perf_counter()
                plan = strategy.plan(batch, ctx, options)
                batch_metrics(plan, engine.Engine(cost).run(plan), 0.0)
                return time.perf_counter() - start, len(plan.table)

            times = []
            saved = optable.SMALL
            try:
                for small in (10**9, 0):  # every plan row by row, then every plan over arrays
                    optable.SMALL = small
                    times.append(min(one()[0] for _ in range(15)))
            finally:
                optable.SMALL = saved
            print(f"| {name} | {n} | {one()[1]} | {1e3 * times[0]:.2f} | {1e3 * times[1]:.2f} |")


if __name__ == "__main__":
    main()
