"""Plan validation rules (used by Plan.validate): placement, op contents, coverage, dependencies,
acyclicity, memory pairing (the rules about chunks, coverage among them, in ltsim/chunk_check.py).

The rules read the plan's columns (ltsim/optable.py) as arrays, so a plan is checked in a few
array passes rather than one Python step per op (issue 13); each reports the first problem in
program order, as a walk over the programs would, with the key of the op to mark."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

import ltsim.optable as optable
from ltsim.chunk_check import check_chunk_indices, check_coverage, check_mirrors
from ltsim.optable import COLL, KIND_CODE, OPT, STREAM_CODE, OpTable
from ltsim.plan import STREAMS, WORK_KINDS, Plan

# per kind code: carries a Work
_IS_WORK = np.array([k in WORK_KINDS for k in KIND_CODE])


def check_plan(plan: Plan, *, check_cycles: bool = True) -> tuple[str, object] | None:
    """The first problem found as (message, key of the offending op), or None when the plan is valid."""
    for rule in RULES if check_cycles else tuple(r for r in RULES if r is not _check_acyclic):
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


def _gather(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices first[0], first[0] + 1, ... (counts[0] of them), then first[1], ...: the
    places of some rows' items in a flat array, in the rows' order."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.repeat(first - starts, counts) + np.arange(total)


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
    """Per device, every buffer is freed as often as it is allocated, and only where allocated;
    within one program a buffer is not allocated while live (an op may allocate and free one
    buffer: a transient). Buffers may move between streams (a copy frees what a forward made).
    (Freeing before the allocation in program order is not checked: the engine's replay orders
    the two by their dependencies.)"""
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


def _once_each(table: OpTable, rows: np.ndarray, n_alloc: np.ndarray, n_free: np.ndarray) -> bool:
    """Whether every (device, buffer) pair is allocated once and freed once: the plans the
    strategies build, for which no rule of ``_unbalanced_arrays`` can fail (one allocation per
    device is one per program; every freed pair is allocated; every balance is zero), found
    with two sorts rather than its ordered pass over the events."""
    (_, alloc_first, alloc_flat), (_, free_first, free_flat) = (table.effects("allocs"),
                                                                table.effects("frees"))
    device = _positions(table)["device"]
    width = len(table.buffers) + 1
    allocs = np.sort(np.repeat(device, n_alloc) * width
                     + alloc_flat[_gather(alloc_first[rows], n_alloc)])
    frees = np.sort(np.repeat(device, n_free) * width
                    + free_flat[_gather(free_first[rows], n_free)])
    return bool((allocs[1:] != allocs[:-1]).all()) and np.array_equal(allocs, frees)


def _unbalanced_arrays(table: OpTable):
    """``_check_buffers`` over arrays."""
    rows = table.order()
    order = rows.tolist()
    (alloc_counts, alloc_first, alloc_flat), (free_counts, free_first, free_flat) = (
        table.effects("allocs"), table.effects("frees"))
    n_alloc, n_free = alloc_counts[rows], free_counts[rows]
    if not (n_alloc.any() or n_free.any()):
        return None
    if _once_each(table, rows, n_alloc, n_free):
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


# in the order they run (each plan problem is reported by the first rule that finds one)
RULES = (check_chunk_indices, _check_placement, check_mirrors, check_coverage, _check_deps,
         _check_acyclic, _check_buffers)
