"""The SimPy engine: one process per device stream replays a Plan against a CostModel.

Rules (DESIGN.md section 2): an op starts when its ``deps`` have finished, its ``start_deps`` have
started and its stream is free (ops of a stream run in program order); a SEND occupies the
sender's comm stream for the link time; a collective with a group of several devices starts when
every member has reached it; memory is charged at an op's start for its ``allocs`` and released
at its end for its ``frees``, on top of the static level, in device or host memory as each buffer
says; a backward over several layers charges part of its context K/V gradients at its end
(ltsim/sim/layerwise.py: they accrue layer by layer as its activations are released).

How it runs (issue 13, validation/perf/README.md). The plan's rows (ltsim/optable.py) are first
priced (ltsim/sim/compile.py): durations and byte counts once per distinct shape of work (ops of
equal token layout cost the same whatever their chunk), dependencies as row ids. Each stream's
process then walks its rows keeping its own clock: an op starts at the latest of the stream's
clock and its dependencies' (known) end times, so a process yields to SimPy only when it needs
an op whose times are not known yet (another stream has not reached it), or a collective
partner. Such a wait is an event that fires at the awaited op's end (or start) in simulated
time. A stream whose every op waits only for ops of one compute stream, in that stream's order
(the SENDs of a pipeline), has no process: the compute stream's process computes each of its ops
as soon as the op it waits for is done (``_riders``). Identical DP replicas (equal compiled
programs) are replayed once and their times copied (ltsim/sim/replicas.py); replicas the plan
itself names as mirrors (ltsim/mirrors.py) are not in its programs at all, and the trace names
which device each of them repeats. The memory changes are made from the start and end times
after the run. Deterministic: times are maxima and sums of priced durations, independent of the
order SimPy wakes processes in.
"""

from __future__ import annotations

from dataclasses import replace
from heapq import merge
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import simpy

from ltsim.costs import CostModel
from ltsim.errors import PlanError
from ltsim.gcpause import paused
from ltsim.mirrors import device_sources, mirrored_gpus
import ltsim.optable as optable
from ltsim.optable import ints
from ltsim.plan import Plan
from ltsim.sim.compile import (  # noqa: F401 (the names the engine's readers import from it)
    _SHARED, Compiled, Prices, compile_plan, shared_prices)
from ltsim.sim.replicas import barrier_sizes, copy_replicas, replica_classes
from ltsim.trace import EventTable, Samples, Trace


class _At(simpy.Event):
    """An event that fires at a simulated time known only later: when the op it stands for is
    reached by its stream (SimPy's Timeout, with its delay set after creation)."""

    __slots__ = ()

    def fire_at(self, time_s: float) -> None:
        self._ok = True
        self._value = None
        env = self.env
        env.schedule(self, delay=max(0.0, time_s - env.now))


class _Barrier:
    """The members of one collective: how many have not arrived, the latest arrival, and the
    event the early ones wait on."""

    __slots__ = ("remaining", "time_s", "event")

    def __init__(self, env: simpy.Environment, size: int) -> None:
        self.remaining = size
        self.time_s = 0.0
        self.event = _At(env)


