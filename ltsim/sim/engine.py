"""The SimPy engine: one process per device stream replays a Plan against a CostModel.

Rules (DESIGN.md section 2): an op starts when its ``deps`` have finished, its ``start_deps`` have
started and its stream is free (ops of a stream run in program order); a SEND occupies the
sender's comm stream for the link time; a collective with a group of several devices starts when
every member has reached it; memory is charged at an op's start for its ``allocs`` and released
at its end for its ``frees``, on top of the static level, in device or host memory as each buffer
says; a backward over several layers charges part of its context K/V gradients at its end
(``layerwise_deferral``: they accrue layer by layer as its activations are released).

How it runs (issue 13, validation/perf/README.md). The plan is first compiled to flat arrays:
integer op ids, dependency id tuples, and durations and byte counts priced once per distinct
shape of work (ops of equal token layout cost the same whatever their chunk). Each stream's
process then walks its ops keeping its own clock: an op starts at the latest of the stream's
clock and its dependencies' (known) end times, so a process yields to SimPy only when it needs
an op whose times are not known yet (another stream has not reached it), or a collective
partner. Such a wait is an event that fires at the awaited op's end (or start) in simulated
time. A stream whose every op waits only for ops of one compute stream, in that stream's order
(the SENDs of a pipeline), has no process: the compute stream's process computes each of its ops
as soon as the op it waits for is done (``_riders``). Identical DP replicas (equal compiled
programs) are replayed once and their times copied (ltsim/sim/replicas.py); replicas the plan
itself names as mirrors (ltsim/mirrors.py) are not in its programs at all, and the trace names
which device each of them repeats. Deterministic:
times are maxima and sums of priced durations, independent of the order SimPy wakes processes in.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import replace
from heapq import merge
from typing import Any

import simpy

from ltsim.costs import CostModel, duration_s
from ltsim.errors import PlanError
from ltsim.gcpause import paused
from ltsim.mirrors import device_sources, mirrored_gpus
from ltsim.plan import Buffer, Op, OpKey, OpKind, Plan
from ltsim.sim.replicas import barrier_sizes, copy_replicas, replica_classes
from ltsim.trace import EventTable, Trace


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


class Compiled:
    """A plan as the replay reads it: per op, its stream position, duration, memory deltas and
    the integer ids of what it waits for. Built once per plan (``compile_plan``)."""

    __slots__ = ("plan", "ops", "programs", "steps", "static", "host_static")

    def __init__(self, plan: Plan, ops: list[Op], programs: list[tuple[int, str, int, int]],
                 steps: list[tuple], static: list[int], host_static: list[int]) -> None:
        self.plan = plan
        self.ops = ops  # in plan order: op id = position
        self.programs = programs  # (device, stream, first op id, stop op id)
        self.steps = steps  # per op: (dur, alloc, host_alloc, free, host_free, deps, start_deps, coll)
        self.static = static
        self.host_static = host_static  # per device: what it keeps in host memory throughout


class Prices:
    """What a cost model said, by value: a compute op's duration and working-set bytes per (kind,
    cost shape, part, keep), comm durations per comm key, buffer bytes per shape, optimizer steps
    per device, each with the notes (would-be warnings) computing it made. Values only, so sound
    for any plan priced by a cost model of the same ``price_scope``: Engines of one scope share one
    (``shared_prices``: the batches of a run, the points of a sweep, maxlen's probes), and the
    notes of the prices a plan takes from it are made again (``CostModel.renote``), so each run
    warns as if it had priced alone."""

    __slots__ = ("compute", "durations", "buffers", "optimizer")

    def __init__(self) -> None:
        self.compute: dict = {}  # -> (seconds, working-set bytes, notes)
        self.durations: dict = {}  # comm -> (seconds, notes)
        self.buffers: dict = {}
        self.optimizer: dict = {}

    def __len__(self) -> int:
        return len(self.compute) + len(self.durations) + len(self.buffers) + len(self.optimizer)


_SHARED: dict = {}  # price scope -> Prices, the most recently used last
SHARED_SCOPES = 4
SHARED_ENTRIES = 200_000  # per scope, then begun anew: ~65 MB (324 B a price: cache_costs.py)


def shared_prices(cost: CostModel) -> Prices:
    """The Prices of ``cost``'s scope (a new one when it has none, or has grown past
    SHARED_ENTRIES)."""
    scope = cost.price_scope()
    if scope is None:
        return Prices()
    prices = _SHARED.pop(scope, None)
    if prices is None or len(prices) > SHARED_ENTRIES:
        prices = Prices()
    _SHARED[scope] = prices
    while len(_SHARED) > SHARED_SCOPES:
        del _SHARED[next(iter(_SHARED))]
    return prices


def compile_plan(plan: Plan, cost: CostModel, prices: Prices | None = None) -> Compiled:
    """Price every op once per distinct shape and turn keys into integer ids. ``prices``: what
    earlier plans priced with a cost model of ``cost``'s scope, filled in as a side effect."""
    prices = Prices() if prices is None else prices
    ops = [op for program in plan.programs for op in program.ops]
    ids = {op.key: i for i, op in enumerate(ops)}
    # The caches below are keyed by object identity where the plan shares objects (a Work is
    # hashed in Python; an id in C), which is sound while the plan, holding them, is alive here.
    shapes: dict = {}  # id(Work) -> its cost shape
    sized: dict = {}  # id(Buffer) -> its size (a forward's buffer is freed by its backward)
    computed, durations, sizes, optimizer = (prices.compute, prices.durations, prices.buffers,
                                             prices.optimizer)
    noted = cost.noted  # (value, notes) of a call: what each table below stores
    again: set = set()  # the notes of the prices this plan takes: made once, at the end

    def shape(work) -> tuple:
        value = shapes.get(id(work))
        if value is None:
            value = shapes[id(work)] = work.cost_shape()
        return value

    def nbytes(buffers) -> tuple[int, int]:
        dev = hst = 0
        for buf in buffers:
            size = sized.get(id(buf))
            if size is None:
                bkey = (buf.kind, shape(buf.work), buf.keep, buf.host)
                hit = sizes.get(bkey)
                if hit is None:
                    hit = sizes[bkey] = noted(cost.buffer_bytes, buf)
                if hit[1]:
                    again.update(hit[1])
                size = sized[id(buf)] = hit[0]
            if buf.host:
                hst += size
            else:
                dev += size
        return dev, hst

    def price(op: Op) -> float:
        """An optimizer step's or a comm op's seconds (compute ops are priced in the loop)."""
        if op.kind is OpKind.OPT:
            device = plan.devices[op.device]
            hit = optimizer.get(device)
            if hit is None:
                hit = optimizer[device] = noted(cost.optimizer_s, device)
        elif op.comm is not None:  # by comm_key, which sends on other GPUs share (a key by
            ckey = cost.comm_key(op.comm)  # shape and GPUs first cost as much as it saved)
            hit = durations.get(ckey)
            if hit is None:
                hit = durations[ckey] = noted(duration_s, cost, op)
        else:
            return duration_s(cost, op)  # raises: the op carries neither
        if hit[1]:
            again.update(hit[1])
        return hit[0]

    steps = []
    programs = []
    first = 0
    coll_kind = OpKind.COLL
    backward = OpKind.B
    opt = OpKind.OPT

    def device_bytes(buffers) -> int:
        return nbytes(buffers)[0]

    for program in plan.programs:
        pending = {}  # op index -> bytes its end releases less (a deferral of the op before it)
        for i, op in enumerate(program.ops):
            # one unpack rather than an attribute read per field (the fields as plan.Op orders them)
            (kind, _, _, _, _, _, work, keep, part, comm, deps, start_deps, allocs, frees, group,
             key) = op
            alloc, host_alloc = nbytes(allocs) if allocs else (0, 0)
            free, host_free = nbytes(frees) if frees else (0, 0)
            if kind is backward:
                if allocs:
                    deferred, j = layerwise_deferral(program.ops, i, device_bytes)
                    alloc -= deferred
                    if j == i:
                        free -= deferred
                    else:
                        pending[j] = deferred
                if pending and i in pending:
                    free -= pending.pop(i)
            if work is not None and kind is not opt:  # priced once per shape; its working set
                work_shape = shapes.get(id(work))  # is held while it runs (shape(), inline)
                if work_shape is None:
                    work_shape = shapes[id(work)] = work.cost_shape()
                pkey = (kind, work_shape, part, keep)
                hit = computed.get(pkey)
                if hit is None:
                    hit = computed[pkey] = _compute_price(cost, op)
                dur, size, notes = hit
                if notes:
                    again.update(notes)
                alloc += size
                free += size
            else:
                dur = price(op)
                if work is not None:  # an optimizer step naming a work (none does): its working set
                    size, notes = noted(_working_bytes, cost, op)
                    again.update(notes)
                    alloc += size
                    free += size
            try:
                dep_ids = ((ids[deps[0]],) if len(deps) == 1 else tuple([ids[d] for d in deps])
                           if deps else ())
                start_ids = tuple([ids[d] for d in start_deps]) if start_deps else ()
            except KeyError as missing:
                raise PlanError(f"{plan.strategy}: op {key} depends on {missing.args[0]}, which "
                                f"is not in the plan\n{plan.grid(mark=key)}") from None
            coll = (key.token, group) if kind is coll_kind and len(group) > 1 else None
            steps.append((dur, alloc, host_alloc, free, host_free, dep_ids, start_ids, coll))
        stop = first + len(program.ops)
        programs.append((program.device, program.stream, first, stop))
        first = stop
    if again:
        cost.renote(tuple(again))
    static = [cost.static_memory_bytes(d) for d in plan.devices]
    host_static = [cost.static_host_bytes(d) for d in plan.devices]
    return Compiled(plan, ops, programs, steps, static, host_static)


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


