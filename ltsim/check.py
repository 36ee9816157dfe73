"""CI regression of predicted speedups (``ltsim check``; the command itself is in ltsim.cli).

A regression file lists cases; each compares a candidate scenario with a baseline scenario::

    [[case]]
    name = "chunkflow vs megatron, qwen2.5-7b 256k"
    baseline = "scenarios/chunkflow/qwen2.5-7b-256k-megatron.toml"
    candidate = "scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml"
    min_speedup = 1.0         # gate: the candidate must be at least this much faster
    expected_speedup = 2.41   # recorded by --update
    tolerance = 0.05          # allowed relative drift from expected_speedup
    set = ["workload.num_batches=2"]   # optional overrides for both scenarios

A case fails when the predicted speedup (baseline time / candidate time) is below ``min_speedup``,
drifts from ``expected_speedup`` by more than ``tolerance``, or the candidate does not fit in memory.
Paths are relative to the regression file's directory's parent when they do not exist as given.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ltsim.errors import ConfigError

_KEYS = {"name", "baseline", "candidate", "min_speedup", "expected_speedup", "tolerance", "set"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    baseline: str
    candidate: str
    min_speedup: float = 1.0
    expected_speedup: float | None = None
    tolerance: float = 0.05
    set: tuple[str, ...] = field(default=())


def load_cases(path: Path) -> list[Case]:
    if not path.is_file():
        raise ConfigError("check", "an existing regression TOML file", str(path))
    raw = tomllib.loads(path.read_text())
    cases = []
    for i, item in enumerate(raw.get("case", [])):
        unknown = set(item) - _KEYS
        if unknown:
            raise ConfigError(f"case[{i}].{sorted(unknown)[0]}", f"one of {', '.join(sorted(_KEYS))}",
                              item[sorted(unknown)[0]], source=str(path))
        for key in ("name", "baseline", "candidate"):
            if key not in item:
                raise ConfigError(f"case[{i}].{key}", "given", None, source=str(path))
        cases.append(Case(**{**item, "set": tuple(item.get("set", ()))}))
    if not cases:
        raise ConfigError("case", "at least one [[case]] table", 0, source=str(path))
    return cases


def _resolve(path: Path, name: str) -> Path:
    given = Path(name)
    return given if given.exists() else path.resolve().parent.parent / name


def evaluate(path: Path, case: Case) -> dict[str, Any]:
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    base = simulate(load_scenario(_resolve(path, case.baseline), list(case.set))).to_dict()
    cand = simulate(load_scenario(_resolve(path, case.candidate), list(case.set))).to_dict()
    speedup = base["iteration_time_s"] / cand["iteration_time_s"]
    problems = []
    if not cand["fits"]:
        problems.append(f"candidate does not fit ({cand['fit_reason']})")
    if speedup < case.min_speedup:
        problems.append(f"speedup {speedup:.3f}x is below min_speedup {case.min_speedup}x")
    if case.expected_speedup is not None:
        drift = abs(speedup - case.expected_speedup) / case.expected_speedup
        if drift > case.tolerance:
            problems.append(f"speedup {speedup:.3f}x drifts {100 * drift:.1f}% from the recorded "
                            f"{case.expected_speedup}x (tolerance {100 * case.tolerance:.0f}%)")
    return {"name": case.name, "speedup": speedup, "expected_speedup": case.expected_speedup,
            "baseline_s": base["iteration_time_s"], "candidate_s": cand["iteration_time_s"],
            "ok": not problems, "problems": problems}


def write_cases(path: Path, cases: list[Case]) -> None:
    """Rewrite the file with the cases (comments at the top are kept)."""
    lines = path.read_text().splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip() == "[[case]]"), len(lines))
    header = "".join(line + "\n" for line in lines[:first] if line.startswith("#"))
    out = [header.rstrip("\n")]
    for c in cases:
        out.append("\n[[case]]")
        out.append(f'name = "{c.name}"')
        out.append(f'baseline = "{c.baseline}"')
        out.append(f'candidate = "{c.candidate}"')
        out.append(f"min_speedup = {c.min_speedup}")
        if c.expected_speedup is not None:
            out.append(f"expected_speedup = {c.expected_speedup}")
        out.append(f"tolerance = {c.tolerance}")
        if c.set:
            out.append("set = [" + ", ".join(f'"{s}"' for s in c.set) + "]")
    path.write_text("\n".join(out).lstrip("\n") + "\n")


def run_check(path: Path, *, update: bool = False) -> list[dict[str, Any]]:
    """Evaluate every case of the file, one row each (see ``evaluate``).

    ``update``: record each predicted speedup as the case's ``expected_speedup`` in the file; the
    rows then fail only on ``min_speedup`` and report no drift.
    """
    cases = load_cases(path)
    rows = [evaluate(path, c) for c in cases]
    if update:
        cases = [replace(c, expected_speedup=round(r["speedup"], 4)) for c, r in zip(cases, rows)]
        write_cases(path, cases)
        rows = [{**r, "ok": r["speedup"] >= c.min_speedup, "problems": []} for r, c in zip(rows, cases)]
    return rows
