"""Constants and converters. Inside ltsim everything is seconds and bytes; convert only at boundaries."""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
KB = 1000
MB = 1000**2
GB = 1000**3
TFLOPS = 1e12

MS = 1e-3
US = 1e-6

NO_LIMIT_BYTES = 2**60  # a memory limit at least this large is none (the unit preset's is 2**62)
MAX_NUMBER = 2**53  # no count, size or degree of a scenario comes near; past it sums lose exactness

DTYPE_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name ("bf16", "fp16", "fp32", "fp64", "fp8")."""
    return DTYPE_BYTES[dtype]


def fmt_bytes(num_bytes: float) -> str:
    """Human-readable GiB/MiB string for reports."""
    if abs(num_bytes) >= GiB:
        return f"{num_bytes / GiB:.2f} GiB"
    if abs(num_bytes) >= MiB:
        return f"{num_bytes / MiB:.1f} MiB"
    return f"{num_bytes:.0f} B"


def fmt_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
