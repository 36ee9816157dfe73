"""Plan validation rules (used by Plan.validate): placement, op contents, coverage, dependencies,
acyclicity, memory pairing.

The rules read the plan's columns (ltsim/optable.py) as arrays, so a plan is checked in a few
array passes rather than one Python step per op (issue 13); each reports the first problem in
program order, as a walk over the programs would, with the key of the op to mark."""

from __future__ import annotations

from collections import defaultdict
from itertools import chain
from operator import itemgetter

import numpy as np

import ltsim.optable as optable
from ltsim.optable import B, COLL, F, KIND_CODE, OPT, STREAM_CODE, OpTable
from ltsim.plan import STREAMS, WORK_KINDS, OpKind, Plan

# per part code: counted for coverage ("" and "dense": an "attn" part op repeats its main op's
# slices); per kind code: carries a Work
_COVERED = np.array([True, False, True])
_COVERED_ROW = _COVERED.tolist()
_IS_WORK = np.array([k in WORK_KINDS for k in KIND_CODE])


def check_plan(plan: Plan, *, check_cycles: bool = True) -> tuple[str, object] | None:
    """The first problem found as (message, key of the offending op), or None when the plan is valid."""
    rules = (_check_placement, _check_mirrors, _check_coverage, _check_deps, _check_acyclic,
             _check_buffers)
    for rule in rules if check_cycles else tuple(r for r in rules if r is not _check_acyclic):
        problem = rule(plan)
        if problem is not None:
            return problem
    return None


def _program_of(table: OpTable, order: np.ndarray) -> np.ndarray:
    """Per position of ``order``: the index of its program."""
    return _positions(table)["program"]


def _positions(table: OpTable) -> dict[str, np.ndarray]:
    """Per position of the plan's op order (``table.order()``): its program's index, device and
    stream code (made once per table)."""
    def make() -> dict[str, np.ndarray]:
        sizes = [len(rows) for _, _, rows in table.programs]
        program = np.repeat(np.arange(len(sizes)), sizes)
        return {"program": program,
                "device": np.array([d for d, _, _ in table.programs], dtype=np.int64)[program],
                "stream": np.array([STREAMS.index(s) for _, s, _ in table.programs],
                                   dtype=np.int64)[program]}

    return table.memo("positions", table.programs, make)


def _check_placement(plan: Plan):
    """Keys are unique, ops run on a device that holds their stage and layers, and each op carries
    what it needs to be priced (compute ops a Work, comm ops a Comm)."""
    table = plan.table
    found = (_misplaced_rows if len(table) < optable.SMALL else _misplaced_arrays)(plan, table)
    if found is None:
        return None
    row, problem, owner, in_stream = found
    key = table.key(row)
    token, where = key.token, key.device
    if problem == "twice":
        return f"op {token} appears twice on device {where}", key
    if problem == "owner":
        return f"op {token} of device {where} is in device {owner}'s program", key
    if problem == "stage":
        return f"op {token} runs on device {where}, which does not hold stage {key.stage}", key
    if problem == "stream":
        return (f"op {token} is in the {in_stream} program but says "
                f"{STREAMS[table.stream[row]]}"), key
    if problem == "work":
        return f"compute op {token} has no work", key
    if problem == "layers":
        first, stop = plan.devices[where].layers
        return (f"op {token} covers layers {table.works[table.work[row]].layers}, outside device "
                f"{where}'s {first}-{stop}"), key
    return f"comm op {token} says nothing about what it moves", key


_PLACEMENT = ("twice", "owner", "stage", "stream", "work", "layers", "comm")  # checked in order


