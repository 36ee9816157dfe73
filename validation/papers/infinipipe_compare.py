"""InfiniPipe against its baselines and its ablations on the paper's testbed (GPT-13B, 4 x 8
A800-40GB, GitHub lengths truncated at 64K, 512 sequences): ltsim's predicted iteration time.

    python validation/papers/infinipipe_compare.py > validation/papers/infinipipe-13b-64k.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ltsim.runner import run
from ltsim.scenario import load_scenario

HERE = Path(__file__).resolve().parents[2] / "scenarios" / "infinipipe"
RUNS = (("infinipipe", "gpt-13b-64k-infinipipe", {}),
        ("infinipipe, fixed chunking", "gpt-13b-64k-infinipipe", {"strategy.chunking": "fixed"}),
        ("infinipipe, no checkpointing", "gpt-13b-64k-infinipipe",
         {"strategy.checkpointing": "none"}),
        ("infinipipe, full checkpointing", "gpt-13b-64k-infinipipe",
         {"strategy.checkpointing": "full"}),
        ("seq1f1b (enhanced)", "gpt-13b-64k-seq1f1b", {}),
        ("flexsp", "gpt-13b-64k-flexsp", {}),
        ("deepspeed-ulysses", "gpt-13b-64k-deepspeed-ulysses", {}),
        ("megatron (TP8 CP4)", "gpt-13b-64k-megatron", {}))


def main() -> int:
    rows = []
    for label, name, overrides in RUNS:
        scenario = load_scenario(HERE / f"{name}.toml").with_overrides(overrides)
        started = time.perf_counter()
        sim = run(scenario)
        batch = sim.result.batches[0]
        rows.append({"run": label, "scenario": name, "overrides": overrides,
                     "iteration_time_s": batch.iteration_time_s,
                     "bubble_ratio": sim.result.to_dict()["bubble_ratio"],
                     "peak_memory_gib": max(sim.traces[0].peak_memory_bytes()) / 2**30,
                     "limit_gib": sim.result.memory_limit_bytes / 2**30,
                     "options": dict(sim.plans[0].options),
                     "wall_s": round(time.perf_counter() - started, 2)})
        print(label, round(batch.iteration_time_s, 2), file=sys.stderr)
    json.dump(rows, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
