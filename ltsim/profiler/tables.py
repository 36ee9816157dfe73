"""Running one profile table: its points, checkpointing, resuming and progress.

A table is a list of points (one row each, named by a unique `key`) and a function that measures a
list of points and hands each finished row to a callback (`sequential`: one point after another;
`interleaved`: timed in rounds over all points, see timing.py). Every finished row is checkpointed at once
to `<name>.partial.csv` (rewritten whole through a temporary file and a rename, so it is never half
written). When all points are measured the table is written with `ltsim.profiles.write_table`
(atomic) and the partial file is removed.

Resuming (`--resume`): a table whose `<name>.csv` exists and reads back is kept untouched; otherwise
the rows of `<name>.partial.csv` whose key is still one of the table's points are reused and only
the missing points are measured. Without `--resume`, stale partial files are removed and every table
is measured again.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from ltsim.errors import ProfileError
from ltsim.files import read_input, replaced_atomically
from ltsim.profiler.timing import Bench, Case, sample, summarize
from ltsim.profiles import read_table, write_table

KEY_COLUMN = "point"

Row = dict[str, Any]
Emit = Callable[[Row], None]
Advance = Callable[[float], None]  # progress: this many more points' worth of work done


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One row to measure: a unique key and the parameters the table's measure function reads."""

    key: str
    params: tuple[tuple[str, Any], ...]

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.params)


def make_point(key_fields: Sequence[str], **params: Any) -> Point:
    """A point whose key is built from the named parameters (in order)."""
    key = " ".join(f"{name}={params[name]}" for name in key_fields)
    return Point(key=key, params=tuple(params.items()))


