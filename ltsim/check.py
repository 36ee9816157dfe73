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

A case fails when the predicted speedup (candidate tokens/s over baseline tokens/s: baseline time /
candidate time when both run the same batches) is below ``min_speedup``,
drifts from ``expected_speedup`` by more than ``tolerance``, or the candidate does not fit in memory.
A baseline that does not fit is noted beside the case, not failed.
Paths are tried as given, then beside the regression file, then from its folder's parent.

Every case is checked, and both of its scenarios loaded, before any simulation runs: a typo in the
last case fails at once, naming the file and ``case[i].key``. ``--update`` rewrites only the
``expected_speedup`` values (tomlkit), so comments, order and quoting stay as written.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ltsim.errors import ConfigError, check_one_line, unusable_path
from ltsim.files import read_input, write_text_atomically
from ltsim.overrides import parse_override
from ltsim.scenario import load_scenario, read_text_file, read_toml_file
from ltsim.sim.metrics import speedup as throughput_speedup

_KEYS = {"name", "baseline", "candidate", "min_speedup", "expected_speedup", "tolerance", "set"}
_STR, _NUM = "a string", "a number"
_TYPES = {"name": _STR, "baseline": _STR, "candidate": _STR, "min_speedup": _NUM,
          "expected_speedup": _NUM, "tolerance": _NUM}


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
    """Read and check a regression file. Raises ConfigError naming the file and ``case[i].key``."""
    raw = read_toml_file(Path(path), "check", "regression TOML file")
    source = str(path)
    extra = sorted(set(raw) - {"case"})
    if extra:
        raise ConfigError(extra[0], "absent: a regression file holds only [[case]] tables", extra[0],
                          "move it into a [[case]] table or remove it", source=source)
    items = raw.get("case", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ConfigError("case", "an array of [[case]] tables", type(items).__name__,
                          "write each case under its own [[case]] header", source=source)
    if not items:
        raise ConfigError("case", "at least one [[case]] table", 0, source=source)
    cases = [_case(i, item, source) for i, item in enumerate(items)]
    names = [case.name for case in cases]
    for i, name in enumerate(names):
        if not name.strip():  # a report line names each case; an empty one names nothing
            raise ConfigError(f"case[{i}].name", "a non-empty name", name,
                              'e.g. name = "chunkflow vs megatron"', source=source)
        if name in names[:i]:
            raise ConfigError(f"case[{i}].name", "a name no other case has", name,
                              "give each case its own name (the report tells the cases "
                              "apart by it)", source=source)
    return cases


def _case(i: int, item: dict[str, Any], source: str) -> Case:
    where = f"case[{i}]"
    for key in sorted(item):
        if key not in _KEYS:
            raise ConfigError(f"{where}.{key}", f"one of {', '.join(sorted(_KEYS))}", key,
                              "remove it or check the spelling", source=source)
    for key in ("name", "baseline", "candidate"):
        if key not in item:
            example = '"a name"' if key == "name" else '"scenarios/quickstart.toml"'
            raise ConfigError(f"{where}.{key}", "given", None, f"add {key} = {example} to the case",
                              source=source)
    for key, rule in _TYPES.items():
        value = item.get(key)
        if key in item and (isinstance(value, bool) or not isinstance(
                value, str if rule == _STR else (int, float))):
            raise ConfigError(f"{where}.{key}", rule, value, source=source)
    check_one_line(f"{where}.name", item["name"], source=source)  # printed in the check's table
    for key in ("min_speedup", "expected_speedup", "tolerance"):
        value = item.get(key)
        if value is not None and not (math.isfinite(value) and value >= 0 and
                                      (value > 0 or key == "tolerance")):
            rule = "a non-negative number" if key == "tolerance" else "a positive number"
            raise ConfigError(f"{where}.{key}", rule, value, source=source)
    overrides = item.get("set", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"{where}.set", 'a list of "section.key=value" strings', overrides,
                          'e.g. set = ["workload.num_batches=2"]', source=source)
    for text in overrides:
        try:
            parse_override(text)
        except ConfigError as exc:
            raise ConfigError(f"{where}.set", exc.rule, text, exc.fix, source=source) from None
    return Case(**{**item, "set": tuple(overrides)})


def _resolve(path: Path, name: str) -> Path:
    """A case's scenario: as given, else beside the regression file, else from its folder's
    parent (validation/regression.toml names scenarios/... from the repository)."""
    folder = path.resolve().parent
    tries = [Path(name), folder / name, folder.parent / name]
    return next((t for t in tries if t.is_file()), tries[-1])


def _scenarios(path: Path, i: int, case: Case) -> tuple[Any, Any]:
    """Both scenarios of a case, loaded (and so checked) without simulating."""
    out = []
    for key in ("baseline", "candidate"):
        name = getattr(case, key)
        try:
            scenario = _resolve(path, name)
            found = scenario.is_file()
        except OSError as exc:  # a path the system refuses (too long, ...)
            raise unusable_path(f"case[{i}].{key}", name, exc, source=str(path)) from None
        if not found:
            raise ConfigError(f"case[{i}].{key}", "an existing scenario file", name,
                              f"paths are tried as given, then from {path.resolve().parent} and "
                              f"{path.resolve().parent.parent}",
                              source=str(path))
        try:
            out.append(load_scenario(scenario, list(case.set)))
        except ConfigError as exc:  # say which case brought the scenario (and its set) in
            raise _from_case(exc, path, i, key, case.set) from None
    if out[0].cluster.device.is_unit != out[1].cluster.device.is_unit:  # units vs seconds
        kind = "the unit preset" if out[0].cluster.device.is_unit else "real hardware"
        raise ConfigError(f"case[{i}].candidate", f"a scenario on {kind}, as its baseline (a "
                          "unit-cost time is in units, not seconds: no speedup between them)",
                          case.candidate, "compare scenarios of the same kind of device",
                          source=str(path))
    return out[0], out[1]


def _from_case(exc: ConfigError, path: Path, i: int, key: str,
               sets: tuple[str, ...] = ()) -> ConfigError:
    """``exc`` saying which case of the file (and which of its scenarios) brought it in; a value
    the case's ``set`` gave is the regression file's, not the scenario file's."""
    if exc.key == "--set":  # the set list itself
        return ConfigError(f"case[{i}].set", exc.rule, exc.value, exc.fix, source=str(path),
                           context=exc.context)
    if exc.key in {parse_override(text)[0] for text in sets}:  # (each parsed when read)
        where = f"given by case[{i}].set, on its {key}"
        return ConfigError(exc.key, exc.rule, exc.value, exc.fix, source=str(path),
                           context=f"{exc.context}; {where}" if exc.context else where)
    where = f"from {path} case[{i}].{key}"
    return ConfigError(exc.key, exc.rule, exc.value, exc.fix, source=exc.source,
                       context=f"{exc.context}; {where}" if exc.context else where)


def evaluate(path: Path, case: Case, scenarios: tuple[Any, Any] | None = None,
             index: int = 0) -> dict[str, Any]:
    """One case (``index``: its place in the file, for messages)."""
    from ltsim.runner import simulate

    baseline, candidate = scenarios or _scenarios(path, index, case)
    results = []
    for key, scenario in (("baseline", baseline), ("candidate", candidate)):
        try:  # a plan the strategy refuses (its size guard, a layout): which case, which side
            results.append(simulate(scenario).to_dict())
        except ConfigError as exc:
            exc = exc if exc.source else exc.with_source(scenario.source)
            raise _from_case(exc, path, index, key) from None
    base, cand = results
    speedup = throughput_speedup(base, cand) or 0.0
    problems = []
    if not cand["fits"]:
        problems.append(f"candidate does not fit ({cand['fit_reason']})")
    if speedup < case.min_speedup:
        problems.append(f"speedup {speedup:.3f}x is below min_speedup {case.min_speedup}x")
    if case.expected_speedup is not None:
        drift = abs(speedup - case.expected_speedup) / case.expected_speedup
        if drift > case.tolerance:
            problems.append(f"speedup {speedup:.6g}x drifts {100 * drift:.3g}% from the recorded "
                            f"{case.expected_speedup}x (tolerance {100 * case.tolerance:.3g}%)")
    # not a failure (a candidate may gate on beating a baseline that cannot run), but said
    notes = ([f"baseline does not fit ({base['fit_reason']}): the speedup is over a run that "
              "would not start"] if not base["fits"] else [])
    return {"name": case.name, "speedup": speedup, "expected_speedup": case.expected_speedup,
            "baseline_s": base["iteration_time_s"], "candidate_s": cand["iteration_time_s"],
            "ok": not problems, "problems": problems, "notes": notes}


def write_speedups(path: Path, speedups: list[float | None]) -> None:
    """Set each case's ``expected_speedup`` in place (None: leave the case as it is); every other
    byte of the file is kept (comments, order, quoting of ``set`` overrides, a byte order mark,
    CRLF line ends when every line has them). A case without one gets it appended."""
    import tomlkit

    source = read_text_file(Path(path), "check", "regression TOML file")
    bom = read_input(path, 2).startswith(codecs.BOM_UTF8)  # (which read_text_file drops)
    document = tomlkit.parse(source)
    for table, speedup in zip(document["case"], speedups, strict=True):
        if speedup is not None:
            table["expected_speedup"] = speedup
    text = tomlkit.dumps(document)
    if "\n" in source and source.count("\r\n") == source.count("\n"):  # the lines tomlkit adds
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")  # end as the file's do
    if bom:
        text = "\ufeff" + text
    try:
        write_text_atomically(path, text, encoding="utf-8", newline="")
    except OSError as exc:  # the file keeps what it held
        raise ConfigError("check", "a writable regression file for --update", str(path),
                          "check its permissions and the free space (the file is unchanged)",
                          context=exc.strerror or "") from None


def run_check(path: Path, *, update: bool = False,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every case of the file, one row each (see ``evaluate``); ``progress(done, total)``
    after each case.

    ``update``: record each predicted speedup as the case's ``expected_speedup`` in the file; the
    rows then fail only on ``min_speedup`` or a candidate that does not fit, and report no drift.
    """
    cases = load_cases(path)
    loaded = [_scenarios(path, i, c) for i, c in enumerate(cases)]  # every input before any work
    if update:  # judged without the drift from the value being replaced
        cases = [replace(c, expected_speedup=None) for c in cases]
    rows = []
    for i, (case, scenarios) in enumerate(zip(cases, loaded)):
        rows.append(evaluate(path, case, scenarios, i))
        if progress is not None:
            progress(len(rows), len(cases))
    if update:
        recorded = [_recorded(r["speedup"], c.tolerance) for r, c in zip(rows, cases)]
        write_speedups(path, recorded)
        rows = [{**r, "expected_speedup": v if v is not None else r["expected_speedup"]}
                for r, v in zip(rows, recorded)]
    return rows


def _recorded(speedup: float, tolerance: float) -> float | None:
    """The speedup as ``--update`` writes it: five significant digits, or as many more as a
    finer tolerance needs for the next check to pass on the same prediction (tolerance 1e-6
    failed on 1.2174 recorded for 1.21739; a review), every digit for tolerance 0; None (not
    recorded: the file refuses it) for a speedup that is not a positive number."""
    if not (math.isfinite(speedup) and speedup > 0):
        return None
    if tolerance <= 0:
        return speedup
    return float(f"{speedup:.{max(5, math.ceil(-math.log10(tolerance)) + 3)}g}")
