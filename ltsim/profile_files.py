"""The on-disk format of a profile (DESIGN.md section 7): meta.json and the CSV tables, written
atomically, read back with their columns, units and numbers checked. profiles.py re-exports these
names and builds the lookups on top of them.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ltsim.errors import ProfileError
from ltsim.files import NotRegularFile, read_input, replaced_atomically, write_text_atomically
from ltsim.profile_checks import TABLE_COLUMNS, check_table
from ltsim.units import NO_LIMIT_BYTES

if TYPE_CHECKING:
    import pandas as pd

METHODS = ("measured", "published", "analytic")
META_METHODS = (*METHODS, "mixed", "derived")  # a whole profile's: "derived" scales another's
# the files a profile is read from (the cache and a sweep's store key on these alone), and the
# most bytes one may hold: the largest shipped table is 0.9 MB
PROFILE_FILES = ("meta.json", *(f"{table}.csv" for table in TABLE_COLUMNS))
MAX_TABLE_BYTES = 64 * 2**20


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


class _Repeated(Exception):
    """A JSON object naming a key twice."""


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, each key once (json keeps the last copy of a key)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated
    return out


def read_meta(directory: str | Path) -> ProfileMeta:
    """Read meta.json; raises ProfileError when it is missing or malformed."""
    path = Path(directory) / "meta.json"
    if not path.is_file():
        raise ProfileError(f"profile '{directory}' has no meta.json. Fix: point hardware.profile at a "
                           "directory written by `ltsim profile` or a script under profiles/")
    fix = "Fix: rewrite it with `ltsim profile` or compare with profiles/cpu-ci/meta.json"
    try:
        data = json.loads(_read_bounded(path, "meta.json", fix).decode("utf-8-sig"),
                          object_pairs_hook=_once_each)
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
    except _Repeated:  # (the last copy was read, silently)
        raise ProfileError(f"{path}: meta.json must name each key of an object once. {fix}"
                           ) from None
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
    first: dict[str, int] = {}  # (a dict, not a scan of the fields before: a header of 10^5
    twice = next((i for i, c in enumerate(columns) if first.setdefault(c, i) != i), None)
    if twice is not None:  # fields took minutes) the last copy's values were read, the others dropped
        raise ProfileError(f"{path}: table '{name}' names a column twice in its header (fields "
                           f"{first[columns[twice]] + 1} and {twice + 1}). {fix}")
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
    """A column's fields as pandas would type them (see Table): a number written with an
    underscore (Python's ``1_024``, which pandas and the length files do not read) stays text,
    which the checks then refuse, and so does ``nan`` (which Python's float takes): a blank is an
    empty field, and a NaN read as a number got past the checks that allow blanks (a fuzzing
    review: a traceback where the cost model read it)."""
    filled = [f for f in fields if f != ""]
    if filled and all(f.strip().lower() in ("true", "false") for f in filled):
        return [f.strip().lower() == "true" if f != "" else None for f in fields]
    for kind in (() if any("_" in f for f in filled) else (int, float)):
        try:
            values = [kind(f) for f in filled]
        except ValueError:
            continue
        if any(v != v for v in values):  # a NaN
            break
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


# ---------------------------------------------------------------------------------------------
# Collectives (the GEMM and attention lookups live in ltsim.lookup).
