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
import json
import math
import numbers
import os
import re
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

from ltsim.errors import ConfigError, LtsimError, check_argument, check_callable
from ltsim.grid import METRICS, evaluate_point
from ltsim.hardware import PRESETS
from ltsim.overrides import apply_overrides
from ltsim.scenario import Scenario, check_call
from ltsim.sweepstore import SweepStore, fingerprint, input_digest, point_key

# HOST:PORT (tcp is implied), or any address with its own scheme (tls://, inproc://, ...)
_DASK_ADDRESS = re.compile(r"[A-Za-z0-9_.\-]+:\d{1,5}|\[[0-9A-Fa-f:]+\]:\d{1,5}|[a-z]+://\S+")


MAX_WORKERS = 4096  # more is a typo: each worker is a process holding a copy of the parent


def check_executor(spec: str) -> tuple[str, int | str]:
    """``local`` | ``local:N`` (1 <= N <= 4096 worker processes) | ``dask://HOST:PORT``. Raises
    ConfigError."""
    rule = f"local, local:N (1 to {MAX_WORKERS} worker processes) or dask://HOST:PORT"
    check_argument("--executor", spec, str, rule, "e.g. --executor local")
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
    check_call(scenario, progress)
    check_argument("points", points, (list, tuple), "a list of override dicts",
                   'e.g. run_sweep(scenario, expand_grid(["strategy.k=1,2"]))')
    for point in points:  # a Python caller's (the command line's come from expand_grid)
        check_argument("points", point, dict, "override dicts (expand_grid gives them)",
                       'e.g. run_sweep(scenario, expand_grid(["strategy.k=1,2"]))')
        for key in point:
            check_argument("points", key, str, "dicts keyed by key paths (text)",
                           'e.g. [{"strategy.k": 2}]')
    check_callable("on_stale", on_stale, "a function of the count")
    check_callable("on_reused", on_reused, "a function of (reused, total)")
    if store is not None:
        check_argument("store", store, SweepStore, "a SweepStore, or None (ltsim's default file)",
                       "e.g. SweepStore(\"out/sweep.sqlite\")")
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
    then every metric, each a finite number of its range (the ratios within [0, 1], the rest not
    negative; MFU None with unit costs) and ``fits`` a bool. A row edited by hand otherwise is
    simulated again and replaced: its numbers would be printed and ranked as ltsim's. A point
    that failed (an ``error`` row) is always tried again, so that its message is this run's (a
    fuzzing review had a store's edited text printed as the command's error). Most failures are
    the scenario's or the strategy's refusals, found again in milliseconds; an internal error or
    a planner's late refusal costs its run again."""
    if point_key({k: row.get(k) for k in overrides}) != point_key(overrides):  # (as stored: a
        return False  # NaN or a TOML date in a grid compares by its text, and true is not 1)
    if "error" in row:
        return False
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
    """Plans that fit first, fastest first; failed points last (and a time that is not a
    finite number, which sorted first: a NaN compares false with everything)."""
    def key(row):
        ok = row.get("fits") is True and "error" not in row
        time_s = row.get("iteration_time_s")
        known = isinstance(time_s, numbers.Real) and math.isfinite(time_s) and time_s > 0
        return (not ok, "error" in row, time_s if known else math.inf)

    for row in rows:
        check_argument("rows", row, dict, "result rows (dicts, as run_sweep returns)")

    return sorted(rows, key=key)
