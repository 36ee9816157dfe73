"""Identical DP replicas replayed once (placeholder, filled in below)."""

from __future__ import annotations

from ltsim.costs import CostModel
from ltsim.plan import Plan
from ltsim.trace import Trace


def replay_deduplicated(plan: Plan, cost: CostModel, replay) -> Trace:
    from ltsim.sim.engine import build_trace, compile_plan

    compiled = compile_plan(plan, cost)
    return build_trace(compiled, *replay(compiled))
