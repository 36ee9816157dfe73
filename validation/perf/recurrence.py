"""The reference the engine's replay is timed against (issue 13): a plain list-scheduling
recurrence over the same compiled plan, with no SimPy.

Each stream's ops run in order; an op starts at the latest of its stream's clock, its
dependencies' ends, the starts of its start-dependencies and, for a collective, every member's
arrival. The streams are swept round-robin, each advancing as far as its inputs are known, until
nothing moves. It must give the engine's start and end of every op, hence the same makespan and
memory peaks (``check`` asserts it).
"""

from __future__ import annotations

from ltsim.sim.engine import Compiled


def recurrence(compiled: Compiled) -> tuple[list, list]:
    """Start and end time of every op (None for ops that never run: a deadlock)."""
    dur, deps_of, starts_of, colls = (compiled.dur, compiled.deps, compiled.start_deps,
                                      compiled.coll)
    n = len(dur)
    start: list = [None] * n
    finish: list = [None] * n
    programs = [rows for _, _, rows in compiled.programs if rows]
    position = [0] * len(programs)
    clock = [0.0] * len(programs)
    arrivals: dict = {}  # collective -> [members arrived, latest arrival]
    arrived: set = set()
    moved = True
    while moved:
        moved = False
        for p, rows in enumerate(programs):
            k, t = position[p], clock[p]
            while k < len(rows):
                i = rows[k]
                ready = t
                blocked = False
                for d in deps_of[i]:
                    end = finish[d]
                    if end is None:
                        blocked = True
                        break
                    ready = max(ready, end)
                if not blocked:
                    for d in starts_of[i]:
                        begin = start[d]
                        if begin is None:
                            blocked = True
                            break
                        ready = max(ready, begin)
                if blocked:
                    break
                coll = colls[i]
                if coll is not None:
                    entry = arrivals.setdefault(coll, [0, 0.0])
                    if i not in arrived:
                        arrived.add(i)
                        entry[0] += 1
                        entry[1] = max(entry[1], ready)
                    if entry[0] < len(coll[1]):
                        break
                    ready = entry[1]
                start[i] = ready
                t = finish[i] = ready + dur[i] if dur[i] > 0 else ready
                k += 1
                moved = True
            position[p], clock[p] = k, t
    return start, finish


def check(compiled: Compiled, engine_start: list, engine_finish: list) -> tuple[list, list]:
    """Run the recurrence and assert it times every op as the engine did."""
    start, finish = recurrence(compiled)
    if start != engine_start or finish != engine_finish:
        bad = next(i for i in range(len(start))
                   if start[i] != engine_start[i] or finish[i] != engine_finish[i])
        raise AssertionError(f"recurrence and engine differ at op {compiled.table.key(bad)}: "
                             f"{start[bad]}-{finish[bad]} vs {engine_start[bad]}-{engine_finish[bad]}")
    return start, finish
