"""Table 2 of InfiniPipe on ltsim's costs: relative standard deviation (over every chunk) of chunk
time (backward, what Alg. 1 balances, priced as the whole chunk) and chunk length, Alg. 1's
balanced packing against packing on time alone (best fit decreasing on time within T_t), with
the GPT-13B 64K scenario's costs and the planner's token capacity, for the paper's GitHub lengths
and FlexSP's Wikipedia lengths (short-dominated, as the paper's CommonCrawl), three seeds, and
several slice counts N. Each cell is printed twice: over every chunk, and over the packed chunks
alone (batched and hybrid, the only ones the two packings make differently; the split chunks come
from the same mesh in both).

    python validation/papers/infinipipe_table2.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from ltsim.plan import Keep
from ltsim.runner import make_cost_model
from ltsim.scenario import load_scenario
from ltsim.strategies import infinipipe
from ltsim.strategies.base import PlanContext
from ltsim.strategies.epp_chunking import chunk_balanced, spread
from ltsim.strategies.epp_costs import StageCosts

SCENARIO = (Path(__file__).resolve().parents[2] / "scenarios" / "infinipipe"
            / "gpt-13b-64k-infinipipe.toml")


def main() -> int:
    print("dataset             seed  N  balanced: time  length   time only: time  length"
          "   | packed only: balanced time  length  time only: time  length")
    for dataset in ("github-infinipipe", "wikipedia"):
        scenario = load_scenario(SCENARIO).with_overrides({"workload.dataset": dataset})
        cost = make_cost_model(scenario)
        ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
        costs = StageCosts(cost, infinipipe.ulysses_layout(ctx), Keep.SELECTIVE)
        capacity = infinipipe.Planner(costs, None, mode="milp", warmup="prefill", grouping=True,
                                      time_limit_s=1.0).capacity
        for seed in range(3):
            lengths = dict(enumerate(scenario.workload.sample(seed)[0]))
            for n in (2, 4, 9):
                every, packed = [], []
                for mode in ("balanced", "time-only"):
                    units, _ = chunk_balanced(lengths, n, costs.chunk_time, capacity, mode)
                    for cells, chunks in ((every, [c for u in units for c in u.chunks]),
                                          (packed, [u.chunks[-1] for u in units])):
                        cells += [spread([costs.chunk_time(c) for c in chunks]),
                                  spread([sum(s.num_tokens for s in c) for c in chunks])]
                print(f"{dataset:<19} {seed:>4} {n:>2} {every[0]:>15.1%} {every[1]:>7.1%}"
                      f" {every[2]:>17.1%} {every[3]:>7.1%}   | {packed[0]:>24.1%}"
                      f" {packed[1]:>7.1%} {packed[2]:>16.1%} {packed[3]:>7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
