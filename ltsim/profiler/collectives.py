"""collectives.csv: torch.distributed collectives across local processes the profiler starts itself.

For each group size the parent process opens a `TCPStore` on a free localhost port (port 0, so no
race for the port) and spawns that many workers (torch.multiprocessing, start method "spawn"); they
join a process group through the store (gloo on CPU, NCCL on CUDA, one GPU per rank) and measure
every point in turn. Rank 0 sends each finished row back over a queue, so rows are checkpointed as
they finish. CPU workers run with one intra-op thread each.

Sizes follow nccl-tests: `bytes` is the size of the whole buffer: the all_reduce buffer, the
all_gather output, the reduce_scatter input, the all_to_all buffer one rank sends (and receives),
the message of send_recv (ranks 2i -> 2i+1). `time_s` is the median over repeats of the slowest
rank's time of one call; every repeat starts after a barrier. `impl` says how the op ran: the
native call (e.g. "gloo:reduce_scatter_single") or, where the backend lacks it, an honest emulation
("emulated:all_reduce+slice" for reduce_scatter, "emulated:send/recv" for all_to_all).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ltsim.errors import ProfileError
from ltsim.profile_checks import COLLECTIVE_OPS
from ltsim.profiler.tables import Advance, Emit, Point, Row, make_point
from ltsim.profiler.timing import TORCH_DTYPES, TimingPlan, summarize

KEY_FIELDS = ("op", "group_size", "bytes", "dtype")
TIMEOUT = timedelta(seconds=300)


def collective_points(group_sizes: Sequence[int], sizes_bytes: Sequence[int], dtype: str
                      ) -> tuple[Point, ...]:
    return tuple(make_point(KEY_FIELDS, op=op, group_size=size, bytes=num_bytes, dtype=dtype)
                 for size in group_sizes for op in COLLECTIVE_OPS for num_bytes in sizes_bytes)


def _fn(op: str, num_bytes: int, dtype: torch.dtype, device: torch.device, rank: int,
        world: int) -> tuple[Callable[[], object], str]:
    """A zero-argument call performing one `op` on buffers of the nccl-tests size, and its impl label."""
    numel = max(world, num_bytes // torch.tensor([], dtype=dtype).element_size())
    numel -= numel % world
    full = torch.ones(numel, dtype=dtype, device=device)
    part = torch.ones(numel // world, dtype=dtype, device=device)
    backend = dist.get_backend()
    if op == "all_reduce":
        return (lambda: dist.all_reduce(full)), f"{backend}:all_reduce"
    if op == "all_gather":
        gather = _api("all_gather_single", "all_gather_into_tensor")
        return (lambda: gather(full, part)), f"{backend}:{gather.__name__}"
    if op == "reduce_scatter":
        scatter = _api("reduce_scatter_single", "reduce_scatter_tensor")
        if _works(lambda: scatter(part, full)):
            return (lambda: scatter(part, full)), f"{backend}:{scatter.__name__}"
        def emulated_rs() -> None:
            dist.all_reduce(full)
            part.copy_(full[rank * part.numel():(rank + 1) * part.numel()])
        return emulated_rs, "emulated:all_reduce+slice"
    if op == "all_to_all":
        out = torch.empty_like(full)
        if _works(lambda: dist.all_to_all_single(out, full)):
            return (lambda: dist.all_to_all_single(out, full)), f"{backend}:all_to_all_single"
        return (lambda: _all_to_all_p2p(out, full, rank, world)), "emulated:send/recv"
    if op == "send_recv":
        peer = rank + 1 if rank % 2 == 0 else rank - 1
        if peer >= world:  # odd group: the last rank idles
            return (lambda: None), f"{backend}:send/recv"
        if rank % 2 == 0:
            return (lambda: dist.send(full, peer)), f"{backend}:send/recv"
        return (lambda: dist.recv(full, peer)), f"{backend}:send/recv"
    raise ValueError(op)


def _api(name: str, older: str) -> Callable[..., object]:
    """torch.distributed's current name for a collective (torch 2.13 renamed the *_tensor forms)."""
    return getattr(dist, name, None) or getattr(dist, older)


