"""The SimPy engine: one process per device stream replays a Plan against a CostModel.

Rules (DESIGN.md section 2): an op starts when its dependencies have finished and its stream is
free (ops of a stream run in program order); a SEND occupies the sender's comm stream for the link
time; a collective starts when every member device has reached it; memory is charged at an op's
start for its ``allocs`` and released at its end for its ``frees``, on top of the static level.
Deterministic: SimPy orders simultaneous events by insertion, and processes are created in
plan order.
"""

from __future__ import annotations

import gc

import simpy

from ltsim.costs import CostModel
from ltsim.plan import Op, OpKind, Plan
from ltsim.sim.trace import Event, Trace


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
        ops = list(plan.ops())
        needed = {dep for op in ops for dep in op.deps}
        done = {key: env.event() for key in needed}  # only ops that something waits for
        static = [self.cost.static_memory_bytes(d, plan) for d in range(plan.num_devices)]
        level = list(static)
        memory: list[tuple[float, int, int]] = []
        events: list[Event] = []
        barriers: dict[tuple, _Barrier] = {}
        nbytes = self._buffer_sizer(plan)
        steps = {id(op): (tuple(done[d] for d in op.deps), self.cost.duration_s(op, plan),
                          sum(map(nbytes, op.allocs)), sum(map(nbytes, op.frees)),
                          op.kind is OpKind.COLL and len(op.group) > 1, done.get(op.key))
                 for op in ops}

        def arrive(op: Op):
            key = (op.token, op.group)
            barrier = barriers.get(key)
            if barrier is None:
                barrier = barriers[key] = _Barrier(env, len(op.group))
            barrier.remaining -= 1
            if barrier.remaining == 0:
                barrier.event.succeed()
            return barrier.event

        def run_program(program):
            stream = program.stream
            for op in program.ops:
                deps, dur, alloc, free, is_coll, finished = steps[id(op)]
                for event in deps:
                    if not event.processed:
                        yield event
                if is_coll:
                    yield arrive(op)
                start = env.now
                device = op.device
                if op.allocs:
                    level[device] += alloc
                    memory.append((start, device, level[device]))
                if dur > 0:
                    yield env.timeout(dur)
                if op.frees:
                    level[device] -= free
                    memory.append((env.now, device, level[device]))
                events.append(Event(device, stream, op.token, op.kind.value, op.stage, op.chunk,
                                    start, env.now))
                if finished is not None:
                    finished.succeed()

        for program in plan.programs:
            env.process(run_program(program))
        env.run()
        expected = sum(len(p.ops) for p in plan.programs)
        if len(events) != expected:
            ran = {(e.device, e.token) for e in events}
            stuck = next(op.key for op in ops if (op.device, op.token) not in ran)
            from ltsim.errors import PlanError

            raise PlanError(f"{plan.strategy}: {expected - len(events)} ops never ran (deadlock), "
                            f"first {stuck}\n{plan.grid(mark=stuck)}")
        events.sort(key=lambda e: (e.start_s, e.device, e.stream))
        return Trace(events=tuple(events), memory=tuple(memory), static_bytes=tuple(static))

    def _buffer_sizer(self, plan: Plan):
        cache: dict[str, int] = {}

        def nbytes(buf) -> int:
            size = cache.get(buf.name)
            if size is None:
                size = cache[buf.name] = self.cost.buffer_bytes(buf, plan)
            return size

        return nbytes
