"""Copies between device and host memory, from a profile's host_copy.csv or the preset's link.

host_copy.csv (measured by `ltsim profile --device cuda`, ltsim/profiler/host_copy.py; loaded with
the profile, ``Profile.host_copies``) holds the seconds of one copy of ``bytes`` per direction (d2h,
h2d) and host memory (``pageable``: a plain ``tensor.to("cpu")``, synchronous, what ALST's
reference offload and ltsim's executor do; ``pinned``: page-locked buffers, what an asynchronous
copy needs). A copy is priced by linear interpolation in bytes between the measured sizes of its
(direction, host memory), and beyond them at the bandwidth of the nearest measured size. A profile
without the table (the published ones), or without that pair, prices bytes /
``host_link_bytes_per_s`` of the hardware preset. Each of these approximations is reported once
among the run's warnings, as the other tables' lookups outside their ranges are.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable

from ltsim.units import GiB, MiB


class HostLink:
    """Seconds of device <-> host copies (see the module docstring). ``points``: (direction, host
    memory) -> ((bytes, seconds), ...) by bytes, as ``profiles.read_host_copies`` gives them."""

    def __init__(self, points: dict[tuple[str, str], tuple[tuple[int, float], ...]],
                 fallback_bytes_per_s: float,
                 note: Callable[[str], None] | None = None) -> None:
        self._points = {key: (tuple(b for b, _ in rows), rows) for key, rows in points.items()
                        if rows}
        self._fallback = fallback_bytes_per_s
        self._note = note or (lambda text: None)  # the profile's warnings (Profile.note)

    def measured(self, direction: str, pinned: bool) -> bool:
        return (direction, "pinned" if pinned else "pageable") in self._points

    def time_s(self, direction: str, num_bytes: float, *, pinned: bool) -> float:
        if num_bytes <= 0:
            return 0.0
        memory = "pinned" if pinned else "pageable"
        found = self._points.get((direction, memory))
        if found is None:
            self._note(f"host_copy: no measured {direction} copies through {memory} memory; "
                       f"priced at the hardware preset's host link, "
                       f"{self._fallback / 1e9:g} GB/s")
            return num_bytes / self._fallback
        sizes, points = found
        i = bisect_left(sizes, num_bytes)
        if i < len(points) and sizes[i] == num_bytes:
            return points[i][1]
        if i == 0 or i == len(points):  # outside the measured sizes: the nearest one's bandwidth
            b, t = points[0] if i == 0 else points[-1]
            self._note(f"host_copy: {direction} ({memory}) copies "
                       + (f"below the measured min {_size(b)} priced at its bandwidth, without "
                          "a fixed latency" if i == 0 else
                          f"above the measured max {_size(b)} priced at its bandwidth"))
            return num_bytes * t / b
        (b0, t0), (b1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (num_bytes - b0) / (b1 - b0)


def _size(num_bytes: int) -> str:
    return f"{num_bytes / GiB:g} GiB" if num_bytes >= GiB else f"{num_bytes / MiB:g} MiB"
