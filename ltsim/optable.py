"""A plan's ops as columns: the storage behind :class:`ltsim.plan.Plan` (issue 13).

A plan of 10^4-10^5 ops is built, checked, priced and replayed many times in a sweep. Held as one
Python tuple per op (:class:`~ltsim.plan.Op`), every phase paid object work per op; held as
columns, the lowering appends plain integers, the checks and the pricing run over arrays, and the
replay reads lists. The Op tuples, programs and tokens every other reader uses (the executor,
figures, exports, error grids) are written out from the columns when first asked for, and equal
what a plan of Op tuples held.

Rows are ops in any order; ``programs`` lists each device stream's rows in program order. Per
row: integer codes (kind, stream, keep and part index :data:`KIND_OF`, :data:`STREAMS`,
:data:`KEEP_OF`, :data:`PART_OF`), its device, stage and chunk, indices into the side tables
(``names``, ``works``, ``comms``, ``groups``; -1 for no work or comm), and tuples of row ids:
``deps``, ``start_deps``, and of buffer ids (``buffers``): ``allocs``, ``frees``. A dependency
that names no op of the plan stays in ``missing`` (the plan's check reports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from ltsim.interned import KEEP_CODE, KEEP_OF, Buffers, Comms, Works, ints, value_id  # noqa: F401
from ltsim.plan import STREAMS, Chunk, Op, OpKey, OpKind, Program, make_op

KIND_OF: tuple[OpKind, ...] = tuple(OpKind)
KIND_CODE: dict[OpKind, int] = {k: i for i, k in enumerate(KIND_OF)}
STREAM_CODE: dict[str, int] = {s: i for i, s in enumerate(STREAMS)}
PART_OF: tuple[str, ...] = ("", "attn", "dense")
PART_CODE: dict[str, int] = {p: i for i, p in enumerate(PART_OF)}

#: codes of the kinds, by name (``F`` is ``KIND_CODE[OpKind.F]``)
F, B, W, R, SEND_F, SEND_B, COLL, COPY, OPT = (KIND_CODE[k] for k in (
    OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.SEND_F, OpKind.SEND_B, OpKind.COLL, OpKind.COPY,
    OpKind.OPT))

#: Below this many ops a plan is checked, lowered and replayed row by row rather than over
#: arrays: a numpy call costs microseconds whatever its size, so the array versions pay off only
#: from some hundreds of ops (validation/perf/README.md). Both give the same answers
#: (tests/property/test_small_paths.py runs every strategy both ways).
SMALL = 256

#: the per-row columns of an OpTable's block, in order
COLUMNS = ("kind", "device", "stage", "chunk", "name", "stream", "work", "keep", "part", "comm",
           "group")
COLUMN_INDEX = {c: i for i, c in enumerate(COLUMNS)}


def _column(index: int, doc: str) -> property:
    def get(self: "OpTable") -> list[int]:
        out = self._lists[index]
        if out is None:
            out = self._lists[index] = self.block[index].tolist()
        return out

    return property(get, doc=doc)


class OpTable:
    """The ops of a plan, column by column (see the module docstring). Built by the lowering
    (ltsim/strategies/lowering.py) or from programs of Op tuples (:meth:`from_programs`).
    ``block``: the per-row columns (``COLUMNS``) as one int64 array of shape (columns, rows);
    ``kind``, ``device``, ... read them as lists, ``array`` as numpy arrays."""

    __slots__ = ("block", "deps", "start_deps", "allocs", "frees", "programs", "names", "works",
                 "buffers", "comms", "groups", "missing", "_lists", "_arrays", "_ops", "_keys",
                 "_programs", "_work_arrays")

    def __init__(self, *, block: np.ndarray, deps: list[tuple[int, ...]],
                 start_deps: list[tuple[int, ...]], allocs: list[tuple[int, ...]],
                 frees: list[tuple[int, ...]], programs: list[tuple[int, str, list[int]]],
                 names: list[str], works: Works, buffers: Buffers, comms: Comms,
                 groups: list[tuple[int, ...]],
                 missing: tuple[tuple[int, OpKey, bool], ...] = ()) -> None:
        self.block = block
        self.deps, self.start_deps, self.allocs, self.frees = deps, start_deps, allocs, frees
        self.programs = programs  # (device, stream, rows in program order), in plan order
        self.names, self.works, self.buffers, self.comms, self.groups = (names, works, buffers,
                                                                         comms, groups)
        self.missing = missing  # (row, the key it names, whether a start dependency)
        self._lists: list[list[int] | None] = [None] * len(COLUMNS)
        self._arrays: dict[str, np.ndarray] = {}
        self._ops: list[Op] | None = None
        self._keys: list[OpKey] | None = None
        self._programs: tuple[Program, ...] | None = None
        self._work_arrays: dict[str, np.ndarray] | None = None

    kind = _column(0, "per row: its kind's code (KIND_OF)")
    device = _column(1, "per row: its device")
    stage = _column(2, "per row: its stage")
    chunk = _column(3, "per row: its chunk (-1: none)")
    name = _column(4, "per row: an index into ``names``")
    stream = _column(5, "per row: its stream's code (STREAMS)")
    work = _column(6, "per row: an index into ``works`` (-1: none)")
    keep = _column(7, "per row: its keep code (KEEP_OF)")
    part = _column(8, "per row: its part code (PART_OF)")
    comm = _column(9, "per row: an index into ``comms`` (-1: none)")
    group = _column(10, "per row: an index into ``groups``")

    def __len__(self) -> int:
        return self.block.shape[1]

    def __eq__(self, other: object) -> bool:  # as the programs they hold
        if not isinstance(other, OpTable):
            return NotImplemented
        return self is other or self.to_programs() == other.to_programs()

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:  # the columns, not what is written out from them
        return {name: getattr(self, name) for name in self.__slots__ if not name.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def array(self, column: str) -> np.ndarray:
        """A per-row column as an int64 numpy array."""
        return self.block[COLUMN_INDEX[column]]

    def memo(self, name: str, source: Any, make) -> Any:
        """``make()``, made once per table and ``source`` (the object it is made from, held to
        tell it apart: plans of one table may differ in their chunks or mirrors)."""
        found = self._arrays.get(name)
        if found is None or found[0] is not source:
            found = self._arrays[name] = (source, make())
        return found[1]

    def effects(self, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``allocs`` or ``frees`` (``which``) as arrays: per row its count and its first place
        in ``flat``, and ``flat``, every row's buffer ids in row order (made once)."""
        lists = getattr(self, which)

        def make() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            counts = np.fromiter(map(len, lists), np.int64, len(lists))
            flat = np.fromiter(chain.from_iterable(lists), np.int64, int(counts.sum()))
            return counts, np.cumsum(counts) - counts, flat

        return self.memo(which, lists, make)

    def order(self) -> np.ndarray:
        """Every row, program after program, each in program order (the plan's op order)."""
        out = self._arrays.get("_order")
        if out is None:
            rows = [rows for _, _, rows in self.programs]
            out = self._arrays["_order"] = (np.fromiter(chain.from_iterable(rows), dtype=np.int64,
                                                        count=sum(map(len, rows)))
                                            if rows else np.zeros(0, dtype=np.int64))
        return out

    def work_arrays(self) -> dict[str, np.ndarray]:
        """``Works.arrays()`` of this table's works (made once)."""
        if self._work_arrays is None:
            self._work_arrays = self.works.arrays()
        return self._work_arrays

    # -- written out ------------------------------------------------------------------------
    def keys(self) -> list[OpKey]:
        """The key of every row."""
        if self._keys is None:
            names = self.names
            new = tuple.__new__
            self._keys = [new(OpKey, (device, stage, KIND_OF[kind], chunk, names[name]))
                          for kind, device, stage, chunk, name
                          in zip(self.kind, self.device, self.stage, self.chunk, self.name)]
        return self._keys

    def key(self, row: int) -> OpKey:
        return OpKey(self.device[row], self.stage[row], KIND_OF[self.kind[row]], self.chunk[row],
                     self.names[self.name[row]])

    def token(self, row: int) -> str:
        return self.key(row).token

    def ops(self) -> list[Op]:
        """The Op tuple of every row (made once)."""
        if self._ops is None:
            keys = self.keys()
            missing: dict[int, list[tuple[OpKey, bool]]] = {}
            for row, key, start in self.missing:
                missing.setdefault(row, []).append((key, start))
            works, comms, buffers, groups, names = (self.works, self.comms, self.buffers,
                                                    self.groups, self.names)
            out = []
            for row, (kind, device, stage, chunk, name, stream, work, keep, part, comm, group,
                      deps, start_deps, allocs, frees) in enumerate(zip(
                        self.kind, self.device, self.stage, self.chunk, self.name, self.stream,
                        self.work, self.keep, self.part, self.comm, self.group, self.deps,
                        self.start_deps, self.allocs, self.frees)):
                dep_keys = tuple([keys[d] for d in deps])
                start_keys = tuple([keys[d] for d in start_deps])
                if row in missing:
                    dep_keys += tuple(k for k, start in missing[row] if not start)
                    start_keys += tuple(k for k, start in missing[row] if start)
                out.append(make_op(KIND_OF[kind], device, stage, chunk, names[name],
                                   STREAMS[stream], works[work] if work >= 0 else None,
                                   KEEP_OF[keep], PART_OF[part],
                                   comms[comm] if comm >= 0 else None, dep_keys, start_keys,
                                   tuple([buffers[b] for b in allocs]),
                                   tuple([buffers[b] for b in frees]), groups[group]))
            self._ops = out
        return self._ops

    def op(self, row: int) -> Op:
        return self.ops()[row]

    def to_programs(self) -> tuple[Program, ...]:
        """The programs of Op tuples (made once)."""
        if self._programs is None:
            ops = self.ops()
            self._programs = tuple(Program(device, stream, tuple([ops[r] for r in rows]))
                                   for device, stream, rows in self.programs)
        return self._programs

    # -- from Op tuples ---------------------------------------------------------------------
    @classmethod
    def from_programs(cls, programs: Sequence[Program], chunks: Sequence[Chunk]) -> "OpTable":
        """The table of programs of Op tuples (hand-made plans, mirrors written out), the plan's
        chunks ``chunks``. A dependency on a key no op has goes to ``missing``; of ops with one
        key the last is the one a dependency names (the plan's check reports the duplicate)."""
        columns: dict[str, list[int]] = {c: [] for c in COLUMNS}
        deps_in: list[tuple[OpKey, ...]] = []
        start_in: list[tuple[OpKey, ...]] = []
        allocs: list[tuple[int, ...]] = []
        frees: list[tuple[int, ...]] = []
        spans: list[tuple[int, str, list[int]]] = []
        works = Works({c.index: c.slices for c in chunks})
        buffers, comms = Buffers(works), Comms(works)
        names, groups = [""], [()]
        name_ids: dict[str, int] = {"": 0}
        group_ids: dict[tuple, int] = {(): 0}
        rows_of_key: dict[OpKey, int] = {}
        row = 0
        for program in programs:
            rows = []
            for op in program.ops:
                (kind, device, stage, chunk, name, stream, work, keep, part, comm, deps,
                 start_deps, op_allocs, op_frees, group, key) = op
                for column, value in zip(COLUMNS, (
                        KIND_CODE[kind], device, stage, chunk, value_id(name_ids, names, name),
                        STREAM_CODE[stream],
                        works.of(work) if work is not None else -1, KEEP_CODE[keep],
                        PART_CODE[part], comms.of(comm) if comm is not None else -1,
                        value_id(group_ids, groups, group))):
                    columns[column].append(value)
                deps_in.append(deps)
                start_in.append(start_deps)
                allocs.append(tuple(map(buffers.of, op_allocs)))
                frees.append(tuple(map(buffers.of, op_frees)))
                rows_of_key[key] = row
                rows.append(row)
                row += 1
            spans.append((program.device, program.stream, rows))
        missing: list[tuple[int, OpKey, bool]] = []

        def resolve(keys: list[tuple[OpKey, ...]], start: bool) -> list[tuple[int, ...]]:
            out = []
            for r, wanted in enumerate(keys):
                ids = []
                for key in wanted:
                    found = rows_of_key.get(key)
                    if found is None:
                        missing.append((r, key, start))
                    else:
                        ids.append(found)
                out.append(tuple(ids))
            return out

        block = np.array([columns[c] for c in COLUMNS], dtype=np.int64).reshape(len(COLUMNS), -1)
        return cls(block=block, deps=resolve(deps_in, False),
                   start_deps=resolve(start_in, True), allocs=allocs, frees=frees,
                   programs=spans, names=names, works=works, buffers=buffers, comms=comms,
                   groups=groups, missing=tuple(missing))
