"""Where bench_engine.py's two 256-sequence cases spend their time, phase by phase
(validation/perf/README.md). Not a test.

    python validation/perf/engine_phases.py            # Megatron 1F1B and ChunkFlow 8K/K=2
    python validation/perf/engine_phases.py --plans 50

Each phase function is wrapped with a perf_counter (the wrappers add about a microsecond a call)
and the case is built and replayed ``--plans`` times after three warm-up plans, each from cold
memos as bench_engine.py's ``_cold`` leaves them. Prints the mean ms per plan of each phase;
nested phases are listed under what contains them (the build holds the lowering, which holds the
compute ops, whose buffer effects are ``_effects``; the engine holds compile, replay and trace,
and the replay the riders' search). It runs against the ltsim of the checkout it sits in, so the
same script run in a worktree of an older commit times that commit (a phase the older code lacks
prints as "-").
"""

from __future__ import annotations

import argparse
import importlib
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import bench_engine  # noqa: E402
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402

# (label, module, attribute), in the order printed: where the caller looks the function up, so
# the wrapper is called; "build" and "engine" (no module) are timed around strategy.plan and
# Engine.run
PHASES = [
    ("build", None, None),
    ("build: 1F1B orders", "ltsim.strategies.megatron_1f1b", "one_f_one_b_stages"),
    ("build: 1F1B orders", "ltsim.strategies.chunkflow", "interleave_1f1b"),
    ("build: lowering", "ltsim.strategies.megatron_1f1b", "lower"),
    ("build: lowering", "ltsim.strategies.chunkflow", "lower"),
    ("  lowering: compute ops", "ltsim.strategies.lowering", "compute_ops"),
    ("    compute ops: buffer effects", "ltsim.strategies.lowering", "_effects"),
    ("  lowering: Plan.validate", "ltsim.plan", "Plan.validate"),
    ("  lowering: the table (keyed deps)", "ltsim.strategies.draft", "Draft.table"),
    ("engine", None, None),
    ("engine: compile", "ltsim.sim.engine", "compile_plan"),
    ("engine: replay", "ltsim.sim.engine", "replay"),
    ("  replay: riders", "ltsim.sim.engine", "_riders"),
    ("engine: trace", "ltsim.sim.engine", "build_trace"),
]


def _wrap(times: dict, label: str, module: str, attribute: str) -> bool:
    owner = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    inner = getattr(owner, name, None)
    if inner is None:
        return False

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times[label] += time.perf_counter() - start

    setattr(owner, name, timed)
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=30)
    args = parser.parse_args()
    times: dict[str, float] = defaultdict(float)
    found = {label for label, module, attribute in PHASES
             if module is None or _wrap(times, label, module, attribute)}
    from ltsim.sim.engine import Engine

    rng = random.Random(0)
    mixed = tuple(rng.choice([512, 1024, 2048, 4096, 32768]) for _ in range(256))
    cases = [("megatron-1f1b, 256 equal micro-batches, pp=8", "megatron-1f1b", (1,) * 256, {}),
             ("chunkflow 8K/K=2, 256 mixed sequences, pp=8", "chunkflow", mixed,
              {"chunk_size": 8192, "k": 2})]
    for title, name, batch, options in cases:
        cost = UnitCostModel()
        ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=8),
                          cost=cost)
        strategy = get_strategy(name)
        parsed = strategy.parse(options)
        for i in range(args.plans + 3):
            if i == 3:
                times.clear()
            bench_engine._cold()
            start = time.perf_counter()
            plan = strategy.plan(batch, ctx, parsed)
            times["build"] += time.perf_counter() - start
            start = time.perf_counter()
            Engine(cost).run(plan)
            times["engine"] += time.perf_counter() - start
        print(f"\n{title}: ms per plan, mean of {args.plans}\n")
        print("| phase | ms |")
        print("|---|---:|")
        for label in dict.fromkeys(label for label, _, _ in PHASES):
            value = f"{times[label] / args.plans * 1e3:.2f}" if label in found else "-"
            print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
