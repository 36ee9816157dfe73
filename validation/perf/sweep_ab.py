"""The command-line sweep of bench_engine.py's sweep row, timed alternately in two checkouts
(validation/perf/README.md). Not a test.

    git worktree add /tmp/before <commit>
    python validation/perf/sweep_ab.py /tmp/before .            # 10 rounds, local:2
    python validation/perf/sweep_ab.py /tmp/before . --rounds 20 --executor local

Each round runs ``ltsim sweep`` on the quickstart's 4 x 4 ChunkSize x K grid once in each
checkout (``python -m ltsim`` from the checkout's root, so its own ltsim is imported), swapping
which goes first every round, each with a fresh database; bytecode caching is allowed, as an
installed ltsim runs. Prints each checkout's best and median wall time: alternating keeps a slow
phase of a shared machine from landing on one side only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import _sweep_seconds  # noqa: E402

GRID = ["strategy.chunk_size=2048,4096,8192,16384", "strategy.k=1,2,4,8"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkouts", nargs=2, type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--executor", default="local:2")
    args = parser.parse_args()
    roots = [p.resolve() for p in args.checkouts]
    times: dict[Path, list[float]] = {root: [] for root in roots}
    for i in range(args.rounds):
        for root in roots if i % 2 == 0 else roots[::-1]:
            times[root].append(_sweep_seconds(GRID, args.executor, root))
    for root, seconds in times.items():
        print(f"{root}: best {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s "
              f"({args.rounds} runs, {args.executor})")


if __name__ == "__main__":
    main()
