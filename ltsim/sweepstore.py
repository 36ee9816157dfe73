"""SQLite store for sweep results: one row per (scenario fingerprint, point), written as each point
finishes, so an interrupted sweep resumes where it stopped.

A stored row is reused only while everything its result depends on is unchanged. ``fingerprint``
names the sweep (the scenario's merged TOML); ``input_digest`` covers what the TOML only points
at: the bytes of a length file (``workload.dataset`` as a path), the bytes of every file of the
profile directory (bundled profiles too), and ltsim itself (its version and the bytes of its
source, so an edited checkout recomputes). A row whose digest differs is stale and recomputed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from ltsim.errors import ConfigError, LtsimError
from ltsim.files import expand_user, input_blocks, read_input

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    scenario TEXT NOT NULL,      -- fingerprint of the base scenario (sha256 of its TOML)
    point TEXT NOT NULL,         -- canonical JSON of the overrides
    result TEXT NOT NULL,        -- JSON of the result row
    created_s REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),  -- Unix time
    inputs TEXT NOT NULL DEFAULT '',  -- input_digest: length file, profile tables, ltsim
    PRIMARY KEY (scenario, point)
)
"""
_COLUMNS = {"scenario", "point", "result"}
_INSERT = "INSERT OR REPLACE INTO results (scenario, point, result, inputs) VALUES (?, ?, ?, ?)"


def fingerprint(raw: dict[str, Any]) -> str:
    """Stable hash of a scenario's merged TOML."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def point_key(overrides: dict[str, Any]) -> str:
    return json.dumps(overrides, sort_keys=True, default=str)


def input_digest(raw: dict[str, Any], source: str = "") -> str:
    """Hash of the files a scenario's result depends on beyond its TOML, and of ltsim itself.

    ``raw`` is the merged TOML of one point; ``source`` the scenario file (length files are found
    beside it first, as ``build_scenario`` does). Inputs that do not resolve hash as their name:
    such a point fails, and its error row is keyed like any other.
    """
    from ltsim.scenario import resolve_dataset

    from ltsim.length_files import MAX_LENGTH_FILE_BYTES
    from ltsim.profile_files import MAX_TABLE_BYTES, PROFILE_FILES

    parts = [_ltsim_digest()]
    dataset = raw.get("workload", {}).get("dataset")
    if isinstance(dataset, str) and dataset:
        path = expand_user(resolve_dataset(dataset, source))
        parts.append(_sized_digest(path, MAX_LENGTH_FILE_BYTES) if path.is_file()
                     else f"name:{dataset}")
    profile = _profile_dir(raw.get("hardware", {}))
    if profile is not None:  # the files a profile is read from, not the whole folder
        parts += [f"{name}={_sized_digest(profile / name, MAX_TABLE_BYTES)}"
                  for name in PROFILE_FILES if (profile / name).is_file()]
    # (a path's or name's bytes that are not UTF-8 come in as surrogates: encoded back to them)
    return hashlib.sha256("\n".join(parts).encode(errors="surrogateescape")).hexdigest()[:16]


def _sized_digest(path: Path, limit: int) -> str:
    """A file's digest, or, past the size its reader takes (the point then fails on it), its
    size: a huge file is never read for a key."""
    key = _stat_key(path)
    return f"size:{key[2]}" if key[2] > limit else _file_digest(*key)


def _profile_dir(hardware: dict[str, Any]) -> Path | None:
    """The profile directory a hardware section prices with (None for the unit preset)."""
    from ltsim.hardware import get_device
    from ltsim.profiles import resolve_profile

    try:
        device = get_device(str(hardware.get("preset", "h100-sxm5-80gb")))
        if device.is_unit:
            return None
        return resolve_profile(hardware.get("profile") or device.profile)
    except LtsimError:
        return None


def _stat_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """sha256 of a file's bytes; cached by path, modification time and size."""
    del mtime_ns, size  # only part of the cache key: an edited file is hashed again
    digest = hashlib.sha256()
    try:
        for block in input_blocks(path):
            digest.update(block)
    except OSError as exc:  # the point reports it when it reads the file; keyed by the failure
        return f"unreadable:{exc.errno}"
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _ltsim_digest() -> str:
    """The bytes of ltsim's modules: an edited checkout, or another version (``__version__`` is
    in ``__init__.py``), counts as new. (Not importlib.metadata's version: 18 ms of start-up.)
    One hash over the package's own files, names and bytes (read whole: 3 ms, against 10 ms for
    a guarded, cached digest per file)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if p.is_file()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root)} {len(data)}\n".encode())
        digest.update(data)
    return "ltsim " + digest.hexdigest()[:16]


def _reason(exc: Exception) -> str:
    """Why SQLite or the system refused, by its error name (SQLITE_READONLY, SQLITE_BUSY, ...):
    not the message, which a trigger of the file's own writes (RAISE(ABORT, '...'))."""
    return (getattr(exc, "strerror", None) or getattr(exc, "sqlite_errorname", None)
            or type(exc).__name__)


