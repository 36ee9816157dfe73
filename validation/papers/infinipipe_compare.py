"""InfiniPipe against its baselines and its ablations on the paper's testbed (4 x 8 A800-40GB,
GitHub lengths truncated at the context, 512 sequences unless stated): ltsim's predicted iteration
time, bubble ratio and peak memory per GPU, for

- every model (GPT 7B, 13B, 30B) at a 64K context with every system (Fig. 8's comparison);
- Fig. 11's ablations on GPT-13B at 64K;
- GPT-13B at 48K, 96K and 192K contexts (the paper's Seq1F1B numbers are at 48K and 96K);
- GPT-13B at global batches of 128 and 256 sequences (Fig. 10).

    python validation/papers/infinipipe_compare.py > validation/papers/infinipipe-compare.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ltsim.runner import run
from ltsim.scenario import load_scenario

HERE = Path(__file__).resolve().parents[2] / "scenarios" / "infinipipe"
SYSTEMS = ("infinipipe", "seq1f1b", "flexsp", "deepspeed-ulysses", "megatron")


def runs():
    for model in ("7b", "13b", "30b"):
        for system in SYSTEMS:
            yield "fig8", f"gpt-{model}-64k-{system}", {}
    for label, overrides in (("fixed chunking", {"strategy.chunking": "fixed"}),
                             ("no checkpointing", {"strategy.checkpointing": "none"}),
                             ("full checkpointing", {"strategy.checkpointing": "full"})):
        yield f"fig11 {label}", "gpt-13b-64k-infinipipe", overrides
    for context in (49152, 98304, 196608):
        for system in ("infinipipe", "seq1f1b", "flexsp"):
            yield f"context {context}", f"gpt-13b-64k-{system}", {"workload.max_length": context}
    for batch in (128, 256):
        for system in ("infinipipe", "flexsp"):
            yield f"batch {batch}", f"gpt-13b-64k-{system}", {"workload.global_batch_size": batch}


def main() -> int:
    rows = []
    for study, name, overrides in runs():
        scenario = load_scenario(HERE / f"{name}.toml").with_overrides(overrides)
        started = time.perf_counter()
        sim = run(scenario)
        batch = sim.result.batches[0]
        peak = max(max(trace.peak_memory_bytes()) for trace in sim.traces)
        rows.append({"study": study, "scenario": name, "overrides": overrides,
                     "iteration_time_s": round(batch.iteration_time_s, 3),
                     "bubble_ratio": round(sim.result.to_dict()["bubble_ratio"], 4),
                     "peak_memory_gib": round(peak / 2**30, 2),
                     "limit_gib": round(sim.result.memory_limit_bytes / 2**30, 2),
                     "options": dict(sim.plans[0].options),
                     "wall_s": round(time.perf_counter() - started, 2)})
        print(study, name, rows[-1]["iteration_time_s"], rows[-1]["peak_memory_gib"],
              file=sys.stderr)
    json.dump(rows, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