def _misplaced_rows(plan: Plan, table: OpTable):
    """The first misplaced op in program order, row by row: (row, problem, its program's
    device, its program's stream), or None."""
    seen: set = set()
    count = len(plan.devices)
    devices = plan.devices
    works = table.works
    kinds, device_of, stage_of = table.kind, table.device, table.stage
    chunk_of, name_of, stream_of, work_of, comm_of = (table.chunk, table.name, table.stream,
                                                      table.work, table.comm)
    for owner, stream, rows in table.programs:
        code = STREAM_CODE[stream]
        for r in rows:
            kind, device, stage, work = kinds[r], device_of[r], stage_of[r], work_of[r]
            key = (device, stage, kind, chunk_of[r], name_of[r])
            problem = None
            if key in seen:
                problem = "twice"
            elif device != owner:
                problem = "owner"
            elif not 0 <= device < count or devices[device].stage != stage:
                problem = "stage"
            elif stream_of[r] != code:
                problem = "stream"
            elif _IS_WORK[kind]:
                if work < 0:
                    problem = "work"
                else:
                    first, stop = devices[device].layers
                    low, high = works.layers(work)
                    if not first <= low <= high <= stop:
                        problem = "layers"
            elif comm_of[r] < 0 and kind != OPT:
                problem = "comm"
            if problem is not None:
                return r, problem, owner, stream
            seen.add(key)
    return None


def _misplaced_arrays(plan: Plan, table: OpTable):
    """``_misplaced_rows`` over arrays."""
    order = table.order()
    if not len(order):
        return None
    kind, device, stage, chunk, name, stream, work = table.block[:7, order]
    comm = table.array("comm")[order]
    positions = _positions(table)
    owner, in_stream = positions["device"], positions["stream"]
    count = len(plan.devices)
    stages = np.array([d.stage for d in plan.devices] + [-1])
    layers = np.array([d.layers for d in plan.devices] + [(0, 0)]).reshape(-1, 2)
    # a key seen earlier in program order; the key as one number (exact while devices x stages
    # x kinds x chunks x names stays below 2^63), the rows of a repeated one sorted out after
    twice = np.zeros(len(order), dtype=bool)
    code = (((device * (int(stage.max()) + 2) + stage) * len(KIND_CODE) + kind)
            * (int(chunk.max()) + 2) + chunk + 1) * (len(table.names) + 1) + name
    ordered = np.sort(code)
    if (ordered[1:] == ordered[:-1]).any():
        by_key = np.lexsort((np.arange(len(order)), name, chunk, kind, stage, device))
        same = np.ones(len(order), dtype=bool)
        for column in (device, stage, kind, chunk, name):
            ordered = column[by_key]
            same[1:] &= ordered[1:] == ordered[:-1]
        same[0] = False
        twice[by_key[same]] = True
    known = (device >= 0) & (device < count)
    slot = np.where(known, device, count)
    wrong_stage = ~known | (stages[slot] != stage)
    is_work = _IS_WORK[kind]
    no_work = is_work & (work < 0)
    works = table.work_arrays()
    low = np.where(work >= 0, works["low"][np.maximum(work, 0)] if len(table.works) else 0, 0)
    high = np.where(work >= 0, works["high"][np.maximum(work, 0)] if len(table.works) else 0, 0)
    outside = (is_work & (work >= 0) & known
               & ~((layers[slot, 0] <= low) & (low <= high) & (high <= layers[slot, 1])))
    no_comm = ~is_work & (comm < 0) & (kind != OPT)
    masks = (twice, device != owner, wrong_stage, stream != in_stream, no_work, outside, no_comm)
    bad = np.logical_or.reduce(masks)
    if not bad.any():
        return None
    at = int(np.argmax(bad))
    problem = next(p for p, mask in zip(_PLACEMENT, masks) if mask[at])
    return int(order[at]), problem, int(owner[at]), STREAMS[in_stream[at]]


def _check_mirrors(plan: Plan):
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
    counts = np.bincount(pieces["chunk"], minlength=len(chunks))
    first = np.cumsum(counts) - counts
    clipped = np.minimum(first, max(len(pieces["seq"]) - 1, 0))
    lengths_of = np.fromiter(lengths, np.int64, len(lengths))
    head = (np.stack([pieces["start"][clipped], pieces["stop"][clipped],
                      lengths_of[pieces["seq"][clipped]]]) if len(pieces["seq"])
            else np.zeros((3, len(chunks)), np.int64))
    indices = pieces["index"]
    replicas = pieces["replica"]
    position = np.full(int(indices.max()) + 2 if len(indices) else 1, -1, dtype=np.int64)
    position[indices] = np.arange(len(chunks))

    def layout(at: int) -> list:
        return [(x.start, x.stop, lengths[x.seq]) for x in chunks[at].slices]

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
    a, b = (position[np.where((c >= 0) & (c < len(position) - 1), c, len(position) - 1)]
            for c in (src, dst))
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


