"""Instructions per global batch (plan build, replay, metrics) of bench_engine.py's two engine
cases, counted by callgrind: a measure the machine's load does not move, for a before/after check on a
shared machine. Not a test; needs valgrind.

    python validation/perf/instructions.py            # both cases
    python validation/perf/instructions.py --case m   # Megatron only (c: ChunkFlow)
    python validation/perf/instructions.py --case d   # Megatron at dp 32, mirrored replicas
    python validation/perf/instructions.py --case s   # the 1024-GPU Megatron scenario

Case s is bench_engine.py's scale row: the quickstart as Megatron 1F1B on 1024 GPUs (tp 4, pp 8,
dp 32, 4096 sequences), scenario file to Result; its second run finds the profile's lookups
cached, as the best of bench_engine.py's repeats does.

Each case runs twice under ``valgrind --tool=callgrind``: one batch, then the same batch again
(the memos each build starts without are cleared before it, as bench_engine.py's ``_cold``
does); the difference of the two totals is one batch's instructions, without start-up and
imports. It runs against the ltsim of the checkout it sits in (as bench_engine.py). A count
moves by a few percent from run to run (225 and 233 M for case m in two runs of one checkout:
objects' addresses order some dicts): compare two runs or more per checkout.
"""
from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def one_case(which: str, batches: int) -> None:
    """Plan, replay and measure ``batches`` + 1 global batches of case ``which``."""
    sys.path.insert(0, str(ROOT))
    from ltsim.costs import UnitCostModel
    from ltsim.model import get_model
    from ltsim.parallel import ParallelConfig
    from ltsim.sim import engine as engine_module
    from ltsim.sim.engine import Engine
    from ltsim.sim.metrics import batch_metrics
    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import PlanContext
    import ltsim.strategies.chunkflow as chunkflow
    import ltsim.strategies.pipeline as pipeline

    def forget() -> None:  # as bench_engine.py's _cold
        for memo in (getattr(chunkflow, "_chunks", None), pipeline.kept_actions):
            if hasattr(memo, "cache_clear"):
                memo.cache_clear()
        getattr(engine_module, "_SHARED", {}).clear()

    if which == "s":
        sys.path.insert(0, str(Path(__file__).parent))
        import phases
        from ltsim.runner import simulate
        from ltsim.scenario import load_scenario

        with phases.scenario_path(chunkflow=False) as path:
            for _ in range(batches + 1):
                forget()
                simulate(load_scenario(path, phases.SETS))
        return
    cost = UnitCostModel()
    dp = 32 if which == "d" else 1
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=8, dp=dp), cost=cost)
    if which in ("m", "d"):  # (bench_engine.py's scale rows: 256 per replica)
        strategy, batch, options = "megatron-1f1b", (1,) * (256 * dp), {}
    else:
        rng = random.Random(0)
        batch = tuple(rng.choice([512, 1024, 2048, 4096, 32768]) for _ in range(256))
        strategy, options = "chunkflow", {"chunk_size": 8192, "k": 2}
    strat = get_strategy(strategy)
    opts = strat.parse(options)
    for _ in range(batches + 1):
        forget()
        plan = strat.plan(batch, ctx, opts)
        batch_metrics(plan, Engine(cost).run(plan), 0.0)


def _instructions(which: str, batches: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, __file__, "--run", which, str(batches)],
                       check=True, capture_output=True)
        found = re.search(r"^summary:\s*(\d+)", out.read_text(), re.MULTILINE)
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=("m", "c", "d", "s"))
    parser.add_argument("--run", nargs=2, help=argparse.SUPPRESS)  # inside valgrind
    args = parser.parse_args()
    if args.run:
        one_case(args.run[0], int(args.run[1]))
        return
    names = {"m": "megatron-1f1b, 256 equal micro-batches, pp=8",
             "c": "chunkflow 8K/K=2, 256 mixed sequences, pp=8",
             "d": "megatron-1f1b, 256 equal micro-batches per replica, pp=8, dp=32",
             "s": "megatron-1f1b, 1024 GPUs, 4096 quickstart sequences, scenario to Result"}
    print("| case | instructions per global batch (case s: per run) |")
    print("|---|---:|")
    for which in (args.case,) if args.case else ("m", "c", "d"):
        per_batch = _instructions(which, 1) - _instructions(which, 0)
        print(f"| {names[which]} | {per_batch / 1e6:,.0f} M |")


if __name__ == "__main__":
    main()
