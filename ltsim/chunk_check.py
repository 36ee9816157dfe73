"""The plan rules about chunks (used by ltsim/plan_check.py): chunks count from 0, mirrored
replicas repeat their sources' chunks, and every chunk is forwarded and backwarded once per stage
over exactly the batch's tokens. Over arrays, or op by op for a small plan (``optable.SMALL``);
each reports the first problem as a walk over the programs would."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter

import numpy as np

from ltsim.interned import sorted_unique
import ltsim.optable as optable
from ltsim.optable import B, F
from ltsim.plan import OpKind, Plan
from ltsim.work import slice_columns, slices_tokens

# per part code: counted for coverage ("" and "dense": an "attn" part op repeats its main op's
# slices)
_COVERED = np.array([True, False, True])
_COVERED_ROW = _COVERED.tolist()


def check_chunk_indices(plan: Plan):
    """Chunks count from 0: the op table keeps -1 for an op of no chunk (an optimizer step), so
    a negative index would read as none. The first such chunk, then the first op in program
    order that names one."""
    table = plan.table
    if len(table) < optable.SMALL:
        low = min(map(_INDEX, plan.chunks), default=0)
    else:
        indices = _pieces(plan)["index"]
        low = int(indices.min()) if len(indices) else 0
    if low < 0:
        return f"chunk {low} has a negative index. Chunks count from 0", None
    if len(table) < optable.SMALL:
        chunk = table.chunk
        row = next((r for _, _, rows in table.programs for r in rows if chunk[r] < -1), None)
    else:
        order = table.order()
        below = table.array("chunk")[order] < -1
        row = int(order[int(np.argmax(below))]) if below.any() else None
    if row is None:
        return None
    key = table.key(row)
    return f"op {key.token} names chunk {table.chunk[row]}. Chunks count from 0", key


def check_mirrors(plan: Plan):
    """A mirrored replica (ltsim/mirrors.py) has no programs of its own, pairs each device with a
    source device of the same stage, and each chunk with a source chunk of the same token layout."""
    if not plan.mirrors:
        return None
    live = {device for device, _, _ in plan.table.programs}
    chunks = plan.chunks
    lengths = plan.seq_lengths
    replica_devices: dict[int, set] = {}
    for device in plan.devices:
        replica_devices.setdefault(device.replica, set()).add(device.index)
    # per chunk (by position): its first slice's start, stop and sequence length, its slice count
    pieces = _pieces(plan)
    counts = pieces["count"]
    first = np.cumsum(counts) - counts
    clipped = np.minimum(first, max(len(pieces["seq"]) - 1, 0))
    count = len(lengths)
    lengths_of = np.fromiter(chain(lengths, (-1,)), np.int64, count + 1)  # -1: not in the batch
    seq = pieces["seq"]
    length = lengths_of[np.where((seq >= 0) & (seq < count), seq, count)]
    head = (np.stack([pieces["start"][clipped], pieces["stop"][clipped], length[clipped]])
            if len(seq) else np.zeros((3, len(chunks)), np.int64))
    indices = pieces["index"]
    replicas = pieces["replica"]
    # a chunk index's position in plan.chunks (of two chunks with one index, the later), -1 if
    # no chunk has it
    by_index = np.argsort(indices, kind="stable")
    sorted_indices = indices[by_index]

    def position(wanted: np.ndarray) -> np.ndarray:
        if not len(indices):
            return np.full(len(wanted), -1, dtype=np.int64)
        at = np.maximum(np.searchsorted(sorted_indices, wanted, side="right") - 1, 0)
        return np.where(sorted_indices[at] == wanted, by_index[at], -1)

    def layout(at: int) -> list:
        return [(x.start, x.stop, lengths[x.seq] if 0 <= x.seq < count else -1)
                for x in chunks[at].slices]

    device_problem = None  # the first mirror's device problem, as (mirror, message)
    for m, mirror in enumerate(plan.mirrors):
        where = f"mirror of replica {mirror.source} as replica {mirror.replica}"
        pair = (mirror.source, mirror.replica)
        for src, dst in mirror.devices:
            a, b = plan.devices[src], plan.devices[dst]
            if dst in live or a.stage != b.stage or (a.replica, b.replica) != pair:
                device_problem = (m, f"{where}: device {dst} cannot repeat device {src}")
                break
        else:
            unpaired = (replica_devices.get(mirror.replica, set())
                        - {dst for _, dst in mirror.devices})
            if unpaired:
                device_problem = (m, f"{where}: device {min(unpaired)} repeats no device")
        if device_problem is not None:
            break
    # every mirror's chunk pairs at once
    sizes = [len(mirror.chunks) for mirror in plan.mirrors]
    pairs = _mirror_pairs(plan)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    src, dst = pairs[:, 0], pairs[:, 1]
    a, b = position(src), position(dst)
    expected = np.array([(m.source, m.replica) for m in plan.mirrors], dtype=np.int64)[owner]
    unknown = (a < 0) | (b < 0) | (replicas[a] != expected[:, 0]) | (replicas[b] != expected[:, 1])
    alone = (counts[a] == 1) & (counts[b] == 1)  # one sequence each (Megatron's): directly
    differ = ~unknown & alone & (head[:, a] != head[:, b]).any(axis=0)
    for k in np.flatnonzero(~unknown & ~alone).tolist():
        differ[k] = layout(int(a[k])) != layout(int(b[k]))
    bad = unknown | differ
    k = int(np.argmax(bad)) if bad.any() else -1
    if device_problem is not None and (k < 0 or device_problem[0] <= owner[k]):
        return device_problem[1], None
    if k >= 0:
        mirror = plan.mirrors[owner[k]]
        where = f"mirror of replica {mirror.source} as replica {mirror.replica}"
        if unknown[k]:
            return f"{where}: chunk {dst[k]} cannot repeat chunk {src[k]}", None
        return f"{where}: chunk {dst[k]} does not have chunk {src[k]}'s token layout", None
    return None


def check_coverage(plan: Plan):
    """Every chunk is forwarded once per stage and, if it gets gradients, backwarded once: the ops'
    token-layers (a CP-sharded work counts 1/cp on one rank, fully on a lockstep group) add up to
    the chunk's tokens times the stage's layers. Chunks without gradients get no backward. A
    mirrored chunk is covered by its source's ops; every sequence by the chunks' slices. Over
    arrays, or op by op for a small plan (``_coverage_rows``: the same sums in the same order)."""
    if len(plan.table) < optable.SMALL:
        return _coverage_rows(plan)
    table = plan.table
    stages = plan.num_stages  # a property over devices: once
    pieces = _pieces(plan)
    chunk_ids = pieces["index"]
    known = sorted_unique(chunk_ids)  # the plan's chunk indices, sorted: a chunk's bin is its place
    size = len(known)
    compute = [rows for _, stream, rows in table.programs if stream == "compute"]
    rows = np.fromiter(chain.from_iterable(compute), np.int64, sum(map(len, compute)))
    kind, chunk, part, work = (table.array(c)[rows] for c in ("kind", "chunk", "part", "work"))
    stage, device = table.array("stage")[rows], table.array("device")[rows]
    place = np.minimum(np.searchsorted(known, chunk), max(size - 1, 0))
    counted = (((kind == F) | (kind == B)) & _COVERED[part] & (chunk >= 0)
               & (known[place] == chunk if size else False))
    if len(table.works):
        works = table.work_arrays()
        layers = works["high"] - works["low"]
        weight = works["tokens"] * layers / works["cp"]
        share = weight[work[counted]]
    else:
        share = np.zeros(0)
    widths = np.array([d.cp_width for d in plan.devices])
    share = share * widths[device[counted]]
    bins = place[counted] * stages + stage[counted]
    backward = kind[counted] == B
    forwards = np.bincount(bins[~backward], weights=share[~backward], minlength=size * stages)
    backwards = np.bincount(bins[backward], weights=share[backward], minlength=size * stages)
    stage_widths = np.array([stop - first for first, stop in plan.stage_layers])
    tokens = np.bincount(pieces["chunk"], weights=pieces["stop"] - pieces["start"],
                         minlength=len(plan.chunks))
    # the chunks the ops cover: all but mirrored ones (check_mirrors checks those)
    checked = (np.flatnonzero(~np.isin(chunk_ids, _mirror_pairs(plan)[:, 1])) if plan.mirrors
               else np.arange(len(chunk_ids)))
    chunk_ids, tokens = chunk_ids[checked], tokens[checked]
    need = (tokens[:, None] * stage_widths[None, :]).astype(float)  # per chunk and stage
    places = np.searchsorted(known, chunk_ids)
    got_f = forwards.reshape(size, stages)[places] if size else need * 0
    got_b = backwards.reshape(size, stages)[places] if size else need * 0
    grad_chunks = plan.grad_chunks
    grad = (np.ones(len(chunk_ids), dtype=bool) if grad_chunks is None
            else np.isin(chunk_ids, np.array(sorted(grad_chunks), dtype=np.int64)))
    slack = 1e-6 * np.maximum(need, 1)
    bad_f = np.abs(got_f - need) > slack
    bad_b = np.where(grad[:, None], np.abs(got_b - need) > slack, np.abs(got_b) > 1e-6)
    bad = bad_f | bad_b
    if bad.any():
        at, stage_at = np.unravel_index(int(np.argmax(bad)), bad.shape)
        index = int(chunk_ids[at])
        if bad_f[at, stage_at]:
            return _uncovered(plan, index, int(stage_at), OpKind.F, float(got_f[at, stage_at]),
                              int(need[at, stage_at]))
        return _uncovered(plan, index, int(stage_at), OpKind.B, float(got_b[at, stage_at]),
                          int(need[at, stage_at]) if grad[at] else 0)
    seq, count = pieces["seq"], len(plan.seq_lengths)
    outside = (seq < 0) | (seq >= count)
    if outside.any():
        at = int(np.argmax(outside))
        return (f"chunk {plan.chunks[pieces['chunk'][at]].index} holds sequence {seq[at]}, not "
                f"in the batch"), None
    seq_tokens = np.bincount(seq, weights=pieces["stop"] - pieces["start"], minlength=count)
    lengths = np.fromiter(plan.seq_lengths, np.int64, count)
    wrong = seq_tokens != lengths
    if wrong.any():
        at = int(np.argmax(wrong))
        return (f"sequence {at} has {lengths[at]} tokens but its slices cover "
                f"{int(seq_tokens[at])}"), None
    return None


def _coverage_rows(plan: Plan):
    """``check_coverage`` op by op."""
    table = plan.table
    works = table.works
    kind, chunk, part, work = table.kind, table.chunk, table.part, table.work
    stage, device = table.stage, table.device
    widths = [d.cp_width for d in plan.devices]
    tokens_of: dict[tuple[int, int], int] = {}  # per (chunk, slices id): their tokens

    def tokens(chunk_index: int, ref: int) -> int:
        found = tokens_of.get((chunk_index, ref))
        if found is None:
            slices = works.chunk_slices[chunk_index] if ref < 0 else works.slice_sets[ref]
            found = tokens_of[(chunk_index, ref)] = slices_tokens(slices)
        return found

    weights: dict[int, float] = {}  # per work: its token-layers, over its CP degree
    got: dict[tuple[int, int, int], float] = {}  # (kind, chunk, stage) -> token-layers
    for _, stream, rows in table.programs:
        if stream != "compute":
            continue
        for row in rows:
            k = kind[row]
            if (k != F and k != B) or not _COVERED_ROW[part[row]] or chunk[row] < 0:
                continue
            w = work[row]
            weight = weights.get(w)
            if weight is None:
                (low, high), split = works.variants[works.variant[w]][:2]
                weight = weights[w] = (tokens(works.chunk[w], works.ref[w]) * (high - low)
                                       / split.cp)
            cell = (k, chunk[row], stage[row])
            got[cell] = got.get(cell, 0.0) + weight * widths[device[row]]
    mirrored = set(_mirror_pairs(plan)[:, 1].tolist()) if plan.mirrors else ()
    grad_chunks = plan.grad_chunks
    stage_widths = [stop - first for first, stop in plan.stage_layers]
    for c in plan.chunks:
        if c.index in mirrored:
            continue
        own = (tokens(c.index, -1) if works.chunk_slices.get(c.index) is c.slices
               else slices_tokens(c.slices))
        grad = grad_chunks is None or c.index in grad_chunks
        for at, width in enumerate(stage_widths):
            need = float(own * width)
            slack = 1e-6 * max(need, 1)
            forward, backward = got.get((F, c.index, at), 0.0), got.get((B, c.index, at), 0.0)
            if abs(forward - need) > slack:
                return _uncovered(plan, c.index, at, OpKind.F, forward, int(need))
            if abs(backward - need) > slack if grad else abs(backward) > 1e-6:
                return _uncovered(plan, c.index, at, OpKind.B, backward, int(need) if grad else 0)
    lengths = plan.seq_lengths
    count = len(lengths)
    seq_tokens = [0] * count
    for c in plan.chunks:
        for seq, start, stop in c.slices:
            if seq < 0 or seq >= count:
                return f"chunk {c.index} holds sequence {seq}, not in the batch", None
            seq_tokens[seq] += stop - start
    for at, (have, length) in enumerate(zip(seq_tokens, lengths)):
        if have != length:
            return f"sequence {at} has {length} tokens but its slices cover {have}", None
    return None


def _pieces(plan: Plan) -> dict[str, np.ndarray]:
    """Every slice of the plan's chunks: ``chunk`` (its chunk's position in ``plan.chunks``),
    ``seq``, ``start``, ``stop``, in order (made once per plan: the rules share it)."""
    return plan.table.memo("pieces", plan.chunks, lambda: slice_columns(plan.chunks))


def known_pieces(plan: Plan, columns: dict[str, np.ndarray]) -> None:
    """Give the rules ``columns``, work.slice_columns(plan.chunks) as a strategy already made
    them (Schedule.columns), instead of making them again."""
    plan.table.memo("pieces", plan.chunks, lambda: columns)


def _mirror_pairs(plan: Plan) -> np.ndarray:
    """Every mirror's (source chunk, copy chunk) pairs, one row each, mirror after mirror."""
    return plan.table.memo("mirror pairs", plan.mirrors, lambda: np.fromiter(
        chain.from_iterable(chain.from_iterable(m.chunks for m in plan.mirrors)), np.int64,
        2 * sum(len(m.chunks) for m in plan.mirrors)).reshape(-1, 2))


_INDEX = itemgetter(0)  # of a Chunk


def _uncovered(plan: Plan, chunk: int, stage: int, kind: OpKind, got: float, want: float):
    """The coverage problem, with the key of the first covering op of ``kind`` of ``chunk`` on
    ``stage`` (None if none)."""
    what = "no backward (it gets no gradient)" if not want else "exactly one per stage"
    first = next((op.key for program in plan.programs if program.stream == "compute"
                  for op in program.ops if op.kind is kind and op.stage == stage
                  and op.chunk == chunk and op.part in ("", "dense")), None)
    return (f"chunk {chunk} has {got:g} of {want} token-layers of {kind.value} on stage {stage} "
            f"(each chunk needs {what})", first)
