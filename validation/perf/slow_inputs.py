"""Inputs a probe of the command line found slow (2026-11-29): FlexSP on 2,048 and 4,096 GPUs,
whose MILP model was built with a scan of every variable per run and per slot; InfiniPipe's
chunking of thousands of short sequences, which prices chunks of hundreds of slices again as
each sequence joins; and a 1M-token plan on the CPU profile, whose eager residuals were made
again for every token count. Each case is timed whole (scenario to Result, imports excluded)
with the result fields that must not move. Not a test.

    python validation/perf/slow_inputs.py                 # this tree
    python validation/perf/slow_inputs.py --tree OLD_DIR  # and another checkout, in turn

``OLD_DIR`` is a directory holding an older ``ltsim`` package (``git worktree add /tmp/old
<commit>``); each tree runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLEXSP = ["parallel.pp=1", "parallel.tp=4", "workload.num_batches=1"]
CASES = (
    ("FlexSP, 2,048 GPUs, 512 sequences", "scenarios/quickstart.toml", "flexsp",
     FLEXSP + ["hardware.num_nodes=256", "workload.global_batch_size=512"]),
    ("FlexSP, 4,096 GPUs, 1,024 sequences", "scenarios/quickstart.toml", "flexsp",
     FLEXSP + ["hardware.num_nodes=512", "workload.global_batch_size=1024"]),
    ("InfiniPipe, the quickstart's 8 GPUs, 8,192 sequences", "scenarios/quickstart.toml",
     "infinipipe", ["workload.global_batch_size=8192", "workload.num_batches=1"]),
    ("CPU profile, one 1M-token sequence (ChunkFlow)",
     "scenarios/examples/cpu-llama-tiny-chunkflow.toml", "",
     ["hardware.profile=\"cpu-ci\"", "workload.lengths=[1000000]"]),
)
ONE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ltsim.runner import simulate
from ltsim.scenario import build_scenario, load_scenario
scenario = load_scenario(sys.argv[2], json.loads(sys.argv[3]))
if sys.argv[4]:  # another strategy, with its default options (as `ltsim compare --strategies`)
    scenario = build_scenario({**scenario.raw, "strategy": {"name": sys.argv[4]}},
                              source=scenario.source)
start = time.perf_counter()
result = simulate(scenario).to_dict()
print(json.dumps({"seconds": time.perf_counter() - start,
                  "iteration_time_s": result["iteration_time_s"],
                  "peak_memory_bytes": result["peak_memory_bytes"]}))
"""


def run(tree: Path, path: str, strategy: str, sets: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", ONE, str(tree), str(tree / path), json.dumps(sets),
                           strategy], capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, help="another checkout, timed in turn")
    args = parser.parse_args()
    trees = [("this", ROOT)] + ([("other", args.tree.resolve())] if args.tree else [])
    print("| case | tree | seconds | iteration time (s) | peak memory (bytes) |")
    print("|---|---|---:|---:|---:|")
    for name, path, strategy, sets in CASES:
        for label, tree in trees:
            row = run(tree, path, strategy, sets)
            print(f"| {name} | {label} | {row['seconds']:.2f} | {row['iteration_time_s']!r} | "
                  f"{row['peak_memory_bytes']} |", flush=True)


if __name__ == "__main__":
    main()