def layerwise_deferral(ops: Sequence[Op], i: int,
                       device_bytes: Callable[[Sequence[Buffer]], int]) -> tuple[int, int]:
    """(bytes, index): of the context K/V gradients ("kv_grad") that backward ``ops[i]`` (of one
    program, in order) allocates, the bytes charged at the end of ``ops[index]`` rather than at
    its start. A backward over L layers runs them one by one: layer l's dK/dV of the earlier
    tokens appear when its backward runs, and its stored activations (the "act" or, under full
    recompute, "ckpt" buffers over its layers; not a one-layer recompute working set, which is
    rebuilt for every layer and held to the end) are released once it is done. So in the op the
    level rises by max over layers of (the gradients so far less the activations released so
    far), which for A bytes of gradients and F of activations, each even over the layers, is
    max(A / L, A - F (L - 1) / L): the op's allocs less d = (L - 1) / L x min(A, F). That d is
    charged at its end, where the level is the same as before. A backward split for context
    parallelism (``split_cp``: its attention part, which allocates, then the rest, which
    releases, the next op) defers to the end of the rest. ``device_bytes``: the device bytes of
    some buffers (maxlen.peak_terms splits the peak the same way). (0, i) when nothing is
    deferred."""
    op = ops[i]
    work = op.work
    if op.kind is not OpKind.B or work is None or work.num_layers < 2 or op.part == "dense":
        return 0, i
    grads = device_bytes([b for b in op.allocs if b.kind == "kv_grad"])
    if not grads:
        return 0, i
    j = i
    if op.part == "attn":  # split_cp puts the rest of this backward right after it
        j = i + 1
        rest = ops[j] if j < len(ops) else None
        if (rest is None or rest.kind is not OpKind.B or rest.part != "dense"
                or rest.chunk != op.chunk or rest.work != work):
            return 0, i
    acts = device_bytes([b for b in ops[j].frees if b.kind in _LAYERWISE and b.work.num_layers > 1])
    return (work.num_layers - 1) * min(grads, acts) // work.num_layers, j


