"""Metrics: per-batch numbers from a Trace, and the Result aggregated over batches (DESIGN.md section 5).

bubble ratio = 1 - (busy compute time summed over simulated devices) / (devices x makespan), with
recompute counted as busy (ChunkFlow eq. 1 generalised); MFU = model training FLOPs (forward +
backward, 3x forward, recompute excluded; see ltsim/model.py) / (iteration time x GPUs x peak).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from math import floor, fsum
from typing import Any

import numpy as np

from ltsim.plan import BUSY_KINDS, OpKind, Plan
from ltsim.trace import Trace

_BUSY = frozenset(k.value for k in BUSY_KINDS)
_RECOMPUTE = frozenset({OpKind.R.value})


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetrics:
    iteration_time_s: float
    busy_s: float
    recompute_s: float
    bubble_ratio: float
    peak_memory_bytes_per_device: tuple[int, ...]
    peak_host_memory_bytes_per_device: tuple[int, ...]
    final_memory_bytes_per_device: tuple[int, ...]
    static_memory_bytes_per_device: tuple[int, ...]
    num_tokens: int
    model_flops: float


def batch_metrics(plan: Plan, trace: Trace, model_flops: float) -> BatchMetrics:
    makespan = trace.makespan_s
    # mirrored replicas (ltsim/mirrors.py): a replayed device counts once per device it stands for
    copies = Counter(trace.mirror_of)
    busy = fsum(copies.get(device, 1) * seconds for device, seconds
                in trace.seconds_by_device(_BUSY, "compute").items())
    recompute = fsum(copies.get(device, 1) * seconds for device, seconds
                     in trace.seconds_by_device(_RECOMPUTE).items())
    capacity = plan.num_devices * makespan
    return BatchMetrics(
        iteration_time_s=makespan, busy_s=busy, recompute_s=recompute,
        bubble_ratio=1.0 - busy / capacity if capacity > 0 else 0.0,
        peak_memory_bytes_per_device=tuple(trace.peak_memory_bytes()),
        peak_host_memory_bytes_per_device=tuple(trace.peak_host_memory_bytes()),
        final_memory_bytes_per_device=tuple(trace.final_memory_bytes()),
        static_memory_bytes_per_device=trace.static_bytes,
        num_tokens=plan.num_tokens, model_flops=model_flops)


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """A scenario's prediction, aggregated over its simulated global batches."""

    scenario: str
    strategy: str
    strategy_options: dict[str, Any]
    batches: tuple[BatchMetrics, ...]
    memory_limit_bytes: int
    host_memory_limit_bytes: int
    num_gpus: int
    peak_flops_per_s: float
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    unit_costs: bool = False  # the ``unit`` preset: times are units of work, memory tokens

    @property
    def iteration_times_s(self) -> np.ndarray:
        return np.array([b.iteration_time_s for b in self.batches])

    @property
    def peak_memory_bytes_per_device(self) -> list[int]:
        per = np.array([b.peak_memory_bytes_per_device for b in self.batches])
        return [int(x) for x in per.max(axis=0)]

    @property
    def peak_host_memory_bytes_per_device(self) -> list[int]:
        per = np.array([b.peak_host_memory_bytes_per_device for b in self.batches])
        return [int(x) for x in per.max(axis=0)]

    @property
    def static_memory_bytes(self) -> int:
        """Weights, gradients and optimizer state per GPU of the busiest device."""
        return max(max(b.static_memory_bytes_per_device) for b in self.batches)

    @property
    def fits(self) -> bool:
        return (max(self.peak_memory_bytes_per_device) <= self.memory_limit_bytes
                and max(self.peak_host_memory_bytes_per_device) <= self.host_memory_limit_bytes)

    @property
    def fit_reason(self) -> str:
        if self.fits:
            return ""
        peaks = self.peak_memory_bytes_per_device
        worst = int(np.argmax(peaks))
        if peaks[worst] > self.memory_limit_bytes:
            if self.unit_costs:  # the unit preset's memory is in tokens of activation
                return (f"device {worst} needs {peaks[worst]:,} tokens, the limit is "
                        f"{self.memory_limit_bytes:,} tokens")
            need, limit = _apart(peaks[worst], self.memory_limit_bytes)
            return f"device {worst} needs {need} GiB, the limit is {limit} GiB"
        host = self.peak_host_memory_bytes_per_device
        worst = int(np.argmax(host))
        need, limit = _apart(host[worst], self.host_memory_limit_bytes)
        return (f"device {worst} needs {need} GiB of host memory, the limit is {limit} GiB "
                "per GPU")

    @property
    def mfu(self) -> float | None:
        """Model FLOPs over the batches' time at the preset's peak (None without a peak or FLOPs)."""
        total_time = float(self.iteration_times_s.sum())
        flops = sum(b.model_flops for b in self.batches)
        if self.peak_flops_per_s > 0 and flops > 0 and total_time > 0:
            return flops / (total_time * self.num_gpus * self.peak_flops_per_s)
        return None

    def to_dict(self) -> dict[str, Any]:
        times = self.iteration_times_s
        total_time = float(times.sum())
        tokens = sum(b.num_tokens for b in self.batches)
        busy = sum(b.busy_s for b in self.batches)
        mfu = self.mfu
        peaks = self.peak_memory_bytes_per_device
        return {
            "scenario": self.scenario, "strategy": self.strategy,
            "strategy_options": dict(self.strategy_options),
            "num_batches": len(self.batches),
            "iteration_time_s": float(times.mean()),
            "iteration_time_s_p50": percentile(times, 50),
            "iteration_time_s_p95": percentile(times, 95),
            "bubble_ratio": float(np.mean([b.bubble_ratio for b in self.batches])),
            "recompute_ratio": sum(b.recompute_s for b in self.batches) / busy if busy else 0.0,
            "peak_memory_bytes": max(peaks), "peak_memory_bytes_per_device": peaks,
            "static_memory_bytes": self.static_memory_bytes,
            "peak_host_memory_bytes": max(self.peak_host_memory_bytes_per_device),
            "memory_limit_bytes": self.memory_limit_bytes, "fits": self.fits,
            "fit_reason": self.fit_reason,
            "tokens_per_s": tokens / total_time if total_time > 0 else 0.0,
            "mfu": mfu, "num_gpus": self.num_gpus,
            "warnings": list(self.warnings), "unit_costs": self.unit_costs, **self.extra,
        }


