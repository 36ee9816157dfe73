"""The SimPy engine: one process per device stream replays a Plan against a CostModel.

Rules (DESIGN.md section 2): an op starts when its ``deps`` have finished, its ``start_deps`` have
started and its stream is free (ops of a stream run in program order); a SEND occupies the
sender's comm stream for the link time; a collective with a group of several devices starts when
every member has reached it; memory is charged at an op's start for its ``allocs`` and released
at its end for its ``frees``, on top of the static level, in device or host memory as each buffer
says. Durations and bytes are priced once per op before the replay, from the op alone.
Deterministic: SimPy orders simultaneous events by insertion, and processes are created in plan
order.
"""

from __future__ import annotations

import gc

import simpy

from ltsim.costs import CostModel, duration_s
from ltsim.errors import PlanError
from ltsim.plan import Op, OpKind, Plan
from ltsim.trace import Event, Trace


class _Barrier:
    """Releases all members of one collective together."""

    __slots__ = ("remaining", "event")

    def __init__(self, env: simpy.Environment, size: int) -> None:
        self.remaining = size
        self.event = env.event()


class Engine:
    """Replays plans. One Engine can run many plans with the same cost model."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost

    def run(self, plan: Plan) -> Trace:
        # The replay allocates many short-lived objects and no cycles: pausing the cyclic garbage
        # collector saves ~25% of the wall time on 10k-op plans (validation/perf/README.md).
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._run(plan)
        finally:
            if paused:
                gc.enable()

    def _run(self, plan: Plan) -> Trace:
        env = simpy.Environment()
        cost = self.cost
        finish_needed = {dep for op in plan.ops() for dep in op.deps}
        start_needed = {dep for op in plan.ops() for dep in op.start_deps}
        done = {key: env.event() for key in finish_needed}
        began = {key: env.event() for key in start_needed}
        static = [cost.static_memory_bytes(d) for d in plan.devices]
        level = list(static)
        host = [0] * plan.num_devices
        memory: list[tuple[float, int, int]] = []
        host_memory: list[tuple[float, int, int]] = []
        events: list[Event] = []
        barriers: dict[tuple, _Barrier] = {}
        sizes: dict = {}
        prices: dict = {}
        kind_text = {k: k.value for k in OpKind}

        def nbytes(buffers) -> tuple[int, int]:
            if not buffers:
                return 0, 0
            dev = hst = 0
            for buf in buffers:
                size = sizes.get(buf)
                if size is None:
                    size = sizes[buf] = cost.buffer_bytes(buf)
                if buf.host:
                    hst += size
                else:
                    dev += size
            return dev, hst

        def price(op: Op) -> float:
            if op.kind is OpKind.OPT:
                return cost.optimizer_s(plan.devices[op.device])
            if op.work is None:
                return duration_s(cost, op)
            pkey = (op.kind, op.work, op.part, op.keep)  # ops of one work share a price
            value = prices.get(pkey)
            if value is None:
                value = prices[pkey] = duration_s(cost, op)
            return value

        def step(op: Op):
            key = op.key
            waits = tuple(done[d] for d in op.deps)
            if op.start_deps:
                waits += tuple(began[d] for d in op.start_deps)
            coll = (key.token, op.group) if op.kind is OpKind.COLL and len(op.group) > 1 else None
            alloc, host_alloc = nbytes(op.allocs)
            free, host_free = nbytes(op.frees)
            if op.work is not None:  # an op's working set is held while it runs
                working = cost.working_bytes(op.kind, op.work, part=op.part)
                alloc, free = alloc + working, free + working
            return (key.token, kind_text[key.kind], key.stage, key.chunk, waits, price(op),
                    (alloc, host_alloc), (free, host_free), coll, done.get(key), began.get(key))

        def arrive(coll, size: int):
            barrier = barriers.get(coll)
            if barrier is None:
                barrier = barriers[coll] = _Barrier(env, size)
            barrier.remaining -= 1
            if barrier.remaining == 0:
                barrier.event.succeed()
            return barrier.event

        def run_program(device: int, stream: str, steps):
            for (token, kind, stage, chunk, waits, dur, (alloc, host_alloc), (free, host_free), coll,
                 finished, started) in steps:
                for event in waits:
                    if not event.processed:
                        yield event
                if coll is not None:
                    yield arrive(coll, len(coll[1]))
                start = env.now
                if started is not None:
                    started.succeed()
                if alloc:
                    level[device] += alloc
                    memory.append((start, device, level[device]))
                if host_alloc:
                    host[device] += host_alloc
                    host_memory.append((start, device, host[device]))
                if dur > 0:
                    yield env.timeout(dur)
                if free:
                    level[device] -= free
                    memory.append((env.now, device, level[device]))
                if host_free:
                    host[device] -= host_free
                    host_memory.append((env.now, device, host[device]))
                events.append(Event(device, stream, token, kind, stage, chunk, start, env.now))
                if finished is not None:
                    finished.succeed()

        for program in plan.programs:
            if program.ops:
                steps = [step(op) for op in program.ops]
                env.process(run_program(program.device, program.stream, steps))
        env.run()
        expected = sum(len(p.ops) for p in plan.programs)
        if len(events) != expected:
            ran = {(e.device, e.token) for e in events}
            stuck = next(op.key for op in plan.ops() if (op.device, op.token) not in ran)
            raise PlanError(f"{plan.strategy}: {expected - len(events)} ops never ran (deadlock), "
                            f"first {stuck}\n{plan.grid(mark=stuck)}")
        events.sort(key=lambda e: (e.start_s, e.device, e.stream))
        return Trace(events=tuple(events), memory=tuple(memory), static_bytes=tuple(static),
                     host_memory=tuple(host_memory))
