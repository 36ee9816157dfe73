"""The on-disk format of a profile (DESIGN.md section 7): meta.json and the CSV tables, written
atomically, read back with their columns, units and numbers checked. profiles.py re-exports these
names and builds the lookups on top of them.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ltsim.errors import ProfileError
from ltsim.files import NotRegularFile, read_input, replaced_atomically, write_text_atomically
from ltsim.units import NO_LIMIT_BYTES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype", "time_s"),
    "gemm_bwd": ("m", "n", "k", "dtype", "time_s", "pass"),
    "attention": ("q_tokens", "kv_tokens", "num_heads", "num_kv_heads", "head_dim", "causal",
                  "pass", "time_s"),
    "collectives": ("op", "group_size", "scope", "bytes", "time_s"),
    # optional tables: what the cost model reads of them (ltsim/costs/eager.py, compute.py)
    "eager": ("model", "op", "layers", "num_tokens", "dtype", "time_s"),
    "elementwise": ("op", "num_tokens", "hidden", "dtype", "pass", "time_s"),
    "optimizer": ("model", "optimizer", "num_params", "dtype", "time_s"),
    "host_copy": ("direction", "host_memory", "bytes", "time_s"),  # ltsim/costs/host.py
}
# columns every row must fill with one of a few words
# how a row applied the causal mask (ltsim/profiler/attention.py); blank for published rows.
# CONTEXT_MASKS: paths only queries with context take (a boolean mask; torch's lower-right causal
# bias; the CPU flash kernel with a bottom-right mask), a kernel of their own (profiles.py)
CONTEXT_MASKS = ("bool_bottom_right", "causal_lower_right", "cpu_flash_bottom_right")
ATTENTION_MASKS = ("is_causal", "causal_bottom_right", *CONTEXT_MASKS, None)
# the names the cost model looks rows up by: a row of another name would be ignored without a
# word (a misspelt 'rmsnorm' drops the norms' time from every layer)
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
OP_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
              "alltoall": "all_to_all", "all2all": "all_to_all", "p2p": "send_recv",
              "sendrecv": "send_recv"}
ELEMENTWISE_OPS = ("rmsnorm", "residual_add", "swiglu", "rope", "layernorm", "gelu")
EAGER_OPS = ("F", "F_discard", "FB", "FdRB")  # ltsim/costs/eager.py
OPTIMIZERS = ("adam", "sgd")
CHOICE_COLUMNS: dict[str, dict[str, tuple[str | None, ...]]] = {
    "attention": {"pass": ("fwd", "bwd"), "mask": ATTENTION_MASKS},
    "gemm_bwd": {"pass": ("dgrad", "wgrad")},
    "collectives": {"scope": ("intra", "inter"), "op": (*COLLECTIVE_OPS, *OP_ALIASES)},
    "eager": {"stage": ("first", "middle", "last", None), "op": EAGER_OPS},  # blank: a middle stage
    "elementwise": {"op": ELEMENTWISE_OPS, "pass": ("fwd", "bwd")},
    "optimizer": {"optimizer": OPTIMIZERS},
    "host_copy": {"direction": ("d2h", "h2d"), "host_memory": ("pageable", "pinned")},
}
# columns every row must fill with a whole number of at least this: sizes and counts (where
# the table has them; eager's context_tokens may be blank: none)
COUNT_COLUMNS: dict[str, dict[str, int]] = {
    "gemm": {"m": 1, "n": 1, "k": 1},
    "gemm_bwd": {"m": 1, "n": 1, "k": 1},
    "attention": {"q_tokens": 1, "kv_tokens": 1, "num_heads": 1, "num_kv_heads": 1, "head_dim": 1},
    "collectives": {"group_size": 2, "bytes": 1},
    "eager": {"layers": 1, "num_tokens": 1, "context_tokens": 0, "hidden": 1},
    "elementwise": {"num_tokens": 1, "hidden": 1},
    "optimizer": {"num_params": 1, "hidden": 1},
    "host_copy": {"bytes": 1},
}
MAX_TIME_S = 3600.0  # no kernel, collective or op of a profile takes an hour
MIN_TIME_S = 1e-9  # nor less than a nanosecond (a few clock cycles)
# No GEMM runs at 10 PFLOP/s: about 4x the fastest GPU's dense BF16 (NVIDIA B200, 2.25 PFLOP/s,
# its datasheet); a row that implies more is a unit slip (ms as s) or a broken measurement
MAX_GEMM_FLOPS_PER_S = 10e15
# columns every row must fill with a name (a word, not a number or a blank), where the table has them
TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("dtype",),
    "gemm_bwd": ("dtype",),
    "attention": ("kernel",),  # mask may be blank: no mask
    "collectives": ("op", "scope"),
    "eager": ("model", "op", "dtype"),
    "elementwise": ("op", "dtype"),
    "optimizer": ("model", "optimizer", "dtype"),
}
METHODS = ("measured", "published", "analytic")
META_METHODS = (*METHODS, "mixed", "derived")  # a whole profile's: "derived" scales another's
# the files a profile is read from (the cache and a sweep's store key on these alone), and the
# most bytes one may hold: the largest shipped table is 0.9 MB
PROFILE_FILES = ("meta.json", *(f"{table}.csv" for table in TABLE_COLUMNS))
MAX_TABLE_BYTES = 64 * 2**20
# a name in a TEXT_COLUMNS cell: a word of letters, digits, '_', '.' and '-' (an attention kernel
# may not hold '+': profiles.CONTEXT_SUFFIX marks a kernel's rows with context)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileMeta:
    """meta.json: what device the tables describe and how they were made."""

    device: str
    memory_bytes: int
    method: str  # one of META_METHODS
    date: str
    software: dict[str, str] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-table provenance
    command: str = ""
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def measured_on_cpu(meta: ProfileMeta) -> bool:
    """Whether the profile's tables time a CPU (`ltsim profile --device cpu` names it "cpu: ...")."""
    return meta.device.lower().startswith("cpu")


