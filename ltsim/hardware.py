"""Device and cluster specs: memory, peak throughput, links, node topology, and their presets.

Peak numbers are the vendors' dense BF16 datasheet values; link bandwidths are per-direction
nominal values. Measured behaviour lives in the profile tables, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ltsim.errors import ConfigError
from ltsim.units import GB, GiB, TFLOPS


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator."""

    name: str
    memory_bytes: int
    peak_flops_per_s: float  # dense bf16 (fp32 for cpu)
    hbm_bytes_per_s: float
    intra_link_bytes_per_s: float  # per GPU, one direction (NVLink)
    inter_link_bytes_per_s: float  # per GPU, one direction (NIC)
    profile: str  # default profile directory, relative to the repository's profiles/
    host_memory_bytes: float  # host (CPU) memory per GPU: the node's memory / its GPUs
    host_link_bytes_per_s: float  # host <-> device copies, one direction (PCIe)
    host_dram_bytes_per_s: float = 0.0  # the host's memory bandwidth per GPU (CPU optimizer steps)
    synchronous: bool = False  # kernels run on the host thread (a CPU): host work adds to them
    is_unit: bool = False
    chip: str = ""  # the GPU as a profile's meta.json names it ("H100"): another is noted


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """Nodes of identical devices."""

    device: DeviceSpec
    num_nodes: int = 1
    gpus_per_node: int = 8
    memory_limit_bytes: int | None = None  # defaults to the device memory
    profile: str = ""  # overrides device.profile when set
    attention_kernel: str = ""  # the profile's attention kernel to use ("" its default): e.g.
    # "torch_sdpa" (ltsim's executor), "fa2", "fa3"; each kernel is its own rows in attention.csv
    loss_kernel: str = "torch"  # the cross entropy's kernel, memory.LOSS_KERNELS: "torch" (ltsim's
    # executor, fp32 logits) or "fused" (flash-attn's, model-dtype logits)

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def limit_bytes(self) -> int:
        return self.memory_limit_bytes if self.memory_limit_bytes is not None else self.device.memory_bytes

    @property
    def host_limit_bytes(self) -> float:
        return self.device.host_memory_bytes

    @property
    def profile_dir(self) -> str:
        return self.profile or self.device.profile


H100_MEMORY_BYTES = 85_017_493_504

