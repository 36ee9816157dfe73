"""Process groups, P2P channels and asynchronous communication with measured completion times.

Channels. Every (kind, sender, receiver) of the plan's SEND_F / SEND_B ops gets its own process
group of the two devices, and every distinct COLL group its own group. Messages on one channel go
one way, so a channel's sends and receives are posted in the same order on both ends: the sender
posts SEND_F(c) in the order it forwards chunks, the receiver posts the receive in the order it
forwards them (``check_p2p_order`` verifies the orders agree, which NCCL needs: it matches P2P
messages of a communicator in posting order and ignores tags). Gloo matches by (peer, tag); the tag
is the chunk index. With one two-way channel instead, NCCL could deadlock on the GPU: stage s
enqueues send F1 while stage s+1 enqueues send B0, each waiting for a receive queued behind the
other's send (Megatron avoids this with batched isend/irecv).

Completion. ``Async`` wraps a torch.distributed work; a helper thread waits for it (blocking wait on
gloo, polling ``is_completed`` on NCCL, whose wait only orders streams) and stamps the host time it
finished, so a SEND's measured end is when the transfer completed, not when someone looked.
The helper threads are kept and reused (``_Watchers``): starting a thread waits until the new
thread runs, which on a machine whose cores all compute (a CPU run, one process per core) costs a
scheduler tick, about 2 ms (validation/executor/comm_start.py), on the compute thread at every
send. Frameworks issue their sends without that, so the executor must not pay it either.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ltsim.errors import PlanError
from ltsim.plan import OpKind, Plan

P2P_KINDS = (OpKind.SEND_F, OpKind.SEND_B)
_POLL_S = 5e-5


@dataclass(frozen=True, slots=True, kw_only=True)
class Groups:
    """Process groups of one run; identical in every process (created in the same order)."""

    p2p: dict[tuple[str, int, int], object]  # (kind value, sender, receiver) -> group
    coll: dict[tuple[int, ...], object]  # member devices -> group


def p2p_channels(plan: Plan) -> list[tuple[str, int, int]]:
    return sorted({(op.kind.value, op.device, op.group[0]) for op in plan.ops()
                   if op.kind in P2P_KINDS})


def coll_groups(plan: Plan) -> list[tuple[int, ...]]:
    return sorted({tuple(op.group) for op in plan.ops()
                   if op.kind is OpKind.COLL and len(op.group) > 1})


def make_groups(plan: Plan) -> Groups:
    """Create every group of the plan. A collective call: every process must make it."""
    p2p = {channel: dist.new_group(sorted(channel[1:])) for channel in p2p_channels(plan)}
    coll = {members: dist.new_group(list(members)) for members in coll_groups(plan)}
    return Groups(p2p=p2p, coll=coll)


def recv_sources(plan: Plan, device: int) -> dict[str, tuple[tuple[str, int, int], int]]:
    """Op key -> (channel, sender) for each of the device's ops fed by another device.

    The executor moves data between devices only as SEND_F -> F and SEND_B -> B of the same chunk,
    or SEND_B -> the R before that B (a full recompute waits for the gradient: the backward step
    holds it for its B); any other cross-device dependency raises PlanError.
    """
    out = {}
    expected = {OpKind.F: OpKind.SEND_F, OpKind.B: OpKind.SEND_B, OpKind.R: OpKind.SEND_B}
    for program in plan.programs:
        if program.device != device:
            continue
        for op in program.ops:
            remote = [dep for dep in op.deps + op.start_deps if dep.device != device]
            if not remote:
                continue
            source = remote[0]
            if (len(remote) > 1 or expected.get(op.kind) is not source.kind
                    or source.chunk != op.chunk):
                raise PlanError(f"{op.key} depends on {', '.join(map(str, remote))}; the executor "
                                "supports only SEND_F -> F and SEND_B -> B of one chunk across "
                                f"devices\n{plan.grid(mark=op.key)}")
            out[op.key] = ((source.kind.value, source.device, device), source.device)
    return out


def check_p2p_order(plan: Plan) -> None:
    """Raise PlanError unless each channel's receiver consumes chunks in the sender's order."""
    consumer = {OpKind.SEND_F: (OpKind.F,), OpKind.SEND_B: (OpKind.B, OpKind.R)}
    for kind_value, sender, receiver in p2p_channels(plan):
        kind = OpKind(kind_value)
        sent = [op.chunk for op in plan.program(sender, "comm").ops
                if op.kind is kind and op.group[0] == receiver]
        used = [op.chunk for op in plan.program(receiver).ops if op.kind in consumer[kind]
                and any(d.device == sender for d in op.deps)]
        if sent != used:
            raise PlanError(f"{plan.strategy}: device {sender} sends {kind_value} chunks in order "
                            f"{sent} but device {receiver} consumes them in order {used}; NCCL "
                            "matches P2P messages in order, run this plan with backend 'gloo'")


class _Watchers:
    """Daemon threads that run waits, reused: a call takes an idle thread, or starts one when
    none is idle (only while more works are in flight than ever before). Daemon threads, so a
    wait that never returns cannot keep a failed process from exiting."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, fn) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        self._queue.put(fn)
        if start:
            threading.Thread(target=self._loop, daemon=True, name="ltsim-comm-wait").start()

    def _loop(self) -> None:
        while True:
            self._queue.get()()
            with self._lock:
                self._idle += 1


_WATCHERS = _Watchers()


@dataclass(eq=False, slots=True)
class Async:
    """One asynchronous work; ``end_s`` is set (host perf_counter) when it completed."""

    work: object | None
    start_s: float
    tensor: torch.Tensor | None = None  # kept alive (and counted) until completion
    polling: bool = False
    end_s: float | None = None
    error: BaseException | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.work is None:
            self.end_s = self.start_s
            self._done.set()
        else:
            _WATCHERS.submit(self._watch)

    def _watch(self) -> None:
        try:
            if self.polling:
                while not self.work.is_completed():
                    time.sleep(_POLL_S)
            else:
                self.work.wait()
        except BaseException as exc:  # reported by wait() in the main thread
            self.error = exc
        self.end_s = time.perf_counter()
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float) -> float:
        """Block until complete; returns the completion time. Raises on error or timeout."""
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"communication did not complete within {timeout_s} s")
        if self.error is not None:
            raise self.error
        if self.work is not None and self.polling:
            self.work.wait()  # orders the current CUDA stream after the transfer
        return self.end_s


def isend(tensor: torch.Tensor, peer: int, group: object, tag: int, polling: bool) -> Async:
    start = time.perf_counter()
    work = dist.isend(tensor, dst=peer, group=group, tag=tag)
    return Async(work, start, tensor=tensor, polling=polling)


def irecv(tensor: torch.Tensor, peer: int, group: object, tag: int, polling: bool) -> Async:
    start = time.perf_counter()
    work = dist.irecv(tensor, src=peer, group=group, tag=tag)
    return Async(work, start, tensor=tensor, polling=polling)


def all_reduce(tensor: torch.Tensor, group: object | None, polling: bool) -> Async:
    """Sum ``tensor`` in place over ``group``; None (a group of one) completes at once."""
    start = time.perf_counter()
    if group is None:
        return Async(None, start)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group, async_op=True)
    return Async(work, start, tensor=tensor, polling=polling)