def layerwise_deferrals(ops: Sequence[Op], device_bytes: Callable[[Sequence[Buffer]], int]
                        ) -> dict[OpKey, tuple[int, int]]:
    """``layerwise_deferral`` of every backward of one program: per op key, (bytes charged less
    at its start, bytes released less at its end)."""
    out: dict[OpKey, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        if op.kind is OpKind.B and op.allocs:
            deferred, j = layerwise_deferral(ops, i, device_bytes)
            if deferred:
                if j == i:
                    out[op.key] = (deferred, deferred)
                else:
                    out[op.key] = (deferred, 0)
                    out[ops[j].key] = (0, deferred)
    return out


_LAYERWISE = ("act", "ckpt")  # buffers of a backward's layers, released as it passes each


def _working_bytes(cost: CostModel, op: Op) -> int:
    return cost.working_bytes(op.kind, op.work, part=op.part)


def _compute_price(cost: CostModel, op: Op) -> tuple[float, int, tuple]:
    """A compute op's seconds and working-set bytes, with the notes computing them made."""
    seconds, timing = cost.noted(duration_s, cost, op)
    size, sizing = cost.noted(_working_bytes, cost, op)
    return seconds, size, timing + sizing


def mirrors_price_alike(compiled: Compiled, cost: CostModel) -> bool:
    """Whether every comm of a mirrored replica costs what its source's does: on other GPUs a
    send may cross a node boundary its source's does not. Checked once per distinct comm without
    its payload (the cost model reads the GPUs only for the scope: comm_key)."""
    seen = set()
    mirrors = compiled.plan.mirrors
    for op in compiled.ops:
        comm = op.comm
        if comm is None:
            continue
        shape = (comm.collective, comm.tensor, comm.group_size, comm.steps, comm.gpus, comm.pinned)
        if shape in seen:
            continue
        seen.add(shape)
        key = cost.comm_key(comm)
        for mirror in mirrors:
            gpus = mirrored_gpus(mirror, comm.gpus)
            if gpus != comm.gpus and cost.comm_key(comm._replace(gpus=gpus)) != key:
                return False
    return True


def replay(compiled: Compiled, *, only: set[int] | None = None,
           barrier_sizes: dict | None = None) -> tuple[list, list, list[list], list[list]]:
    """Run the compiled plan in SimPy. Returns per op its start and end time (None where it never
    ran) and, per program, its device and host memory deltas as (time, delta) in program order.
    ``only``: the programs to run (the others are identical replicas, ltsim/sim/replicas.py);
    ``barrier_sizes``: how many members each collective then waits for."""
    env = simpy.Environment()
    steps = compiled.steps
    n = len(steps)
    start: list[Any] = [None] * n
    finish: list[Any] = [None] * n
    done_wait: list[Any] = [None] * n  # per op id: the event fired at its end, made when someone
    began_wait: list[Any] = [None] * n  # waits (lists: read for every op, faster than a dict)
    barriers: dict[tuple, _Barrier] = {}
    mem: list[list] = [[] for _ in compiled.programs]
    host_mem: list[list] = [[] for _ in compiled.programs]
    sizes = barrier_sizes or {}

    def wait(table: list, op_id: int) -> _At:
        event = table[op_id]
        if event is None:
            event = table[op_id] = _At(env)
        return event

    riders = _riders(compiled, only)  # op id -> ops of programs that only follow it (below)
    rider_clock = [0.0] * len(compiled.programs)

    def ride(i: int) -> None:
        """The rider ops of op ``i``, just computed: each after its own stream's previous op and
        ``i`` (the last of its dependencies, all in ``i``'s program and so known). Records an
        op as ``run_program`` does, written out again there: that loop runs once per op."""
        for q, j in riders[i]:
            dur, alloc, host_alloc, free, host_free, deps, _, _ = steps[j]
            clock = rider_clock[q]
            for d in deps:
                end = finish[d]
                if end > clock:
                    clock = end
            start[j] = clock
            event = began_wait[j]
            if event is not None:
                event.fire_at(clock)
            end = clock + dur if dur > 0 else clock
            finish[j] = end
            event = done_wait[j]
            if event is not None:
                event.fire_at(end)
            if alloc:
                mem[q].append((clock, alloc))
            if host_alloc:
                host_mem[q].append((clock, host_alloc))
            if free:
                mem[q].append((end, -free))
            if host_free:
                host_mem[q].append((end, -host_free))
            rider_clock[q] = end

    def run_program(first: int, stop: int, mem_out: list, host_out: list):
        clock = 0.0
        for i in range(first, stop):
            dur, alloc, host_alloc, free, host_free, deps, start_deps, coll = steps[i]
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
            if alloc:
                mem_out.append((clock, alloc))
            if host_alloc:
                host_out.append((clock, host_alloc))
            if free:
                mem_out.append((end, -free))
            if host_free:
                host_out.append((end, -host_free))
            clock = end
            if i in riders:
                ride(i)

    ridden = {q for ops in riders.values() for q, _ in ops}
    for p, (_, _, first, stop) in enumerate(compiled.programs):
        if stop > first and (only is None or p in only) and p not in ridden:
            env.process(run_program(first, stop, mem[p], host_mem[p]))
    env.run()
    return start, finish, mem, host_mem


def _riders(compiled: Compiled, only: set[int] | None) -> dict[int, list[tuple[int, int]]]:
    """Programs replayed inside another's process: each of their ops waits only for ops of one
    compute program (no start dependency, no collective), the last of which comes in that program
    no earlier than the last one the op before waited for. A SEND stream does (each send waits
    for the op that produced its tensor). Such an op's times are known as soon as that last
    dependency's are, so the producing program's process computes it then (``ride``), with the
    same times as a process of its own would give, and without the SimPy resumptions of one.
    Returns, per op id, the (program, op id) pairs to compute right after it, in program order."""
    out: dict[int, list[tuple[int, int]]] = {}
    steps = compiled.steps
    programs = compiled.programs
    starts = [first for _, _, first, _ in programs]  # op ids are contiguous per program
    for q, (_, stream, first, stop) in enumerate(programs):
        if stream == "compute" or stop <= first or (only is not None and q not in only):
            continue
        host = low = high = last = -1
        plan: list[tuple[int, int]] = []
        for j in range(first, stop):
            _, _, _, _, _, deps, start_deps, coll = steps[j]
            if start_deps or coll is not None or not deps:
                break
            trigger = max(deps) if len(deps) > 1 else deps[0]
            if host < 0:  # the last program starting at or before it (never an empty one)
                host = bisect_right(starts, trigger) - 1
                low, high = programs[host][2], programs[host][3]
            if not low <= trigger < high or trigger < last or (len(deps) > 1 and min(deps) < low):
                break
            last = trigger
            plan.append((trigger, j))
        else:
            if (host != q and programs[host][1] == "compute"  # a rider's host rides nothing
                    and (only is None or host in only)):
                for trigger, j in plan:
                    out.setdefault(trigger, []).append((q, j))
    return out


def build_trace(compiled: Compiled, start: list, finish: list, mem: list[list],
                host_mem: list[list]) -> Trace:
    """The Trace of a replay: its events (an EventTable, written out sorted by (start, device,
    stream) when read), and each device's memory levels after every change (its streams' deltas
    merged by time, releases first at a tie)."""
    plan, ops = compiled.plan, compiled.ops
    if None in finish:
        missing = [i for i, end in enumerate(finish) if end is None]
        stuck = ops[missing[0]].key
        raise PlanError(f"{plan.strategy}: {len(missing)} ops never ran (deadlock), "
                        f"first {stuck}\n{plan.grid(mark=stuck)}")
    static = compiled.static
    memory = _levels(compiled.programs, mem, static)
    host_memory = _levels(compiled.programs, host_mem, compiled.host_static)
    return Trace(events=EventTable(ops, compiled.programs, start, finish), memory=memory,
                 static_bytes=tuple(static), host_memory=host_memory,
                 host_static_bytes=tuple(compiled.host_static))


def _release_first(change: tuple[float, int]) -> tuple[float, bool]:
    """Across a device's streams, changes at one time apply releases first (as an op's free
    precedes the next op's alloc within a stream); a stream's own changes keep their order."""
    return change[0], change[1] > 0


def _levels(programs, deltas: list[list], base: list[int]) -> tuple[tuple[float, int, int], ...]:
    per_device: dict[int, list[list]] = {}
    for (device, _, _, _), changes in zip(programs, deltas):
        if changes:
            per_device.setdefault(device, []).append(changes)
    out = []
    for device in sorted(per_device):
        level = base[device]
        streams = per_device[device]
        for time_s, delta in (streams[0] if len(streams) == 1
                              else merge(*streams, key=_release_first)):
            level += delta
            out.append((time_s, device, level))
    out.sort(key=lambda sample: sample[0])  # stable: a device's samples keep their order
    return tuple(out)
