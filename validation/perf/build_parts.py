"""Where the plan build's time goes (validation/perf/README.md): how many Op tuples the Megatron
1F1B lowering makes for a 256-micro-batch, pp 8 plan, and what Plan.validate (as the lowering
runs it) costs. Not a test.

    python validation/perf/build_parts.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ltsim.plan as plan_module  # noqa: E402
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def megatron_plan():
    """The 256-micro-batch, pp 8 Megatron 1F1B plan on the unit preset (bench_engine.py's first
    case), with what built it: (plan, strategy, batch, context, options)."""
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=8),
                      cost=UnitCostModel())
    strategy = get_strategy("megatron-1f1b")
    options = strategy.parse({})
    batch = (1,) * 256
    return strategy.plan(batch, ctx, options), strategy, batch, ctx, options


def main() -> None:
    plan, strategy, batch, ctx, options = megatron_plan()
    made = [0]
    real = plan_module._tuple_new  # every Op (Op(), make_op, with_deps, evolve) is made here

    def counting(cls, values):
        if cls is plan_module.Op:
            made[0] += 1
        return real(cls, values)

    plan_module._tuple_new = counting
    try:
        strategy.plan(batch, ctx, options)
    finally:
        plan_module._tuple_new = real
    times = []
    for _ in range(7):
        start = time.perf_counter()
        plan.validate(check_cycles=False)
        times.append(time.perf_counter() - start)
    ops = sum(len(p.ops) for p in plan.programs)
    print(f"{made[0]} Op tuples built for {ops} ops; Plan.validate(check_cycles=False) "
          f"{min(times) * 1e3:.1f} ms (best of 7)")


if __name__ == "__main__":
    main()
