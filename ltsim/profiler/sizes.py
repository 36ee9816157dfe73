"""The sizes each table measures, per device and for `--quick`.

CPU sizes cover what the executor's CPU tests run: chunks of 16 to 8192 tokens, K/V up to 16384
tokens. CUDA sizes cover long-context training chunks (up to 128K tokens of queries and K/V).
Token counts are powers of two (log-spaced), so the cost model interpolates in log-log space.
"""

from __future__ import annotations

from dataclasses import dataclass

from ltsim.profiler.timing import TimingPlan
from ltsim.units import KiB, MiB


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileSizes:
    """What to measure. Token counts are per chunk (per TP rank for the sharded widths)."""

    gemm_tokens: tuple[int, ...]
    attention_tokens: tuple[int, ...]  # every (q, kv) pair of these with q <= kv is measured
    varlen_total_tokens: tuple[int, ...]
    varlen_num_seqs: tuple[int, ...]
    elementwise_tokens: tuple[int, ...]
    memory_tokens: tuple[int, ...]
    eager_tokens: tuple[int, ...]  # tiny chunks (the launch floor); on a CPU larger ones too
    eager_stages: tuple[str, ...] = ("middle",)  # on a CPU also "first" (embedding), "last" (head)
    # chunks with context: (query tokens, context tokens) of a middle stage
    eager_context: tuple[tuple[int, int], ...] = ()
    host_copy_bytes: tuple[int, ...] = ()  # none on a CPU: the device is the host
    collective_bytes: tuple[int, ...]
    collective_group_sizes: tuple[int, ...]
    timing: TimingPlan
    collective_timing: TimingPlan

    def attention_pairs(self) -> tuple[tuple[int, int], ...]:
        """(q_tokens, kv_tokens) pairs: the upper triangle (q <= kv) of a square grid, the shape
        ltsim.lookup.LogGrid2D interpolates bilinearly."""
        tokens = sorted(self.attention_tokens)
        return tuple((q, kv) for q in tokens for kv in tokens if q <= kv)


def powers_of_two(low: int, high: int, step: int = 1) -> tuple[int, ...]:
    """low, low * 2**step, ... up to high (high included even off the step)."""
    values, value = [], low
    while value < high:
        values.append(value)
        value *= 2**step
    values.append(high)
    return tuple(values)


def sizes_for(device: str, *, quick: bool, max_group_size: int) -> ProfileSizes:
    """Sizes for device "cpu" or "cuda"; `max_group_size` caps the collective group sizes.

    `max_group_size` is the number of devices a collective group can span (GPUs for NCCL). Below 2
    there is no group to measure: `collective_group_sizes` is empty and the profile has no
    collectives table.
    """
    groups = tuple(g for g in (2, 4, 8) if g <= max_group_size)
    if device == "cpu":
        if quick:
            return ProfileSizes(
                gemm_tokens=(16, 128, 1024), attention_tokens=(16, 128, 1024, 2048),
                varlen_total_tokens=(512, 2048), varlen_num_seqs=(2, 8),
                elementwise_tokens=(16, 256, 4096), memory_tokens=(128, 512),
                eager_tokens=(16,),
                collective_bytes=(64 * KiB, 1 * MiB, 16 * MiB), collective_group_sizes=groups[:1],
                timing=TimingPlan(warmup=1, min_repeats=3, max_repeats=10, target_s=0.02),
                collective_timing=TimingPlan(warmup=1, min_repeats=3, max_repeats=10,
                                             target_s=0.02))
        return ProfileSizes(
            gemm_tokens=powers_of_two(16, 8192),
            attention_tokens=(*powers_of_two(16, 4096, 2), 8192, 16384),
            varlen_total_tokens=(1024, 4096, 8192), varlen_num_seqs=(2, 8, 32),
            elementwise_tokens=powers_of_two(16, 8192, 2), memory_tokens=(256, 1024, 4096),
            eager_tokens=(16, 64, 256, 1024, 4096),  # on a CPU, whole ops at every size
            eager_stages=("middle", "first", "last"),
            eager_context=tuple((q, c) for q in (64, 256, 1024) for c in (256, 1024, 4096)),
            collective_bytes=powers_of_two(4 * KiB, 64 * MiB, 2), collective_group_sizes=groups[:1],
            timing=TimingPlan(warmup=1, min_repeats=3, max_repeats=30, target_s=0.5,
                              long_call_s=0.5, rounds=3),
            collective_timing=TimingPlan(warmup=5, min_repeats=10, max_repeats=200, target_s=0.25))
    if quick:
        return ProfileSizes(
            gemm_tokens=(256, 4096), attention_tokens=(512, 4096, 16384),
            varlen_total_tokens=(4096,), varlen_num_seqs=(2, 8),
            elementwise_tokens=(1024, 16384), memory_tokens=(1024, 4096),
            eager_tokens=(32,), host_copy_bytes=(16 * MiB, 256 * MiB),
            collective_bytes=(1 * MiB, 64 * MiB), collective_group_sizes=groups[:1],
            timing=TimingPlan(warmup=3, min_repeats=5, max_repeats=20, target_s=0.02),
            collective_timing=TimingPlan(warmup=3, min_repeats=5, max_repeats=20, target_s=0.02))
    return ProfileSizes(
        gemm_tokens=powers_of_two(64, 65536), attention_tokens=powers_of_two(128, 131072, 2),
        varlen_total_tokens=(4096, 16384, 65536), varlen_num_seqs=(2, 8, 32, 128),
        elementwise_tokens=powers_of_two(256, 65536), memory_tokens=(1024, 4096, 16384),
        eager_tokens=(32, 256), host_copy_bytes=powers_of_two(16 * MiB, 1024 * MiB, 2),
        # small chunks after earlier tokens of their sequence (SeCO, SpaCO, ChunkFlow): host-bound
        eager_context=tuple((q, c) for q in (256, 1024) for c in (1024, 4096, 16384)),
        collective_bytes=powers_of_two(64 * KiB, 1024 * MiB, 2), collective_group_sizes=groups,
        timing=TimingPlan(warmup=5, min_repeats=10, max_repeats=100, target_s=0.1),
        collective_timing=TimingPlan(warmup=5, min_repeats=10, max_repeats=50, target_s=0.1))