def write_meta(directory: str | Path, meta: ProfileMeta) -> Path:
    """Write meta.json into ``directory`` (created if needed)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = path / "meta.json"
    # in one step: the profiler rewrites it after every table, and a run killed meanwhile left
    # a truncated meta.json that --resume then refused
    write_text_atomically(out, json.dumps(meta.to_dict(), indent=2, sort_keys=True) + "\n")
    return out


def _read_fix(exc: OSError) -> str:
    if isinstance(exc, NotRegularFile):
        return "Fix: make it a regular file (a copy, not a link to a device or a kernel file)"
    return "Fix: check its permissions"


def _read_bounded(path: Path, what: str, fix: str) -> bytes:
    """A profile file's bytes; ProfileError past MAX_TABLE_BYTES (never read further)."""
    data = read_input(path, MAX_TABLE_BYTES)
    if len(data) > MAX_TABLE_BYTES:
        raise ProfileError(f"{path}: {what} must be at most {MAX_TABLE_BYTES // 2**20} MiB. {fix}")
    return data


def read_meta(directory: str | Path) -> ProfileMeta:
    """Read meta.json; raises ProfileError when it is missing or malformed."""
    path = Path(directory) / "meta.json"
    if not path.is_file():
        raise ProfileError(f"profile '{directory}' has no meta.json. Fix: point hardware.profile at a "
                           "directory written by `ltsim profile` or a script under profiles/")
    fix = "Fix: rewrite it with `ltsim profile` or compare with profiles/cpu-ci/meta.json"
    try:
        data = json.loads(_read_bounded(path, "meta.json", fix).decode("utf-8-sig"))
        meta = ProfileMeta(**data) if isinstance(data, dict) else None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: meta.json must be UTF-8 JSON text. Fix: rewrite it with "
                           "`ltsim profile` or the profile's build script") from None
    except json.JSONDecodeError as exc:  # its place, never the text
        raise ProfileError(f"{path}: meta.json must be JSON ({exc.msg} at line {exc.lineno}, "
                           f"column {exc.colno}). {fix}") from None
    except (ValueError, RecursionError):  # a number past 4300 digits, nesting thousands deep
        raise ProfileError(f"{path}: meta.json must be plain JSON (flat, with realistic "
                           f"numbers). {fix}") from None
    except TypeError:  # an unknown or a missing field: named by the fix, not quoted from the file
        meta = None
    except OSError as exc:
        raise ProfileError(f"{path}: unreadable meta.json ({exc.strerror}). {_read_fix(exc)}"
                           ) from None
    if meta is None:
        raise ProfileError(f"{path}: meta.json must be a JSON object of the profile's fields "
                           f"(device, memory_bytes, method, date, ...). {fix}")
    number = isinstance(meta.memory_bytes, (int, float)) and not isinstance(meta.memory_bytes, bool)
    tables_ok = isinstance(meta.tables, dict) and all(isinstance(v, dict)
                                                      for v in meta.tables.values())
    if not (number and 0 < meta.memory_bytes < NO_LIMIT_BYTES) or not tables_ok:
        raise ProfileError(f"{path}: meta.json must give memory_bytes as a positive number and "
                           "tables as an object of objects. Fix: compare with profiles/cpu-ci/meta.json")
    texts = (meta.device, meta.date, meta.command, meta.notes)
    software_ok = isinstance(meta.software, dict) and all(isinstance(v, str)
                                                          for v in meta.software.values())
    if not (all(isinstance(t, str) for t in texts) and meta.device and software_ok
            and meta.method in META_METHODS):  # its values never quoted: a file's content
        raise ProfileError(f"{path}: meta.json must give device (non-empty), date, command and "
                           f"notes as text, software as an object of texts, and method as one of "
                           f"{', '.join(META_METHODS)}. Fix: compare with profiles/cpu-ci/meta.json")
    return meta