def _works(call: Callable[[], object]) -> bool:
    """Whether the backend implements a collective (every rank must agree, so all of them try)."""
    try:
        call()
        ok = 1
    except (RuntimeError, NotImplementedError, ValueError):
        ok = 0
    flag = torch.tensor([ok], dtype=torch.int32)
    if dist.get_backend() == "nccl":
        flag = flag.cuda()
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _all_to_all_p2p(out: torch.Tensor, inp: torch.Tensor, rank: int, world: int) -> None:
    chunk = inp.numel() // world
    ops = []
    for peer in range(world):
        if peer == rank:
            out[rank * chunk:(rank + 1) * chunk].copy_(inp[rank * chunk:(rank + 1) * chunk])
            continue
        ops.append(dist.P2POp(dist.isend, inp[peer * chunk:(peer + 1) * chunk], peer))
        ops.append(dist.P2POp(dist.irecv, out[peer * chunk:(peer + 1) * chunk], peer))
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def _time_call(call: Callable[[], object], device: torch.device) -> float:
    """Seconds for one call, started right after a barrier."""
    dist.barrier()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin


def _measure_point(params: dict[str, Any], plan: TimingPlan, device: torch.device, rank: int,
                   world: int) -> Row:
    dtype = TORCH_DTYPES[params["dtype"]]
    call, impl = _fn(params["op"], params["bytes"], dtype, device, rank, world)
    estimate_s = max(_time_call(call, device) for _ in range(max(plan.warmup, 1)))
    wanted = torch.tensor([plan.target_s / max(estimate_s, 1e-9)], dtype=torch.float64, device=device)
    dist.all_reduce(wanted, op=dist.ReduceOp.MIN)  # every rank must run the same number of calls
    repeats = int(max(plan.min_repeats, min(plan.max_repeats, np.ceil(wanted.item()))))
    times = torch.tensor([_time_call(call, device) for _ in range(repeats)], dtype=torch.float64,
                         device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # per repeat, the slowest rank
    result = summarize(times.cpu().tolist())
    return {"op": params["op"], "group_size": world, "scope": "intra", "bytes": params["bytes"],
            **result.as_row(), "dtype": params["dtype"],
            "algbw_bytes_per_s": params["bytes"] / result.time_s, "impl": impl,
            "method": "measured"}


def _worker(rank: int, world: int, port: int, device_type: str, points: list[tuple[str, dict]],
            plan: TimingPlan, rows: Any) -> None:
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    else:
        torch.set_num_threads(1)
        device, backend = torch.device("cpu"), "gloo"
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=TIMEOUT)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        warm = torch.ones(1024, device=device)
        for _ in range(20):  # open the connections before the first timed point
            dist.all_reduce(warm)
        for key, params in points:
            row = _measure_point(params, plan, device, rank, world)
            if rank == 0:
                rows.put({"point": key, **row})
    finally:
        dist.destroy_process_group()


def measure_collectives(points: Sequence[Point], emit: Emit, advance: Advance, *,
                        device_type: str, plan: TimingPlan) -> None:
    """Measure the points group size by group size in freshly spawned worker processes."""
    for world in sorted({p.values["group_size"] for p in points}):
        todo = [(p.key, p.values) for p in points if p.values["group_size"] == world]
        context = mp.get_context("spawn")
        rows = context.Queue()
        store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                              timeout=TIMEOUT)
        workers = mp.start_processes(_worker, args=(world, store.port, device_type, todo, plan, rows),
                                     nprocs=world, join=False, start_method="spawn")
        try:
            while not workers.join(timeout=0.2):
                _drain(rows, emit, advance)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            raise ProfileError(f"collectives: a worker of the {world}-process group failed: "
                               f"{str(exc).strip().splitlines()[-1]}") from exc
        _drain(rows, emit, advance)
        del store


def _drain(rows: Any, emit: Emit, advance: Advance) -> None:
    while True:
        try:
            row = rows.get_nowait()
        except queue.Empty:
            return
        emit(row)
        advance(1)
