"""Timing of microbenchmark points: warm-up, adaptive repeats over interleaved rounds, median, spread.

CPU: `time.perf_counter` around each call. CUDA: a pair of CUDA events around each call, read after
the end event has completed. Very short calls (< 100 us) are batched so one sample covers several
calls, which keeps the timer's resolution out of the result.

CUDA kernel tables (``Bench.kernels_only``) time the GPU's work alone: before the start event the
stream is held by a GPU sleep (``torch.cuda._sleep``) long enough for the host to queue every
launch of the sample, so the kernels run back to back and the events see no launch gaps. A sample
whose start event had already passed when the host finished queuing (the sleep was too short) is
taken again with twice the sleep. Without this, a row of a launch-bound point (an elementwise op at
256 tokens, say) times the host's launch rate, and the cost model, which adds the host's own time
per op from eager.csv, would count the host twice (validation/executor/gpu_notes.md).

A point is measured in `rounds` rounds; `interleaved` (tables.py) runs round 1 of every point of a
table, then round 2 of every point, and so on, so a burst of load from another process on a shared
machine touches only some of a point's samples and the median stays clean. Each round rebuilds the
operands, warms up, and takes its share of the repeats, chosen from the warm-up time so the point
gets about `target_s` of timed work in total within [min_repeats, max_repeats].
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

MIN_SAMPLE_S = 1e-4  # calls shorter than this are batched into one sample
MAX_QUEUED_CALLS = 64  # calls per kernels-only sample: their launches must fit CUDA's launch queue
SLEEP_MARGIN = 1.5  # the sleep covers this many times the host's measured queuing time
MAX_SLEEP_RETRIES = 3
TORCH_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16,
                "fp16": torch.float16}


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingPlan:
    """How hard to measure one point."""

    warmup: int  # untimed calls per round (the first call also estimates the duration)
    min_repeats: int  # timed samples per point, over all rounds
    max_repeats: int
    target_s: float  # timed work to aim for per point, in seconds
    long_call_s: float = float("inf")  # a warm-up call at least this long also counts as a sample
    rounds: int = 1

    @property
    def per_round(self) -> "TimingPlan":
        """The plan of one round: its share of the repeats and of the timed work."""
        return replace(self, min_repeats=math.ceil(self.min_repeats / self.rounds),
                       max_repeats=math.ceil(self.max_repeats / self.rounds),
                       target_s=self.target_s / self.rounds, rounds=1)

    @property
    def description(self) -> str:
        text = (f"{self.rounds} interleaved round(s) per table, each with {self.warmup} warm-up "
                f"call(s); {self.min_repeats}..{self.max_repeats} timed samples per point in all "
                f"(about {self.target_s:g} s of timed work); time_s is the median, time_s_spread "
                "the interquartile range divided by the median")
        if self.long_call_s < float("inf"):
            text += (f"; a warm-up call of {self.long_call_s:g} s or more counts as a sample "
                     "(one-time costs are negligible beside it)")
        return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """Median time of one call, its relative spread and how many samples were taken."""

    time_s: float
    time_s_spread: float  # (75th - 25th percentile) / median
    repeats: int

    def as_row(self) -> dict[str, float | int]:
        return {"time_s": self.time_s, "time_s_spread": self.time_s_spread,
                "repeats": self.repeats}


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One point ready to time: the call and the row columns around its timing columns."""

    run: Callable[[], object]
    columns: dict[str, Any]  # written before time_s
    extras: dict[str, Any] = field(default_factory=dict)  # written after the timing columns

    def row(self, key: str, result: Measurement) -> dict[str, Any]:
        return {"point": key, **self.columns, **result.as_row(), **self.extras}


def summarize(samples_s: list[float]) -> Measurement:
    """Median and interquartile spread of per-call times in seconds."""
    values = np.asarray(samples_s, dtype=float)
    median = float(np.median(values))
    q25, q75 = np.percentile(values, [25, 75])
    return Measurement(time_s=median, time_s_spread=float((q75 - q25) / median) if median > 0 else 0.0,
                       repeats=len(values))