def write_table(directory: str | Path, name: str, frame: "pd.DataFrame") -> Path:
    """Write one table as ``<name>.csv``, checking its required columns first.

    Writes to a temporary file and renames it, so an interrupted run never leaves half a table.
    """
    check_table(name, frame, source=str(directory))
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = path / f"{name}.csv"
    with replaced_atomically(out) as temp:
        frame.to_csv(temp, index=False)
    return out


class Table:
    """One profile table in memory without pandas (which costs a third of a command's start-up):
    its column names and, per column, its values typed as pandas reads them: bool when every
    filled field is true or false, int when every one is an integer, else float when every one is
    a number, else text; an empty field is None. ``rows(...)`` gives tuples of the columns
    named, ``where(...)`` the rows matching."""

    __slots__ = ("columns", "_data")

    def __init__(self, columns: list[str], data: dict[str, list]) -> None:
        self.columns = columns
        self._data = data

    def __len__(self) -> int:
        return len(self._data[self.columns[0]]) if self.columns else 0

    def __getitem__(self, column: str) -> list:
        return self._data[column]

    def rows(self, *columns: str) -> list[tuple]:
        return list(zip(*(self._data[c] for c in columns)))

    def where(self, **match: Any) -> "Table":
        """The rows whose named columns equal the values given (compared as text)."""
        return self._matching(match, True)

    def without(self, **match: Any) -> "Table":
        """The rows that ``where(**match)`` leaves out."""
        return self._matching(match, False)

    def _matching(self, match: dict[str, Any], wanted: bool) -> "Table":
        keep = [i for i in range(len(self))
                if all(str(self._data[c][i]) == str(v) for c, v in match.items()) is wanted]
        return Table(self.columns, {c: [vals[i] for i in keep] for c, vals in self._data.items()})

    def with_column(self, column: str, values: list) -> "Table":
        data = dict(self._data)
        data[column] = values
        columns = self.columns if column in self.columns else [*self.columns, column]
        return Table(columns, data)


