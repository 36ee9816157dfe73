"""What machine a profile was measured on: device, memory, software versions, CPU model, threads."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else (platform.processor() or "unknown")


def host_memory_bytes() -> int:
    """Physical memory from /proc/meminfo (0 when unknown)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def _blas() -> str:
    match = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return match.group(1) if match else "unknown"


def _driver_version() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


def _flash_attn_version() -> str:
    try:
        import flash_attn
    except ImportError:
        return "not installed"
    return str(getattr(flash_attn, "__version__", "unknown"))


def describe(device: torch.device) -> tuple[str, int, dict[str, str]]:
    """(device name, device memory in bytes, software and host facts as strings)."""
    software = {"torch": torch.__version__, "python": platform.python_version(),
                "platform": platform.platform(), "cpu_model": cpu_model(),
                "cpu_count": str(os.cpu_count()), "num_threads": str(torch.get_num_threads()),
                "num_interop_threads": str(torch.get_num_interop_threads()), "blas": _blas(),
                "host_memory_bytes": str(host_memory_bytes())}
    if device.type != "cuda":
        return f"cpu: {software['cpu_model']}", host_memory_bytes(), software
    props = torch.cuda.get_device_properties(device)
    nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
    software |= {"cuda": str(torch.version.cuda), "driver": _driver_version(),
                 "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                 "cudnn": str(torch.backends.cudnn.version()), "flash_attn": _flash_attn_version(),
                 "gpu_count": str(torch.cuda.device_count())}
    return props.name, int(props.total_memory), software
