"""Plan validation rules (used by Plan.validate): placement, op contents, coverage, dependencies,
acyclicity, memory pairing."""

from __future__ import annotations

from collections import defaultdict
from operator import itemgetter

from ltsim.plan import WORK_KINDS, OpKind, Plan

_COVERED_PARTS = ("", "dense")  # an "attn" part op repeats its main op's slices


def check_plan(plan: Plan, *, check_cycles: bool = True) -> tuple[str, object] | None:
    """The first problem found as (message, key of the offending op), or None when the plan is valid."""
    rules = (_check_placement, _check_mirrors, _check_coverage, _check_deps, _check_acyclic,
             _check_buffers)
    for rule in rules if check_cycles else tuple(r for r in rules if r is not _check_acyclic):
        problem = rule(plan)
        if problem is not None:
            return problem
    return None


_PLACED = itemgetter(0, 1, 2, 5, 6, 9, 15)  # an Op's kind, device, stage, stream, work, comm, key
_COVERING = itemgetter(0, 2, 3, 6, 8)  # an Op's kind, stage, chunk, work, part
_KEY = itemgetter(15)
_DEPS = itemgetter(10)
_START_DEPS = itemgetter(11)
_EFFECTS = itemgetter(12, 13)  # allocs, frees


def _check_placement(plan: Plan):
    """Keys are unique, ops run on a device that holds their stage and layers, and each op carries
    what it needs to be priced (compute ops a Work, comm ops a Comm)."""
    seen: set = set()
    count = len(plan.devices)
    stages = [d.stage for d in plan.devices]
    layers = [d.layers for d in plan.devices]
    OPT = OpKind.OPT
    for program in plan.programs:
        stream, owner = program.stream, program.device
        for kind, device, stage, op_stream, work, comm, key in map(_PLACED, program.ops):
            if key in seen:
                return f"op {key.token} appears twice on device {device}", key
            seen.add(key)
            if device != owner:
                return f"op {key.token} of device {device} is in device {owner}'s program", key
            if device >= count or stages[device] != stage:
                return f"op {key.token} runs on device {device}, which does not hold stage {stage}", key
            if op_stream != stream:
                return f"op {key.token} is in the {stream} program but says {op_stream}", key
            if kind in WORK_KINDS:
                if work is None:
                    return f"compute op {key.token} has no work", key
                first, stop = layers[device]
                low, high = work.layers
                if not first <= low <= high <= stop:
                    return (f"op {key.token} covers layers {work.layers}, outside device "
                            f"{device}'s {first}-{stop}"), key
            elif comm is None and kind is not OPT:
                return f"comm op {key.token} says nothing about what it moves", key
    return None


def _check_mirrors(plan: Plan):
    """A mirrored replica (ltsim/mirrors.py) has no programs of its own, pairs each device with a
    source device of the same stage, and each chunk with a source chunk of the same token layout."""
    if not plan.mirrors:
        return None
    live = {p.device for p in plan.programs}
    chunks = {c.index: c for c in plan.chunks}
    lengths = plan.seq_lengths
    layouts: dict[int, list] = {}  # a source chunk's, computed once for all its copies
    replica_devices: dict[int, set] = {}
    for device in plan.devices:
        replica_devices.setdefault(device.replica, set()).add(device.index)

    def layout(chunk: int) -> list:
        return [(x.start, x.stop, lengths[x.seq]) for x in chunks[chunk].slices]

    for mirror in plan.mirrors:
        where = f"mirror of replica {mirror.source} as replica {mirror.replica}"
        pair = (mirror.source, mirror.replica)
        for src, dst in mirror.devices:
            a, b = plan.devices[src], plan.devices[dst]
            if dst in live or a.stage != b.stage or (a.replica, b.replica) != pair:
                return f"{where}: device {dst} cannot repeat device {src}", None
        unpaired = replica_devices.get(mirror.replica, set()) - {dst for _, dst in mirror.devices}
        if unpaired:
            return f"{where}: device {min(unpaired)} repeats no device", None
        for src, dst in mirror.chunks:
            a, b = chunks.get(src), chunks.get(dst)
            if a is None or b is None or a.replica != pair[0] or b.replica != pair[1]:
                return f"{where}: chunk {dst} cannot repeat chunk {src}", None
            x, y = a.slices, b.slices
            if len(x) == 1 == len(y):  # one sequence each (Megatron's micro-batches): directly
                same = (x[0].start == y[0].start and x[0].stop == y[0].stop
                        and lengths[x[0].seq] == lengths[y[0].seq])
            else:
                source = layouts.get(src)
                if source is None:
                    source = layouts[src] = layout(src)
                same = layout(dst) == source
            if not same:
                return f"{where}: chunk {dst} does not have chunk {src}'s token layout", None
    return None


