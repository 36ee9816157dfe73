"""Where a short command-line sweep's wall time goes (validation/perf/README.md): the quickstart's
4 x 4 ChunkSize x K grid with ``--executor local:2``, as bench_engine.py's sweep row runs it,
with a time stamp at each phase. Not a test.

    python validation/perf/sweep_timeline.py             # local:2
    python validation/perf/sweep_timeline.py --executor local

Runs one child interpreter that imports the command line, wraps the planner's phases (loading the
scenario, the points' input digests, the profile, each point as it is stored) and runs
``ltsim sweep``, exiting as the ``ltsim`` program does (``cli.program``). Each line is seconds
since the child's interpreter started (``time.time`` against the process's start time), the
last one when this script saw the process gone (its interpreter's shut-down included); then
the time the parent spent making dataclasses (the ``@dataclass`` decorator writes and compiles
each class's methods when its module is imported). Then the import time of numpy and of simpy alone, each the best of five fresh interpreters.
Bytecode caching is allowed, as an installed ltsim runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys, time
start = float(os.environ["LTSIM_T0"])
sys.path.insert(0, os.environ["LTSIM_ROOT"])
def stamp(what):
    print(f"{time.time() - start:6.3f} s  {what}", file=sys.stderr, flush=True)
stamp("interpreter up")
import dataclasses
made = [0.0, 0]  # seconds spent making dataclasses (ltsim's frozen ones), and how many
process_class = dataclasses._process_class
def timed_class(cls, *args, **kwargs):
    begin = time.perf_counter()
    try:
        return process_class(cls, *args, **kwargs)
    finally:
        made[0] += time.perf_counter() - begin
        made[1] += 1
dataclasses._process_class = timed_class
import ltsim.cli as cli, ltsim.planner as planner, ltsim.scenario as scenario
stamp("command line and planner imported")
def wrap(module, name, label):
    inner = getattr(module, name)
    def timed(*args, **kwargs):
        out = inner(*args, **kwargs)
        stamp(label)
        return out
    setattr(module, name, timed)
wrap(scenario, "load_scenario", "scenario loaded (its strategy imported)")
wrap(planner, "_point_inputs", "points' input digests")
wrap(planner, "_warm", "profile loaded in the parent (simulator imported)")
store = planner.SweepStore.put
def put(self, *args, **kwargs):
    store(self, *args, **kwargs)
    stamp("a point stored")
planner.SweepStore.put = put
sys.argv = ["ltsim", "sweep", os.path.join(os.environ["LTSIM_ROOT"], "scenarios", "quickstart.toml"),
            "--executor", os.environ["LTSIM_EXECUTOR"], "--db", os.environ["LTSIM_DB"],
            "--grid", "strategy.chunk_size=2048,4096,8192,16384", "--grid", "strategy.k=1,2,4,8"]
try:
    code = cli.main()
except SystemExit:
    code = 1
stamp("done")
print(f"of which making {made[1]} dataclasses in the parent: {made[0] * 1e3:.0f} ms",
      file=sys.stderr)
if hasattr(cli, "program"):  # the rest of what the ltsim program does: its exit
    from ltsim.gcpause import before_exit
    before_exit()
sys.exit(code)
"""


def _import_ms(module: str) -> float:
    best = float("inf")
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); "
                              f"import {module}; print(time.perf_counter() - t)"],
                             capture_output=True, text=True, check=True, env=_env())
        best = min(best, float(out.stdout) * 1e3)
    return best


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executor", default="local:2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = _env() | {"LTSIM_ROOT": str(ROOT), "LTSIM_EXECUTOR": args.executor,
                        "LTSIM_DB": str(Path(tmp) / "sweep.db")}
        env["LTSIM_T0"] = repr(time.time())  # just before the child starts
        child = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT,
                               capture_output=True, text=True)
        gone = time.time() - float(env["LTSIM_T0"])
    print(child.stderr.rstrip())
    print(f"{gone:6.3f} s  the process gone (its interpreter shut down)")
    if child.returncode:
        sys.exit(child.returncode)
    for module in ("numpy", "simpy"):
        print(f"import {module} alone: {_import_ms(module):.0f} ms (best of 5)")


if __name__ == "__main__":
    main()
