"""Plan validation rules (used by Plan.validate): coverage, dependencies, acyclicity, memory pairing."""

from __future__ import annotations

from collections import Counter, defaultdict

from ltsim.plan import OpKind, Plan


def check_plan(plan: Plan, *, check_cycles: bool = True) -> tuple[str, str | None] | None:
    """The first problem found as (message, key of the offending op), or None when the plan is valid."""
    rules = (_check_unique, _check_coverage, _check_deps, _check_acyclic, _check_buffers)
    for rule in rules if check_cycles else tuple(r for r in rules if r is not _check_acyclic):
        problem = rule(plan)
        if problem is not None:
            return problem
    return None


def _check_unique(plan: Plan):
    seen: set[str] = set()
    for op in plan.ops():
        if op.key in seen:
            return f"op {op.token} appears twice on device {op.device}", op.key
        seen.add(op.key)
        if op.device >= plan.num_devices or plan.device_stage[op.device] != op.stage:
            return f"op {op.token} runs on device {op.device}, which does not hold stage {op.stage}", op.key
    return None


def _check_coverage(plan: Plan):
    counts: Counter = Counter()
    first_key: dict = {}
    for op in plan.ops():
        if op.kind in (OpKind.F, OpKind.B):
            counts[(op.kind, op.stage, op.chunk)] += 1
            first_key.setdefault((op.kind, op.stage, op.chunk), op.key)
    for chunk in plan.chunks:
        for stage in range(plan.num_stages):
            for kind in (OpKind.F, OpKind.B):
                n = counts[(kind, stage, chunk.index)]
                if n != 1:
                    return (f"chunk {chunk.index} has {n} {kind.value} ops on stage {stage} "
                            f"(each chunk needs exactly one per stage)",
                            first_key.get((kind, stage, chunk.index)))
    seq_tokens: Counter = Counter()
    for chunk in plan.chunks:
        for piece in chunk.slices:
            seq_tokens[piece.seq] += piece.num_tokens
    for seq, length in enumerate(plan.seq_lengths):
        if seq_tokens[seq] != length:
            return f"sequence {seq} has {length} tokens but its slices cover {seq_tokens[seq]}", None
    return None


def _check_deps(plan: Plan):
    keys = {op.key for op in plan.ops()}
    for op in plan.ops():
        for dep in op.deps:
            if dep not in keys:
                return f"op {op.token} on device {op.device} depends on missing op {dep}", op.key
    return None


def _check_acyclic(plan: Plan):
    """Kahn's algorithm over explicit deps plus program order (collectives join their members)."""
    preds: dict[str, set[str]] = defaultdict(set)
    for program in plan.programs:
        prev = None
        for op in program.ops:
            preds[op.key].update(op.deps)
            if prev is not None:
                preds[op.key].add(prev)
            prev = op.key
    groups: dict[tuple, list[str]] = defaultdict(list)
    for op in plan.ops():
        if op.kind is OpKind.COLL:
            groups[(op.token, op.group)].append(op.key)
    for members in groups.values():  # a collective starts when all members arrive
        union = set().union(*(preds[m] for m in members)) - set(members)
        for m in members:
            preds[m] = set(union)
    indegree = {k: len(v) for k, v in preds.items()}
    succs: dict[str, list[str]] = defaultdict(list)
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
        stuck = sorted(k for k, n in indegree.items() if n > 0)
        return f"dependency cycle: {len(stuck)} ops can never start (first: {stuck[0]})", stuck[0]
    return None


def _check_buffers(plan: Plan):
    """Walk each program in order: allocate only what is not live, free only what is live, and
    leave nothing live at the end (an op may allocate and free one buffer: a transient)."""
    for program in plan.programs:
        live: dict[str, str] = {}
        for op in program.ops:
            for buf in op.allocs:
                if buf.name in live:
                    return f"buffer {buf.name} allocated twice on device {op.device}", op.key
                live[buf.name] = op.key
            for buf in op.frees:
                if buf.name not in live:
                    return f"op {op.token} frees buffer {buf.name} that is not allocated", op.key
                del live[buf.name]
        if live:
            name, key = sorted(live.items())[0]
            return f"buffer {name} on device {program.device} is never freed", key
    return None
