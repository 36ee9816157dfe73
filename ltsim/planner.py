"""Sweeps: grids of scenario overrides, evaluated locally (process pool) or on Dask, ranked by
iteration time among the plans that fit, stored in SQLite so an interrupted sweep resumes.

``ltsim sweep SCENARIO --grid strategy.chunk_size=2048,4096 --grid strategy.k=1,2,4`` sizes
ChunkFlow's ChunkSize and K; any scenario key can be swept the same way.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

from ltsim.errors import ConfigError, LtsimError
from ltsim.scenario import Scenario, build_scenario, parse_override
from ltsim.sweepstore import SweepStore, fingerprint, point_key

METRICS = ("iteration_time_s", "bubble_ratio", "recompute_ratio", "peak_memory_bytes", "fits",
           "mfu", "tokens_per_s")


def expand_grid(specs: Iterable[str]) -> list[dict[str, Any]]:
    """``["strategy.k=1,2", "strategy.chunk_size=4096,8192"]`` -> the 4 override dicts.

    Values use TOML syntax; a list value is written with brackets and is not split.
    """
    axes: list[tuple[str, list[Any]]] = []
    for spec in specs:
        if "=" not in spec:
            raise ConfigError("--grid", "of the form section.key=v1,v2,...", spec)
        key, text = spec.split("=", 1)
        parts = [text] if text.strip().startswith("[") else text.split(",")
        values = [parse_override(f"{key}={p.strip()}")[1] for p in parts if p.strip()]
        if not values:
            raise ConfigError("--grid", "given at least one value", spec)
        axes.append((key.strip(), values))
    return [dict(zip([k for k, _ in axes], combo))
            for combo in itertools.product(*(v for _, v in axes))]


def evaluate_point(raw: dict[str, Any], source: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point; bad combinations become rows with an ``error`` (they do not stop a sweep)."""
    from ltsim.runner import simulate
    from ltsim.scenario import apply_overrides

    row: dict[str, Any] = dict(overrides)
    try:
        result = simulate(build_scenario(apply_overrides(raw, overrides), source=source)).to_dict()
    except LtsimError as exc:
        return {**row, "error": str(exc), "fits": False}
    row.update({k: result[k] for k in METRICS})
    row["warnings"] = len(result["warnings"])
    return row


def _executor(spec: str) -> tuple[str, int | str]:
    if spec == "local":
        return "local", 0
    if spec.startswith("local:") and spec[6:].isdigit():
        return "local", int(spec[6:])
    if spec.startswith("dask://"):
        return "dask", spec[len("dask://"):]
    raise ConfigError("--executor", "local, local:N or dask://HOST:PORT", spec)


def run_sweep(scenario: Scenario, points: list[dict[str, Any]], *, executor: str = "local",
              store: SweepStore | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every point not already in ``store``; return all rows (resumed ones included).

    ``progress(done, total)`` is called after each point is stored (the command line draws its
    progress bar with it).
    """
    store = store or SweepStore()
    fp = fingerprint(scenario.raw)
    done = store.done(fp)
    todo = [p for p in points if point_key(p) not in done]
    kind, arg = _executor(executor)
    finished = len(points) - len(todo)
    for overrides, row in _evaluate_all(kind, arg, scenario, todo):
        store.put(fp, overrides, row)
        done[point_key(overrides)] = row
        finished += 1
        if progress:
            progress(finished, len(points))
    return [done[point_key(p)] for p in points]


def _evaluate_all(kind: str, arg: int | str, scenario: Scenario, todo: list[dict[str, Any]]):
    if not todo:
        return
    if kind == "dask":
        yield from _evaluate_dask(str(arg), scenario, todo)
        return
    workers = int(arg) or 1
    if workers == 1:
        for p in todo:
            yield p, evaluate_point(scenario.raw, scenario.source, p)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(evaluate_point, scenario.raw, scenario.source, p) for p in todo]
        for p, future in zip(todo, futures):
            yield p, future.result()


def _evaluate_dask(address: str, scenario: Scenario, todo: list[dict[str, Any]]):
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise ConfigError("--executor", "usable with Dask installed", f"dask://{address}",
                          "pip install 'ltsim[dask]'") from exc
    with Client(address if "://" in address else f"tcp://{address}") as client:
        futures = {client.submit(evaluate_point, scenario.raw, scenario.source, p, pure=False): i
                   for i, p in enumerate(todo)}
        for future in as_completed(futures):
            yield todo[futures[future]], future.result()


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plans that fit first, fastest first; failed points last."""
    def key(row):
        ok = row.get("fits") is True and "error" not in row
        return (not ok, "error" in row, row.get("iteration_time_s") or float("inf"))

    return sorted(rows, key=key)
