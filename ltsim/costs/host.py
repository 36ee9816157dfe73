"""Copies between device and host memory, from a profile's host_copy.csv or the preset's link.

host_copy.csv (measured by `ltsim profile --device cuda`, ltsim/profiler/host_copy.py) holds the
seconds of one copy of ``bytes`` per direction (d2h, h2d) and host memory (``pageable``: a plain
``tensor.to("cpu")``, synchronous, what ALST's reference offload and ltsim's executor do;
``pinned``: page-locked buffers, what an asynchronous copy needs). A copy is priced by linear
interpolation in bytes between the measured sizes of its (direction, host memory), and beyond them
at the bandwidth of the nearest measured size. A profile without the table (the published ones), or
without that pair, prices bytes / ``host_link_bytes_per_s`` of the hardware preset.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from functools import lru_cache
from pathlib import Path

from ltsim.profile_files import read_optional_rows


class HostLink:
    """Seconds of device <-> host copies (see the module docstring)."""

    def __init__(self, points: dict[tuple[str, str], tuple[tuple[int, float], ...]],
                 fallback_bytes_per_s: float) -> None:
        self._points = points  # (direction, host memory) -> ((bytes, seconds), ...) by bytes
        self._fallback = fallback_bytes_per_s

    def measured(self, direction: str, pinned: bool) -> bool:
        return (direction, "pinned" if pinned else "pageable") in self._points

    def time_s(self, direction: str, num_bytes: float, *, pinned: bool) -> float:
        points = self._points.get((direction, "pinned" if pinned else "pageable"))
        if num_bytes <= 0:
            return 0.0
        if not points:
            return num_bytes / self._fallback
        sizes = [b for b, _ in points]
        i = bisect_left(sizes, num_bytes)
        if i < len(points) and sizes[i] == num_bytes:
            return points[i][1]
        if i == 0 or i == len(points):  # outside the measured sizes: the nearest one's bandwidth
            b, t = points[0] if i == 0 else points[-1]
            return num_bytes * t / b
        (b0, t0), (b1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (num_bytes - b0) / (b1 - b0)


def host_link(directory: str, fallback_bytes_per_s: float) -> HostLink:
    """The profile's host copies (read once per version of its host_copy.csv), else the preset's
    bandwidth (also for ``directory`` "": no profile)."""
    try:
        if not directory:
            raise FileNotFoundError
        stat = (Path(directory) / "host_copy.csv").stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None
    return _host_link(directory, stamp, fallback_bytes_per_s)


@lru_cache(maxsize=16)
def _host_link(directory: str, stamp: tuple[int, int] | None,
               fallback_bytes_per_s: float) -> HostLink:
    rows = read_optional_rows(Path(directory), "host_copy") if stamp is not None else None
    groups: dict[tuple[str, str, int], list[float]] = {}
    if rows is not None:
        for direction, memory, size, seconds in zip(rows["direction"], rows["host_memory"],
                                                    rows["bytes"], rows["time_s"]):
            groups.setdefault((direction, memory, int(size)), []).append(float(seconds))
    points: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for (direction, memory, size), times in sorted(groups.items()):
        points.setdefault((direction, memory), []).append((size, statistics.median(times)))
    return HostLink({k: tuple(v) for k, v in points.items()}, fallback_bytes_per_s)