Measure = Callable[[Sequence[Point], Emit, Advance], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class TableJob:
    """A table to measure: name, points, and `measure(points, emit, advance)` emitting one row per point."""

    name: str
    points: tuple[Point, ...]
    measure: Measure
    provenance: dict[str, Any]  # method, kernel(s), timing: goes to meta.json


_STREAM: ContextVar[TextIO | None] = ContextVar("progress_stream", default=None)


@contextmanager
def progress_stream(stream: TextIO | None) -> Iterator[None]:
    """Within the block, a `Progress` built without a stream draws on `stream` (the command line
    passes sys.stderr; the library itself never picks a stream)."""
    token = _STREAM.set(stream)
    try:
        yield
    finally:
        _STREAM.reset(token)


class Progress:
    """Progress on `stream`: a one-line bar on a terminal, else one line per finished table
    ("gemm: 330 rows in 22.5 s"), and one every LINE_EVERY_S within a table ("gemm: 12 of 330
    rows, 60 s"; a large model's GEMMs on a CPU ran minutes without a word), so a log file or a
    batch job's output shows it too.

    Without `stream`, the one set by `progress_stream`; with neither (or not `enabled`), nothing.
    """

    def __init__(self, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else _STREAM.get()
        shown = enabled and self.stream is not None
        self.bar = shown and _isatty(self.stream)
        self.lines = shown and not self.bar
        self.start_s = self.said_s = time.perf_counter()

    LINE_EVERY_S = 30.0

    def update(self, table: str, done: float, total: int) -> None:
        """Redraw the bar on a terminal; elsewhere a line when LINE_EVERY_S have passed."""
        if self.lines and time.perf_counter() - self.said_s >= self.LINE_EVERY_S:
            self.line(f"{table}: {done:.0f} of {total} rows, "
                      f"{time.perf_counter() - self.start_s:.0f} s")
        if not self.bar or self.stream is None:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        elapsed_s = time.perf_counter() - self.start_s
        self.stream.write(f"\r{table:<17} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done:.0f}/{total} {elapsed_s:6.0f} s")
        if round(done) >= total:
            self.stream.write("\n")
        self.stream.flush()

    def finished(self, table: str, rows: int, duration_s: float) -> None:
        """A table is written: one line when not on a terminal (there the bar has shown it)."""
        self.line(f"{table}: {rows} rows in {duration_s:.1f} s")

    def line(self, text: str) -> None:
        """One line of progress text (not on a terminal, where the bar shows progress)."""
        if not self.lines or self.stream is None:
            return
        self.stream.write(text + "\n")
        self.stream.flush()
        self.said_s = time.perf_counter()


def _isatty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def sequential(measure_one: Callable[[Point], Row]) -> Measure:
    """A table measure function that measures points one after another in this process."""
    def measure(points: Sequence[Point], emit: Emit, advance: Advance) -> None:
        for point in points:
            emit(measure_one(point))
            advance(1)
    return measure


def interleaved(prepare: Callable[[Point], Case], bench: Bench) -> Measure:
    """A table measure function timing `prepare(point).run` in interleaved rounds (see timing.py).

    A point's row is emitted (and checkpointed) when its last round is done.
    """
    plan = bench.plan

    def measure(points: Sequence[Point], emit: Emit, advance: Advance) -> None:
        samples: dict[str, list[float]] = {point.key: [] for point in points}
        for round_ in range(plan.rounds):
            gc.collect()  # once per round: it takes ~0.1 s with torch loaded; off while timing
            for point in points:
                case = prepare(point)
                samples[point.key] += sample(case.run, plan=plan.per_round, device=bench.device,
                                             kernels_only=bench.kernels_only)
                if round_ == plan.rounds - 1:
                    emit(case.row(point.key, summarize(samples[point.key])))
                del case  # free this point's operands before the next point builds its own
                advance(1 / plan.rounds)
    return measure


def table_done(out: Path, name: str) -> bool:
    """Whether `<name>.csv` exists in `out` and reads back as a valid table."""
    if not (out / f"{name}.csv").is_file():
        return False
    try:
        read_table(out, name)
    except (ProfileError, ValueError, OSError):
        return False
    return True


def partial_made_with(out: Path, name: str) -> dict[str, Any] | None:
    """The arguments of the run that wrote `<name>.partial.csv` ({"args": ...}, as meta.json keeps
    a table's), or None when it recorded none (an older run) or the record does not read: not a
    regular file (a named pipe would wait forever), past 1 MiB, or not JSON (or nested too deep)."""
    try:
        data = json.loads(read_input(out / f"{name}{_ARGS_SUFFIX}", _ARGS_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


_ARGS_BYTES = 1 << 20  # a run's recorded arguments are a few hundred bytes


_ARGS_SUFFIX = ".partial.args.json"


def run_table(job: TableJob, out: Path, *, resume: bool, progress: Progress,
              args: dict[str, Any] | None = None) -> int:
    """Measure `job` into `out/<name>.csv`; returns the number of rows. See the module docstring.
    `args`: the run's arguments, recorded beside the partial checkpoint so that --resume reuses
    its rows only when run the same way (harness.py checks it)."""
    partial = out / f"{job.name}.partial.csv"
    recorded = out / f"{job.name}{_ARGS_SUFFIX}"
    order = {point.key: i for i, point in enumerate(job.points)}
    rows: list[Row] = []
    if resume and partial.is_file():
        rows = [r for r in _read_partial(partial) if r.get(KEY_COLUMN) in order]
    elif partial.exists():
        partial.unlink()
    if args is not None and not rows:
        recorded.write_text(json.dumps({"args": args}))
    done = {row[KEY_COLUMN] for row in rows}
    todo = [point for point in job.points if point.key not in done]
    done_points = [float(len(rows))]
    progress.update(job.name, done_points[0], len(job.points))

    def emit(row: Row) -> None:
        if row.get(KEY_COLUMN) not in order:
            raise AssertionError(f"{job.name}: row without a known point key: {row}")
        rows.append(row)
        _write_partial(partial, rows)

    def advance(amount: float) -> None:
        done_points[0] += amount
        progress.update(job.name, done_points[0], len(job.points))

    job.measure(todo, emit, advance)
    measured = {row[KEY_COLUMN] for row in rows}
    missing = [p.key for p in job.points if p.key not in measured]
    if missing:
        raise ProfileError(f"{job.name}: {len(missing)} point(s) were not measured, first: {missing[0]}")
    frame = pd.DataFrame(rows)
    frame["_order"] = frame[KEY_COLUMN].map(order)
    frame = frame.sort_values("_order").drop(columns=["_order", KEY_COLUMN]).reset_index(drop=True)
    write_table(out, job.name, frame)
    partial.unlink(missing_ok=True)
    recorded.unlink(missing_ok=True)
    return len(frame)


def _write_partial(path: Path, rows: list[Row]) -> None:
    with replaced_atomically(path) as temp:
        pd.DataFrame(rows).to_csv(temp, index=False)


def _read_partial(path: Path) -> list[Row]:
    try:
        frame = pd.read_csv(path)
    except (ValueError, OSError):  # unreadable checkpoint: measure the table again
        return []
    if KEY_COLUMN not in frame.columns:
        return []
    return frame.to_dict("records")
