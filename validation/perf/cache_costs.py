"""What the caches of issue 13's last pass save and hold (validation/perf/README.md). Not a test.

    python validation/perf/cache_costs.py            # profile parse vs unpickle; bytes a price
    python validation/perf/cache_costs.py --sweep    # where the 16-point local:2 sweep's time goes

- the bundled H100 profile parsed from its CSV tables, and unpickled from the disk cache's entry
  (ltsim/profile_cache.py), best of 5 each;
- the memory one shared price holds (ltsim/sim/engine.py SHARED_ENTRIES): tracemalloc around
  compile_plan of the 1024-GPU Megatron plan of phases.py, divided by its prices;
- ``--sweep``: the quickstart's 4 x 4 ChunkSize x K sweep with ``--executor local:2`` through
  ``ltsim.cli.main``, with timestamps from this script's start (the interpreter's own start-up,
  ``python -c pass``, comes before): the command's imports, the start of the pool, and each task
  of points in its worker.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import pickle
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "perf"))


def caches() -> None:
    import phases
    from bench_packing import best
    from ltsim.profiles import PROFILES_DIR, Profile
    from ltsim.runner import make_cost_model
    from ltsim.scenario import load_scenario
    from ltsim.sim.engine import Prices, compile_plan
    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import PlanContext

    directory = PROFILES_DIR / "h100-sxm5-80gb"
    entry = pickle.dumps(Profile(directory), protocol=pickle.HIGHEST_PROTOCOL)
    parse = best(lambda: Profile(directory), 5)
    load = best(lambda: pickle.loads(entry), 5)
    print(f"{directory.name}: parsed {parse * 1e3:.1f} ms, unpickled {load * 1e3:.1f} ms "
          f"({len(entry):,} B), best of 5")

    with phases.scenario_path(chunkflow=False) as path:
        scenario = load_scenario(path, phases.SETS)
    strategy = get_strategy(scenario.strategy)
    cost = make_cost_model(scenario)
    plan = strategy.plan(next(iter(scenario.workload.sample(scenario.seed))),
                         PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost),
                         strategy.parse(scenario.strategy_options))
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    prices = Prices()
    compiled = compile_plan(plan, cost, prices)
    del compiled
    gc.collect()
    held = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    print(f"1024-GPU Megatron plan: {len(prices):,} prices hold {held / 1e6:.1f} MB, "
          f"{held / len(prices):.0f} B a price")


_EVALUATE_BATCH: list = []  # planner's own, for _timed_batch (a module function: workers unpickle it)


def _timed_batch(raw, source, batch):
    """planner._evaluate_batch in a worker, its start and end printed on stderr."""
    start = time.perf_counter() - T0
    rows = _EVALUATE_BATCH[0](raw, source, batch)
    print(f"  worker {os.getpid()}: {len(batch)} points {start:.3f}-{time.perf_counter() - T0:.3f} s",
          file=sys.stderr)
    return rows


def sweep() -> None:
    import ltsim.cli as cli
    import ltsim.planner as planner

    imported = time.perf_counter() - T0
    marks: dict[str, float] = {}
    evaluate_all = planner._evaluate_all
    _EVALUATE_BATCH.append(planner._evaluate_batch)

    def timed_all(*args, **kwargs):
        marks["pool"] = time.perf_counter() - T0
        yield from evaluate_all(*args, **kwargs)

    planner._evaluate_all, planner._evaluate_batch = timed_all, _timed_batch
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        cli.main(["sweep", str(ROOT / "scenarios" / "quickstart.toml"), "--executor", "local:2",
                  "--grid", "strategy.chunk_size=2048,4096,8192,16384", "--grid",
                  "strategy.k=1,2,4,8", "--db", str(Path(tmp) / "sweep.db")])
    print(f"imports done {imported:.3f} s, pool starts {marks['pool']:.3f} s, "
          f"sweep done {time.perf_counter() - T0:.3f} s (from this script's start)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true")
    if parser.parse_args().sweep:
        sweep()
    else:
        caches()


if __name__ == "__main__":
    main()
