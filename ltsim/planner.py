"""Sweeps: grids of scenario overrides, evaluated locally (process pool) or on Dask, ranked by
iteration time among the plans that fit, stored in SQLite so an interrupted sweep resumes.

``ltsim sweep SCENARIO --grid strategy.chunk_size=2048,4096 --grid strategy.k=1,2,4`` sizes
ChunkFlow's ChunkSize and K; any scenario key can be swept the same way.

A stored row is reused only while its inputs are unchanged (``ltsim.sweepstore.input_digest``:
length file, profile tables, ltsim itself); stale rows are recomputed. A bad point is a row with
an ``error``; it never ends the sweep. Pool workers ignore Ctrl-C (the parent handles it and
stops them) and exit when the parent dies (PR_SET_PDEATHSIG on Linux, a parent watch elsewhere).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import os
import re
import shlex
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable

from ltsim.errors import ConfigError, LtsimError
from ltsim.hardware import PRESETS
from ltsim.overrides import apply_overrides, parse_override
from ltsim.scenario import Scenario, build_scenario, check_override_key
from ltsim.sweepstore import SweepStore, fingerprint, input_digest, point_key

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
    axes: list[tuple[str, list[Any]]] = []
    for spec in specs:
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
    if "strategy.name" in overrides and exc.key.startswith("strategy.") and "an option of" in exc.rule:
        option = exc.key.removeprefix("strategy.")
        fix = (f"sweep {exc.key} over the strategies that take it, or compare strategies each "
               f"with its own options (ltsim compare {shlex.quote(exc.source or 'FILE')} "
               f"--strategies {overrides['strategy.name']},NAME:{option}=VALUE)")
    return ConfigError(exc.key, exc.rule, exc.value, fix, source=exc.source,
                       context=f"{exc.context}; {where}" if exc.context else where)


# HOST:PORT (tcp is implied), or any address with its own scheme (tls://, inproc://, ...)
_DASK_ADDRESS = re.compile(r"[A-Za-z0-9_.\-]+:\d{1,5}|\[[0-9A-Fa-f:]+\]:\d{1,5}|[a-z]+://\S+")


MAX_WORKERS = 4096  # more is a typo: each worker is a process holding a copy of the parent


def check_executor(spec: str) -> tuple[str, int | str]:
    """``local`` | ``local:N`` (1 <= N <= 4096 worker processes) | ``dask://HOST:PORT``. Raises
    ConfigError."""
    rule = f"local, local:N (1 to {MAX_WORKERS} worker processes) or dask://HOST:PORT"
    if spec == "local":
        return "local", 0
    if spec.startswith("local:"):
        count = spec[len("local:"):]
        if count.isascii() and count.isdigit() and 1 <= int(count) <= MAX_WORKERS:  # '٣' too is a digit
            return "local", int(count)
        raise ConfigError("--executor", rule, spec, f"e.g. --executor local:{os.cpu_count() or 2}")
    if spec.startswith("dask://"):
        address = spec[len("dask://"):]
        if _DASK_ADDRESS.fullmatch(address):
            return "dask", address
        raise ConfigError("--executor", rule, spec, "e.g. --executor dask://127.0.0.1:8786 (the "
                          "scheduler's host and port)")
    raise ConfigError("--executor", rule, spec, "e.g. --executor local:4")



def check_one_kind_of_hardware(scenario: Scenario, points: list[dict[str, Any]]) -> None:
    """Raise ConfigError unless a sweep's points all run on the unit preset or all on real
    hardware: a unit-cost time is in units, not seconds, and the ranking put the two side by
    side (``ltsim check`` refuses the same mix)."""
    own = scenario.raw.get("hardware", {}).get("preset")
    presets = {str(p.get("hardware.preset", own)) for p in points}
    known = [PRESETS[name.lower()] for name in presets if name.lower() in PRESETS]
    if len({device.is_unit for device in known}) > 1:  # (an unknown name is its point's error)
        raise ConfigError("--grid", "points all on the unit preset or all on real hardware (a "
                          "unit-cost time is in units, not seconds: they cannot be ranked "
                          "together)", ", ".join(sorted(presets)),
                          "sweep the unit preset and real hardware separately")


def run_sweep(scenario: Scenario, points: list[dict[str, Any]], *, executor: str = "local",
              store: SweepStore | None = None,
              progress: Callable[[int, int], None] | None = None,
              on_stale: Callable[[int], None] | None = None,
              on_reused: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every point not already in ``store`` with the same inputs; return all rows
    (resumed ones included). Raises ConfigError for a bad ``executor``.

    ``progress(done, total)`` is called after each point is stored (the command line draws its
    progress bar with it); ``on_stale(n)`` once, before any work, when n stored rows are
    recomputed because their inputs changed; ``on_reused(n, total)`` once, when n of the points
    come from the store unchanged.
    """
    kind, arg = check_executor(executor)
    store = store or SweepStore()
    fp = fingerprint(scenario.raw)
    stored = store.stored(fp)
    inputs = _point_inputs(scenario, points)
    wanted = {point_key(p): p for p in points}
    done = {key: row for key, (digest, row) in stored.items()
            if digest == inputs.get(key) and _usable(row, wanted.get(key, {}))}
    todo = [p for p in points if point_key(p) not in done]
    stale = sum(1 for p in todo if point_key(p) in stored  # (a row edited by hand and left
                and stored[point_key(p)][0] != inputs.get(point_key(p)))  # unusable is not)
    if stale and on_stale:
        on_stale(stale)
    if len(todo) < len(points) and on_reused:
        on_reused(len(points) - len(todo), len(points))
    finished = len(points) - len(todo)
    for overrides, row in _evaluate_all(kind, arg, scenario, todo):
        key = point_key(overrides)
        store.put(fp, overrides, row, inputs[key])
        done[key] = row
        finished += 1
        if progress:
            progress(finished, len(points))
    return [done[point_key(p)] for p in points]