def read_rows(directory: str | Path, name: str) -> Table:
    """Read ``<name>.csv`` from a profile directory into a Table (``#`` starts a comment, blank
    lines are skipped, as pandas reads it); raises ProfileError if missing, empty or bad."""
    path = Path(directory) / f"{name}.csv"
    if not path.is_file():
        what = "a link to no file" if path.is_symlink() else "no file" if not path.exists() else (
            "not a regular file")
        raise ProfileError(f"profile '{directory}' has no {name}.csv ({what} there). Fix: re-run "
                           f"the profiler or the profile's build script so it writes {name}.csv")
    fix = f"Fix: re-run the profiler or the profile's build script so it rewrites {name}.csv"
    try:
        text = _read_bounded(path, f"table '{name}'", fix).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: table '{name}' must be UTF-8 CSV text. {fix}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: table '{name}' is unreadable ({exc.strerror}). "
                           f"{_read_fix(exc)}") from None
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    try:
        records = list(csv.reader(line for line in lines if line.strip()))
    except csv.Error as exc:  # places, not content
        raise ProfileError(f"{path}: table '{name}' must be valid CSV ({exc}). {fix}") from None
    if not records:
        raise ProfileError(f"{path}: table '{name}' is empty (no header line). {fix}")
    columns = records[0]
    twice = next((i for i, c in enumerate(columns) if c in columns[:i]), None)
    if twice is not None:  # the last copy's values were read, the others dropped
        raise ProfileError(f"{path}: table '{name}' names a column twice in its header (fields "
                           f"{columns.index(columns[twice]) + 1} and {twice + 1}). {fix}")
    uneven = next((r for r in records[1:] if len(r) != len(columns)), None)
    if uneven is not None:
        raise ProfileError(f"{path}: table '{name}' must have as many fields in every row as in "
                           f"its header (some rows have "
                           f"{'more' if len(uneven) > len(columns) else 'fewer'}). {fix}")
    data = {c: _typed([r[i] if i < len(r) else "" for r in records[1:]])
            for i, c in enumerate(columns)}
    table = Table(columns, data)
    check_table(name, table, source=str(path))
    return table


def _typed(fields: list[str]) -> list:
    """A column's fields as pandas would type them (see Table)."""
    filled = [f for f in fields if f != ""]
    if filled and all(f.strip().lower() in ("true", "false") for f in filled):
        return [f.strip().lower() == "true" if f != "" else None for f in fields]
    for kind in (int, float):
        try:
            values = [kind(f) for f in filled]
        except ValueError:
            continue
        it = iter(values)
        return [next(it) if f != "" else None for f in fields]
    return [f if f != "" else None for f in fields]


def read_optional_rows(directory: str | Path, name: str) -> Table | None:
    """``read_rows`` for a table a profile may leave out: None when ``<name>.csv`` is absent; a file
    that is there but broken is a ProfileError like any table's."""
    path = Path(directory) / f"{name}.csv"
    if not (path.exists() or path.is_symlink()):  # a link to nothing is there, and broken
        return None
    return read_rows(directory, name)


def read_host_copies(directory: str | Path) -> dict[tuple[str, str], tuple[tuple[int, float], ...]]:
    """host_copy.csv as (direction, host memory) -> ((bytes, median seconds), ...) by bytes; empty
    without the table (ltsim/costs/host.py prices copies from it)."""
    table = read_optional_rows(directory, "host_copy")
    groups: dict[tuple[str, str, int], list[float]] = {}
    for direction, memory, size, seconds in (table.rows("direction", "host_memory", "bytes",
                                                        "time_s") if table is not None else ()):
        groups.setdefault((direction, memory, int(size)), []).append(float(seconds))
    points: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for (direction, memory, size), times in sorted(groups.items()):
        points.setdefault((direction, memory), []).append((size, statistics.median(times)))
    return {key: tuple(value) for key, value in points.items()}


def read_table(directory: str | Path, name: str) -> "pd.DataFrame":
    """``read_rows`` as a pandas DataFrame (for the profiler and validation scripts)."""
    import pandas as pd

    table = read_rows(directory, name)
    return pd.DataFrame({c: table[c] for c in table.columns}, columns=table.columns)


