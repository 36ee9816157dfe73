"""A backward's context K/V gradients charged layer by layer (``layerwise_deferrals``): a backward
over L layers makes each layer's dK/dV of the earlier tokens as it passes that layer and releases
the layer's stored activations once done, so its level does not rise by all its gradients at its
start. ltsim/sim/compile.py moves the deferred bytes in the per-op memory deltas; maxlen splits a
peak the same way."""

from __future__ import annotations

from itertools import chain

import numpy as np

import ltsim.optable as optable
from ltsim.optable import B, PART_OF, ints


def layerwise_deferrals(table, sizes: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per row of a backward that allocates context K/V gradients ("kv_grad"), and of the rest of
    such a backward that context parallelism split: (bytes charged less at its start, bytes
    released less at its end). ``sizes``: per buffer id of ``table``, its bytes (host buffers are
    not counted). A backward over L layers runs them one by one: layer l's dK/dV of the earlier
    tokens appear when its backward runs, and its stored activations (the "act" or, under full
    recompute, "ckpt" buffers over its layers; not a one-layer recompute working set, which is
    rebuilt for every layer and held to the end) are released once it is done. So in the op the
    level rises by max over layers of (the gradients so far less the activations released so
    far), which for A bytes of gradients and F of activations, each even over the layers, is
    max(A / L, A - F (L - 1) / L): the op's allocs less d = (L - 1) / L x min(A, F). That d is
    charged at its end, where the level is the same as before. A backward split for context
    parallelism (``split_cp``: its attention part, which allocates, then the rest, which
    releases, the next op of its program) defers to the end of the rest (maxlen.peak_terms
    splits the peak the same way)."""
    buffers = table.buffers
    if "kv_grad" not in buffers.kinds:  # nothing to defer
        return {}
    if len(table) < optable.SMALL:
        return _layerwise_rows(table, sizes.tolist())
    kind, allocs = table.array("kind"), table.allocs
    rows = np.array([r for r in np.flatnonzero(kind == B).tolist() if allocs[r]], dtype=np.int64)
    if not len(rows):
        return {}
    names = np.array(buffers.kinds + [""])
    buffer_kind = names[ints(buffers.kind)]
    works = table.work_arrays()
    layers = works["high"] - works["low"]
    on_device = ~np.fromiter(buffers.host, bool, len(buffers))
    grad_bytes = np.where(on_device & (buffer_kind == "kv_grad"), sizes, 0)
    act_bytes = np.where(on_device & np.isin(buffer_kind, _LAYERWISE)
                         & (layers[ints(buffers.work)] > 1), sizes, 0)
    work, part, chunk = table.array("work"), table.array("part"), table.array("chunk")
    # the next op of each row's program (-1 for a program's last)
    order = table.order()
    following = np.full(len(table), -1, dtype=np.int64)
    ends = np.cumsum([len(r) for _, _, r in table.programs])
    last = np.zeros(len(order), dtype=bool)
    last[ends[ends > 0] - 1] = True
    following[order[~last]] = order[1:][~last[:-1]]
    span = np.where(work[rows] >= 0, layers[np.maximum(work[rows], 0)], 0)
    grads = _summed(allocs, rows, grad_bytes)
    rest = np.where(part[rows] == _ATTN, following[rows], rows)  # split_cp's rest comes next
    paired = (rest >= 0) & ((part[rows] != _ATTN) | (
        (kind[rest] == B) & (part[rest] == _DENSE) & (chunk[rest] == chunk[rows])
        & (work[rest] == work[rows])))
    deferred = np.zeros(len(rows), dtype=np.int64)
    ok = (work[rows] >= 0) & (span >= 2) & (part[rows] != _DENSE) & (grads > 0) & paired
    if ok.any():
        acts = _summed(table.frees, rest[ok], act_bytes)
        deferred[ok] = (span[ok] - 1) * np.minimum(grads[ok], acts) // span[ok]
    out: dict[int, tuple[int, int]] = {}
    for row, after, d in zip(rows.tolist(), rest.tolist(), deferred.tolist()):
        if d:
            _defer(out, row, after, d)
    return out


def _layerwise_rows(table, sizes: list[int]) -> dict[int, tuple[int, int]]:
    """``layerwise_deferrals`` row by row (a small plan)."""
    buffers, works = table.buffers, table.works
    grad = buffers.kinds.index("kv_grad")
    layerwise = {i for i, name in enumerate(buffers.kinds) if name in _LAYERWISE}
    host, buffer_kind, buffer_work = buffers.host, buffers.kind, buffers.work

    def layers(w: int) -> int:
        low, high = works.layers(w)
        return high - low

    def grad_bytes(b: int) -> int:
        return sizes[b] if not host[b] and buffer_kind[b] == grad else 0

    def act_bytes(b: int) -> int:
        return (sizes[b] if not host[b] and buffer_kind[b] in layerwise
                and layers(buffer_work[b]) > 1 else 0)

    following: dict[int, int] = {}  # the next op of each row's program
    for _, _, rows in table.programs:
        following.update(zip(rows, rows[1:]))
    kind, part, work, chunk = table.kind, table.part, table.work, table.chunk
    out: dict[int, tuple[int, int]] = {}
    for row, allocs in enumerate(table.allocs):
        if kind[row] != B or not allocs:
            continue
        w = work[row]
        grads = sum(map(grad_bytes, allocs))
        rest = following.get(row, -1) if part[row] == _ATTN else row  # split_cp's rest
        if (w < 0 or part[row] == _DENSE or grads <= 0 or rest < 0
                or (part[row] == _ATTN and not (kind[rest] == B and part[rest] == _DENSE
                                                 and chunk[rest] == chunk[row]
                                                 and work[rest] == w))):
            continue
        span = layers(w)
        if span < 2:
            continue
        d = (span - 1) * min(grads, sum(map(act_bytes, table.frees[rest]))) // span
        if d:
            _defer(out, row, rest, d)
    return out


def _defer(out: dict[int, tuple[int, int]], row: int, rest: int, d: int) -> None:
    """``d`` bytes charged at the end of ``rest`` instead of the start of ``row`` (the same op,
    or split_cp's attention part and the rest after it): (allocation deferred, release
    deferred) per row."""
    if rest == row:
        out[row] = (d, d)
    else:
        out[row] = (d, 0)
        out[rest] = (0, d)


def _summed(effects: list[tuple[int, ...]], rows: np.ndarray, bytes_of: np.ndarray) -> np.ndarray:
    """Per row of ``rows``, the sum of ``bytes_of`` its buffers (``effects``: allocs or frees)."""
    mine = [effects[r] for r in rows.tolist()]
    counts = np.fromiter(map(len, mine), np.int64, len(mine))
    flat = np.fromiter(chain.from_iterable(mine), np.int64, int(counts.sum()))
    return np.bincount(np.repeat(np.arange(len(mine)), counts), weights=bytes_of[flat],
                       minlength=len(mine)).astype(np.int64)


_LAYERWISE = ("act", "ckpt")  # buffers of a backward's layers, released as it passes each
_ATTN, _DENSE = PART_OF.index("attn"), PART_OF.index("dense")
