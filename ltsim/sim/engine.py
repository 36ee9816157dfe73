"""The SimPy engine: one process per device stream replays a Plan against a CostModel.

Rules (DESIGN.md section 2): an op starts when its dependencies have finished and its stream is
free (ops of a stream run in program order); a SEND occupies the sender's comm stream for the link
time; a collective starts when every member device has reached it; memory is charged at an op's
start for its ``allocs`` and released at its end for its ``frees``, on top of the static level.
Deterministic: SimPy orders simultaneous events by insertion, and processes are created in
plan order.
"""

from __future__ import annotations

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
        env = simpy.Environment()
        ops = list(plan.ops())
        done = {op.key: env.event() for op in ops}
        duration = {op.key: self.cost.duration_s(op, plan) for op in ops}
        buffer_cache: dict[str, int] = {}

        def nbytes(buf) -> int:
            size = buffer_cache.get(buf.name)
            if size is None:
                size = buffer_cache[buf.name] = self.cost.buffer_bytes(buf, plan)
            return size

        static = [self.cost.static_memory_bytes(d, plan) for d in range(plan.num_devices)]
        level = list(static)
        memory: list[tuple[float, int, int]] = []
        events: list[Event] = []
        barriers: dict[tuple, _Barrier] = {}

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
            for op in program.ops:
                for dep in op.deps:
                    event = done[dep]
                    if not event.processed:
                        yield event
                if op.kind is OpKind.COLL and len(op.group) > 1:
                    yield arrive(op)
                start = env.now
                if op.allocs:
                    level[op.device] += sum(nbytes(b) for b in op.allocs)
                    memory.append((start, op.device, level[op.device]))
                dur = duration[op.key]
                if dur > 0:
                    yield env.timeout(dur)
                if op.frees:
                    level[op.device] -= sum(nbytes(b) for b in op.frees)
                    memory.append((env.now, op.device, level[op.device]))
                events.append(Event(op.device, program.stream, op.token, op.kind.value, op.stage,
                                    op.chunk, start, env.now))
                done[op.key].succeed()

        for program in plan.programs:
            env.process(run_program(program))
        env.run()
        unfinished = [op.key for op in ops if not done[op.key].triggered]
        if unfinished:
            from ltsim.errors import PlanError

            raise PlanError(f"{plan.strategy}: {len(unfinished)} ops never ran (deadlock), first "
                            f"{unfinished[0]}\n{plan.grid(mark=unfinished[0])}")
        events.sort(key=lambda e: (e.start_s, e.device, e.stream))
        return Trace(events=tuple(events), memory=tuple(memory), static_bytes=tuple(static))
