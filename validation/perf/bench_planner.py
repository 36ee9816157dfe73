"""InfiniPipe's planner (chunking, the N search, the grouping DP and the checkpointing MILPs) on
the paper scenarios' 512-sequence batches: ``planner_s`` as the strategy reports it, with the
iteration time so a change that speeds the planner can be seen to leave the plan alone.

    python validation/perf/bench_planner.py                 # this tree
    python validation/perf/bench_planner.py --tree OLD_DIR  # and another checkout, in turn

``OLD_DIR`` is a directory holding an older ``ltsim`` package (for example a
``git worktree add /tmp/old <commit>``); each tree runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = (("13B, 64K", "gpt-13b-64k-infinipipe.toml", {}),
        ("13B, 192K", "gpt-13b-64k-infinipipe.toml", {"workload.max_length": 196608}),
        ("30B, 64K", "gpt-30b-64k-infinipipe.toml", {}),
        ("13B, 64K, no checkpointing", "gpt-13b-64k-infinipipe.toml",
         {"strategy.checkpointing": "none"}))
ONE = """
import json
import sys
sys.path.insert(0, sys.argv[1])
from ltsim import runner
from ltsim.scenario import load_scenario
scenario = load_scenario(sys.argv[2]).with_overrides(json.loads(sys.argv[3]))
result = runner.run(scenario).result
print(result.strategy_options["planner_s"], result.batches[0].iteration_time_s)
"""


def measure(tree: Path, scenario: Path, overrides: dict) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", ONE, str(tree), str(scenario), json.dumps(overrides)],
                         check=True, capture_output=True, text=True, cwd=tree).stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="another checkout to time beside this one")
    args = parser.parse_args()
    trees = [ROOT] + ([args.tree.resolve()] if args.tree else [])
    print(f"{'run':<28} " + "  ".join(f"{str(t)[-24:]:>24}" for t in trees) + "   iteration s")
    for name, file, overrides in RUNS:
        scenario = ROOT / "scenarios" / "infinipipe" / file
        cells = [measure(tree, scenario, overrides) for tree in trees]
        print(f"{name:<28} " + "  ".join(f"{c[0]:>22.2f} s" for c in cells)
              + "   " + " / ".join(f"{c[1]:.2f}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
