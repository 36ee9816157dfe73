"""Simulator speed benchmarks (DESIGN.md section 8). Not a test: prints a markdown table.

    python validation/perf/bench_engine.py            # all cases
    python validation/perf/bench_engine.py --quick    # fewer repeats

Cases: Megatron 1F1B on the unit preset with 64 and 256 equal micro-batches at PP=8 (plan build
and engine replay timed separately, best of N), and a ChunkFlow plan of a 256-sequence batch.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.sim.engine import Engine  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def _time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def case(name: str, strategy: str, batch: tuple[int, ...], pp: int, options: dict, repeats: int):
    cost = UnitCostModel()
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=pp), cost=cost)
    strat = get_strategy(strategy)
    opts = strat.parse(options)
    plan_s, plan = _time(lambda: strat.plan(batch, ctx, opts), repeats)
    sim_s, trace = _time(lambda: Engine(cost).run(plan), repeats)
    num_ops = sum(len(p.ops) for p in plan.programs)
    return name, num_ops, plan_s, sim_s


def sweep_rate(points: int = 64) -> tuple[int, float]:
    """Plans per minute of a ChunkSize x K sweep (quickstart scenario, one batch per plan, 2 workers)."""
    from ltsim.planner import expand_grid, run_sweep
    from ltsim.scenario import load_scenario

    root = Path(__file__).resolve().parents[2]
    scenario = load_scenario(root / "scenarios" / "quickstart.toml", ["workload.num_batches=1"])
    grid = expand_grid(["strategy.chunk_size=1024,2048,3072,4096,6144,8192,12288,16384",
                        "strategy.k=1,2,3,4,6,8,12,16"])[:points]
    start = time.perf_counter()
    run_sweep(scenario, grid, executor="local:2")
    return len(grid), 60 * len(grid) / (time.perf_counter() - start)


def big_cluster(repeats: int) -> tuple[str, float]:
    """One global batch on 1024 GPUs: Qwen2.5-72B, tp 8, pp 8, dp 16, 1024 sequences."""
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    root = Path(__file__).resolve().parents[2]
    sets = ["hardware.num_nodes=128", "model.preset=\"qwen2.5-72b\"", "parallel.tp=8",
            "parallel.pp=8", "workload.global_batch_size=1024", "workload.num_batches=1"]
    scenario = load_scenario(root / "scenarios" / "quickstart.toml", sets)
    best, _ = _time(lambda: simulate(scenario), repeats)
    return f"{scenario.parallel.world_size} GPUs (dp {scenario.parallel.dp})", best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    repeats = 3 if parser.parse_args().quick else 7
    import random

    rng = random.Random(0)
    mixed = tuple(rng.choice([512, 1024, 2048, 4096, 32768]) for _ in range(256))
    rows = [
        case("megatron-1f1b, 64 equal micro-batches, pp=8", "megatron-1f1b", (1,) * 64, 8, {}, repeats),
        case("megatron-1f1b, 256 equal micro-batches, pp=8", "megatron-1f1b", (1,) * 256, 8, {}, repeats),
        case("chunkflow 8K/K=2, 256 mixed sequences, pp=8", "chunkflow", mixed, 8,
             {"chunk_size": 8192, "k": 2}, repeats),
    ]
    print(f"python {platform.python_version()}, {platform.machine()}, best of {repeats}\n")
    print("| case | ops | plan build (ms) | engine (ms) | total (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, ops, plan_s, sim_s in rows:
        print(f"| {name} | {ops} | {plan_s * 1e3:.1f} | {sim_s * 1e3:.1f} | {(plan_s + sim_s) * 1e3:.1f} |")
    points, rate = sweep_rate()
    print(f"\nChunkSize x K sweep, quickstart scenario, 1 batch per plan, local:2: {points} plans, "
          f"{rate:.0f} plans per minute")
    label, seconds = big_cluster(min(repeats, 3))
    print(f"One global batch of 1024 sequences on {label}, chunkflow 8K/K=2: {seconds:.2f} s "
          "(scenario load, sampling, plan, replay)")


if __name__ == "__main__":
    main()
