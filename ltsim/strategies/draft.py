"""The plan as the lowering passes build it (ltsim/strategies/lowering.py): ops as rows of integer
columns, grown in blocks, which becomes the plan's OpTable (ltsim/optable.py).

A pass reads a column as a numpy array (``col``), adds rows one at a time (``add``, the passes
that make a few) or a block at once (``extend``, the ones that make an op per chunk), and gives
rows more dependencies (``add_deps``). Per row it also keeps tuples: ``deps`` and ``start_deps``
(row ids, or OpKeys where a strategy's action names an op by key: ``keyed`` rows, resolved when
the table is made) and ``allocs``/``frees`` (ids into ``buffers``). Works, buffers and comms are
interned by value as fields (optable.Works, Buffers, Comms); per (device, stream), ``programs``
lists its rows in program order, and a pass that reorders a program replaces its list.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ltsim.optable import (COLUMN_INDEX, COLUMNS, KEEP_CODE, KIND_CODE, KIND_OF, Buffers, Comms,
                           OpTable, Works)
from ltsim.plan import STREAMS, Keep, OpKey, Work
from ltsim.strategies.schedule import Layout, Schedule

ALL = KEEP_CODE[Keep.ALL]
_KEPT_STREAMS = ("compute", "comm", "coll")  # programs kept in the plan even when empty


class Draft:
    """See the module docstring."""

    __slots__ = ("schedule", "layout", "_data", "n", "deps", "start_deps", "allocs", "frees",
                 "programs", "names", "_name_ids", "works", "buffers", "comms", "groups",
                 "_group_ids", "keyed")

    def __init__(self, schedule: Schedule, layout: Layout) -> None:
        self.schedule, self.layout = schedule, layout
        self._data = np.zeros((len(COLUMNS), 1024), dtype=np.int64)
        self.n = 0
        self.deps: list[tuple] = []
        self.start_deps: list[tuple] = []
        self.allocs: list[tuple[int, ...]] = []
        self.frees: list[tuple[int, ...]] = []
        self.programs: dict[tuple[int, str], list[int]] = {}
        self.names: list[str] = [""]
        self._name_ids: dict[str, int] = {"": 0}
        self.works = Works({c.index: c.slices for c in schedule.chunks})
        self.buffers = Buffers(self.works)
        self.comms = Comms(self.works)
        self.groups: list[tuple[int, ...]] = [()]
        self._group_ids: dict[tuple[int, ...], int] = {(): 0}
        self.keyed: set[int] = set()

    # -- reading ------------------------------------------------------------------------------
    def col(self, column: str) -> np.ndarray:
        """A column of every row so far (a view: read it before adding rows)."""
        return self._data[COLUMN_INDEX[column], :self.n]

    def get(self, row: int, column: str) -> int:
        return int(self._data[COLUMN_INDEX[column], row])

    def fields(self, row: int) -> list[int]:
        """Every column of a row, in COLUMNS order."""
        return self._data[:, row].tolist()

    def rows(self, device: int, stream: str = "compute") -> list[int]:
        """The rows of a device stream's program, in order (not to be changed in place)."""
        return self.programs.get((device, stream), [])

    def work(self, row: int) -> Work | None:
        w = self.get(row, "work")
        return self.works[w] if w >= 0 else None

    def key(self, row: int) -> OpKey:
        kind, device, stage, chunk, name = self._data[:5, row].tolist()
        return OpKey(device, stage, KIND_OF[kind], chunk, self.names[name])

    # -- ids of values ------------------------------------------------------------------------
    def name_id(self, name: str) -> int:
        found = self._name_ids.get(name)
        if found is None:
            found = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return found

    def group_id(self, group: tuple[int, ...]) -> int:
        found = self._group_ids.get(group)
        if found is None:
            found = self._group_ids[group] = len(self.groups)
            self.groups.append(group)
        return found

    # -- writing ------------------------------------------------------------------------------
    def _reserve(self, count: int) -> None:
        need = self.n + count
        if need > self._data.shape[1]:
            grown = np.zeros((len(COLUMNS), max(need, 2 * self._data.shape[1])), dtype=np.int64)
            grown[:, :self.n] = self._data[:, :self.n]
            self._data = grown

    def add(self, kind: int, device: int, stage: int, chunk: int, name: str, stream: int, *,
            work: int = -1, keep: int = ALL, part: int = 0, comm: int = -1, deps: tuple = (),
            start_deps: tuple = (), allocs: tuple = (), frees: tuple = (),
            group: tuple[int, ...] = ()) -> int:
        """A new row; its id."""
        self._reserve(1)
        row = self.n
        self._data[:, row] = (kind, device, stage, chunk, self.name_id(name), stream, work, keep,
                              part, comm, self.group_id(group))
        self.n += 1
        self.deps.append(deps)
        self.start_deps.append(start_deps)
        self.allocs.append(allocs)
        self.frees.append(frees)
        return row

    def extend(self, count: int, *, deps: Sequence[tuple], start_deps: Sequence[tuple] | None = None,
               allocs: Sequence[tuple] | None = None, frees: Sequence[tuple] | None = None,
               **columns) -> np.ndarray:
        """``count`` new rows, each column an array or one value for all (a missing one: its
        default, as ``add``'s); their ids."""
        self._reserve(count)
        first = self.n
        defaults = {"name": 0, "work": -1, "keep": ALL, "part": 0, "comm": -1, "group": 0}
        for column in COLUMNS:
            self._data[COLUMN_INDEX[column], first:first + count] = columns.get(
                column, defaults.get(column, 0))
        self.n += count
        empty = [()] * count
        self.deps.extend(deps)
        self.start_deps.extend(start_deps if start_deps is not None else empty)
        self.allocs.extend(allocs if allocs is not None else empty)
        self.frees.extend(frees if frees is not None else empty)
        return np.arange(first, first + count)

    def set(self, row: int, column: str, value: int) -> None:
        self._data[COLUMN_INDEX[column], row] = value

    def add_deps(self, row: int, extra: tuple) -> None:
        """Row ``row`` also waits for ``extra`` (row ids, or OpKeys)."""
        self.deps[row] = self.deps[row] + extra
        if not all(type(d) is int for d in extra):
            self.keyed.add(row)

    # -- the table ----------------------------------------------------------------------------
    def table(self) -> OpTable:
        """The ops as a table: programs in plan order (device, then stream), the empty ones but
        compute, comm and coll dropped; dependencies by key resolved (a key no op has goes to the
        table's ``missing``)."""
        programs = [(device, stream, list(rows)) for (device, stream), rows in sorted(
            self.programs.items(), key=lambda kv: (kv[0][0], STREAMS.index(kv[0][1])))
            if len(rows) or stream in _KEPT_STREAMS]
        missing = self._resolve_keys(programs) if self.keyed else ()
        return OpTable(block=self._data[:, :self.n], deps=self.deps, start_deps=self.start_deps,
                       allocs=self.allocs, frees=self.frees, programs=programs, names=self.names,
                       works=self.works, buffers=self.buffers, comms=self.comms,
                       groups=self.groups, missing=missing)

    def _resolve_keys(self, programs) -> tuple[tuple[int, OpKey, bool], ...]:
        """Each keyed row's dependencies as row ids; a key of device -1 names an op of the row's
        own device and stage (``schedule.own_key``)."""
        keyed = sorted(self.keyed)
        where = dict(zip(keyed, zip(self._data[1, keyed].tolist(), self._data[2, keyed].tolist())))
        named = {where[r][0] if d.device < 0 else d.device for r in keyed
                 for d in self.deps[r] + self.start_deps[r] if type(d) is not int}
        rows = np.array([r for device, _, mine in programs if device in named for r in mine],
                        dtype=np.int64)
        fields = self._data[:5, rows].tolist()  # kind, device, stage, chunk, name
        rows_of = dict(zip(zip(fields[1], fields[2], fields[0], fields[3], fields[4]),
                           rows.tolist()))  # by (device, stage, kind code, chunk, name id)
        missing = []
        for r in keyed:
            for column, start in ((self.deps, False), (self.start_deps, True)):
                ids = []
                for d in column[r]:
                    if type(d) is int:
                        ids.append(d)
                        continue
                    if d.device < 0:
                        d = d._replace(device=where[r][0], stage=where[r][1])
                    found = rows_of.get((d.device, d.stage, KIND_CODE[d.kind], d.chunk,
                                         self._name_ids.get(d.name, -1)))
                    if found is None:
                        missing.append((r, d, start))
                    else:
                        ids.append(found)
                column[r] = tuple(ids)
        return tuple(missing)