class Engine:
    """Replays plans. One Engine can run many plans with the same cost model."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.prices = shared_prices(cost)  # with every engine of the same price scope

    def run(self, plan: Plan) -> Trace:
        with paused():  # many short-lived objects and no cycles (ltsim/gcpause.py)
            compiled = compile_plan(plan, self.cost, self.prices)
            if plan.mirrors and not mirrors_price_alike(compiled, self.cost):
                return self.run(plan.expand())
            classes = replica_classes(plan, compiled)
            if classes is None:
                sizes = (barrier_sizes(compiled, set(range(len(compiled.programs))))
                         if plan.mirrors else None)  # the mirrors' members do not arrive
                trace = build_trace(compiled, *replay(compiled, barrier_sizes=sizes))
            else:
                only = {p for members in classes for p in members[0]}  # one replica per class
                start, finish, mem, host_mem = replay(compiled, only=only,
                                                      barrier_sizes=barrier_sizes(compiled, only))
                copy_replicas(compiled, classes, start, finish, mem, host_mem)
                trace = build_trace(compiled, start, finish, mem, host_mem)
            if plan.mirrors:
                trace = replace(trace, mirror_of=device_sources(plan))
            return trace


def mirrors_price_alike(compiled: Compiled, cost: CostModel) -> bool:
    """Whether every comm of a mirrored replica costs what its source's does: on other GPUs a
    send may cross a node boundary its source's does not. Checked once per distinct comm without
    its payload (the cost model reads the GPUs only for the scope: comm_key)."""
    comms = compiled.table.comms
    reps = list(dict(zip(zip(comms.cls, comms.gpus), range(len(comms)))).values())
    gpus = np.array([comms.gpus[c] for c in reps], dtype=np.int64).reshape(-1, 2)
    scopes = getattr(cost, "comm_scopes", None)
    for mirror in compiled.plan.mirrors:
        ranges = np.array(mirror.gpus, dtype=np.int64).reshape(-1, 2)
        inside = ((gpus[:, :, None] >= ranges[:, 0]) & (gpus[:, :, None] <= ranges[:, 1])).any(2)
        moved = inside.all(axis=1)  # both ends in the source replica: shifted with it
        if not moved.any():
            continue
        if scopes is not None:  # the key reads the GPUs only through their scope
            low, high = gpus[moved, 0], gpus[moved, 1]
            if (np.asarray(scopes(low, high)) != np.asarray(scopes(low + mirror.gpu_shift,
                                                               high + mirror.gpu_shift))).any():
                return False
            continue
        for c in np.array(reps)[moved].tolist():
            comm = comms[c]  # one of each class and GPUs (payloads ignored)
            shifted = mirrored_gpus(mirror, comm.gpus)
            if cost.comm_key(comm._replace(gpus=shifted)) != cost.comm_key(comm):
                return False
    return True


def replay(compiled: Compiled, *, only: set[int] | None = None,
           barrier_sizes: dict | None = None) -> tuple[list, list, list[list], list[list]]:
    """Run the compiled plan in SimPy. Returns per op (row) its start and end time (None where
    it never ran) and, per program, its device and host memory deltas as (time, delta) in
    program order (an op's allocations at its start, its releases at its end).
    ``only``: the programs to run (the others are identical replicas, ltsim/sim/replicas.py);
    ``barrier_sizes``: how many members each collective then waits for."""
    env = simpy.Environment()
    n = len(compiled.dur)
    steps = list(zip(compiled.dur, compiled.deps, compiled.start_deps, compiled.coll,
                     compiled.memory))
    mem: list[list] = [[] for _ in compiled.programs]
    host_mem: list[list] = [[] for _ in compiled.programs]
    start: list[Any] = [None] * n
    finish: list[Any] = [None] * n
    done_wait: list[Any] = [None] * n  # per row: the event fired at its end, made when someone
    began_wait: list[Any] = [None] * n  # waits (lists: read for every op, faster than a dict)
    barriers: dict[tuple, _Barrier] = {}
    sizes = barrier_sizes or {}

    def wait(table: list, row: int) -> _At:
        event = table[row]
        if event is None:
            event = table[row] = _At(env)
        return event

    # per row, the rows of programs that only follow it (below): the first, and after each the
    # next; per rider row its program
    first_rider, next_rider, rider_program, ridden = _riders(compiled, only)
    rider_clock = [0.0] * len(compiled.programs)

    def run_program(rows: list[int], changes: list, host_changes: list):
        clock = 0.0
        for i in rows:
            dur, deps, start_deps, coll, memory = steps[i]
            for d in deps:
                end = finish[d]
                if end is None:
                    yield wait(done_wait, d)
                    end = finish[d]
                if end > clock:
                    clock = end
            for d in start_deps:
                begin = start[d]
                if begin is None:
                    yield wait(began_wait, d)
                    begin = start[d]
                if begin > clock:
                    clock = begin
            if coll is not None:
                barrier = barriers.get(coll)
                if barrier is None:
                    size = sizes.get(coll, 0) or len(coll[1])
                    barrier = barriers[coll] = _Barrier(env, size)
                barrier.remaining -= 1
                if clock > barrier.time_s:
                    barrier.time_s = clock
                if barrier.remaining:
                    yield barrier.event
                else:
                    barrier.event.fire_at(barrier.time_s)
                clock = barrier.time_s
            start[i] = clock
            event = began_wait[i]
            if event is not None:
                event.fire_at(clock)
            end = clock + dur if dur > 0 else clock
            finish[i] = end
            event = done_wait[i]
            if event is not None:
                event.fire_at(end)
            if memory is not None:  # allocations at the start, releases at the end
                alloc, host_alloc, free, host_free = memory
                if alloc:
                    changes.append((clock, alloc))
                if host_alloc:
                    host_changes.append((clock, host_alloc))
                if free:
                    changes.append((end, -free))
                if host_free:
                    host_changes.append((end, -host_free))
            clock = end
            j = first_rider[i]
            # rider ops, right after the op they follow: each after its own stream's previous
            # op and this one (the last of its dependencies, all in this program and so known),
            # timed as above (written out again: this loop runs once per op)
            while j >= 0:
                q = rider_program[j]
                dur, deps, _, _, memory = steps[j]
                ride = rider_clock[q]
                for d in deps:
                    end = finish[d]
                    if end > ride:
                        ride = end
                start[j] = ride
                event = began_wait[j]
                if event is not None:
                    event.fire_at(ride)
                end = ride + dur if dur > 0 else ride
                finish[j] = end
                event = done_wait[j]
                if event is not None:
                    event.fire_at(end)
                if memory is not None:
                    alloc, host_alloc, free, host_free = memory
                    if alloc:
                        mem[q].append((ride, alloc))
                    if host_alloc:
                        host_mem[q].append((ride, host_alloc))
                    if free:
                        mem[q].append((end, -free))
                    if host_free:
                        host_mem[q].append((end, -host_free))
                rider_clock[q] = end
                j = next_rider[j]

    replayed = [p for p, (_, _, rows) in enumerate(compiled.programs)
                if rows and (only is None or p in only)]
    for p in replayed:
        if p not in ridden:
            env.process(run_program(compiled.programs[p][2], mem[p], host_mem[p]))
    env.run()
    return start, finish, mem, host_mem


class Riders(NamedTuple):
    """Which ops ride after which (``_riders``): per row the first row to compute right after it
    and, per rider row, the next one after the same row (-1: none), in program order; per rider
    row its program; the programs that ride."""

    first: list[int]
    next: list[int]
    program: list[int]
    ridden: set[int]

    @classmethod
    def none(cls, n: int) -> Riders:
        return cls([-1] * n, [-1] * n, [-1] * n, set())

    def after(self, row: int) -> list[int]:
        """The rows computed right after ``row``, in order."""
        out, j = [], self.first[row]
        while j >= 0:
            out.append(j)
            j = self.next[j]
        return out

    def ride(self, q: int, triggers: list[int], rows: list[int]) -> None:
        """Program ``q``'s ``rows`` ride after their ``triggers`` (one each)."""
        first, after = self.first, self.next
        list(map(self.program.__setitem__, rows, [q] * len(rows)))
        self.ridden.add(q)
        if (list(map(first.__getitem__, triggers)).count(-1) == len(triggers)
                and len(set(triggers)) == len(triggers)):  # (a SEND stream's: each op its own)
            list(map(first.__setitem__, triggers, rows))
            return
        for trigger, j in zip(triggers, rows):
            last = first[trigger]
            if last < 0:
                first[trigger] = j
                continue
            while after[last] >= 0:
                last = after[last]
            after[last] = j


def _riders(compiled: Compiled, only: set[int] | None) -> Riders:
    """Programs replayed inside another's process: each of their ops waits only for ops of one
    compute program (no start dependency, no collective), the last of which comes in that program
    no earlier than the last one the op before waited for. A SEND stream does (each send waits
    for the op that produced its tensor). Such an op's times are known as soon as that last
    dependency's are, so the producing program's process computes it then (``ride``), with the
    same times as a process of its own would give, and without the SimPy resumptions of one.
    Returns them as :class:`Riders`."""
    if len(compiled.dur) < optable.SMALL:
        return _riders_rows(compiled, only)
    programs = compiled.programs
    n = len(compiled.dur)
    out = Riders.none(n)
    program_of = np.full(n, -1, dtype=np.int64)  # per row of a compute program: its program
    position = np.zeros(n, dtype=np.int64)  # and its place there
    for p, (_, stream, rows) in enumerate(programs):
        if stream == "compute" and rows:
            mine = ints(rows)
            program_of[mine] = p
            position[mine] = np.arange(len(rows))
    deps, start_deps, coll = compiled.deps, compiled.start_deps, compiled.coll
    for q, (_, stream, rows) in enumerate(programs):
        if stream == "compute" or not rows or (only is not None and q not in only):
            continue
        waits = [deps[j] for j in rows]
        if (list(map(len, waits)).count(1) == len(rows)
                and [start_deps[j] for j in rows].count(()) == len(rows)
                and [coll[j] for j in rows].count(None) == len(rows)):
            triggers = np.fromiter(map(itemgetter(0), waits), np.int64, len(rows))
        else:
            triggers = _triggers(waits, [start_deps[j] for j in rows], [coll[j] for j in rows],
                                 program_of, position)
            if triggers is None:
                continue
        host = program_of[triggers]
        if (host[0] < 0 or (host != host[0]).any() or host[0] == q
                or (np.diff(position[triggers]) < 0).any()
                or (only is not None and int(host[0]) not in only)):
            continue
        out.ride(q, triggers.tolist(), rows)
    return out


def _riders_rows(compiled: Compiled, only: set[int] | None) -> Riders:
    """``_riders`` op by op."""
    programs = compiled.programs
    out = Riders.none(len(compiled.dur))
    program_of: dict[int, int] = {}
    position: dict[int, int] = {}
    for p, (_, stream, rows) in enumerate(programs):
        if stream == "compute":
            for i, row in enumerate(rows):
                program_of[row] = p
                position[row] = i
    deps, start_deps, coll = compiled.deps, compiled.start_deps, compiled.coll
    for q, (_, stream, rows) in enumerate(programs):
        if stream == "compute" or not rows or (only is not None and q not in only):
            continue
        host = last = -1
        plan: list[tuple[int, int]] = []
        for j in rows:
            waits = deps[j]
            if start_deps[j] or coll[j] is not None or not waits:
                break
            where = program_of.get(waits[0], -1)
            if where < 0 or any(program_of.get(d, -2) != where for d in waits[1:]):
                break
            trigger = max(waits, key=position.__getitem__)
            if (host >= 0 and where != host) or position[trigger] < last:
                break
            host, last = where, position[trigger]
            plan.append((trigger, j))
        else:
            if host != q and (only is None or host in only):
                out.ride(q, [t for t, _ in plan], [j for _, j in plan])
    return out


def _triggers(waits: list[tuple], starts: list[tuple], colls: list, program_of: np.ndarray,
              position: np.ndarray) -> np.ndarray | None:
    """Per op of a program, the one of its dependencies (all in one program) that comes last
    there; None when an op has none, a start dependency, a collective or dependencies in
    several programs."""
    out = []
    for need, start, coll in zip(waits, starts, colls):
        if start or coll is not None or not need:
            return None
        where = program_of[list(need)]
        if (where != where[0]).any():
            return None
        out.append(need[int(np.argmax(position[list(need)]))])
    return ints(out)


def build_trace(compiled: Compiled, start: list, finish: list, mem: list[list],
                host_mem: list[list]) -> Trace:
    """The Trace of a replay: its events (an EventTable, written out sorted by (start, device,
    stream) when read), and each device's memory levels after every change (its streams' deltas
    merged by time, releases first at a tie)."""
    plan = compiled.plan
    if None in finish:
        missing = [i for i, end in enumerate(finish) if end is None]
        stuck = compiled.table.key(missing[0])
        raise PlanError(f"{plan.strategy}: {len(missing)} ops never ran (deadlock), "
                        f"first {stuck}\n{plan.grid(mark=stuck)}")
    static = compiled.static
    memory = _levels(compiled.programs, mem, static)
    host_memory = _levels(compiled.programs, host_mem, compiled.host_static)
    return Trace(events=EventTable(compiled.table, start, finish), memory=memory,
                 static_bytes=tuple(static), host_memory=host_memory,
                 host_static_bytes=tuple(compiled.host_static))


def _release_first(change: tuple[float, int]) -> tuple[float, bool]:
    """Across a device's streams, changes at one time apply releases first (as an op's free
    precedes the next op's alloc within a stream); a stream's own changes keep their order."""
    return change[0], change[1] > 0


def _levels(programs, deltas: list[list], base: list[int]) -> Samples:
    """Each device's level after every change (its streams' changes merged by time, releases
    first at a tie), all devices' samples sorted by time (a device's keep their order), with
    each device's highest and last level."""
    per_device: dict[int, list[list]] = {}
    for (device, _, _), changes in zip(programs, deltas):
        if changes:
            per_device.setdefault(device, []).append(changes)
    if sum(map(len, deltas)) < optable.SMALL:  # sample by sample
        out, peaks, finals = [], {}, {}
        for device in sorted(per_device):
            level = peak = base[device]
            streams = per_device[device]
            for time_s, delta in (streams[0] if len(streams) == 1
                                  else merge(*streams, key=_release_first)):
                level += delta
                peak = max(peak, level)
                out.append((time_s, device, level))
            peaks[device], finals[device] = peak, level
        out.sort(key=itemgetter(0))  # stable: a device's samples keep their order
        return Samples(out, peaks, finals)
    times, devices, levels = [], [], []
    peaks, finals = {}, {}
    for device in sorted(per_device):
        streams = per_device[device]
        changes = streams[0] if len(streams) == 1 else list(merge(*streams, key=_release_first))
        when, delta = zip(*changes)
        level = np.cumsum(ints(delta)) + base[device]
        peaks[device], finals[device] = int(level.max()), int(level[-1])
        times.append(np.fromiter(when, float, len(when)))
        devices.append(np.full(len(when), device, dtype=np.int64))
        levels.append(level)
    if not times:
        return Samples((), peaks, finals)
    time_s = np.concatenate(times)
    order = np.argsort(time_s, kind="stable")
    return Samples(zip(time_s[order].tolist(), np.concatenate(devices)[order].tolist(),
                       np.concatenate(levels)[order].tolist()), peaks, finals)