def _number(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:  # a whole number of hundreds of digits: past any bound
        return math.inf
    except (TypeError, ValueError):
        return math.nan


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _whole(value: Any, least: int) -> bool:
    """A whole number (1024 or 1024.0, never a bool) of at least ``least``."""
    if isinstance(value, bool):
        return False
    number = _number(value)
    return math.isfinite(number) and number == int(number) and number >= least


def check_table(name: str, frame: "pd.DataFrame | Table", *, source: str) -> None:
    """Raise ProfileError when a table lacks a required column, is empty, or holds a bad value:
    times (``MAX_TIME_S``), choices, names and counts by the tables above; the message names the
    row, never the value."""
    columns = list(frame.columns)
    missing = [c for c in TABLE_COLUMNS.get(name, ()) if c not in columns]
    if missing:
        # the columns found are the file's first line: counted, never quoted (a profile may be
        # pointed at any file)
        raise ProfileError(f"{source}: table '{name}' lacks column(s) {', '.join(missing)} "
                           f"({len(columns)} columns found). Fix: its first line must name the "
                           f"columns {', '.join(TABLE_COLUMNS[name])}")
    if len(frame) == 0:
        raise ProfileError(f"{source}: table '{name}' is empty. Fix: re-run the profiler for it")
    if "time_s" in columns and not all(MIN_TIME_S <= _number(v) <= MAX_TIME_S
                                       for v in frame["time_s"]):
        raise ProfileError(f"{source}: table '{name}' has time_s values that are not numbers "
                           f"of seconds from {MIN_TIME_S:g} to {MAX_TIME_S:g}. Fix: re-run the "
                           f"profiler for {name}")
    for column, allowed in CHOICE_COLUMNS.get(name, {}).items():
        if column not in columns:  # an optional column (eager's stage)
            continue
        bad = [i for i, v in enumerate(frame[column])
               if (None if _blank(v) else v) not in allowed]
        if bad:  # the row, not its value
            words = ", ".join(a for a in allowed if a) + (" or blank" if None in allowed else "")
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold one of "
                               f"{words} (data row {bad[0] + 1} does not). Fix: "
                               "correct those rows or re-run the profiler for this table")
    for column in (c for c in TEXT_COLUMNS.get(name, ()) if c in columns):
        bad = [i for i, v in enumerate(frame[column])
               if not isinstance(v, str) or not NAME.fullmatch(v.strip())]
        if bad:  # the row, not its value
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold names (letters, "
                               f"digits, '_', '.', '-'), not numbers or blanks (data row "
                               f"{bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct those "
                               "rows or re-run the profiler for this table")
    if name == "attention":
        _check_attention(frame, source)
    if name == "attention" and "dtype" in columns and len({d for d in frame["dtype"]
                                                           if not _blank(d) and d}) > 1:
        raise ProfileError(f"{source}: table 'attention' must time one dtype (its lookup does not "
                           "tell them apart: rows of another dtype were combined with the "
                           "model's). Fix: keep one dtype's rows (a profile per dtype), or re-run "
                           "the profiler for attention")
    for column, least in COUNT_COLUMNS.get(name, {}).items():
        if column not in columns:
            continue
        blank_ok = column == "context_tokens"
        bad = [i for i, v in enumerate(frame[column]) if not (
            (blank_ok and _blank(v)) or _whole(v, least))]
        if bad:  # the row, not its value
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold whole "
                               f"numbers of at least {least} (data row {bad[0] + 1} does not, "
                               f"{len(bad)} rows in all). Fix: correct those rows or re-run the "
                               "profiler for this table")
    if name in ("gemm", "gemm_bwd"):
        _check_gemm_rate(name, frame, source)
    _check_repeats(name, frame, source)
    if name == "eager":
        _check_eager(frame, source)


def _check_eager(frame: "pd.DataFrame | Table", source: str) -> None:
    """An FB row (forward and backward) takes longer than the F row of the same point: B = FB - F
    (costs/eager.py), so FB <= F made every backward's floor 0 s without a word."""
    keys = [c for c in frame.columns if c not in MEASUREMENT_COLUMNS and c != "op"]
    forward: dict[tuple, tuple[int, float]] = {}
    rows = list(zip(frame["op"], zip(*(frame[c] for c in keys)), map(_number, frame["time_s"])))
    for row, (op, key, seconds) in enumerate(rows):
        if op == "F":
            forward.setdefault(key, (row, seconds))
    for row, (op, key, seconds) in enumerate(rows):
        found = forward.get(key) if op == "FB" else None
        if found is not None and seconds <= found[1]:
            raise ProfileError(f"{source}: table 'eager' must time an FB row (forward and "
                               f"backward) above the F row of its point (data row {row + 1} is "
                               f"not above row {found[0] + 1}). Fix: re-run the profiler for eager")


