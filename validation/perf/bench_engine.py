"""Simulator speed benchmarks (DESIGN.md section 8, issue 13). Not a test: prints markdown tables.

    python validation/perf/bench_engine.py            # all cases, best of 7
    python validation/perf/bench_engine.py --quick    # best of 3
    python validation/perf/bench_engine.py --only engine|scale|sweep

Runs against whatever ltsim this checkout holds (``sys.path`` puts it first), so the same script
times an older commit from a worktree: phases the older engine lacks (compile, replay alone, the
recurrence) print as "-".

- engine: 256 equal micro-batches at pp 8 (Megatron 1F1B) and a 256-sequence ChunkFlow batch,
  unit preset: plan build, engine (compile + replay + trace), metrics; and, where the engine
  exposes them, the replay alone and the plain recurrence over the same compiled plan
  (validation/perf/recurrence.py; it must time every op identically).
- scale: Megatron with 256 equal micro-batches per replica at dp 1 and dp 32 (identical
  replicas); Megatron and ChunkFlow on 1024 GPUs (tp 4 x pp 8 x dp 32) with 4096 sequences of
  the quickstart's distribution, one batch (scenario load to Result).
- sweep: the quickstart's 4 x 4 ChunkSize x K grid from the command line with ``local`` and
  ``local:2`` (plans per minute, start-up included), and a 200-point grid both ways; with
  Python's bytecode cache allowed, as a user's installed ltsim runs (best of 3, so the first run
  writes it).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.sim import engine as engine_module  # noqa: E402
from ltsim.sim.engine import Engine  # noqa: E402
from ltsim.sim.metrics import batch_metrics  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402


def _time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def _recurrence():
    import importlib.util

    spec = importlib.util.spec_from_file_location("recurrence", Path(__file__).with_name("recurrence.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cold() -> None:
    """Forget what an earlier plan of the same batch left in the strategies' memos (ChunkFlow's
    chunks per batch and ChunkSize, the 1F1B actions per chunk) and the prices engines of one
    cost model share, so that each build and replay is timed as the first plan of a run (a sweep
    over K reuses them: that gain is not in these rows)."""
    import ltsim.strategies.chunkflow as chunkflow
    import ltsim.strategies.pipeline as pipeline

    for memo in (getattr(chunkflow, "_chunks", None), pipeline.kept_actions):
        if hasattr(memo, "cache_clear"):  # (an older checkout has neither memo)
            memo.cache_clear()
    getattr(engine_module, "_SHARED", {}).clear()  # (nor an older one these)


def case(strategy: str, batch: tuple[int, ...], pp: int, dp: int, options: dict, repeats: int) -> dict:
    cost = UnitCostModel()
    ctx = PlanContext(model=get_model("qwen2.5-7b"), parallel=ParallelConfig(pp=pp, dp=dp), cost=cost)
    strat = get_strategy(strategy)
    opts = strat.parse(options)
    row = {"ops": 0}
    row["build"], plan = _time(lambda: _cold() or strat.plan(batch, ctx, opts), repeats)
    row["ops"] = sum(len(p.ops) for p in plan.programs)
    row["engine"], trace = _time(lambda: _cold() or Engine(cost).run(plan), repeats)
    row["metrics"], _ = _time(lambda: batch_metrics(plan, trace, 0.0), repeats)
    row["total"] = row["build"] + row["engine"] + row["metrics"]
    if hasattr(engine_module, "compile_plan"):
        compiled = engine_module.compile_plan(plan, cost)
        row["compile"], _ = _time(lambda: engine_module.compile_plan(plan, cost), repeats)
        row["replay"], (start, finish, _, _) = _time(lambda: engine_module.replay(compiled), repeats)
        reference = _recurrence()
        row["recurrence"], _ = _time(lambda: reference.recurrence(compiled), repeats)
        reference.check(compiled, start, finish)  # identical start and end of every op
    return row


def _ms(row: dict, key: str) -> str:
    return f"{row[key] * 1e3:.1f}" if key in row else "-"


def engine_cases(repeats: int) -> None:
    rng = random.Random(0)
    mixed = tuple(rng.choice([512, 1024, 2048, 4096, 32768]) for _ in range(256))
    rows = [("megatron-1f1b, 256 equal micro-batches, pp=8",
             case("megatron-1f1b", (1,) * 256, 8, 1, {}, repeats)),
            ("chunkflow 8K/K=2, 256 mixed sequences, pp=8",
             case("chunkflow", mixed, 8, 1, {"chunk_size": 8192, "k": 2}, repeats))]
    print("| case | ops | build | engine | metrics | total | of which compile | replay | "
          "recurrence | replay / recurrence |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in rows:
        ratio = f"{row['replay'] / row['recurrence']:.1f}x" if "replay" in row else "-"
        print(f"| {name} | {row['ops']} | {_ms(row, 'build')} | {_ms(row, 'engine')} | "
              f"{_ms(row, 'metrics')} | {_ms(row, 'total')} | {_ms(row, 'compile')} | "
              f"{_ms(row, 'replay')} | {_ms(row, 'recurrence')} | {ratio} |")


def _simulate(path: Path, sets: list[str], repeats: int) -> float:
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    best, _ = _time(lambda: _cold() or simulate(load_scenario(path, sets)), repeats)
    return best


def scale_cases(repeats: int) -> None:
    print("| case | ops | build (s) | engine (s) | total (s) |")
    print("|---|---:|---:|---:|---:|")
    totals = {}
    for dp in (1, 32):
        row = case("megatron-1f1b", (1,) * (256 * dp), 8, dp, {}, repeats)
        totals[dp] = row["total"]
        print(f"| megatron-1f1b, 256 equal micro-batches per replica, pp 8, dp {dp} | {row['ops']} | "
              f"{row['build']:.3f} | {row['engine']:.3f} | {row['total']:.3f} |")
    print(f"| dp 32 / dp 1 | | | | {totals[32] / totals[1]:.2f}x |")
    sets = ["hardware.num_nodes=128", "parallel.tp=4", "parallel.pp=8",
            "workload.global_batch_size=4096", "workload.num_batches=1"]
    quickstart = ROOT / "scenarios" / "quickstart.toml"
    with tempfile.TemporaryDirectory() as tmp:
        megatron = Path(tmp) / "megatron.toml"
        text = quickstart.read_text().replace('name = "chunkflow"', 'name = "megatron-1f1b"')
        megatron.write_text("\n".join(line for line in text.splitlines()
                                      if not line.startswith(("chunk_size", "k = "))))
        for name, path in (("megatron-1f1b", megatron), ("chunkflow 8K/K=2", quickstart)):
            seconds = _simulate(path, sets, min(repeats, 2))
            print(f"| {name}, 1024 GPUs (tp 4, pp 8, dp 32), 4096 quickstart sequences, scenario "
                  f"to Result | - | - | - | {seconds:.2f} |")


def _sweep_seconds(grid: list[str], executor: str, root: Path = ROOT) -> float:
    """Wall time of ``ltsim sweep`` over ``grid`` in the checkout at ``root`` (its own ltsim)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "ltsim", "sweep", str(root / "scenarios" / "quickstart.toml"),
                   "--executor", executor, "--db", str(Path(tmp) / "sweep.db")]
        for spec in grid:
            command += ["--grid", spec]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=root, env=_USER_ENV)
        return time.perf_counter() - start


