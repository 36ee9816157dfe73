"""ChunkFlow's exact packing search on batches of a few distinct lengths, where it used to run for
seconds to minutes (validation/perf/README.md). Not a test. Times ``packing.pack`` (min-bins) on
eight quickstart batches and on 256 lengths drawn from a few values, one run each, seconds.

    python validation/perf/packing_search.py
    PYTHONPATH=/path/to/other/checkout python validation/perf/packing_search.py   # before/after
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import ltsim.strategies.packing as packing
from ltsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = 8192


def main() -> None:
    print(f"ltsim from {Path(packing.__file__).parents[2]}")
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.toml")
    batches = [b for _, b in zip(range(8), scenario.workload.sample(1))]
    start = time.perf_counter()
    bins = sum(len(packing.pack([n for n in b if n <= CAPACITY], CAPACITY)) for b in batches)
    print(f"| quickstart, 8 batches of {len(batches[0])} | {bins} chunks | "
          f"{time.perf_counter() - start:.3f} s |")
    rng = np.random.default_rng(0)
    for values in ([1000, 2000], [1000, 2000, 3000], [700, 1500, 2100, 4000], [512, 1024, 2048, 4096]):
        sizes = [int(x) for x in rng.choice(values, 256)]
        start = time.perf_counter()
        count = len(packing.pack(sizes, CAPACITY))
        print(f"| 256 lengths of {values} | {count} chunks (lower bound "
              f"{packing.lower_bound(sizes, CAPACITY)}) | {time.perf_counter() - start:.3f} s |")


if __name__ == "__main__":
    main()