def _check_coverage(plan: Plan):
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
    size = int(chunk_ids.max()) + 1 if len(chunk_ids) else 0
    compute = [rows for _, stream, rows in table.programs if stream == "compute"]
    rows = np.fromiter(chain.from_iterable(compute), np.int64, sum(map(len, compute)))
    kind, chunk, part, work = (table.array(c)[rows] for c in ("kind", "chunk", "part", "work"))
    stage, device = table.array("stage")[rows], table.array("device")[rows]
    counted = (((kind == F) | (kind == B)) & _COVERED[part] & (chunk >= 0)
               & (chunk < size))
    if len(table.works):
        works = table.work_arrays()
        layers = works["high"] - works["low"]
        weight = works["tokens"] * layers / works["cp"]
        share = weight[work[counted]]
    else:
        share = np.zeros(0)
    widths = np.array([d.cp_width for d in plan.devices])
    share = share * widths[device[counted]]
    bins = chunk[counted] * stages + stage[counted]
    backward = kind[counted] == B
    forwards = np.bincount(bins[~backward], weights=share[~backward], minlength=size * stages)
    backwards = np.bincount(bins[backward], weights=share[backward], minlength=size * stages)
    stage_widths = np.array([stop - first for first, stop in plan.stage_layers])
    tokens = np.bincount(pieces["chunk"], weights=pieces["stop"] - pieces["start"],
                         minlength=len(plan.chunks))
    # the chunks the ops cover: all but mirrored ones (_check_mirrors checks those)
    checked = (np.flatnonzero(~np.isin(chunk_ids, _mirror_pairs(plan)[:, 1])) if plan.mirrors
               else np.arange(len(chunk_ids)))
    chunk_ids, tokens = chunk_ids[checked], tokens[checked]
    need = (tokens[:, None] * stage_widths[None, :]).astype(float)  # per chunk and stage
    got_f = forwards.reshape(size, stages)[chunk_ids] if size else need * 0
    got_b = backwards.reshape(size, stages)[chunk_ids] if size else need * 0
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
    """``_check_coverage`` op by op."""
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
            found = tokens_of[(chunk_index, ref)] = (sum(map(_STOP, slices))
                                                     - sum(map(_START, slices)))
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
               else sum(map(_STOP, c.slices)) - sum(map(_START, c.slices)))
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


