"""Identical DP replicas replayed once (issue 13).

Two DP replicas are identical when their programs, compiled (ltsim.sim.engine.compile_plan), are
equal step for step: the same durations and memory deltas, dependencies on the same positions
within the replica, collectives over the same members. Replicas meet only in collectives (the DP
gradient reduction, ZeRO gathers), and a collective starts at its members' latest arrival, so
identical replicas keep identical timelines: the engine replays one replica of each class, the
collectives counting only the members it replays, and copies its times and memory changes to the
others. A plan with a dependency across replicas is replayed whole.
"""

from __future__ import annotations

from ltsim.plan import Plan


def replica_classes(plan: Plan, compiled) -> list[list[list[int]]] | None:
    """Replicas grouped by identity: per class, per replica, its program indices (in plan order).
    None when there is nothing to share (one replica, all distinct) or a dependency crosses
    replicas."""
    replica_of = [d.replica for d in plan.devices]
    programs: dict[int, list[int]] = {}
    for p, (device, _, _) in enumerate(compiled.programs):
        programs.setdefault(replica_of[device], []).append(p)
    if len(programs) < 2 or _all_distinct(plan, programs.keys()):
        return None
    position = {}  # row -> (program position within its replica, offset in the program)
    owner = {}  # row -> replica
    for replica, mine in programs.items():
        for k, p in enumerate(mine):
            for offset, row in enumerate(compiled.programs[p][2]):
                position[row] = (k, offset)
                owner[row] = replica
    device_position = {}
    for replica, mine in programs.items():
        for k, p in enumerate(mine):
            device_position.setdefault(compiled.programs[p][0], (replica, k))
    classes: dict[tuple, list[list[int]]] = {}
    dur, memory = compiled.dur, compiled.memory
    deps_of, starts_of, colls = compiled.deps, compiled.start_deps, compiled.coll
    for replica, mine in programs.items():
        signature = []
        for p in mine:
            device, stream, rows = compiled.programs[p]
            signature.append(stream)
            for i in rows:
                deps, start_deps, coll = deps_of[i], starts_of[i], colls[i]
                for d in deps + start_deps:
                    if owner[d] != replica:
                        return None  # replicas interact beyond collectives: replay them all
                members = None
                if coll is not None:  # who it waits for: its own replica's members, by position
                    members = (len(coll[1]), tuple(sorted(
                        device_position[d][1] for d in coll[1]
                        if device_position.get(d, (None,))[0] == replica)))  # mirrors: absent
                signature.append((dur[i], memory[i],
                                  tuple(position[d] for d in deps),
                                  tuple(position[d] for d in start_deps), members))
        classes.setdefault(tuple(signature), []).append(mine)
    if len(classes) == len(programs):
        return None
    return list(classes.values())


def _all_distinct(plan: Plan, replicas) -> bool:
    """Whether every replica's chunks have a token layout no other replica's have (then no two
    can be identical, and the op-by-op comparison is skipped: 0.18 s of a 2.9 s simulation of
    distinct replicas, validation/perf/phases.py). False when unsure (chunks not marked by
    replica)."""
    layouts: dict[int, list] = {}
    mirrored = {m.replica for m in plan.mirrors}  # not in the programs (ltsim/mirrors.py)
    for chunk in plan.chunks:
        if chunk.replica in mirrored:
            continue
        layouts.setdefault(chunk.replica, []).append(
            tuple((piece.start, piece.stop) for piece in chunk.slices))
    if layouts.keys() != set(replicas):
        return False
    return len({tuple(chunks) for chunks in layouts.values()}) == len(layouts)


def barrier_sizes(compiled, replayed: set[int]) -> dict:
    """How many members each collective of the replayed programs waits for: those replayed."""
    devices = {compiled.programs[p][0] for p in replayed}
    sizes = {}
    for p in replayed:
        for i in compiled.programs[p][2]:
            coll = compiled.coll[i]
            if coll is not None and coll not in sizes:
                sizes[coll] = sum(1 for d in coll[1] if d in devices)
    return sizes


def copy_replicas(compiled, classes, start: list, finish: list, mem: list, host_mem: list) -> None:
    """Give every replica of a class its first replica's op times and memory changes (in place)."""
    for members in classes:
        source = members[0]
        for copy in members[1:]:
            for p, q in zip(source, copy):
                for a, b in zip(compiled.programs[p][2], compiled.programs[q][2]):
                    start[b] = start[a]
                    finish[b] = finish[a]
                mem[q], host_mem[q] = mem[p], host_mem[p]
