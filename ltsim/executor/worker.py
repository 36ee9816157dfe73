"""One simulated device's process: its pipeline stage, its programs run op by op, its measurements.

``device_main`` is the spawn target of ``ltsim.executor.runtime.execute_plan``. Each process builds
the layers of its stage (``Transformer(spec, layers=plan.stage_layers[stage], seed)``), one
``StateStore``, an optimizer over a flat gradient buffer (every ``p.grad`` is a view of it, as in
Megatron's contiguous grad buffer, so COLL[dp-grad] all-reduces one tensor in place), and then runs
``warmup + repeats`` iterations of its compute program:

- F / R / B through ``forward_chunk`` / ``recompute_chunk`` / ``backward_chunk``; a forward keeps its
  graph only when the plan says it keeps its activations (``op.keep`` ALL or SELECTIVE); otherwise
  it runs without it and a later R rebuilds it; ops over part of the stage (ALST's per-layer ops)
  and the copy stream's checkpoint copies to host memory and back run through layerwise.py;
- an F on stage > 0 (B on a stage before the last) waits for the receive of its input (output grad).
  Receives are posted ``recv_lookahead`` compute ops ahead (by default all of the iteration's, at
  its start) with ``irecv``: a send then completes when its data has moved, as the simulator's
  SEND does, instead of waiting for the receiver to reach the op (gloo's sends rendezvous with
  the receive). A posted buffer counts in the memory samples once its data has arrived;
- after every compute op, the comm and coll programs' ops whose dependencies have finished are
  started, in program order and asynchronously: SEND_F / SEND_B as ``isend``, COLL[dp-grad] as
  ``all_reduce`` (a reduce-scatter in the plan too: the executor's optimizer is not sharded); OPT
  waits for its COLL, then steps the optimizer. A start dependency (the DP reduction starts with
  the last backward in the simulator) is run as a finish dependency: the executor reduces one flat
  buffer, not buckets as they fill.
Sends never block, so the process only ever blocks on a receive (or a collective) that the plan
orders before the op that waits; see runtime.py for the deadlock argument.

Time: host ``perf_counter`` on CPU (a system-wide monotonic clock, so processes share it), CUDA
events on GPU (converted to the host clock at the iteration's start). Memory: memtrack.py's
accounting at every op boundary on CPU; allocator statistics on GPU.
"""

from __future__ import annotations

import gc
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ltsim.errors import PlanError
from ltsim.executor import layerwise
from ltsim.executor.comm import Async, all_reduce, irecv, isend, make_groups, recv_sources
from ltsim.executor.memtrack import MemoryTracker
from ltsim.executor.model import TORCH_DTYPES, Transformer, pack_chunk
from ltsim.executor.state import (ChunkHandle, StateStore, backward_chunk, forward_chunk,
                                  recompute_chunk)
from ltsim.model import ModelSpec
from ltsim.plan import Keep, Op, OpKind, Plan

OPTIMIZERS = ("adam", "sgd")
# CPU torch ops keep the GIL; a 0.2 ms switch interval (default 5 ms) lets comm.py's watcher threads
# stamp a transfer's completion within ~0.2 ms instead of up to 5 ms late
SWITCH_INTERVAL_S = 2e-4


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """What every device process needs besides the plan and the model shape."""

    backend: str  # "gloo" | "nccl"
    device_type: str  # "cpu" | "cuda"
    init_method: str  # "tcp://127.0.0.1:PORT"
    out_dir: str  # each process writes device<rank>.pt here
    seed: int
    dtype: str | None  # "fp64", "fp32", "bf16", "fp16"; None: the model's dtype
    warmup: int
    repeats: int
    optimizer: str
    lr: float
    num_threads: int
    timeout_s: float
    return_grads: bool
    recv_lookahead: int = 1_000_000  # compute ops ahead whose receives are posted (all, by default)
    attention: str = "auto"  # model.ATTENTION_BACKENDS