class SweepStore:
    """Results keyed by scenario and point; ``path=None`` keeps them in memory.

    Raises ConfigError when ``path`` is a directory, cannot be created or opened, or is not a
    SQLite file this store wrote (or a new, empty file).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path) if path else ":memory:"
        fix = "give a new file name (e.g. --db sweep.sqlite) or a store an earlier sweep wrote"
        if path and Path(path).is_dir():
            raise ConfigError("--db", "a SQLite file, not a directory", str(path), fix)
        try:
            if path and Path(path).exists():
                read_input(path, 16)  # raises, never waits, on a device or a kernel file
            if path:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # a path, absolute: a name that starts "file:" is not read as a URI
            self._conn = sqlite3.connect(str(Path(path).absolute()) if path else self.path)
            tables = {row[0] for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "results" not in tables:  # another program's database: leave it alone
                raise ConfigError("--db", "a store written by ltsim sweep (or a new file)", str(path),
                                  fix, context=f"this SQLite file holds {len(tables)} other tables")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(SCHEMA)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(results)")}
            if not _COLUMNS <= columns:
                raise ConfigError("--db", "a store written by ltsim sweep", str(path), fix,
                                  context="its results table has other columns")
            if "inputs" not in columns:  # a store from before input digests: every row is stale
                self._conn.execute("ALTER TABLE results ADD COLUMN inputs TEXT NOT NULL DEFAULT ''")
            self._conn.commit()
            # a row written and rolled back: a read-only file, a lock held by another process,
            # or another program's constraints and triggers refuse it now, not after the points
            # the store holds were read
            self._conn.execute("SAVEPOINT probe")
            self._conn.execute(_INSERT, ("", "", "{}", ""))
            self._conn.execute("ROLLBACK TO probe")
            self._conn.execute("RELEASE probe")
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError("--db", "a SQLite file ltsim can open and write", str(path), fix,
                              context=_reason(exc)) from None

    def done(self, scenario: str) -> dict[str, dict[str, Any]]:
        """Finished points of a scenario: point key -> result row (whatever their inputs)."""
        return {point: row for point, (_, row) in self.stored(scenario).items()}

    def stored(self, scenario: str) -> dict[str, tuple[str, dict[str, Any]]]:
        """Finished points of a scenario: point key -> (input digest, result row).

        A row whose result is not a JSON object (a store edited or damaged by hand) is left out:
        its point is simulated again and the row replaced. Raises ConfigError when the file
        cannot be read (a damaged SQLite page)."""
        try:
            rows = self._conn.execute("SELECT point, inputs, result FROM results WHERE scenario = ?",
                                      (scenario,)).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError("--db", "a SQLite file ltsim can read", self.path, "give a new file "
                              "name (e.g. --db sweep.sqlite); this one is damaged",
                              context=_reason(exc)) from None
        out = {}
        for point, inputs, result in rows:
            try:
                row = json.loads(result)
            except (TypeError, ValueError, RecursionError):  # (nested past the parser's depth)
                continue
            if isinstance(row, dict) and isinstance(point, str):
                out[point] = (inputs, row)
        return out

    def put(self, scenario: str, overrides: dict[str, Any], result: dict[str, Any],
            inputs: str = "") -> None:
        """Record one finished point (committed at once). Raises ConfigError when the store takes
        no writes (read-only, locked by another process past SQLite's 5 s wait, or a results
        table or trigger of another program's that refuses the row)."""
        try:
            self._conn.execute(_INSERT, (scenario, point_key(overrides),
                                         json.dumps(result, default=str), inputs))
            self._conn.commit()
        except sqlite3.Error as exc:
            raise ConfigError("--db", "a SQLite file ltsim can write", self.path, "give a new file "
                              "name (e.g. --db sweep.sqlite), or wait for the process that holds "
                              "this one", context=_reason(exc)) from None

    def close(self) -> None:
        self._conn.close()