def _check_coverage(plan: Plan):
    """Every chunk is forwarded once per stage and, if it gets gradients, backwarded once: the ops'
    token-layers (a CP-sharded work counts 1/cp on one rank, fully on a lockstep group) add up to
    the chunk's tokens times the stage's layers. Chunks without gradients get no backward. A
    mirrored chunk is covered by its source's ops; every sequence by the chunks' slices."""
    stages = plan.num_stages  # a property over devices: once
    covered = ({}, {})  # F, B: chunk * stages + stage -> token-layers (placement: stage < stages)
    weight: dict = {}  # per Work object: F and B of a chunk share one
    F, B = OpKind.F, OpKind.B
    for program in plan.programs:
        if program.stream != "compute":
            continue
        width = plan.devices[program.device].cp_width  # placement: the ops are its device's
        for kind, stage, chunk, work, part in map(_COVERING, program.ops):
            if (kind is F or kind is B) and part in _COVERED_PARTS:
                share = weight.get(id(work))
                if share is None:
                    share = weight[id(work)] = work.num_tokens * work.num_layers / work.split.cp
                into = covered[kind is B]
                index = chunk * stages + stage
                into[index] = into.get(index, 0) + share * width
    widths = [stop - first for first, stop in plan.stage_layers]
    grad_chunks = plan.grad_chunks
    mirrored = {copy for mirror in plan.mirrors for _, copy in mirror.chunks}  # _check_mirrors
    forwards, backwards = covered
    for chunk in plan.chunks:
        if chunk.index in mirrored:
            continue
        tokens = chunk.num_tokens
        grad = grad_chunks is None or chunk.index in grad_chunks
        base = chunk.index * stages
        for stage, width in enumerate(widths):
            need = tokens * width
            slack = 1e-6 * max(need, 1)
            got = forwards.get(base + stage, 0)
            if abs(got - need) > slack:
                return _uncovered(plan, chunk.index, stage, F, got, need)
            got = backwards.get(base + stage, 0)
            if abs(got - need) > slack if grad else abs(got) > 1e-6:
                return _uncovered(plan, chunk.index, stage, B, got, need if grad else 0)
    seq_tokens = [0] * len(plan.seq_lengths)
    for chunk in plan.chunks:
        for piece in chunk.slices:
            if not 0 <= piece.seq < len(seq_tokens):
                return f"chunk {chunk.index} holds sequence {piece.seq}, not in the batch", None
            seq_tokens[piece.seq] += piece.stop - piece.start
    for seq, length in enumerate(plan.seq_lengths):
        if seq_tokens[seq] != length:
            return f"sequence {seq} has {length} tokens but its slices cover {seq_tokens[seq]}", None
    return None


def _uncovered(plan: Plan, chunk: int, stage: int, kind: OpKind, got: float, want: float):
    """The coverage problem, with the key of the first covering op of ``kind`` of ``chunk`` on
    ``stage`` (None if none)."""
    what = "no backward (it gets no gradient)" if not want else "exactly one per stage"
    first = next((op.key for program in plan.programs if program.stream == "compute"
                  for op in program.ops if op.kind is kind and op.stage == stage
                  and op.chunk == chunk and op.part in _COVERED_PARTS), None)
    return (f"chunk {chunk} has {got:g} of {want} token-layers of {kind.value} on stage {stage} "
            f"(each chunk needs {what})", first)