def make_tokens(seq_lengths: tuple[int, ...], vocab_size: int, seed: int) -> dict[int, torch.Tensor]:
    """Deterministic random token ids per sequence (seeded by ``seed`` and the sequence index)."""
    out = {}
    for seq, length in enumerate(seq_lengths):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + seq)
        out[seq] = torch.randint(0, vocab_size, (length,), generator=gen)
    return out


def global_param_name(name: str, first_layer: int) -> str:
    """A stage's parameter name in the whole model's numbering (``blocks.0`` -> ``blocks.4``)."""
    if name.startswith("blocks."):
        _, index, rest = name.split(".", 2)
        return f"blocks.{int(index) + first_layer}.{rest}"
    return name


class _CpuClock:
    def begin(self) -> float:
        self.release_s = time.perf_counter()
        return self.release_s

    def mark(self) -> float:
        return time.perf_counter()

    def resolve(self, mark: float) -> float:
        return mark


class _CudaClock:
    """CUDA events on the current stream, placed on the host clock at the iteration start."""

    def begin(self) -> float:
        torch.cuda.synchronize()
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()
        self.release_s = time.perf_counter()
        return self.release_s

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def resolve(self, mark: torch.cuda.Event) -> float:
        mark.synchronize()
        return self.release_s + self.start.elapsed_time(mark) / 1e3


@dataclass(eq=False, slots=True)
class _Iteration:
    """Mutable state of one iteration on one device."""

    store: StateStore = field(default_factory=StateStore)
    handles: dict[Any, ChunkHandle] = field(default_factory=dict)  # per-layer: (chunk, layer, head)
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # per-layer: next op's input
    grad: dict[int, torch.Tensor] = field(default_factory=dict)  # per-layer: next B's output grad
    host: dict[Any, torch.Tensor] = field(default_factory=dict)  # checkpoints in host memory
    host_samples: list[int] = field(default_factory=list)
    next_copy: int = 0
    outbox: dict[tuple[OpKind, int], torch.Tensor] = field(default_factory=dict)
    recvs: dict[str, Async] = field(default_factory=dict)
    carried: dict[int, torch.Tensor] = field(default_factory=dict)  # a full recompute's received
    # output gradient, per chunk, for the backward after it
    comm: dict[str, Async] = field(default_factory=dict)
    comm_marks: dict[str, Any] = field(default_factory=dict)  # GPU: a CUDA event at each start
    done: set[str] = field(default_factory=set)
    events: list[tuple[Op, Any, Any]] = field(default_factory=list)
    samples: list[tuple[Any, int]] = field(default_factory=list)
    next_comm: int = 0
    state_is_static: bool = False  # the optimizer state existed at the start (counted as static)
    loss: float = 0.0
    grads: dict[str, torch.Tensor] | None = None


