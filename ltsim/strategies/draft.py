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

from itertools import chain
from typing import Sequence

import numpy as np

from ltsim.interned import value_id
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
        return value_id(self._name_ids, self.names, name)

    def group_id(self, group: tuple[int, ...]) -> int:
        return value_id(self._group_ids, self.groups, group)

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
        wanted: list[tuple] = []  # every key named as (device, stage, kind, chunk, name), with
        for r in keyed:  # its own device's filled in
            for d in self.deps[r] + self.start_deps[r]:
                if type(d) is not int:
                    wanted.append((*where[r], *d[2:]) if d[0] < 0 else d)
        found = self._rows_of(programs, wanted)
        missing = []
        at = 0
        for r in keyed:
            for column, start in ((self.deps, False), (self.start_deps, True)):
                ids = []
                for d in column[r]:
                    if type(d) is int:
                        ids.append(d)
                        continue
                    if found[at] < 0:
                        missing.append((r, OpKey(*wanted[at]), start))
                    else:
                        ids.append(found[at])
                    at += 1
                column[r] = tuple(ids)
        return tuple(missing)

    def _rows_of(self, programs, keys: list[tuple]) -> list[int]:
        """The row of each key among the programs' rows (-1: none; of rows of one key the last),
        looked up as one number per key over sorted arrays."""
        rows = np.fromiter(chain.from_iterable(mine for _, _, mine in programs), np.int64)
        kind, device, stage, chunk, name = self._data[:5, rows]
        width = (int(chunk.max()) + 2 if len(chunk) else 2, len(self.names) + 1)
        code = ((device * len(KIND_OF) + kind) * width[0] + chunk + 1) * width[1] + name
        order = np.argsort(code, kind="stable")
        code, rows, stage = code[order], rows[order], stage[order]
        if not keys:
            return []
        devices, stages, kinds, chunks, names = zip(*keys)  # (device, stage, kind, chunk, name)
        chunks_ = np.fromiter(chunks, np.int64, len(keys))
        want = (((np.fromiter(devices, np.int64, len(keys)) * len(KIND_OF)
                  + np.fromiter(map(KIND_CODE.__getitem__, kinds), np.int64, len(keys)))
                 * width[0] + np.minimum(chunks_, width[0] - 2) + 1) * width[1]
                + np.fromiter((self._name_ids.get(x, width[1] - 1) for x in names), np.int64,
                              len(keys)))
        at = np.searchsorted(code, want, side="right") - 1  # the last row of the key
        hit = (at >= 0) & (code[np.maximum(at, 0)] == want)
        hit &= stage[np.maximum(at, 0)] == np.fromiter(stages, np.int64, len(keys))
        hit &= chunks_ < width[0] - 1
        return np.where(hit, rows[np.maximum(at, 0)], -1).tolist()
