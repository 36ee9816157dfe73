"""Table 2 of InfiniPipe on ltsim's costs: relative standard deviation of chunk time (backward,
Alg. 1's balance) and chunk length, Alg. 1's balanced packing against balancing time alone, on
the GPT-13B 64K scenario's batch (seed 0), for several slice counts N.

    python validation/papers/infinipipe_table2.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from ltsim.plan import Keep
from ltsim.runner import make_cost_model
from ltsim.scenario import load_scenario
from ltsim.strategies import epp, infinipipe
from ltsim.strategies.base import PlanContext
from ltsim.strategies.epp_chunking import chunk_balanced, spread

SCENARIO = (Path(__file__).resolve().parents[2] / "scenarios" / "infinipipe"
            / "gpt-13b-64k-infinipipe.toml")


def main() -> int:
    scenario = load_scenario(SCENARIO)
    cost = make_cost_model(scenario)
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
    costs = epp.StageCosts(cost, infinipipe.ulysses_layout(ctx), Keep.SELECTIVE)
    lengths = dict(enumerate(scenario.workload.sample(scenario.seed)[0]))
    print("N  packing    chunks  time RSD  length RSD")
    for n in (4, 9, 16):
        for mode in ("balanced", "time-only"):
            units, _ = chunk_balanced(lengths, n, costs.slice_time, 1 << 20, mode)
            chunks = [c for u in units for c in u.chunks]
            times = [sum(costs.slice_time(s) for s in c) for c in chunks]
            tokens = [sum(s.num_tokens for s in c) for c in chunks]
            print(f"{n:<2} {mode:<10} {len(chunks):>6} {spread(times):>8.1%} {spread(tokens):>11.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
