"""Where one large simulation spends its time, phase by phase (validation/perf/README.md). Not a test.

    python validation/perf/phases.py                 # Megatron 1F1B, 1024 GPUs, 4096 sequences
    python validation/perf/phases.py --chunkflow     # the quickstart's ChunkFlow on that cluster

The bench_engine.py "scale" case, split: plan build (with its Plan.validate), then, with the
cyclic collector off as the runner runs them, Plan.validate again by rule, compile, the replica
search, replay, trace, model FLOPs and metrics.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim import plan_check  # noqa: E402
from ltsim.runner import make_cost_model  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.sim.engine import build_trace, compile_plan, replay  # noqa: E402
from ltsim.sim.metrics import batch_metrics  # noqa: E402
from ltsim.sim.replicas import replica_classes  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402

SETS = ["hardware.num_nodes=128", "parallel.tp=4", "parallel.pp=8",
        "workload.global_batch_size=4096", "workload.num_batches=1"]


def _timed(times: dict, name: str, fn):
    start = time.perf_counter()
    out = fn()
    times[name] = time.perf_counter() - start
    return out


@contextmanager
def scenario_path(*, chunkflow: bool) -> Iterator[Path]:
    """The quickstart, or (as bench_engine.py) the quickstart with Megatron 1F1B."""
    quickstart = ROOT / "scenarios" / "quickstart.toml"
    if chunkflow:
        yield quickstart
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "megatron.toml"
        text = quickstart.read_text().replace('name = "chunkflow"', 'name = "megatron-1f1b"')
        path.write_text("\n".join(line for line in text.splitlines()
                                  if not line.startswith(("chunk_size", "k = "))))
        yield path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunkflow", action="store_true")
    args = parser.parse_args()
    with scenario_path(chunkflow=args.chunkflow) as path:
        scenario = load_scenario(path, SETS)
    cost = make_cost_model(scenario)
    strategy = get_strategy(scenario.strategy)
    options = strategy.parse(scenario.strategy_options)
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
    batch = next(iter(scenario.workload.sample(scenario.seed)))
    times: dict[str, float] = {}
    plan = _timed(times, "plan build", lambda: strategy.plan(batch, ctx, options))
    gc.disable()
    for rule in plan_check.RULES:
        if rule is not plan_check._check_acyclic:  # as the lowering validates
            name = rule.__name__.removeprefix("_").removeprefix("check_")
            _timed(times, "validate: " + name, lambda: rule(plan))
    compiled = _timed(times, "compile", lambda: compile_plan(plan, cost))
    _timed(times, "replica search", lambda: replica_classes(plan, compiled))
    replayed = _timed(times, "replay", lambda: replay(compiled))
    trace = _timed(times, "trace", lambda: build_trace(compiled, *replayed))
    flops = _timed(times, "model FLOPs", lambda: sum(
        cost.model_flops(chunk, backward=plan.gets_grad(chunk.index)) for chunk in plan.chunks))
    _timed(times, "metrics", lambda: batch_metrics(plan, trace, flops))
    gc.enable()
    ops = sum(len(program.ops) for program in plan.programs)
    print(f"{scenario.strategy}, {ops:,} ops")
    print("| phase | seconds |\n|---|---:|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
