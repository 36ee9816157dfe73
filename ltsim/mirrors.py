"""Mirrored DP replicas (issue 13): one replica's programs standing for every replica that repeats it.

A strategy whose replicas get chunks of the same token layout in the same order (equal-length
micro-batches, a balanced sampler) plans the first of them only and names the others as
:class:`~ltsim.plan.Mirror`\\ s of it. The engine replays the source's programs once; the members a
collective waits for are then those it replays, which is exact because replicas meet only in
collectives and identical replicas reach them at the same time (the argument of
ltsim/sim/replicas.py). The metrics count each source device once per replica it stands for.

Everything that needs every device's own ops (the executor, figures, exported traces) reads
:func:`expand_plan` and :func:`expand_trace`: the copies written out with devices, chunks, sequence
ids and GPU ranks renumbered, equal to what the strategy would have planned and the engine
replayed without mirrors (tests/unit/test_mirrors.py).
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter, itemgetter

from ltsim.plan import STREAMS, Comm, Mirror, Op, OpKey, Plan, Program, make_op, parse_token
from ltsim.trace import Event, Trace
from ltsim.work import Buffer, Slice, Work


def device_sources(plan: Plan) -> tuple[int, ...]:
    """Per device, the device whose programs it runs: itself, or its mirror's source device."""
    source = list(range(plan.num_devices))
    for mirror in plan.mirrors:
        for src, dst in mirror.devices:
            source[dst] = src
    return tuple(source)


def mirrored_gpus(mirror: Mirror, gpus: tuple[int, int]) -> tuple[int, int]:
    """A comm's GPU ranks on the copy: shifted when both lie in the source replica, else (a
    collective over several replicas) unchanged."""
    a, b = gpus

    def inside(rank: int) -> bool:
        return any(first <= rank <= last for first, last in mirror.gpus)

    if inside(a) and inside(b):
        return a + mirror.gpu_shift, b + mirror.gpu_shift
    return gpus


class _Renumber:
    """The copy of one source replica's values on one mirror: devices, chunks, sequences, GPUs."""

    def __init__(self, plan: Plan, mirror: Mirror) -> None:
        self.mirror = mirror
        self.devices = dict(mirror.devices)
        self.chunks = dict(mirror.chunks)
        by_index = {c.index: c for c in plan.chunks}
        self.seqs = {a.seq: b.seq for src, dst in mirror.chunks
                     for a, b in zip(by_index[src].slices, by_index[dst].slices)}
        self.works: dict[int, Work] = {}
        self.comms: dict[int, Comm] = {}
        self.buffers: dict[int, Buffer] = {}
        self.gpus: dict[tuple[int, int], tuple[int, int]] = {}

    def key(self, key: OpKey) -> OpKey:
        return OpKey(self.devices.get(key.device, key.device), key.stage, key.kind,
                     self.chunks.get(key.chunk, key.chunk), key.name)

    def work(self, work: Work | None) -> Work | None:
        if work is None or work.chunk not in self.chunks:
            return work
        out = self.works.get(id(work))
        if out is None:
            seqs = self.seqs
            out = self.works[id(work)] = replace(
                work, chunk=self.chunks[work.chunk],
                slices=tuple(Slice(seqs[s.seq], s.start, s.stop) for s in work.slices))
        return out

    def buffer(self, buf: Buffer) -> Buffer:
        out = self.buffers.get(id(buf))
        if out is None:
            out = self.buffers[id(buf)] = buf._replace(work=self.work(buf.work))
        return out

    def comm(self, comm: Comm | None) -> Comm | None:
        if comm is None:
            return None
        out = self.comms.get(id(comm))
        if out is None:
            gpus = self.gpus.get(comm.gpus)
            if gpus is None:
                gpus = self.gpus[comm.gpus] = mirrored_gpus(self.mirror, comm.gpus)
            out = self.comms[id(comm)] = comm._replace(work=self.work(comm.work), gpus=gpus)
        return out

    def group(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """A group inside the replica (a P2P peer, a CP group) moves with it; one spanning
        replicas (the DP reduction) stays."""
        devices = self.devices
        if all(d in devices for d in group):
            return tuple(devices[d] for d in group)
        return group

    def op(self, op: Op) -> Op:
        key = self.key
        return make_op(op.kind, self.devices[op.device], op.stage, self.chunks.get(op.chunk, op.chunk),
                       op.name, op.stream, self.work(op.work), op.keep, op.part, self.comm(op.comm),
                       tuple(key(k) for k in op.deps), tuple(key(k) for k in op.start_deps),
                       tuple(self.buffer(b) for b in op.allocs),
                       tuple(self.buffer(b) for b in op.frees), self.group(op.group))


def expand_plan(plan: Plan) -> Plan:
    """The plan with every mirror's programs written out (see the module docstring)."""
    if not plan.mirrors:
        return plan
    by_device = _by_device(plan.programs, attrgetter("device"))
    programs = list(plan.programs)
    for mirror in plan.mirrors:
        renumber = _Renumber(plan, mirror)
        for src, dst in mirror.devices:
            for program in by_device.get(src, ()):
                programs.append(Program(dst, program.stream, tuple(map(renumber.op, program.ops))))
    programs.sort(key=lambda p: (p.device, STREAMS.index(p.stream)))
    return replace(plan.with_programs(tuple(programs)), mirrors=())


def expand_trace(trace: Trace, plan: Plan) -> Trace:
    """A trace of ``plan`` (its mirrors replayed once) with every mirrored device's events and
    memory samples written out, in the order a replay of ``plan.expand()`` gives them."""
    if not trace.mirror_of:
        return trace
    events: dict[int, list[Event]] = _by_device(trace.events, attrgetter("device"))
    memory = _by_device(trace.memory, itemgetter(1))  # (time, device, bytes) samples
    host_memory = _by_device(trace.host_memory, itemgetter(1))
    tokens: dict[tuple[str, int], str] = {}
    for mirror in plan.mirrors:
        chunks = dict(mirror.chunks)
        for src, dst in mirror.devices:
            copies = events[dst] = []
            for e in events.get(src, ()):
                chunk = chunks.get(e.chunk, e.chunk)
                token = e.token
                if chunk != e.chunk:
                    token = tokens.get((token, chunk))
                    if token is None:
                        stage, kind, _, name = parse_token(e.token)
                        token = tokens[(e.token, chunk)] = OpKey(dst, stage, kind, chunk, name).token
                copies.append(e._replace(device=dst, token=token, chunk=chunk))
            for samples in (memory, host_memory):
                if src in samples:
                    samples[dst] = [(t, dst, level) for t, _, level in samples[src]]
    by_time = itemgetter(0)
    return replace(trace, events=_flatten(events, attrgetter("start_s", "device", "stream")),
                   memory=_flatten(memory, by_time), host_memory=_flatten(host_memory, by_time),
                   mirror_of=())


def _by_device(items, device_of) -> dict[int, list]:
    """Items grouped by device, each group in the order given."""
    out: dict[int, list] = {}
    for item in items:
        out.setdefault(device_of(item), []).append(item)
    return out


def _flatten(per_device: dict[int, list], key) -> tuple:
    """Devices in order, then a stable sort by ``key``, as the engine orders its trace."""
    out = [item for device in sorted(per_device) for item in per_device[device]]
    out.sort(key=key)
    return tuple(out)
