"""What pausing the cyclic collector once per batch saves (validation/perf/README.md). Not a test.

    python validation/perf/gc_pause.py

Simulates the 1024-GPU Megatron case of phases.py with the runner as it is (collector paused
around each batch) and with the runner's pause replaced by a no-op (the plan build and the
engine still pause it, each on its own, as before issue 13's third pass), alternating, best of 2
per round.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ltsim.runner as runner  # noqa: E402
from phases import SETS, scenario_path  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402


def _best(repeats: int) -> float:
    times = []
    with scenario_path(chunkflow=False) as path:
        for _ in range(repeats):
            scenario = load_scenario(path, SETS)
            start = time.perf_counter()
            runner.simulate(scenario)
            times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    paused = runner.paused
    for round_ in (1, 2):
        once = _best(2)
        runner.paused = contextlib.nullcontext
        try:
            per_phase = _best(2)
        finally:
            runner.paused = paused
        print(f"round {round_}: paused once per batch {once:.2f} s, per phase only "
              f"{per_phase:.2f} s")


if __name__ == "__main__":
    main()
