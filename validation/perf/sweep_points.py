"""The quickstart's 4 x 4 ChunkSize x K points in one process (issue 13), without the command
line's start-up: one warm-up point off the grid, then the 16 points in a loop, best of 3, each
round with the memos a sweep shares emptied first (as a new sweep finds them). Not a test.

    python validation/perf/sweep_points.py [CHECKOUT]   # CHECKOUT: time another worktree's ltsim
    python validation/perf/sweep_points.py --large [CHECKOUT]   # bench_engine.py's 25 x 8 grid
    python validation/perf/sweep_points.py --cold [CHECKOUT]    # each point's ms, no warm-up

``--cold`` times each of the 4 x 4 points once, in grid order, in a process that has loaded the
scenario and its profile as a sweep's parent does before it forks (planner._warm) and nothing
more: what a sweep worker pays for its first point (imports made on first use, first prices)
against the points after it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

LARGE = "--large" in sys.argv[1:]
COLD = "--cold" in sys.argv[1:]
_ARGS = [a for a in sys.argv[1:] if a not in ("--large", "--cold")]
ROOT = Path(_ARGS[0]).resolve() if _ARGS else Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim import planner  # noqa: E402
from ltsim.grid import evaluate_point, expand_grid  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.sim import engine  # noqa: E402
from ltsim.strategies import chunkflow  # noqa: E402


def _forget() -> None:
    """Empty ChunkFlow's chunk memo and the engines' shared prices (where the checkout has them)."""
    memo = getattr(chunkflow, "_chunks", None)
    if memo is not None:
        memo.cache_clear()
    getattr(engine, "_SHARED", {}).clear()


def main() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.toml", [])
    grid = (["strategy.chunk_size=" + ",".join(str(1024 * i) for i in range(1, 26)),
             "strategy.k=1,2,3,4,5,6,7,8"] if LARGE
            else ["strategy.chunk_size=2048,4096,8192,16384", "strategy.k=1,2,4,8"])
    points = expand_grid(grid)
    if COLD:
        planner._warm(scenario)
        for point in points:
            start = time.perf_counter()
            evaluate_point(scenario.raw, scenario.source, point)
            print(f"{point}: {(time.perf_counter() - start) * 1e3:.1f} ms")
        return
    evaluate_point(scenario.raw, scenario.source, {"strategy.chunk_size": 32768, "strategy.k": 3})
    best = float("inf")
    for _ in range(3):
        _forget()
        start = time.perf_counter()
        for point in points:
            evaluate_point(scenario.raw, scenario.source, point)
        best = min(best, time.perf_counter() - start)
    print(f"{ROOT}: {len(points)} quickstart points in one process, best of 3: "
          f"{best * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