def _check_deps(plan: Plan):
    """Every dependency names an op of the plan."""
    ops = [op for program in plan.programs for op in program.ops]
    keys = set(map(_KEY, ops))
    covers = keys.issuperset
    for op, deps, start_deps in zip(ops, map(_DEPS, ops), map(_START_DEPS, ops)):
        if not covers(deps) or (start_deps and not covers(start_deps)):
            for dep in deps + start_deps:
                if dep not in keys:
                    return f"op {op.token} on device {op.device} depends on missing op {dep}", op.key
    return None


def _check_acyclic(plan: Plan):
    """Kahn's algorithm over explicit deps (finish and start) plus program order (collectives
    join their members)."""
    preds: dict = defaultdict(set)
    for program in plan.programs:
        prev = None
        for op in program.ops:
            key = op.key
            preds[key].update(op.deps + op.start_deps)
            if prev is not None:
                preds[key].add(prev)
            prev = key
    groups: dict = defaultdict(list)
    for op in plan.ops():
        if op.kind is OpKind.COLL and len(op.group) > 1:
            groups[(op.token, op.group)].append(op.key)
    for members in groups.values():  # a collective starts when all members arrive
        union = set().union(*(preds[m] for m in members)) - set(members)
        for m in members:
            preds[m] = set(union)
    indegree = {k: len(v) for k, v in preds.items()}
    succs: dict = defaultdict(list)
    for key, ps in preds.items():
        for p in ps:
            succs[p].append(key)
    ready = [k for k, n in indegree.items() if n == 0]
    done = 0
    while ready:
        key = ready.pop()
        done += 1
        for nxt in succs[key]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if done != len(indegree):
        stuck = sorted((k for k, n in indegree.items() if n > 0), key=str)
        return f"dependency cycle: {len(stuck)} ops can never start (first: {stuck[0]})", stuck[0]
    return None


def _check_buffers(plan: Plan):
    """Per device, every buffer is freed as often as it is allocated; within one program a buffer
    is not allocated while live nor freed before its allocation (an op may allocate and free one
    buffer: a transient). Buffers may move between streams (a copy frees what a forward made)."""
    balances: dict[int, dict] = {}  # per device: buffer -> allocations less frees
    allocated: dict[int, set] = {}  # per device, every buffer any of its programs allocates:
    # made on first need (a free before its allocation in program order, on another stream)

    def allocated_on(device: int) -> set:
        found = allocated.get(device)
        if found is None:
            found = allocated[device] = {buf for p in plan.programs if p.device == device
                                         for op in p.ops for buf in op.allocs}
        return found

    for program in plan.programs:
        live: set = set()
        device = program.device
        balance = balances.get(device)
        if balance is None:
            balance = balances[device] = {}
        for op in program.ops:
            allocs, frees = _EFFECTS(op)
            if not (allocs or frees):
                continue
            for buf in allocs:
                if buf in live:
                    return f"buffer {buf.name} allocated twice on device {device}", op.key
                live.add(buf)
                balance[buf] = balance.get(buf, 0) + 1
            for buf in frees:
                count = balance[buf] = balance.get(buf, 0) - 1
                if buf in live:
                    live.discard(buf)
                elif count < 0 and buf not in allocated_on(device):
                    return f"op {op.token} frees buffer {buf.name} that is not allocated", op.key
    for device, balance in balances.items():
        for buf, count in balance.items():
            if count > 0:
                where = next(op.key for p in plan.programs if p.device == device for op in p.ops
                             if buf in op.allocs)
                return f"buffer {buf.name} on device {device} is never freed", where
            if count < 0:
                return (f"buffer {buf.name} on device {device} is freed more often than allocated",
                        None)
    return None

