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
from itertools import chain, compress, repeat
from operator import is_
from typing import Any

import numpy as np

from ltsim.plan import (STREAMS, Buffer, Chunk, Comm, Keep, Op, OpKey, OpKind, Program, Slice,
                        Split, Tiling, Work, make_op)

KIND_OF: tuple[OpKind, ...] = tuple(OpKind)
KIND_CODE: dict[OpKind, int] = {k: i for i, k in enumerate(KIND_OF)}
STREAM_CODE: dict[str, int] = {s: i for i, s in enumerate(STREAMS)}
KEEP_OF: tuple[Keep, ...] = tuple(Keep)
KEEP_CODE: dict[Keep, int] = {k: i for i, k in enumerate(KEEP_OF)}
PART_OF: tuple[str, ...] = ("", "attn", "dense")
PART_CODE: dict[str, int] = {p: i for i, p in enumerate(PART_OF)}

#: codes of the kinds, by name (``F`` is ``KIND_CODE[OpKind.F]``)
F, B, W, R, SEND_F, SEND_B, COLL, COPY, OPT = (KIND_CODE[k] for k in (
    OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.SEND_F, OpKind.SEND_B, OpKind.COLL, OpKind.COPY,
    OpKind.OPT))

#: the per-row columns of an OpTable's block, in order
COLUMNS = ("kind", "device", "stage", "chunk", "name", "stream", "work", "keep", "part", "comm",
           "group")
COLUMN_INDEX = {c: i for i, c in enumerate(COLUMNS)}