def _usable(row: dict[str, Any], overrides: dict[str, Any]) -> bool:
    """A stored row as evaluate_point writes it for the point ``overrides``: the point's values,
    then an error (text, not fitting) or every metric, each a finite number of its range (the
    ratios within [0, 1], the rest not negative; MFU None with unit costs) and ``fits`` a bool. A
    row edited by hand otherwise is simulated again and replaced: its numbers would be printed
    and ranked as ltsim's, and its text printed as the point's."""
    if point_key({k: row.get(k) for k in overrides}) != point_key(overrides):  # (as stored: a
        return False  # NaN or a TOML date in a grid compares by its text, and true is not 1)
    if "error" in row:
        return isinstance(row["error"], str) and row.get("fits") is False
    mfu = row.get("mfu", 0)
    ratios = ("bubble_ratio", "recompute_ratio")  # (a busy device's bubble may round below 0)
    return (all(_number(row.get(k)) for k in METRICS if k not in ("fits", "mfu", *ratios))
            and all(_number(row.get(k), low=-1e-9, high=1 + 1e-9) for k in ratios)
            and (mfu is None or _number(mfu)) and isinstance(row.get("fits"), bool)
            and _number(row.get("warnings", 0)))


def _number(value: Any, low: float = 0.0, high: float = math.inf) -> bool:
    """A finite number within [low, high] (a bool is no number here)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)


def _point_inputs(scenario: Scenario, points: list[dict[str, Any]]) -> dict[str, str]:
    """point key -> input digest; points that share a dataset and hardware section share one."""
    cache: dict[str, str] = {}
    out = {}
    for p in points:
        try:
            raw = apply_overrides(scenario.raw, p)
        except LtsimError:
            raw = scenario.raw
        what = json.dumps([raw.get("workload", {}).get("dataset"), raw.get("hardware", {})],
                          sort_keys=True, default=str)
        if what not in cache:
            cache[what] = input_digest(raw, scenario.source)
        out[point_key(p)] = cache[what]
    return out


def _evaluate_all(kind: str, arg: int | str, scenario: Scenario, todo: list[dict[str, Any]]):
    if not todo:
        return
    if kind == "dask":
        yield from _evaluate_dask(str(arg), scenario, todo)
        return
    # no more processes than points, nor than a few per core (each holds a copy of the parent)
    workers = max(1, min(int(arg), len(todo), 4 * (os.cpu_count() or 1)))
    if workers == 1:
        for p in todo:
            yield p, evaluate_point(scenario.raw, scenario.source, p)
        return
    _warm(scenario)  # workers fork from here with the profile and the modules loaded
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_fork_context(),
                               initializer=_worker_init, initargs=(os.getpid(),))
    batches = _tasks(todo, workers)
    try:
        futures = [pool.submit(_evaluate_batch, scenario.raw, scenario.source, b) for b in batches]
        for batch, future in zip(batches, futures):
            yield from zip(batch, future.result())
    finally:  # also on Ctrl-C / SIGTERM: queued points are dropped, running workers stopped
        _stop(pool)


def _tasks(todo: list[dict[str, Any]], workers: int) -> list[list[dict[str, Any]]]:
    """The points in tasks for a pool: a run of points that differ only in the grid's last key
    (the K values of one ChunkSize, say) is one task, since a worker keeps what they share
    (prices, ChunkFlow's chunks) and two workers would both compute it; runs are cut to at most
    a (2 x workers)-th of the points, so that every worker has work."""
    cap = max(1, math.ceil(len(todo) / (2 * workers)))
    tasks: list[list[dict[str, Any]]] = []
    shared = None
    for point in todo:
        keys = list(point)[:-1]
        mine = [(k, point[k]) for k in keys]
        if tasks and mine == shared and len(tasks[-1]) < cap:
            tasks[-1].append(point)
        else:
            tasks.append([point])
            shared = mine
    return tasks


def _evaluate_batch(raw: dict[str, Any], source: str, batch: list[dict[str, Any]]) -> list[dict]:
    return [evaluate_point(raw, source, p) for p in batch]


def _warm(scenario: Scenario) -> None:
    """Load what every point needs (the simulator's modules, the profile tables) once, in the
    parent, so that forked workers start with it."""
    from ltsim.runner import make_cost_model

    try:
        make_cost_model(scenario)
    except LtsimError:
        pass  # the points report it


def _fork_context():
    """fork where the platform has it (workers inherit the warmed parent); else the default."""
    import multiprocessing

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return None


def _stop(pool: ProcessPoolExecutor) -> None:
    """Drop queued points, stop running workers, and wait for the pool's manager thread: left
    running, it closes its wake-up pipe while the interpreter's exit hook writes to it (a race in
    concurrent.futures, an OSError traceback after "interrupted")."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
    if manager is not None:
        manager.join(timeout=5)


def _worker_init(parent_pid: int) -> None:
    """In each pool worker: leave Ctrl-C to the parent, die quietly when the parent stops the
    pool (SIGTERM; a fork inherits the command line's SIGTERM-as-interrupt handler, whose
    traceback would land on the user's terminal), and exit when the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    """Portable fallback to PR_SET_PDEATHSIG: poll the parent pid."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _evaluate_dask(address: str, scenario: Scenario, todo: list[dict[str, Any]]):
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise ConfigError("--executor", "usable with Dask installed", f"dask://{address}",
                          "pip install 'ltsim[dask]'") from exc
    problem = _unreachable(address)
    try:
        if problem:
            raise OSError(problem)
        client = Client(address if "://" in address else f"tcp://{address}", timeout="30s")
    except Exception as exc:  # noqa: BLE001  # refused, timed out, or not a Dask scheduler at all
        # (another service answers with bytes Dask reads as a frame length: a MemoryError)
        raise ConfigError("--executor", "the address of a running Dask scheduler",
                          f"dask://{address}", "start one with `dask scheduler` (and workers with "
                          "`dask worker HOST:PORT`), or use --executor local:N",
                          context=(str(exc) or type(exc).__name__)
                          if isinstance(exc, (OSError, TimeoutError)) else
                          f"what answers there is not a Dask scheduler ({type(exc).__name__})"
                          ) from None
    with client:
        futures = {client.submit(evaluate_point, scenario.raw, scenario.source, p, pure=False): i
                   for i, p in enumerate(todo)}
        for future in as_completed(futures):
            yield todo[futures[future]], future.result()


def _unreachable(address: str) -> str:
    """For an address over TCP (plain, tcp://, tls://, ws://, wss://), why a connection does not
    open within 3 s ("" when it does): a refused or unroutable scheduler fails at once instead
    of after Dask's 30 s connect timeout. Over plain TCP a Dask scheduler speaks first (its
    handshake, at once): a server that stays silent 3 s is something else (an HTTP server waits
    for a request, and Dask's client then waited for it without end)."""
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp", "tls", "ws", "wss"):
        return ""  # another transport (inproc, ucx): Client decides
    host, _, port = rest.rpartition(":")
    if not (port.isascii() and port.isdigit() and int(port) <= 65535):
        return "no port number (0-65535) after the host"
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=3)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    with conn:
        if scheme not in ("", "tcp"):
            return ""
        try:
            if not conn.recv(1):
                return "the server closed the connection without a word (not a Dask scheduler)"
        except TimeoutError:
            return "no reply within 3 s (not a Dask scheduler, which greets a client at once)"
        except OSError as exc:
            return exc.strerror or type(exc).__name__
    return ""


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plans that fit first, fastest first; failed points last."""
    def key(row):
        ok = row.get("fits") is True and "error" not in row
        return (not ok, "error" in row, row.get("iteration_time_s") or float("inf"))

    return sorted(rows, key=key)
