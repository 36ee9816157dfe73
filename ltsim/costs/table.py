"""TableCostModel: durations and bytes for real hardware, from profile tables plus the memory model.

It knows the model shape, the cluster and the profile, and nothing about a plan or a parallel
layout: every op, buffer and device says what it is (ltsim.plan). Compute: compute.py; comm and
copies: comm.py; buffers and static memory: buffers.py.

OPT = optimizer step: ~28 bytes per local parameter shard through HBM (Adam over fp32 master
weights: read param, grad, m, v (16 B), write param, m, v (12 B)); the shard is 1/num_shards of
the device's parameters from ZeRO stage 1 on. With the optimizer offloaded (ZeRO-Offload's
CPU-Adam), those 28 B plus the model-dtype copy it writes go through the host's memory bandwidth
per GPU (a roofline floor: a measured CPU-Adam is slower), and the updated weights go back to the
device over the host link. With ``optimizer_dtype = "model"`` (Adam state in the
parameters' dtype, the executor's convention) and a profile with optimizer.csv, the measured step
time instead (costs/eager.py); so too for an fp32 model under ``"fp32"``, whose state (fp32
moments, no master copy) and step are the same.

Memory: ``memory_limit_bytes`` is the device memory less the allocator allowance
(memory.ALLOCATOR_OVERHEAD: fixed CUDA-context/NCCL bytes, then the fragmentation share), the one
place the allowance is applied; a plan fits when its tensor peak is below it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, TypeVar

import numpy as np

import ltsim.memory as mem
from ltsim.costs.buffers import BufferCosts
from ltsim.costs.comm import CommCosts
from ltsim.costs.compute import ComputeCosts
from ltsim.costs.eager import eager_costs
from ltsim.errors import ConfigError
from ltsim.hardware import ClusterSpec
from ltsim.model import ModelSpec, training_flops
from ltsim.plan import Buffer, Chunk, Comm, Device, Keep, OpKind, Work
from ltsim.profile_files import ProfileMeta, measured_on_cpu
from ltsim.profile_paths import shadowed_folder
from ltsim.profiles import SDPA_BOOL_MASK_KERNEL, SDPA_KERNELS, load_profile
from ltsim.units import dtype_bytes

OPT_BYTES_PER_PARAM = 28.0
# the share of a GPU preset's peak below which a profile's large GEMMs are noted: times in ms
# read as s put them near 0.1%; the bundled profiles' reach 80-92% of their presets' peaks
# (Profile.best_large_gemm_flops_per_s of each bundled GPU profile, 2026-11-29)
SLOW_GEMM_SHARE = 0.02
T = TypeVar("T")


@lru_cache(maxsize=16)
def _flops_table(model: ModelSpec) -> dict[tuple[int, int], float]:
    """One slice-FLOPs memo per model, shared by the cost models of a sweep's points (values of
    the model alone)."""
    return {}


def _check_device_kind(cluster: ClusterSpec, meta: ProfileMeta) -> None:
    """The preset gives the peak FLOP/s (MFU) and the memory, the profile the times: a CPU's
    times against a GPU preset read MFU 0.02% without a word. Raises ConfigError."""
    on_cpu = cluster.device.name == "cpu"
    if on_cpu != measured_on_cpu(meta):  # the device itself is never quoted
        raise ConfigError("hardware.profile", f"a profile measured on {'a CPU' if on_cpu else 'a GPU'}"
                          f" (hardware.preset '{cluster.device.name}' is one)", cluster.profile_dir,
                          f"leave hardware.profile out (the preset's own is "
                          f"{cluster.device.profile}), or choose the preset of the profile's device",
                          context=f"its meta.json names {'a GPU' if on_cpu else 'a CPU'}")


class TableCostModel:
    """Durations from a profile directory, bytes from the memory model (module docstring)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, *,
                 overhead: mem.AllocatorOverhead = mem.ALLOCATOR_OVERHEAD,
                 working_sets: bool = True, grad_dtype: str = "fp32") -> None:
        self.model, self.cluster = model, cluster
        self.profile = load_profile(cluster.profile_dir,
                                    attention_kernel=cluster.attention_kernel or None).for_run()
        _check_device_kind(cluster, self.profile.meta)
        chip = cluster.device.chip
        # (a derived profile's device ends "..., derived from a100-sxm4-80gb": its own is before)
        measured_on = self.profile.meta.device.lower().split("derived from")[0]
        if chip and chip.lower() not in measured_on:
            self.profile.note(f"profile {cluster.profile_dir} was measured on another GPU than "
                              f"the {cluster.device.name} preset's {chip} (its meta.json's "
                              "device): the times are that GPU's, the memory limit and MFU's "
                              "peak the preset's; choose the preset of the profile's GPU")
        shadowed = shadowed_folder(cluster.profile_dir)
        if shadowed:
            self.profile.note(shadowed)
        self.memory_limit_bytes = int((cluster.limit_bytes - overhead.fixed_bytes)
                                      / (1 + overhead.fragmentation_fraction))
        self.host_memory_limit_bytes = int(cluster.host_limit_bytes)
        # MFU's peak: the preset's, or what the profile measured where that is more (a CPU's
        # depends on its cores and vector units: the cpu preset has none and takes the profile's
        # best GEMM; a GPU preset under its own profile's measurement is noted)
        measured = self.profile.best_gemm_flops_per_s(model.dtype)
        self.peak_flops_per_s = max(cluster.device.peak_flops_per_s, measured)
        if 0 < cluster.device.peak_flops_per_s < measured:
            self.profile.note(f"gemm.csv measured {measured / 1e12:.3g} TFLOP/s, above the "
                              f"{cluster.device.name} preset's peak: MFU is taken against it")
        large = self.profile.best_large_gemm_flops_per_s(model.dtype)
        if 0 < large < SLOW_GEMM_SHARE * cluster.device.peak_flops_per_s:  # (a GPU preset's)
            self.profile.note(f"gemm.csv's large GEMMs reach at most {large / 1e12:.3g} TFLOP/s, "
                              f"{large / cluster.device.peak_flops_per_s:.2%} of the "
                              f"{cluster.device.name} preset's peak: are its times in "
                              "milliseconds (time_s is in seconds), or measured on another "
                              "device?")
        # the executor's SDPA path keeps a concatenated copy of the attention output; with a
        # boolean mask, the mask's bias too
        kernel = self.profile.attention_kernel
        self._buffers = BufferCosts(model, sdpa_output_copy=kernel in SDPA_KERNELS,
                                    context_mask_bias=kernel == SDPA_BOOL_MASK_KERNEL,
                                    loss_kernel=cluster.loss_kernel)
        self.working_sets = working_sets  # False: count only buffers (see validate.bare_cost_model)
        self._compute = ComputeCosts(model, cluster, self.profile,
                                     accumulate_grads=grad_dtype == "model")
        _, self._optimizer_rate, _ = eager_costs(str(self.profile.path), model,
                                                  self.profile.tables)
        self._comm = CommCosts(model, cluster, self.profile, self._buffers.bytes)
        self._flops = _flops_table(model)  # (tokens, context) -> model_flops term

    def compute_s(self, kind: OpKind, work: Work, *, part: str = "", keep: Keep = Keep.ALL) -> float:
        return self._compute.time_s(kind, work, part, keep)

    def comm_s(self, comm: Comm) -> float:
        return self._comm.time_s(comm)

    def comm_key(self, comm: Comm) -> tuple:
        return self._comm.key(comm)

    def comm_scopes(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        return self._comm.scopes(low, high)

    def optimizer_s(self, device: Device) -> float:
        params = self._buffers.static_bytes(device).num_parameters
        shards = device.num_shards if device.zero_stage >= 1 else 1
        spec = self.cluster.device
        if device.offload_optimizer:  # the step on the CPU, the new weights back through pinned
            e = dtype_bytes(self.model.dtype)  # buffers (DeepSpeed's ZeRO-Offload pins them)
            return (params / shards * (OPT_BYTES_PER_PARAM + e) / spec.host_dram_bytes_per_s
                    + self._comm.host.time_s("h2d", params / shards * e, pinned=True))
        if self._optimizer_rate is not None and (device.optimizer_dtype == "model"
                                                 or dtype_bytes(self.model.dtype) >= mem.FP32_BYTES):
            # the executor's step, measured (costs/eager.py): Adam state in the model dtype, which
            # for an fp32 model is also the "fp32" convention (no master copy: memory.py)
            return self._optimizer_rate.time_s(params / shards)
        return params / shards * OPT_BYTES_PER_PARAM / spec.hbm_bytes_per_s

    def buffer_bytes(self, buffer: Buffer) -> int:
        return self._buffers.bytes(buffer)

    def working_bytes(self, kind: OpKind, work: Work, *, part: str = "",
                      keep: Keep | None = None) -> int:
        if part == "attn" or not self.working_sets:
            return 0
        return self._buffers.working_bytes(kind, work, keep)

    def static_memory_bytes(self, device: Device) -> int:
        return int(self._buffers.static_bytes(device).total_bytes)

    def static_host_bytes(self, device: Device) -> int:
        return int(self._buffers.static_bytes(device).host_bytes)

    def static_memory(self, device: Device) -> mem.StaticMemory:
        """The static memory split into weights, gradients and optimizer state (ltsim maxlen)."""
        return self._buffers.static_bytes(device)

    def model_flops(self, chunk: Chunk, *, backward: bool = True) -> float:
        """Training FLOPs of the chunk on the whole model, counted once per TP x CP group: 3 x
        forward, 2 x forward under LoRA (no weight gradients), the forward alone for a chunk that
        gets no backward (``backward=False``, SpaCO's unselected chunks)."""
        flops = self._flops
        total = 0.0
        for s in chunk.slices:
            key = (s.stop - s.start, s.start)
            value = flops.get(key)
            if value is None:
                value = flops[key] = training_flops(self.model, q_tokens=key[0], context_tokens=s.start)
            total += value
        passes = (2.0 if self.model.lora_rank else 3.0) if backward else 1.0
        return total * passes / 3.0

    def warnings(self) -> list[str]:
        return self.profile.warnings()

    def price_scope(self) -> tuple:
        """Everything a price reads: the model, the cluster (device, profile choice, network),
        the gradient dtype, whether working sets count, and the tables themselves (not the
        allocator allowance, which only sets the limit)."""
        return (type(self), self.model, self.cluster, self._compute.accumulate_grads,
                self.working_sets, self.profile.tables)

    def noted(self, fn: Callable[..., T], *args: Any) -> tuple[T, tuple]:
        return self.profile.noted(fn, *args)

    def renote(self, notes: tuple) -> None:
        self.profile.renote(notes)