def speedup(base: dict[str, Any], other: dict[str, Any]) -> float | None:
    """How much faster ``other`` trains than ``base`` (two ``Result.to_dict()``): the ratio of
    their tokens per second, which is base time / other time when both run the same tokens, and
    stays fair when they do not (sorted batching samples its own batches). None without a rate."""
    if not base.get("tokens_per_s") or other.get("tokens_per_s") is None:
        return None
    return other["tokens_per_s"] / base["tokens_per_s"]


def percentile(values, q: float) -> float:
    """``numpy.percentile(values, q)`` (its default, linear method, to the last bit:
    tests/unit/test_metrics_percentile.py) without its first call's import of numpy.ma, 10 ms
    of every sweep worker."""
    ordered = sorted(values)
    index = (len(ordered) - 1) * (q / 100)
    if index >= len(ordered) - 1:
        return float(ordered[-1])
    low = floor(index)
    a, b = ordered[low], ordered[low + 1]
    t, d = index - low, ordered[low + 1] - ordered[low]
    return float(b - d * (1 - t) if t >= 0.5 else a + d * t)  # numpy's _lerp


def _apart(need: float, limit: float) -> tuple[str, str]:
    """Two byte counts in GiB with the fewest decimals (1 to 4) that tell them apart: a need just
    over its limit read "needs 21.9 GiB, the limit is 21.9 GiB"."""
    for digits in range(1, 5):
        texts = (f"{need / 2**30:.{digits}f}", f"{limit / 2**30:.{digits}f}")
        if texts[0] != texts[1]:
            break
    return texts
