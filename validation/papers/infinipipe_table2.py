"""Table 2 of InfiniPipe on ltsim's costs: relative standard deviation of chunk time (backward,
what Alg. 1 balances, priced as the whole chunk) and chunk length, Alg. 1's balanced packing
against balancing time alone, on the GPT-13B 64K scenario's batch (seed 0) with the planner's
token capacity, for several slice counts N. "all" is every chunk; "packed" the chunks the packing
makes (hybrid and batched), the only ones in which the two variants differ.

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
    capacity = infinipipe.Planner(costs, None, mode="milp", warmup="prefill", grouping=True,
                                  time_limit_s=1.0).capacity
    lengths = dict(enumerate(scenario.workload.sample(scenario.seed)[0]))
    print(f"token capacity {capacity}; RSD of time / length")
    print("N  packing    chunks  all: time  length  packed: chunks  time  length")
    for n in (4, 9, 16):
        for mode in ("balanced", "time-only"):
            units, _ = chunk_balanced(lengths, n, costs.chunk_time, capacity, mode)
            every = [c for u in units for c in u.chunks]
            packed = [u.chunks[-1] for u in units]

            def rsd(chunks):
                return (spread([costs.chunk_time(c) for c in chunks]),
                        spread([sum(s.num_tokens for s in c) for c in chunks]))
            (t_all, m_all), (t_pack, m_pack) = rsd(every), rsd(packed)
            print(f"{n:<2} {mode:<10} {len(every):>6} {t_all:>10.1%} {m_all:>7.1%}"
                  f" {len(packed):>15} {t_pack:>5.1%} {m_pack:>7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
