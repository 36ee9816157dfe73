"""A sweep's grid and its points: ``--grid`` specs expanded to override dicts, and one point
simulated into a row (a bad point is a row with an ``error``, never the end of a sweep). The
sweep that runs them, stores and ranks them is ltsim/planner.py."""

from __future__ import annotations

import itertools
import json
import math
import shlex
from collections import abc
from typing import Any, Iterable

from ltsim.errors import ConfigError, LtsimError, TypeShown, check_argument
from ltsim.overrides import apply_overrides, parse_override, strategy_option_names
from ltsim.scenario import build_scenario, check_override_key

# 9-41 minutes at the 2,466-11,344 plans per minute measured on a 2-core machine
# (validation/perf/README.md, 2026-11-24); past it a sweep is hours, and its point list fills memory
MAX_GRID_POINTS = 100_000
METRICS = ("iteration_time_s", "bubble_ratio", "recompute_ratio", "peak_memory_bytes",
           "static_memory_bytes", "fits",
           "mfu", "tokens_per_s")


# keys whose names are read in any case (CHUNKFLOW is chunkflow): a repeat in another case is one
_ANY_CASE = {"strategy.name", "model.preset", "hardware.preset"}


def _named(key: str, value: Any) -> Any:
    """A grid value as the scenario reads it: a name of ``_ANY_CASE`` or a built-in dataset's
    name in lower case (a length file's path keeps its case)."""
    if not isinstance(value, str):
        return value
    if key in _ANY_CASE:
        return value.lower()
    if key == "workload.dataset":
        from ltsim.datasets import dataset_names

        name = value.strip().lower()
        return name if name in dataset_names() else value
    return value


def expand_grid(specs: Iterable[str]) -> list[dict[str, Any]]:
    """``["strategy.k=1,2", "strategy.chunk_size=4096,8192"]`` -> the 4 override dicts.

    Values use TOML syntax, split at the commas outside brackets and quotes: a list value is
    written with brackets, `workload.lengths=[4, 2],[8]` grids two lists.
    """
    if isinstance(specs, str):  # one key's spec, not a list of its characters
        specs = [specs]
    if not isinstance(specs, abc.Iterable) or isinstance(specs, (bytes, dict)):  # (5: a TypeError)
        raise ConfigError("--grid", "a list of section.key=v1,v2,... texts", TypeShown(specs),
                          'e.g. ["strategy.k=1,2,4"]')
    axes: list[tuple[str, list[Any]]] = []
    for spec in specs:
        check_argument("--grid", spec, str, "section.key=v1,v2,... texts",
                       'e.g. ["strategy.k=1,2,4"]')
        if "=" not in spec:
            raise ConfigError("--grid", "of the form section.key=v1,v2,...", spec,
                              "write the key, '=' and its values, e.g. --grid strategy.k=1,2,4")
        key, text = spec.split("=", 1)
        key = key.strip()
        check_override_key(key, "--grid")
        if key in (k for k, _ in axes):
            raise ConfigError("--grid", "given once per key", spec,
                              f"put every value of {key} in one --grid")
        parts = _top_level_values(text)
        if not text.strip():
            raise ConfigError("--grid", "a key with at least one value", spec,
                              f"write the values after '=', e.g. --grid {key}=V1,V2")
        if not all(p.strip() for p in parts):
            raise ConfigError("--grid", "a comma-separated list without empty values", spec,
                              "remove the extra comma")
        try:
            values = [parse_override(f"{key}={p.strip()}")[1] for p in parts]
        except ConfigError as exc:
            raise ConfigError("--grid", exc.rule, spec, exc.fix) from None
        seen = [json.dumps(_named(key, v), sort_keys=True, default=str) for v in values]
        if len(set(seen)) < len(seen):
            raise ConfigError("--grid", "a list of distinct values", spec,
                              "give each value once (a repeat would run the same points twice)")
        axes.append((key, values))
    points = math.prod(len(v) for _, v in axes)
    if points > MAX_GRID_POINTS:  # hours of simulation, and the list alone would fill memory
        raise ConfigError("--grid", f"a grid of at most {MAX_GRID_POINTS:,} points", points,
                          "sweep fewer values per key, or split the sweep (a --db resumes it)")
    return [dict(zip([k for k, _ in axes], combo))
            for combo in itertools.product(*(v for _, v in axes))]


def _top_level_values(text: str) -> list[str]:
    """``"1,2"`` -> ["1", "2"]; ``"[4, 2],[8]"`` -> ["[4, 2]", "[8]"]: split at the commas outside
    brackets, braces and quotes, so list and table values can be gridded."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def evaluate_point(raw: dict[str, Any], source: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point; bad combinations become rows with an ``error`` (they do not stop a sweep)."""
    from ltsim.runner import simulate

    row: dict[str, Any] = dict(overrides)
    try:
        result = simulate(build_scenario(apply_overrides(raw, overrides), source=source)).to_dict()
    except ConfigError as exc:
        return {**row, "error": str(_from_grid(exc, overrides)), "fits": False}
    except LtsimError as exc:
        return {**row, "error": str(exc), "fits": False}
    except (ArithmeticError, LookupError, TypeError, ValueError, MemoryError) as exc:
        # a bug this point exposes: record it (the other points still run), do not hide it
        return {**row, "error": f"internal error ({type(exc).__name__}: {exc}); please report "
                "this point", "fits": False}
    row.update({k: result[k] for k in METRICS})
    row["warnings"] = len(result["warnings"])
    if result.get("unit_costs"):  # the unit preset: the table prints units, not s and B
        row["unit_costs"] = True
    return row


def _from_grid(exc: ConfigError, overrides: dict[str, Any]) -> ConfigError:
    """``exc`` saying so when the key it names is one of the point's grid keys (the value is the
    grid's, not the file's); a strategy option the gridded strategy does not take gets the fix
    of comparing the strategies, each with its own options."""
    if exc.key not in overrides:
        return exc
    where = f"given by --grid {exc.key}"
    fix = exc.fix
    option = exc.key.removeprefix("strategy.")
    if "strategy.name" in overrides and option != exc.key and not _takes(overrides, option):
        fix = (f"sweep {exc.key} over the strategies that take it, or compare strategies each "
               f"with its own options (ltsim compare {shlex.quote(exc.source or 'FILE')} "
               f"--strategies {overrides['strategy.name']},NAME:{option}=VALUE)")
    return ConfigError(exc.key, exc.rule, exc.value, fix, source=exc.source,
                       context=f"{exc.context}; {where}" if exc.context else where)


def _takes(overrides: dict[str, Any], option: str) -> bool:
    """Whether the point's strategy takes ``option`` (an unknown strategy takes none)."""
    try:
        return option in strategy_option_names(overrides["strategy.name"])
    except ConfigError:
        return False
