"""The distinct works, buffers and comm payloads of a plan, by id (ltsim/optable.py's side
tables): each interned by value as a few integer fields, its object (Work, Buffer, Comm) made when
first read. A plan of thousands of chunks prices a few dozen shapes of work: the engine prices
from the fields (``Works.arrays``), not from objects, and the lowering adds values in bulk
(``add_many``: dictionary work in C over integer keys)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np

from ltsim.plan import Buffer, Comm, Keep, Slice, Split, Tiling, Work
from ltsim.work import SLICE_BOUNDS, slices_tokens

KEEP_OF: tuple[Keep, ...] = tuple(Keep)
KEEP_CODE: dict[Keep, int] = {k: i for i, k in enumerate(KEEP_OF)}


def _same(value: Any) -> Any:
    return value


def value_id(ids: dict, values: list, value: Any) -> int:
    """The id of ``value``: its place in ``values`` (``ids``: value -> id), appended when new."""
    found = ids.get(value)
    if found is None:
        found = ids[value] = len(values)
        values.append(value)
    return found


class Works(Sequence):
    """The distinct works of a plan, by id, as fields: a chunk, its slices (-1: the chunk's own,
    else an id into ``slice_sets``) and a variant (an id into ``variants``: the layer range,
    split, embedding, head and tiling). Interned by value; each Work object made when first
    read (a plan of thousands of chunks prices a few dozen shapes)."""

    __slots__ = ("chunk_slices", "chunk", "ref", "variant", "slice_sets", "_slice_ids",
                 "variants", "_variant_ids", "_ids", "_objects", "derived")

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
        self.derived: dict = {}  # a builder's memos (the lowering's: variants made from variants)

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
        return value_id(self._variant_ids, self.variants, (layers, split, embed, head, tiling))

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
        ids = self._ids.get((ref, variant))
        if ids is None:
            ids = self._ids[(ref, variant)] = {}
        found = ids.get(chunk)
        if found is None:
            found = ids[chunk] = len(self.chunk)
            self.chunk.append(chunk)
            self.ref.append(ref)
            self.variant.append(variant)
            self._objects.append(None)
        return found

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
        return _by_class(list(zip(refs, variants)), chunk, self._add_class)

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

    def cost_shape(self, w: int, layouts: dict[tuple[int, int], Any],
                   name: Callable[[tuple], Any] = _same) -> tuple:
        """``self[w].cost_shape()`` without the Work object, its token layout as ``name`` calls
        it; ``layouts``: a memo of the layouts' names by (chunk, ref), which the caller keeps for
        a table."""
        chunk, ref = self.chunk[w], self.ref[w]
        layout = layouts.get((chunk, ref))
        if layout is None:
            layout = layouts[(chunk, ref)] = name(_layout(self.chunk_slices[chunk] if ref < 0
                                                          else self.slice_sets[ref]))
        (low, high), split, embed, head, tiling = self.variants[self.variant[w]]
        return layout, high - low, split, embed, head, tiling

    def arrays(self) -> dict[str, np.ndarray]:
        """Per work: ``tokens``, ``low``, ``high`` (its layer range), ``cp`` (its split's CP
        degree) and ``shape`` (equal numbers: equal ``Work.cost_shape``, an index into
        ``shapes()``)."""
        layouts: dict[tuple, int] = {}
        chunk, ref = ints(self.chunk), ints(self.ref)
        used = sorted_unique(chunk[ref < 0])  # chunks whose own slices some work covers, by place
        size = max(len(used), 1)
        chunk_layout, chunk_tokens = np.zeros(size, np.int64), np.zeros(size, np.int64)
        for at, c in enumerate(used.tolist()):
            slices = self.chunk_slices[c]
            chunk_layout[at] = layouts.setdefault(_layout(slices), len(layouts))
            chunk_tokens[at] = slices_tokens(slices)
        set_layout = ints([layouts.setdefault(_layout(sl), len(layouts))
                           for sl in self.slice_sets] + [0])
        set_tokens = ints([slices_tokens(sl) for sl in self.slice_sets]
                          + [0])
        own = ref < 0
        where = np.where(own, np.minimum(np.searchsorted(used, chunk), size - 1), 0)
        layout = np.where(own, chunk_layout[where], set_layout[ref])
        tokens = np.where(own, chunk_tokens[where], set_tokens[ref])
        kinds: dict[tuple, int] = {}  # a variant's part of the cost shape
        variant_kind = [kinds.setdefault((high - low, split, embed, head, tiling), len(kinds))
                        for (low, high), split, embed, head, tiling in self.variants]
        variant = ints(self.variant)
        low = np.array([v[0][0] for v in self.variants] or [0], dtype=np.int64)
        high = np.array([v[0][1] for v in self.variants] or [0], dtype=np.int64)
        cp = np.array([v[1].cp for v in self.variants] or [1], dtype=np.int64)
        shape = (layout * max(len(kinds), 1)
                 + np.array(variant_kind or [0], dtype=np.int64)[variant])
        return {"tokens": tokens, "low": low[variant],
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


def _by_class(classes: list, items: Sequence, add_class: Callable[[Any, list], list[int]]
              ) -> list[int]:
    """The ids of ``items``, each added as ``add_class(its class, the items of that class)``
    (``classes``: per item its class), in the items' order."""
    out = [0] * len(items)
    for cls, positions in _classes(classes).items():
        for i, found in zip(positions, add_class(cls, [items[i] for i in positions])):
            out[i] = found
    return out


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


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d array without NaN, by sorting: numpy's own asks
    ``np.ma.is_masked`` first, which imports numpy.ma (about 18 ms) in every process that calls
    it (each sweep worker)."""
    out = np.sort(values)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def _layout(slices: tuple[Slice, ...]) -> tuple[tuple[int, int], ...]:
    return tuple(map(SLICE_BOUNDS, slices))


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
        kind_id = value_id(self._kind_ids, self.kinds, kind)
        ids = self._ids.get((kind_id, keep, host))
        if ids is None:
            ids = self._ids[(kind_id, keep, host)] = {}
        found = ids.get(work)
        if found is None:
            found = ids[work] = len(self.kind)
            self.kind.append(kind_id)
            self.work.append(work)
            self.keep.append(keep)
            self.host.append(host)
            self._objects.append(None)
        return found

    def add_many(self, kind: str, work: list[int], keep: list[int] | int, host: bool = False
                 ) -> list[int]:
        """``add`` of a buffer of ``kind`` on each work (each keep code, or one for all)."""
        kind_id = value_id(self._kind_ids, self.kinds, kind)
        if isinstance(keep, int):
            return self._add_class((kind_id, keep, host), work)
        if keep and keep.count(keep[0]) == len(keep):
            return self._add_class((kind_id, keep[0], host), work)
        return _by_class([(kind_id, k, host) for k in keep], work, self._add_class)

    def add_mixed(self, kinds: list[str], work: list[int], keep: list[int], host: list[bool]
                  ) -> list[int]:
        """``add`` of each (kind, work, keep, host)."""
        code = {k: value_id(self._kind_ids, self.kinds, k) for k in dict.fromkeys(kinds)}
        return _by_class(list(zip(map(code.__getitem__, kinds), keep, host)), work,
                         self._add_class)

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
        return value_id(self._class_ids, self.classes,
                        (collective, tensor, group_size, steps, pinned))

    def add(self, collective: str, tensor: str, work: int, group_size: int = 1,
            gpus: tuple[int, int] = (0, 0), steps: int = 1, pinned: bool = False) -> int:
        cls = self.class_id(collective, tensor, group_size, steps, pinned)
        low, high = gpus
        key: int | tuple = ((work << _GPU_BITS | low) << _GPU_BITS | high
                            if 0 <= low < 1 << _GPU_BITS and 0 <= high < 1 << _GPU_BITS
                            else (work, gpus))
        ids = self._ids.setdefault(cls, {})
        found = ids.get(key)
        if found is None:
            found = ids[key] = len(self.cls)
            self.cls.append(cls)
            self.work.append(work)
            self.gpus.append(gpus)
            self._objects.append(None)
        return found

    def add_new(self, collective: str, tensor: str, work: np.ndarray, group_size: int,
                low: np.ndarray, high: np.ndarray, steps: int = 1, pinned: bool = False
                ) -> np.ndarray:
        """Comms of each (work, GPUs ``low`` and ``high``), the other fields one for all, taken
        to be new (a pass that makes one per op: the P2P sends): their ids, not interned (a value
        added again later gets an id of its own, priced alike)."""
        cls = self.class_id(collective, tensor, group_size, steps, pinned)
        first = len(self.cls)
        self.cls.extend([cls] * len(work))
        self.work.extend(work.tolist())
        self.gpus.extend(zip(low.tolist(), high.tolist()))
        self._objects.extend([None] * len(work))
        return np.arange(first, first + len(work))

    def of(self, comm: Comm) -> int:
        return self.add(comm.collective, comm.tensor, self.works.of(comm.work), comm.group_size,
                        comm.gpus, comm.steps, comm.pinned)


_tuple_new = tuple.__new__
_GPU_BITS = 21  # GPU ranks below 2^21 make one int with the work id (others: a tuple)