# H100 SXM5: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink4 450 GB/s per direction, 400 Gb/s NIC.
# Its memory is what CUDA lets a process use, as measured on the profiled H100 (torch's
# total_memory, profiles/h100-sxm5-80gb/meta.json): 85,017,493,504 B = 79.18 GiB, not the
# nominal 80 GiB (0.82 GiB more, which let a plan "fit" that the device cannot hold; a review,
# 2026-11-29). The other GPUs keep their datasheet sizes: none was measured here.
# A100 SXM4: 312 TFLOP/s, 2.04 TB/s, NVLink3 300 GB/s per direction, 200 Gb/s NIC.
# H200: H100 compute with 141 GB HBM3e at 4.8 TB/s.
# Host side: DGX H100 and DGX H200 nodes carry 2 TB of system memory for 8 GPUs, DGX A100 1 TB (the
# DGX datasheets); host copies use PCIe Gen5 x16 on H100/H200 and Gen4 x16 on A100, 64 and 32 GB/s
# per direction nominal (PCI-SIG). Host memory bandwidth per GPU, for an optimizer stepping on the
# CPU: DGX H100/H200 have two Xeon 8480C with 8 channels of DDR5-4800 each (38.4 GB/s a channel,
# 614 GB/s a node, 76.8 GB/s per GPU); DGX A100 two EPYC 7742 with 8 channels of DDR4-3200 each
# (25.6 GB/s a channel, 410 GB/s, 51.2 GB/s per GPU). The cpu preset copies at its memory
# bandwidth within its 24 GiB.
# RTX 3090 (SeCO/SpaCO's setting): 24 GB GDDR6X at 936 GB/s, 71 TFLOP/s dense bf16 with fp32
# accumulation (NVIDIA GA102 whitepaper, Table 9), no NVLink switch: GPUs talk over PCIe 4.0 x16
# (32 GB/s per direction, PCI-SIG); between nodes 100 Gb/s and host memory 64 GB per GPU (a 512 GB
# 8-GPU server, one socket of 8 DDR4-3200 channels: 25.6 GB/s per GPU) are assumptions, as the
# paper states neither. Its profile is derived from the A100's
# by these ratios (profiles/build_rtx3090.py).
# A800-40GB (InfiniPipe's testbed, seeds/infinipipe.md 5.1): the A100's GA100 compute (312 TFLOPS
# dense BF16), 40 GB HBM2 at 1,555 GB/s and NVLink 400 GB/s bidirectional (NVIDIA A800 datasheet,
# 200 GB/s per direction); "400 Gb/s InfiniBand" read as one 400 Gb/s link per 8-GPU node
# (50 GB/s, 6.25 GB/s per GPU); host side as DGX A100. Profile: profiles/build_a800.py.
PRESETS: dict[str, DeviceSpec] = {
    "a100-sxm4-80gb": DeviceSpec(name="a100-sxm4-80gb", chip="A100", memory_bytes=80 * GiB,
                                 peak_flops_per_s=312 * TFLOPS, hbm_bytes_per_s=2.039e12,
                                 intra_link_bytes_per_s=300 * GB, inter_link_bytes_per_s=25 * GB,
                                 profile="a100-sxm4-80gb", host_memory_bytes=1000 * GB / 8,
                                 host_link_bytes_per_s=32 * GB,
                                 host_dram_bytes_per_s=16 * 25.6 * GB / 8),
    "a800-40gb": DeviceSpec(name="a800-40gb", chip="A800", memory_bytes=40 * GiB,
                            peak_flops_per_s=312 * TFLOPS, hbm_bytes_per_s=1.555e12,
                            intra_link_bytes_per_s=200 * GB, inter_link_bytes_per_s=50 * GB / 8,
                            profile="a800-40gb", host_memory_bytes=1000 * GB / 8,
                            host_link_bytes_per_s=32 * GB,
                            host_dram_bytes_per_s=16 * 25.6 * GB / 8),
    "h100-sxm5-80gb": DeviceSpec(name="h100-sxm5-80gb", chip="H100",
                                 memory_bytes=H100_MEMORY_BYTES,
                                 peak_flops_per_s=989 * TFLOPS, hbm_bytes_per_s=3.35e12,
                                 intra_link_bytes_per_s=450 * GB, inter_link_bytes_per_s=50 * GB,
                                 profile="h100-sxm5-80gb", host_memory_bytes=2000 * GB / 8,
                                 host_link_bytes_per_s=64 * GB,
                                 host_dram_bytes_per_s=16 * 38.4 * GB / 8),
    "h200": DeviceSpec(name="h200", chip="H200", memory_bytes=141 * GB,
                       peak_flops_per_s=989 * TFLOPS, hbm_bytes_per_s=4.8e12,
                       intra_link_bytes_per_s=450 * GB, inter_link_bytes_per_s=50 * GB,
                       profile="h200",
                       host_memory_bytes=2000 * GB / 8, host_link_bytes_per_s=64 * GB,
                       host_dram_bytes_per_s=16 * 38.4 * GB / 8),
    "rtx-3090": DeviceSpec(name="rtx-3090", chip="3090", memory_bytes=24 * GiB,
                           peak_flops_per_s=71 * TFLOPS, hbm_bytes_per_s=936 * GB,
                           intra_link_bytes_per_s=32 * GB, inter_link_bytes_per_s=12.5 * GB,
                           profile="rtx-3090",
                           host_memory_bytes=64 * GB, host_link_bytes_per_s=32 * GB,
                           host_dram_bytes_per_s=8 * 25.6 * GB / 8),
    # (no peak: MFU's is the best GEMM rate its profile measured, costs/table.py; 0.1 TFLOP/s
    # before, below the cpu-ci profile's 0.16 at one thread: MFU 1.13 for a one-layer model)
    "cpu": DeviceSpec(name="cpu", memory_bytes=24 * GiB, peak_flops_per_s=0.0,
                      hbm_bytes_per_s=10 * GB, intra_link_bytes_per_s=5 * GB,
                      inter_link_bytes_per_s=1 * GB, profile="cpu-ci", host_memory_bytes=24 * GiB,
                      host_link_bytes_per_s=10 * GB, host_dram_bytes_per_s=10 * GB,
                      synchronous=True),
    # The seed papers' hand-drawn examples: forward = tokens seconds, backward = 2x, free comm,
    # one byte of activation per token (DESIGN.md section 4).
    "unit": DeviceSpec(name="unit", memory_bytes=2**62, peak_flops_per_s=0.0, hbm_bytes_per_s=0.0,
                       intra_link_bytes_per_s=float("inf"), inter_link_bytes_per_s=float("inf"),
                       profile="", host_memory_bytes=2**62, host_link_bytes_per_s=float("inf"),
                       host_dram_bytes_per_s=float("inf"),
                       is_unit=True),
}


def get_device(name: str, **overrides: object) -> DeviceSpec:
    spec = PRESETS.get(name.lower())
    if spec is None:
        raise ConfigError("hardware.preset", f"one of {', '.join(sorted(PRESETS))}", name)
    return replace(spec, **overrides) if overrides else spec
