"""A disk cache of parsed profiles (issue 13): every command used to spend 60-71 ms turning the
H100 profile's CSV tables into lookups; unpickling the result takes 2 ms
(validation/perf/cache_costs.py).

An entry is keyed by a digest of everything a :class:`~ltsim.profiles.Profile` is built from: the
bytes of the profile's ``meta.json`` and tables (every ``*.csv`` of the folder: a superset of
those a Profile reads, so no list here can fall behind profiles.py), the profile's path, the
attention kernel chosen, the Python version, and the source of the modules that parse and
interpolate (profiles.py, profile_files.py, profile_checks.py, lookup.py, collectives.py). Any
edit to one of them is a miss, and the profile is parsed again: a changed input is recomputed,
never served stale.

Where: ``$LTSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ltsim``, else ``~/.cache/ltsim``, in
``profiles/``; ``LTSIM_CACHE_DIR=`` (empty) turns the cache off. Entries are pickles, so only
files owned by the current user are read (the folder is made private, mode 0700). The cache is
best effort: a folder that cannot be written, or an entry that cannot be read, costs only the
parse; at most :data:`MAX_ENTRIES` entries are kept, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from ltsim.files import expand_user, read_input
from ltsim.profile_files import MAX_TABLE_BYTES, PROFILE_FILES

T = TypeVar("T")

FORMAT = 1  # bump when what is pickled changes in a way the sources' digest would not show
MAX_ENTRIES = 32
_SOURCES = ("profiles.py", "profile_files.py", "profile_checks.py", "lookup.py", "collectives.py")


def cache_dir() -> Path | None:
    """The folder of parsed profiles, or None when ``LTSIM_CACHE_DIR`` is set empty."""
    value = os.environ.get("LTSIM_CACHE_DIR")
    if value is not None:
        folder = expand_user(value)
        if not value.strip() or str(folder).startswith("~"):  # off, or an unknown user's home
            return None
        return folder / "profiles"
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        home = expand_user("~")
        if home == Path("~"):  # no home folder known: no cache
            return None
        base = str(home / ".cache")
    return Path(base) / "ltsim" / "profiles"


def cached(directory: Path, kernel: str, build: Callable[[], T], kind: type | None = None) -> T:
    """``build()``, or what an earlier ``build()`` made from the same inputs (an entry that is not
    a ``kind``, when given, is made again: a file of that name written by something else). ``build``
    raises as it would without the cache (a bad table is never cached)."""
    folder = cache_dir()
    key = _digest(directory, kernel) if folder is not None else None
    if key is None:
        return build()
    entry = folder / f"{key}.pickle"
    value = _read(entry)
    if value is not None and (kind is None or isinstance(value, kind)):
        return value
    value = build()
    _write(folder, entry, value)
    return value


_ENTRY = re.compile(r"[0-9a-f]{40}\.pickle")  # an entry's name: the digest below


def _digest(directory: Path, kernel: str) -> str | None:
    """The entry's name; None when an input cannot be read (the parse then reports it)."""
    h = hashlib.blake2b(digest_size=20)
    # (a path's bytes that are not UTF-8 come in as surrogates: encoded back to those bytes)
    h.update(f"{FORMAT}|{sys.version_info[:2]}|{directory}|{kernel}".encode(
        errors="surrogateescape"))
    here = Path(__file__).parent
    try:
        for name in _SOURCES:
            h.update((here / name).read_bytes())  # ltsim's own source
        for name in PROFILE_FILES:  # what the parse reads, no other file of the folder
            path = directory / name
            h.update(f"|{name}|".encode())
            if path.is_file():  # not a folder, a FIFO or a device of that name
                data = read_input(path, MAX_TABLE_BYTES)  # a larger one: the parse refuses it
                h.update(data if len(data) <= MAX_TABLE_BYTES else b"too large")
    except OSError:
        return None
    return h.hexdigest()


def _read(entry: Path):
    try:
        with open(entry, "rb") as handle:
            if hasattr(os, "getuid") and os.fstat(handle.fileno()).st_uid != os.getuid():
                return None  # a pickle another user could have written
            value = pickle.load(handle)
        os.utime(entry)  # recently used: kept when the folder is pruned
        return value
    except Exception:  # noqa: BLE001  # missing, truncated or from another ltsim: parse instead
        return None


def _write(folder: Path, entry: Path, value) -> None:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                pickle.dump(value, out, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, entry)  # readers see the whole entry or none
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        entries = sorted((p for p in folder.glob("*.pickle") if _ENTRY.fullmatch(p.name)),
                         key=lambda p: p.stat().st_mtime)  # its own entries only: the folder
        # may be one the user also keeps other files in (LTSIM_CACHE_DIR)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError):
        pass  # best effort: the next command parses again