# what a row records of its measurement rather than of what was measured: rows equal in every
# other column are one point measured more than once
MEASUREMENT_COLUMNS = ("time_s", "time_s_spread", "repeats", "method", "source",
                       "algbw_bytes_per_s")
MAX_REPEAT_RATIO = 1.5  # the most a point's repeated measurements may disagree (slowest/fastest)


def _check_repeats(name: str, frame: "pd.DataFrame | Table", source: str) -> None:
    """A point measured more than once must agree with itself within ``MAX_REPEAT_RATIO``: the
    lookups combine repeats (a geometric mean, a median or the larger, by table), so a repeat
    ten times slower moved a GEMM's time 4x without a word. The rows are named, never values."""
    if "time_s" not in frame.columns:
        return
    keys = [c for c in frame.columns if c not in MEASUREMENT_COLUMNS]
    first: dict[tuple, int] = {}
    for row, (key, seconds) in enumerate(zip(zip(*(frame[c] for c in keys)), frame["time_s"])):
        seen = first.setdefault(key, row)
        if seen == row:
            continue
        a, b = sorted((_number(frame["time_s"][seen]), _number(seconds)))
        if b > MAX_REPEAT_RATIO * a:
            raise ProfileError(
                f"{source}: table '{name}' measures one point twice with times more than "
                f"{MAX_REPEAT_RATIO:g}x apart (data rows {seen + 1} and {row + 1}, equal in every "
                f"column but {', '.join(c for c in MEASUREMENT_COLUMNS if c in frame.columns)}). "
                "Fix: keep one row per point (the measurement you trust), or re-run the profiler "
                f"for {name}")


def _floats(column: Any) -> "np.ndarray":
    """A checked column as float64 (read as numbers, or as text of numbers)."""
    import numpy as np

    try:
        return np.asarray(column, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_number(v) for v in column], dtype=np.float64)


def _check_gemm_rate(name: str, frame: "pd.DataFrame | Table", source: str) -> None:
    """No row implies more than ``MAX_GEMM_FLOPS_PER_S`` (2 m n k / time_s; its columns already
    checked as whole numbers and times); the row is named, never its values."""
    import numpy as np

    m, n, k, time_s = map(_floats, (frame[c] for c in ("m", "n", "k", "time_s")))
    fast = np.flatnonzero(2 * m * n * k > MAX_GEMM_FLOPS_PER_S * time_s)
    if len(fast):
        raise ProfileError(f"{source}: table '{name}' data row {fast[0] + 1} implies more than "
                           f"{MAX_GEMM_FLOPS_PER_S / 1e15:g} PFLOP/s (2 m n k / time_s; the "
                           "fastest GPU's dense BF16 is 2.25). Fix: time_s is in seconds; "
                           f"correct the row or re-run the profiler for {name}")


def _check_attention(frame: "pd.DataFrame | Table", source: str) -> None:
    """``causal`` is True or False in every row, and a causal row's queries are the last q_tokens
    of its kv_tokens (q <= kv)."""
    causal = [str(v).strip().lower() for v in frame["causal"]]
    bad = [i for i, v in enumerate(causal) if v not in ("true", "false")]
    if bad:
        raise ProfileError(f"{source}: table 'attention' column 'causal' must hold True or False "
                           f"(data row {bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct "
                           "those rows or re-run the profiler for this table")
    bad = [i for i, (c, q, kv) in enumerate(zip(causal, frame["q_tokens"], frame["kv_tokens"]))
           if c == "true" and _number(q) > _number(kv)]
    if bad:
        raise ProfileError(f"{source}: table 'attention' must have q_tokens <= kv_tokens in its "
                           f"causal rows (the queries are the last q_tokens of kv_tokens; data row "
                           f"{bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct those "
                           "rows or re-run the profiler for this table")


# ---------------------------------------------------------------------------------------------
# Collectives (the GEMM and attention lookups live in ltsim.lookup).