def _gather(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices first[0], first[0] + 1, ... (counts[0] of them), then first[1], ...: the
    places of some rows' items in a flat array, in the rows' order."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.repeat(first - starts, counts) + np.arange(total)


def _pieces(plan: Plan) -> dict[str, np.ndarray]:
    """Every slice of the plan's chunks: ``chunk`` (its chunk's position in ``plan.chunks``),
    ``seq``, ``start``, ``stop``, in order (made once per plan: the rules share it)."""
    return plan.table.memo("pieces", plan.chunks, lambda: _slices(plan.chunks))


def _slices(chunks) -> dict[str, np.ndarray]:
    index = np.fromiter(map(_INDEX, chunks), np.int64, len(chunks))
    replica = np.fromiter(map(_REPLICA, chunks), np.int64, len(chunks))
    counts = np.fromiter(map(len, map(_SLICES, chunks)), np.int64, len(chunks))
    total = int(counts.sum())
    seq, start, stop = (np.fromiter(column, np.int64, total) for column in zip(
        *chain.from_iterable(map(_SLICES, chunks)))) if total else (np.zeros(0, np.int64),) * 3
    return {"chunk": np.repeat(np.arange(len(chunks)), counts), "seq": seq, "start": start,
            "stop": stop, "index": index, "replica": replica}


def _mirror_pairs(plan: Plan) -> np.ndarray:
    """Every mirror's (source chunk, copy chunk) pairs, one row each, mirror after mirror."""
    return plan.table.memo("mirror pairs", plan.mirrors, lambda: np.fromiter(
        chain.from_iterable(chain.from_iterable(m.chunks for m in plan.mirrors)), np.int64,
        2 * sum(len(m.chunks) for m in plan.mirrors)).reshape(-1, 2))


_INDEX, _SLICES, _REPLICA = itemgetter(0), itemgetter(1), itemgetter(2)  # of a Chunk
_START, _STOP = itemgetter(1), itemgetter(2)  # of a Slice


def _uncovered(plan: Plan, chunk: int, stage: int, kind: OpKind, got: float, want: float):
    """The coverage problem, with the key of the first covering op of ``kind`` of ``chunk`` on
    ``stage`` (None if none)."""
    what = "no backward (it gets no gradient)" if not want else "exactly one per stage"
    first = next((op.key for program in plan.programs if program.stream == "compute"
                  for op in program.ops if op.kind is kind and op.stage == stage
                  and op.chunk == chunk and op.part in ("", "dense")), None)
    return (f"chunk {chunk} has {got:g} of {want} token-layers of {kind.value} on stage {stage} "
            f"(each chunk needs {what})", first)


def _check_deps(plan: Plan):
    """Every dependency names an op of the plan."""
    table = plan.table
    if not table.missing:
        return None
    position = {int(row): i for i, row in enumerate(table.order())}
    row, dep, _ = min(table.missing, key=lambda m: (position.get(m[0], len(position)), m[2]))
    key = table.key(row)
    return f"op {key.token} on device {key.device} depends on missing op {dep}", key


def _check_acyclic(plan: Plan):
    """Kahn's algorithm over explicit deps (finish and start) plus program order (collectives
    join their members)."""
    table = plan.table
    preds: dict[int, set] = defaultdict(set)
    for _, _, rows in table.programs:
        prev = None
        for row in rows:
            preds[row].update(table.deps[row] + table.start_deps[row])
            if prev is not None:
                preds[row].add(prev)
            prev = row
    groups: dict = defaultdict(list)
    for row in table.order().tolist():
        group = table.groups[table.group[row]]
        if table.kind[row] == COLL and len(group) > 1:
            groups[(table.token(row), group)].append(row)
    for members in groups.values():  # a collective starts when all members arrive
        union = set().union(*(preds[m] for m in members)) - set(members)
        for m in members:
            preds[m] = set(union)
    indegree = {k: len(v) for k, v in preds.items()}
    succs: dict = defaultdict(list)
    for row, ps in preds.items():
        for p in ps:
            succs[p].append(row)
    ready = [k for k, n in indegree.items() if n == 0]
    done = 0
    while ready:
        row = ready.pop()
        done += 1
        for nxt in succs[row]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if done != len(indegree):
        stuck = sorted((table.key(k) for k, n in indegree.items() if n > 0), key=str)
        return f"dependency cycle: {len(stuck)} ops can never start (first: {stuck[0]})", stuck[0]
    return None


def _check_buffers(plan: Plan):
    """Per device, every buffer is freed as often as it is allocated; within one program a buffer
    is not allocated while live nor freed before its allocation (an op may allocate and free one
    buffer: a transient). Buffers may move between streams (a copy frees what a forward made)."""
    table = plan.table
    return (_unbalanced_rows if len(table) < optable.SMALL else _unbalanced_arrays)(table)


def _allocated_twice(table: OpTable, buffer: int, device: int, row: int):
    return f"buffer {table.buffers[buffer].name} allocated twice on device {device}", table.key(row)


def _freed_unallocated(table: OpTable, buffer: int, row: int):
    return (f"op {table.token(row)} frees buffer {table.buffers[buffer].name} that is not "
            "allocated"), table.key(row)


def _unbalanced(table: OpTable, buffer: int, device: int, count: int, row: int | None):
    """A buffer left allocated (``count`` > 0: ``row`` its first allocation) or freed too
    often."""
    name = table.buffers[buffer].name
    if count > 0:
        return f"buffer {name} on device {device} is never freed", table.key(row)
    return f"buffer {name} on device {device} is freed more often than allocated", None


def _unbalanced_rows(table: OpTable):
    """``_check_buffers`` row by row."""
    balances: dict[int, dict[int, int]] = {}  # per device: buffer -> allocations less frees
    firsts: dict[tuple[int, int], int] = {}  # (device, buffer) -> its first allocating row
    allocated: dict[int, set] = {}  # per device: every buffer any of its programs allocates
    for device, _, rows in table.programs:
        mine = allocated.setdefault(device, set())
        for r in rows:
            mine.update(table.allocs[r])
    for device, _, rows in table.programs:
        live: set = set()
        balance = balances.setdefault(device, {})
        for r in rows:
            allocs, frees = table.allocs[r], table.frees[r]
            if not (allocs or frees):
                continue
            for b in allocs:
                if b in live:
                    return _allocated_twice(table, b, device, r)
                live.add(b)
                balance[b] = balance.get(b, 0) + 1
                firsts.setdefault((device, b), r)
            for b in frees:
                balance[b] = balance.get(b, 0) - 1
                if b in live:
                    live.discard(b)
                elif b not in allocated[device]:
                    return _freed_unallocated(table, b, r)
    for device, balance in balances.items():
        for b, count in balance.items():
            if count:
                return _unbalanced(table, b, device, count, firsts.get((device, b)))
    return None


def _unbalanced_arrays(table: OpTable):
    """``_check_buffers`` over arrays."""
    rows = table.order()
    order = rows.tolist()
    (alloc_counts, alloc_first, alloc_flat), (free_counts, free_first, free_flat) = (
        table.effects("allocs"), table.effects("frees"))
    n_alloc, n_free = alloc_counts[rows], free_counts[rows]
    if not (n_alloc.any() or n_free.any()):
        return None
    # the events of every op in program order: its allocations, then its frees
    events = n_alloc + n_free
    position = np.repeat(np.arange(len(order)), events)
    starts = np.cumsum(events) - events
    offset = np.arange(len(position)) - np.repeat(starts, events)
    is_alloc = offset < np.repeat(n_alloc, events)
    buffer = np.empty(len(position), dtype=np.int64)
    buffer[is_alloc] = alloc_flat[_gather(alloc_first[rows], n_alloc)]  # in program order
    buffer[~is_alloc] = free_flat[_gather(free_first[rows], n_free)]
    program = _program_of(table, table.order())[position]
    device = np.array([d for d, _, _ in table.programs])[program]
    # allocated while live in its program: the event before it in (program, buffer) allocated
    by_group = np.lexsort((np.arange(len(position)), buffer, program))
    same = np.zeros(len(position), dtype=bool)
    same[1:] = ((program[by_group][1:] == program[by_group][:-1])
                & (buffer[by_group][1:] == buffer[by_group][:-1]))
    twice_sorted = same & is_alloc[by_group] & np.roll(is_alloc[by_group], 1)
    twice = np.zeros(len(position), dtype=bool)
    twice[by_group[twice_sorted]] = True
    # freed on a device that never allocates it
    pair = device * (len(table.buffers) + 1) + buffer  # (device, buffer) as one number
    pairs, inverse = np.unique(pair, return_inverse=True)
    allocated = np.bincount(inverse[is_alloc], minlength=len(pairs)) > 0
    unallocated = ~is_alloc & ~allocated[inverse]
    bad = twice | unallocated
    if bad.any():
        at = int(np.argmax(bad))
        row = order[position[at]]
        if twice[at]:
            return _allocated_twice(table, int(buffer[at]), int(device[at]), row)
        return _freed_unallocated(table, int(buffer[at]), row)
    # per device (in the order the programs first name it), per buffer (first named first)
    balance = np.bincount(inverse, weights=np.where(is_alloc, 1.0, -1.0), minlength=len(pairs))
    if not balance.any():
        return None
    firsts = np.full(len(pairs), len(position))
    np.minimum.at(firsts, inverse, np.arange(len(position)))
    rank: dict[int, int] = {}
    for d, _, _ in table.programs:
        rank.setdefault(d, len(rank))
    width = len(table.buffers) + 1
    worst = min(np.flatnonzero(balance).tolist(),
                key=lambda u: (rank[int(pairs[u] // width)], firsts[u]))
    d, b = int(pairs[worst] // width), int(pairs[worst] % width)
    first = None
    if balance[worst] > 0:
        first = order[position[int(np.flatnonzero((pair == pairs[worst]) & is_alloc)[0])]]
    return _unbalanced(table, b, d, int(balance[worst]), first)
