"""How many SimPy steps the replay of the 256-micro-batch Megatron plan takes
(validation/perf/README.md), with waiters woken at the awaited op's simulated end (the engine)
and, for comparison only, at once. Both give the same start and end of every op. Not a test.

    python validation/perf/sim_steps.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import simpy  # noqa: E402

from build_parts import megatron_plan  # noqa: E402 (beside this script)
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.sim import engine  # noqa: E402


def main() -> None:
    plan = megatron_plan()[0]
    compiled = engine.compile_plan(plan, UnitCostModel())
    steps = [0]
    step = simpy.Environment.step

    def counting(env):
        steps[0] += 1
        return step(env)

    def at_once(event, time_s):  # the comparison only: SimPy's clock no longer simulated time
        event._ok, event._value = True, None
        event.env.schedule(event, delay=0)

    simpy.Environment.step = counting
    try:
        timed = engine.replay(compiled)
        print(f"{len(compiled.steps)} ops; woken at the awaited op's end: {steps[0]} SimPy steps")
        steps[0] = 0
        fire_at = engine._At.fire_at
        engine._At.fire_at = at_once
        try:
            eager = engine.replay(compiled)
        finally:
            engine._At.fire_at = fire_at
        print(f"woken at once: {steps[0]} SimPy steps; same op times: {timed[:2] == eager[:2]}")
    finally:
        simpy.Environment.step = step


if __name__ == "__main__":
    main()
