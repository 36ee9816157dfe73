"""compile_plan of the 1024-GPU Megatron plan with fresh and with warm prices (not a test).

    python validation/perf/compile_prices.py

The plan of validation/perf/phases.py (the quickstart as Megatron 1F1B on 128 nodes, tp 4, pp 8,
4096 sequences), compiled once as a run's first plan (every cache cold), then three times with a
fresh Prices (the profile's lookup caches warm) and then once more with the Prices that filled;
prints the first time, the best of the others and how many prices the Prices holds. It times
the checkout it sits in (a copy in a worktree of an older commit times that commit).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import phases  # noqa: E402
from ltsim.runner import make_cost_model  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.sim.engine import Prices, compile_plan  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def main() -> None:
    with phases.scenario_path(chunkflow=False) as path:
        scenario = load_scenario(path, phases.SETS)
    cost = make_cost_model(scenario)
    strategy = get_strategy(scenario.strategy)
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
    batch = next(iter(scenario.workload.sample(scenario.seed)))
    plan = strategy.plan(batch, ctx, strategy.parse(scenario.strategy_options))
    gc.disable()  # as the engine runs it (ltsim/gcpause.py)
    start = time.perf_counter()
    compile_plan(plan, cost)  # as a run's first plan: the profile's own lookup caches cold too
    first = time.perf_counter() - start
    fresh = warm = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        prices = Prices()
        compile_plan(plan, cost, prices)
        fresh = min(fresh, time.perf_counter() - start)
        start = time.perf_counter()
        compile_plan(plan, cost, prices)
        warm = min(warm, time.perf_counter() - start)
    tokens = {plan.table.works[w].num_tokens for w in set(plan.table.work) if w >= 0}
    print(f"compile_plan: first {first:.3f} s, fresh prices {fresh:.3f} s, warm prices "
          f"{warm:.3f} s; {len(prices.compute):,} compute prices ({len(tokens):,} distinct "
          f"token counts), {len(prices.durations):,} comm prices")


if __name__ == "__main__":
    main()