class DeviceRun:
    """The stage, optimizer and programs of one device, and the loop that runs them."""

    def __init__(self, plan: Plan, spec: ModelSpec, rank: int, config: WorkerConfig) -> None:
        self.plan, self.rank, self.cfg = plan, rank, config
        self.stage = plan.device_stage[rank]
        self.is_cuda = config.device_type == "cuda"
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.is_cuda \
            else torch.device("cpu")
        dtype = TORCH_DTYPES[config.dtype] if config.dtype else None
        first = plan.stage_layers[self.stage][0]
        self.model = Transformer(spec, layers=plan.stage_layers[self.stage], seed=config.seed,
                                 dtype=dtype, attention_backend=config.attention).to(self.device)
        self.names = {global_param_name(n, first): p for n, p in self.model.named_parameters()}
        self.dtype = next(self.model.parameters()).dtype
        self.hidden_size = spec.hidden_size
        self.is_last = self.stage == plan.num_stages - 1
        self.groups = make_groups(plan)
        self.flat_grad = self._attach_flat_grads()
        self.optimizer = self._make_optimizer()
        self.compute = plan.program(rank, "compute").ops
        self.comm = plan.program(rank, "comm").ops + plan.program(rank, "coll").ops
        self.copies = plan.program(rank, "copy").ops
        self.comm_keys = {op.key for op in self.comm + self.copies}
        self.layerwise = layerwise.is_layerwise(plan, rank)
        self.sources = recv_sources(plan, rank)
        tokens = make_tokens(plan.seq_lengths, spec.vocab_size, config.seed)
        chunks = {c.index: c for c in plan.chunks}
        self.batches = {op.chunk: pack_chunk(chunks[op.chunk].slices, tokens).to(self.device)
                        for op in self.compute if op.chunk >= 0}
        self.scales = {c: (loss, relay) for c, loss, relay in plan.grad_scales}
        self.tracker = None if self.is_cuda else MemoryTracker()
        self.clock = _CudaClock() if self.is_cuda else _CpuClock()

    def _attach_flat_grads(self) -> torch.Tensor:
        params = list(self.model.parameters())
        flat = torch.zeros(sum(p.numel() for p in params), dtype=self.dtype, device=self.device)
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return flat

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = list(self.model.parameters())
        if self.cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.cfg.lr, foreach=False)
        return torch.optim.SGD(params, lr=self.cfg.lr, foreach=False)

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self, keep_grads: bool) -> dict[str, Any]:
        """Run the device's programs once; returns its events, memory samples, loss, peak."""
        it = _Iteration()
        self.flat_grad.zero_()
        gc.collect()
        static = self._start_memory()
        it.state_is_static = bool(self.optimizer.state)
        self._post_recvs(it, 0)  # before the clock starts
        dist.barrier()
        release_s = self.clock.begin()
        gc.disable()
        try:
            with self.tracker.hooks() if self.tracker else nullcontext():
                for index, op in enumerate(self.compute):
                    self._post_recvs(it, index)
                    self._run_compute(it, op, keep_grads)
                    self._pump(it)
            self._pump(it, final=True)
            comm_events = self._finish(it)
        finally:
            gc.enable()
        return self._report(it, release_s, static, comm_events)

    def _start_memory(self) -> int:
        if self.is_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return int(torch.cuda.memory_allocated())
        state = [t for s in self.optimizer.state.values() for t in s.values()
                 if isinstance(t, torch.Tensor)]
        return self.tracker.set_static([*self.model.parameters(), self.flat_grad, *state])

    def _post_recvs(self, it: _Iteration, index: int) -> None:
        for op in self.compute[index:index + 1 + self.cfg.recv_lookahead]:
            source = self.sources.get(op.key)
            if source is None or op.key in it.recvs or op.key in it.done:
                continue
            channel, peer = source
            buffer = torch.empty((self.batches[op.chunk].num_tokens, self.hidden_size),
                                 dtype=self.dtype, device=self.device)
            it.recvs[op.key] = irecv(buffer, peer, self.groups.p2p[channel], op.chunk,
                                     self.is_cuda)

    def _run_compute(self, it: _Iteration, op: Op, keep_grads: bool) -> None:
        received = None
        if op.key in self.sources:
            pending = it.recvs.pop(op.key)
            pending.wait(self.cfg.timeout_s)
            received = pending.tensor
            if op.kind is OpKind.R:  # full recompute: its backward step began with the receive
                it.carried[op.chunk] = received
        elif op.kind is OpKind.B:
            received = it.carried.pop(op.chunk, None)
        for dep in op.deps:
            if dep in self.comm_keys:
                if dep not in it.comm:
                    raise PlanError(f"{op.key} waits for {dep}, which has not started\n"
                                    f"{self.plan.grid(mark=op.key)}")
                it.comm[dep].wait(self.cfg.timeout_s)
        self._sample(it, self.clock.mark(), received)  # before the timed region
        start = self.clock.mark()
        if self.layerwise and op.kind in (OpKind.F, OpKind.R, OpKind.B):
            layerwise.run_compute(self, it, op, received)
        elif op.kind is OpKind.F:
            self._forward(it, op, received)
        elif op.kind is OpKind.R:
            handle = recompute_chunk(self.model, it.handles[op.chunk], it.store)
            if not self.is_last:
                handle.output = None  # already sent at the first forward
        elif op.kind is OpKind.B:
            self._backward(it, op, received)
        elif op.kind is OpKind.OPT:
            if keep_grads:
                it.grads = {n: p.grad.detach().cpu().clone() for n, p in self.names.items()}
            self.optimizer.step()
        else:
            raise PlanError(f"the executor cannot run {op.kind.value} ops ({op.key})")
        for buf in op.frees:  # K/V of chunks that got no backward (SpaCO), released by this op
            if buf.kind == "kv" and buf.work.chunk != op.chunk:
                it.store.release(buf.work.chunk)
        end = self.clock.mark()
        it.done.add(op.key)
        it.events.append((op, start, end))
        self._sample(it, end)

    def _forward(self, it: _Iteration, op: Op, hidden: torch.Tensor | None) -> None:
        handle = forward_chunk(self.model, self.batches[op.chunk], it.store,
                               keep_graph=op.keep in (Keep.ALL, Keep.SELECTIVE), chunk_id=op.chunk,
                               hidden=hidden)
        if self.is_last:
            it.loss += handle.loss
        else:  # the next stage owns it now; kept only until its send completes
            it.outbox[(OpKind.F, op.chunk)] = handle.output
            handle.output = None
        if not self.plan.gets_grad(op.chunk):  # no backward follows (SpaCO)
            it.store.forget(op.chunk)
            handle.input = None
            return
        it.handles[op.chunk] = handle

    def _backward(self, it: _Iteration, op: Op, output_grad: torch.Tensor | None) -> None:
        handle = it.handles.pop(op.chunk)
        loss_scale, kv_scale = self.scales.get(op.chunk, (1.0, 1.0))
        grad = backward_chunk(handle, it.store, output_grad=output_grad,
                              loss_scale=loss_scale if self.is_last else 1.0, kv_scale=kv_scale)
        handle.input_grad = None
        if self.stage > 0:
            it.outbox[(OpKind.B, op.chunk)] = grad

    def _pump(self, it: _Iteration, final: bool = False) -> None:
        """Start the comm ops whose dependencies have finished, in program order."""
        while it.next_comm < len(self.comm):
            op = self.comm[it.next_comm]
            if not all(dep in it.done for dep in op.deps + op.start_deps):
                break
            if self.is_cuda:
                it.comm_marks[op.key] = self.clock.mark()
            it.comm[op.key] = self._launch(it, op)
            it.done.add(op.key)
            it.next_comm += 1
        while it.next_copy < len(self.copies):  # host copies: their own stream, synchronous
            op = self.copies[it.next_copy]
            if not all(dep in it.done for dep in op.deps + op.start_deps):
                break
            if self.is_cuda:
                it.comm_marks[op.key] = self.clock.mark()
            it.comm[op.key] = layerwise.run_copy(self, it, op)
            it.done.add(op.key)
            it.next_copy += 1
        if final and it.next_copy < len(self.copies):
            stuck = self.copies[it.next_copy]
            raise PlanError(f"{stuck.key} waits for {stuck.deps}, which never ran on device "
                            f"{self.rank}\n{self.plan.grid(mark=stuck.key)}")
        if final and it.next_comm < len(self.comm):
            stuck = self.comm[it.next_comm]
            raise PlanError(f"{stuck.key} waits for {stuck.deps}, which never ran on device "
                            f"{self.rank}\n{self.plan.grid(mark=stuck.key)}")

    def _launch(self, it: _Iteration, op: Op) -> Async:
        if op.kind is OpKind.COLL:
            group = self.groups.coll.get(tuple(op.group))
            return all_reduce(self.flat_grad, group, self.is_cuda)
        source = OpKind.F if op.kind is OpKind.SEND_F else OpKind.B
        tensor = it.outbox.pop((source, op.chunk)).contiguous()
        peer = op.group[0]
        group = self.groups.p2p[(op.kind.value, self.rank, peer)]
        return isend(tensor, peer, group, op.chunk, self.is_cuda)

    def _finish(self, it: _Iteration) -> list[tuple[Op, float, float]]:
        events = []
        for op in self.comm + self.copies:
            end = it.comm[op.key].wait(self.cfg.timeout_s)
            start = it.comm[op.key].start_s
            if self.is_cuda:  # GPU time the op was enqueued at; completion seen on the host
                start = self.clock.resolve(it.comm_marks[op.key])
                end = max(end, start)
            events.append((op, start, end))
        if it.handles or len(it.store) or it.outbox or it.recvs or it.hidden or it.grad or it.host:
            raise PlanError(f"device {self.rank} ended its programs with chunks "
                            f"{sorted(it.handles)} not backwarded or messages unsent")
        self._sample(it, self.clock.mark())
        return events

    # -- memory -------------------------------------------------------------------------------------
    def _held(self, it: _Iteration, extra: torch.Tensor | None):
        """Tensors the runtime holds besides parameters, grads and autograd's saved tensors."""
        yield extra
        if not it.state_is_static:  # Adam creates its moments at the first step
            for state in self.optimizer.state.values():
                yield from (t for t in state.values() if isinstance(t, torch.Tensor))
        for handle in it.handles.values():
            yield handle.input
            yield handle.output
        # all K/V state, also of chunks forwarded without a graph (SeCO's and SpaCO's first pass)
        yield from it.store.tensors()
        yield from it.outbox.values()
        yield from it.hidden.values()
        yield from it.grad.values()
        yield from (a.tensor for a in it.recvs.values() if a.done)  # posted: only once filled
        yield from (a.tensor for a in it.comm.values() if not a.done)

    def _sample(self, it: _Iteration, mark: Any, extra: torch.Tensor | None = None) -> None:
        it.host_samples.append(layerwise.host_bytes(it))
        if self.is_cuda:
            it.samples.append((mark, int(torch.cuda.memory_allocated())))
        else:
            it.samples.append((mark, self.tracker.live_bytes(self._held(it, extra))))

    def _report(self, it: _Iteration, release_s: float, static: int,
                comm_events: list[tuple[Op, float, float]]) -> dict[str, Any]:
        resolve = self.clock.resolve
        events = [(op.stream, op.token, op.kind.value, op.stage, op.chunk, resolve(a), resolve(b))
                  for op, a, b in it.events]
        events += [(op.stream, op.token, op.kind.value, op.stage, op.chunk, a, b)
                   for op, a, b in comm_events]
        samples = [(resolve(m), level) for m, level in it.samples]
        peak = int(torch.cuda.max_memory_allocated()) if self.is_cuda else \
            max([static, *(level for _, level in samples)])
        return {"release_s": release_s, "events": events, "samples": samples, "static": static,
                "peak": peak, "host_peak": max(it.host_samples, default=0),
                "loss": it.loss if self.is_last else None, "grads": it.grads}


def device_main(rank: int, plan: Plan, spec: ModelSpec, config: WorkerConfig) -> None:
    """Spawn target: join the process group, run the iterations, write device<rank>.pt."""
    torch.set_num_threads(config.num_threads)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if config.device_type == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(config.backend, init_method=config.init_method, rank=rank,
                            world_size=plan.num_devices,
                            timeout=timedelta(seconds=config.timeout_s))
    try:
        run = DeviceRun(plan, spec, rank, config)
        total = config.warmup + config.repeats
        results = [run.iteration(keep_grads=config.return_grads and i == total - 1)
                   for i in range(total)]
        torch.save({"device": rank, "iterations": results[config.warmup:]},
                   Path(config.out_dir) / f"device{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