# As an installed ltsim runs from its second command on: with its bytecode cached. A shell that
# sets PYTHONDONTWRITEBYTECODE (this sandbox does) would otherwise time the compilation of every
# ltsim module in every command (about 0.06-0.1 s here).
_USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def sweep_cases(repeats: int) -> None:
    small = ["strategy.chunk_size=2048,4096,8192,16384", "strategy.k=1,2,4,8"]
    large = ["strategy.chunk_size=" + ",".join(str(1024 * i) for i in range(1, 26)),
             "strategy.k=1,2,3,4,5,6,7,8"]
    print("| sweep (command line, start-up included) | points | local | local:2 |")
    print("|---|---:|---:|---:|")
    for name, grid, points in (("4 x 4 ChunkSize x K", small, 16), ("25 x 8 ChunkSize x K", large, 200)):
        cells = []
        for executor in ("local", "local:2"):
            best = min(_sweep_seconds(grid, executor) for _ in range(min(repeats, 3)))
            cells.append(f"{best:.2f} s ({60 * points / best:,.0f} plans/min)")
        print(f"| {name} | {points} | {cells[0]} | {cells[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("engine", "scale", "sweep"))
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    print(f"python {platform.python_version()}, {platform.machine()}, best of {repeats}; ms unless "
          "marked\n")
    for name, run in (("engine", engine_cases), ("scale", scale_cases), ("sweep", sweep_cases)):
        if args.only in (None, name):
            run(repeats)
            print()


if __name__ == "__main__":
    main()
