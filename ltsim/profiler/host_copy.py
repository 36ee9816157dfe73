"""Copies between GPU and host memory (host_copy.csv, read by ltsim/costs/host.py).

Per size, direction and host memory, the wall time of one copy of a bf16 tensor, each call
bracketed by ``torch.cuda.synchronize``:
- pageable: ``gpu.to("cpu", copy=True)`` (d2h: a new host tensor each call, as ALST's reference
  offload and ltsim's executor make one) and ``host.to(device)`` (h2d);
- pinned: ``copy_(..., non_blocking=True)`` between the GPU tensor and a page-locked host buffer
  (what an asynchronous offload uses).
Only on CUDA: on a CPU the device is the host, and the table is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from ltsim.profiler.tables import Point, make_point
from ltsim.profiler.timing import summarize

KEY_FIELDS = ("direction", "host_memory", "bytes")
DIRECTIONS = ("d2h", "h2d")
HOST_MEMORY = ("pageable", "pinned")


def host_copy_points(sizes: Sequence[int]) -> tuple[Point, ...]:
    return tuple(make_point(KEY_FIELDS, direction=d, host_memory=m, bytes=int(b))
                 for b in sizes for m in HOST_MEMORY for d in DIRECTIONS)


def _copy(direction: str, pinned: bool, gpu: torch.Tensor, host: torch.Tensor
          ) -> Callable[[], object]:
    if pinned:
        if direction == "d2h":
            return lambda: host.copy_(gpu, non_blocking=True)
        return lambda: gpu.copy_(host, non_blocking=True)
    if direction == "d2h":
        return lambda: gpu.to("cpu", copy=True)
    return lambda: host.to(gpu.device, copy=True)


def measure_host_copy(point: Point, device: torch.device, repeats: int) -> dict:
    """One row: the median of ``repeats`` timed copies after one untimed."""
    p = point.values
    pinned = p["host_memory"] == "pinned"
    numel = p["bytes"] // 2
    gpu = torch.empty(numel, dtype=torch.bfloat16, device=device).normal_()
    host = torch.empty(numel, dtype=torch.bfloat16, pin_memory=pinned)
    copy = _copy(p["direction"], pinned, gpu, host)
    samples = []
    for i in range(1 + repeats):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        copy()
        torch.cuda.synchronize(device)
        if i:
            samples.append(time.perf_counter() - start)
    del gpu, host
    return {"point": point.key, "direction": p["direction"], "host_memory": p["host_memory"],
            "bytes": numel * 2, "dtype": "bf16", **summarize(samples).as_row()}
