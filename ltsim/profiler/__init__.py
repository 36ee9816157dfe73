"""The profiler: torch microbenchmarks that write a profile directory (DESIGN.md section 7).

`run_profile` measures GEMMs, attention (sliced and packed), elementwise ops, activation memory and
collectives for some models and TP degrees; `ltsim.profiler.cli` is the `ltsim profile` command.
torch is imported only when a profile is run, so importing this package (or its cli) stays cheap.
"""

from __future__ import annotations

from pathlib import Path


def run_profile(*, device: str, out: Path, models: list[str], tp_degrees: list[int], quick: bool,
                resume: bool, progress: bool, threads: int | None = None) -> Path:
    """Measure every table into `out`; see `ltsim.profiler.harness.run_profile`."""
    from ltsim.profiler.harness import run_profile as run

    return run(device=device, out=out, models=models, tp_degrees=tp_degrees, quick=quick,
               resume=resume, progress=progress, threads=threads)


__all__ = ["run_profile"]