def sample(run: Callable[[], object], *, plan: TimingPlan, device: torch.device,
           kernels_only: bool = False) -> list[float]:
    """Per-call times in seconds of `run()`: warm-up first, then the plan's adaptive repeats.

    kernels_only: on CUDA, the GPU's time alone, launches queued behind a sleep (module docstring).
    """
    queued = kernels_only and device.type == "cuda"
    warmups = [_time(run, device, 1) for _ in range(max(plan.warmup, 1))]
    host_s = _host_time(run, device) if queued else 0.0
    estimate_s = max(warmups)
    samples = [warmups[-1]] if warmups[-1] >= plan.long_call_s and not queued else []
    inner = 1
    if estimate_s < MIN_SAMPLE_S:
        inner = min(MAX_QUEUED_CALLS if queued else 1000,
                    math.ceil(MIN_SAMPLE_S / max(estimate_s, 1e-7)))
    repeats = math.ceil(plan.target_s / max(estimate_s * inner, 1e-9))
    repeats = max(plan.min_repeats, min(plan.max_repeats, repeats)) - len(samples)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed call is noise, not the kernel's cost
    try:
        if queued:
            sleep_s = SLEEP_MARGIN * inner * host_s + 50e-6
            queue = _Queue(inner=inner, sleep_s=sleep_s, max_sleep_s=4 * sleep_s)
            samples += [_time_queued(run, device, queue) for _ in range(repeats)]
        else:
            samples += [_time(run, device, inner) / inner for _ in range(repeats)]
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def _host_time(run: Callable[[], object], device: torch.device) -> float:
    """Seconds the host takes to queue one call of `run` (the least of three, GPU idle first)."""
    times = []
    for _ in range(3):
        torch.cuda.synchronize(device)
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    torch.cuda.synchronize(device)
    return min(times)


_SLEEP_CYCLES_PER_S: dict[int, float] = {}


def _sleep_cycles_per_s(device: torch.device) -> float:
    """Clock cycles per second of ``torch.cuda._sleep`` on `device`, measured once."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SLEEP_CYCLES_PER_S:
        cycles = 20_000_000
        torch.cuda._sleep(cycles)  # warm
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _SLEEP_CYCLES_PER_S[index] = cycles / (start.elapsed_time(end) / 1e3)
    return _SLEEP_CYCLES_PER_S[index]


@dataclass(slots=True)
class _Queue:
    """A kernels-only point's calls per sample and GPU sleep, adjusted when a sample starves."""

    inner: int
    sleep_s: float
    max_sleep_s: float


def _time_queued(run: Callable[[], object], device: torch.device, queue: _Queue) -> float:
    """GPU seconds of one call of `run`, from `queue.inner` back-to-back calls all queued before
    the first one runs.

    A starved sample (the GPU reached the calls before the host had queued them) is taken again
    with half the calls (their launches may have filled CUDA's launch queue) or, at one call,
    twice the sleep, up to four times the first; the change holds for the point's later samples.
    A single call that still starves launches more kernels than the queue holds: its sample is
    kept as it is, launch gaps included.
    """
    for _ in range(MAX_SLEEP_RETRIES):
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(queue.sleep_s * _sleep_cycles_per_s(device)))
        calls = queue.inner
        start.record()
        for _ in range(calls):
            run()
        end.record()
        starved = start.query()
        end.synchronize()
        if not starved:
            break
        if queue.inner > 1:
            queue.inner //= 2
        elif queue.sleep_s < queue.max_sleep_s:
            queue.sleep_s = min(2 * queue.sleep_s, queue.max_sleep_s)
        else:
            break
    return start.elapsed_time(end) / 1e3 / calls


def _time(run: Callable[[], object], device: torch.device, inner: int) -> float:
    """Seconds taken by `inner` back-to-back calls of `run`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    for _ in range(inner):
        run()
    return time.perf_counter() - begin


@dataclass(frozen=True, slots=True, kw_only=True)
class Bench:
    """Where and how hard to measure: the torch device and the timing plan."""

    device: torch.device
    plan: TimingPlan
    kernels_only: bool = False  # CUDA: time the GPU's work alone (module docstring)


def timer_name(device: torch.device, kernels_only: bool = False) -> str:
    """The clock used on `device`, for provenance."""
    if device.type != "cuda":
        return "time.perf_counter"
    return "cuda-events, launches queued behind a GPU sleep" if kernels_only else "cuda-events"