class Works(Sequence):
    """The distinct works of a plan, by id, as fields: a chunk, its slices (-1: the chunk's own,
    else an id into ``slice_sets``) and a variant (an id into ``variants``: the layer range,
    split, embedding, head and tiling). Interned by value; each Work object made when first
    read (a plan of thousands of chunks prices a few dozen shapes)."""

    __slots__ = ("chunk_slices", "chunk", "ref", "variant", "slice_sets", "_slice_ids",
                 "variants", "_variant_ids", "_ids", "_objects")

    def __init__(self, chunk_slices: dict[int, tuple[Slice, ...]]) -> None:
        self.chunk_slices = chunk_slices  # the plan's chunks' slices, by chunk index
        self.chunk: list[int] = []
        self.ref: list[int] = []
        self.variant: list[int] = []
        self.slice_sets: list[tuple[Slice, ...]] = []
        self._slice_ids: dict[tuple[Slice, ...], int] = {}
        self.variants: list[tuple] = []  # (layers, split, embed, head, tiling)
        self._variant_ids: dict[tuple, int] = {}
        self._ids: dict[tuple[int, int], dict[int, int]] = {}  # (ref, variant) -> chunk -> id
        self._objects: list[Work | None] = []

    def __len__(self) -> int:
        return len(self.chunk)

    def __getitem__(self, w: int) -> Work:
        work = self._objects[w]
        if work is None:
            chunk, ref = self.chunk[w], self.ref[w]
            layers, split, embed, head, tiling = self.variants[self.variant[w]]
            work = self._objects[w] = Work(chunk, self.chunk_slices[chunk] if ref < 0
                                           else self.slice_sets[ref], layers, split, embed,
                                           head, tiling)
        return work

    def variant_id(self, layers: tuple[int, int], split: Split, embed: bool, head: bool,
                   tiling: Tiling) -> int:
        key = (layers, split, embed, head, tiling)
        found = self._variant_ids.get(key)
        if found is None:
            found = self._variant_ids[key] = len(self.variants)
            self.variants.append(key)
        return found

    def slices_id(self, chunk: int, slices: tuple[Slice, ...]) -> int:
        own = self.chunk_slices.get(chunk)
        if own is not None and (slices is own or slices == own):
            return -1
        found = self._slice_ids.get(slices)
        if found is None:
            found = self._slice_ids[slices] = len(self.slice_sets)
            self.slice_sets.append(slices)
        return found

    def add(self, chunk: int, ref: int, variant: int) -> int:
        """The id of the work of ``chunk`` over slices ``ref`` as ``variant`` says."""
        return self.add_many([chunk], ref, variant)[0]

    def add_many(self, chunk: Sequence[int], ref: list[int] | int, variant: list[int] | int
                 ) -> list[int]:
        """``add`` of each (chunk, ref, variant); ``ref`` and ``variant`` may be one for all."""
        if isinstance(ref, list) and ref and ref.count(ref[0]) == len(ref):
            ref = ref[0]
        if isinstance(variant, list) and variant and variant.count(variant[0]) == len(variant):
            variant = variant[0]
        if isinstance(ref, int) and isinstance(variant, int):
            return self._add_class((ref, variant), list(chunk))
        n = len(chunk)
        refs = ref if isinstance(ref, list) else [ref] * n
        variants = variant if isinstance(variant, list) else [variant] * n
        out = [0] * n
        for (r, v), positions in _classes(list(zip(refs, variants))).items():
            for i, found in zip(positions, self._add_class((r, v), [chunk[i] for i in positions])):
                out[i] = found
        return out

    def _add_class(self, key: tuple[int, int], chunks: list[int]) -> list[int]:
        ref, variant = key

        def extend(new: list[int]) -> None:
            self.chunk.extend(new)
            self.ref.extend([ref] * len(new))
            self.variant.extend([variant] * len(new))
            self._objects.extend([None] * len(new))

        return _intern(self._ids.setdefault(key, {}), chunks, len(self.chunk), extend)

    def layers(self, w: int) -> tuple[int, int]:
        return self.variants[self.variant[w]][0]

    def split(self, w: int) -> Split:
        return self.variants[self.variant[w]][1]

    def with_layers(self, w: int, layers: tuple[int, int]) -> int:
        """The id of work ``w`` over ``layers`` instead (``Work.evolve(layers=...)``)."""
        variant = self.variants[self.variant[w]]
        if variant[0] == layers:
            return w
        return self.add(self.chunk[w], self.ref[w], self.variant_id(layers, *variant[1:]))

    def of(self, work: Work) -> int:
        """The id of a Work object's value."""
        return self.add(work.chunk, self.slices_id(work.chunk, work.slices),
                        self.variant_id(work.layers, work.split, work.embed, work.head,
                                        work.tiling))

    def arrays(self) -> dict[str, np.ndarray]:
        """Per work: ``tokens``, ``low``, ``high`` (its layer range), ``cp`` (its split's CP
        degree) and ``shape`` (equal numbers: equal ``Work.cost_shape``, an index into
        ``shapes()``)."""
        layouts: dict[tuple, int] = {}
        layout_of_chunk = {c: layouts.setdefault(_layout(sl), len(layouts))
                           for c, sl in self.chunk_slices.items()}
        tokens_of_chunk = {c: sum(x.stop - x.start for x in sl)
                           for c, sl in self.chunk_slices.items()}
        layout_of_set = [layouts.setdefault(_layout(sl), len(layouts)) for sl in self.slice_sets]
        tokens_of_set = [sum(x.stop - x.start for x in sl) for sl in self.slice_sets]
        layout = [layout_of_chunk[c] if r < 0 else layout_of_set[r]
                  for c, r in zip(self.chunk, self.ref)]
        tokens = [tokens_of_chunk[c] if r < 0 else tokens_of_set[r]
                  for c, r in zip(self.chunk, self.ref)]
        kinds: dict[tuple, int] = {}  # a variant's part of the cost shape
        variant_kind = [kinds.setdefault((high - low, split, embed, head, tiling), len(kinds))
                        for (low, high), split, embed, head, tiling in self.variants]
        variant = ints(self.variant)
        low = np.array([v[0][0] for v in self.variants] or [0], dtype=np.int64)
        high = np.array([v[0][1] for v in self.variants] or [0], dtype=np.int64)
        cp = np.array([v[1].cp for v in self.variants] or [1], dtype=np.int64)
        shape = (ints(layout) * max(len(kinds), 1)
                 + np.array(variant_kind or [0], dtype=np.int64)[variant])
        return {"tokens": ints(tokens), "low": low[variant],
                "high": high[variant], "cp": cp[variant], "shape": shape,
                "_layouts": list(layouts), "_kinds": list(kinds)}

    def shape(self, number: int, arrays: dict[str, Any]) -> tuple:
        """The cost shape of shape number ``number`` (``arrays()``'s)."""
        kinds = arrays["_kinds"]
        nlayers, split, embed, head, tiling = kinds[number % max(len(kinds), 1)]
        return (arrays["_layouts"][number // max(len(kinds), 1)], nlayers, split, embed, head,
                tiling)


def _intern(ids: dict, keys: list, first: int, extend) -> list[int]:
    """The id of each key in ``ids`` (one class of values, by a key that is mostly an int: cheap
    to hash), new keys numbered from ``first`` in order of first appearance (``extend(new keys)``
    records their fields): dictionary work in C."""
    found = list(map(ids.get, keys))
    if None in found:
        new = list(dict.fromkeys(compress(keys, map(is_, found, repeat(None)))))
        ids.update(zip(new, range(first, first + len(new))))
        extend(new)
        found = list(map(ids.__getitem__, keys))
    return found


def _classes(keys: list) -> dict:
    """Positions of ``keys`` by value, in order of first appearance."""
    if keys and keys.count(keys[0]) == len(keys):  # (count runs in C)
        return {keys[0]: range(len(keys))}
    out: dict = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return out


def ints(values: Sequence[int]) -> np.ndarray:
    """A sequence of ints as an int64 numpy array (``np.fromiter``: twice ``np.array``'s speed
    on a list)."""
    return np.fromiter(values, np.int64, len(values))


def _layout(slices: tuple[Slice, ...]) -> tuple[tuple[int, int], ...]:
    return tuple([(x.start, x.stop) for x in slices])


class Buffers(Sequence):
    """The distinct buffers of a plan, by id, as fields (kind, work id, keep, host); interned by
    value, each Buffer object made when first read."""

    __slots__ = ("works", "kinds", "_kind_ids", "kind", "work", "keep", "host", "_ids",
                 "_objects")

    def __init__(self, works: Works) -> None:
        self.works = works
        self.kinds: list[str] = []
        self._kind_ids: dict[str, int] = {}
        self.kind: list[int] = []
        self.work: list[int] = []
        self.keep: list[int] = []
        self.host: list[bool] = []
        self._ids: dict[tuple, dict[int, int]] = {}  # (kind, keep, host) -> work -> id
        self._objects: list[Buffer | None] = []

    def __len__(self) -> int:
        return len(self.kind)

    def __getitem__(self, b: int) -> Buffer:
        buf = self._objects[b]
        if buf is None:
            buf = self._objects[b] = _tuple_new(Buffer, (
                self.kinds[self.kind[b]], self.works[self.work[b]], KEEP_OF[self.keep[b]],
                self.host[b]))
        return buf

    def add(self, kind: str, work: int, keep: int, host: bool = False) -> int:
        """The id of a buffer of ``kind`` on work ``work`` (keep code ``keep``)."""
        return self.add_many(kind, [work], keep, host)[0]

    def add_many(self, kind: str, work: list[int], keep: list[int] | int, host: bool = False
                 ) -> list[int]:
        """``add`` of a buffer of ``kind`` on each work (each keep code, or one for all)."""
        kind_id = self._kind_ids.get(kind)
        if kind_id is None:
            kind_id = self._kind_ids[kind] = len(self.kinds)
            self.kinds.append(kind)
        if isinstance(keep, int):
            return self._add_class((kind_id, keep, host), work)
        if keep and keep.count(keep[0]) == len(keep):
            return self._add_class((kind_id, keep[0], host), work)
        out = [0] * len(work)
        for k, positions in _classes(keep).items():
            for i, found in zip(positions, self._add_class((kind_id, k, host),
                                                           [work[i] for i in positions])):
                out[i] = found
        return out

    def _add_class(self, key: tuple[int, int, bool], works: list[int]) -> list[int]:
        kind, keep, host = key

        def extend(new: list[int]) -> None:
            self.kind.extend([kind] * len(new))
            self.work.extend(new)
            self.keep.extend([keep] * len(new))
            self.host.extend([host] * len(new))
            self._objects.extend([None] * len(new))

        return _intern(self._ids.setdefault(key, {}), works, len(self.kind), extend)

    def of(self, buf: Buffer) -> int:
        return self.add(buf.kind, self.works.of(buf.work), KEEP_CODE[buf.keep], buf.host)


class Comms(Sequence):
    """The distinct comm payloads of a plan, by id, as fields: a class (``classes``: the
    collective, tensor, group size, steps and whether pinned), a work id and the GPUs; interned
    by value, each Comm object made when read."""

    __slots__ = ("works", "classes", "_class_ids", "cls", "work", "gpus", "_ids", "_objects")

    def __init__(self, works: Works) -> None:
        self.works = works
        self.classes: list[tuple[str, str, int, int, bool]] = []
        self._class_ids: dict[tuple, int] = {}
        self.cls: list[int] = []
        self.work: list[int] = []
        self.gpus: list[tuple[int, int]] = []
        self._ids: dict[int, dict[int | tuple, int]] = {}  # class -> work and GPUs, as one int
        self._objects: list[Comm | None] = []

    def __len__(self) -> int:
        return len(self.cls)

    def __getitem__(self, c: int) -> Comm:
        comm = self._objects[c]
        if comm is None:
            collective, tensor, group_size, steps, pinned = self.classes[self.cls[c]]
            comm = self._objects[c] = _tuple_new(Comm, (collective, tensor, self.works[self.work[c]],
                                                        group_size, self.gpus[c], steps, pinned))
        return comm

    def class_id(self, collective: str, tensor: str, group_size: int, steps: int,
                 pinned: bool) -> int:
        key = (collective, tensor, group_size, steps, pinned)
        found = self._class_ids.get(key)
        if found is None:
            found = self._class_ids[key] = len(self.classes)
            self.classes.append(key)
        return found

    def add(self, collective: str, tensor: str, work: int, group_size: int = 1,
            gpus: tuple[int, int] = (0, 0), steps: int = 1, pinned: bool = False) -> int:
        cls = self.class_id(collective, tensor, group_size, steps, pinned)
        low, high = gpus
        key: int | tuple = ((work << _GPU_BITS | low) << _GPU_BITS | high
                            if 0 <= low < 1 << _GPU_BITS and 0 <= high < 1 << _GPU_BITS
                            else (work, gpus))

        def extend(new: list) -> None:
            self.cls.append(cls)
            self.work.append(work)
            self.gpus.append(gpus)
            self._objects.append(None)

        return _intern(self._ids.setdefault(cls, {}), [key], len(self.cls), extend)[0]

    def add_many(self, collective: str, tensor: str, work: np.ndarray, group_size: int,
                 low: np.ndarray, high: np.ndarray, steps: int = 1, pinned: bool = False
                 ) -> list[int]:
        """``add`` of each (work, GPUs ``low`` and ``high``), the other fields one for all."""
        cls = self.class_id(collective, tensor, group_size, steps, pinned)
        if len(work) and max(int(low.max()), int(high.max())) >= 1 << _GPU_BITS:
            return [self.add(collective, tensor, w, group_size, (a, b), steps, pinned)
                    for w, a, b in zip(work.tolist(), low.tolist(), high.tolist())]

        def extend(new: list[int]) -> None:
            codes = ints(new)
            self.cls.extend([cls] * len(new))
            self.work.extend((codes >> (2 * _GPU_BITS)).tolist())
            self.gpus.extend(zip((codes >> _GPU_BITS & _GPU_MASK).tolist(),
                                 (codes & _GPU_MASK).tolist()))
            self._objects.extend([None] * len(new))

        codes = ((work << _GPU_BITS | low) << _GPU_BITS | high).tolist()  # one int per comm
        return _intern(self._ids.setdefault(cls, {}), codes, len(self.cls), extend)

    def of(self, comm: Comm) -> int:
        return self.add(comm.collective, comm.tensor, self.works.of(comm.work), comm.group_size,
                        comm.gpus, comm.steps, comm.pinned)


_tuple_new = tuple.__new__
_GPU_BITS = 21  # GPU ranks below 2^21 make one int with the work id (others: a tuple)
_GPU_MASK = (1 << _GPU_BITS) - 1


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

    def bare_op(self, row: int) -> Op:
        """Row ``row``'s Op without its dependencies (what a cost model reads), made anew."""
        buffers = self.buffers
        work, comm = self.work[row], self.comm[row]
        return make_op(KIND_OF[self.kind[row]], self.device[row], self.stage[row], self.chunk[row],
                       self.names[self.name[row]], STREAMS[self.stream[row]],
                       self.works[work] if work >= 0 else None, KEEP_OF[self.keep[row]],
                       PART_OF[self.part[row]], self.comms[comm] if comm >= 0 else None, (), (),
                       tuple([buffers[b] for b in self.allocs[row]]),
                       tuple([buffers[b] for b in self.frees[row]]), self.groups[self.group[row]])

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
                name_id = name_ids.setdefault(name, len(names))
                if name_id == len(names):
                    names.append(name)
                group_id = group_ids.setdefault(group, len(groups))
                if group_id == len(groups):
                    groups.append(group)
                for column, value in zip(COLUMNS, (
                        KIND_CODE[kind], device, stage, chunk, name_id, STREAM_CODE[stream],
                        works.of(work) if work is not None else -1, KEEP_CODE[keep],
                        PART_CODE[part], comms.of(comm) if comm is not None else -1, group_id)):
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
