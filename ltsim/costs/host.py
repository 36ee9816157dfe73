"""Copies between device and host memory, from a profile's host_copy.csv or the preset's link.

host_copy.csv (measured by `ltsim profile --device cuda`, ltsim/profiler/host_copy.py; loaded with
the profile, ``Profile.host_copies``) holds the seconds of one copy of ``bytes`` per direction (d2h,
h2d) and host memory (``pageable``: a plain ``tensor.to("cpu")``, synchronous, what ALST's
reference offload and ltsim's executor do; ``pinned``: page-locked buffers, what an asynchronous
copy needs). A copy is priced by linear interpolation in bytes between the measured sizes of its
(direction, host memory), and beyond them at the bandwidth of the nearest measured size. A profile
without the table (the published ones), or without that pair, prices bytes /
``host_link_bytes_per_s`` of the hardware preset.
"""

from __future__ import annotations

from bisect import bisect_left


class HostLink:
    """Seconds of device <-> host copies (see the module docstring). ``points``: (direction, host
    memory) -> ((bytes, seconds), ...) by bytes, as ``profiles.read_host_copies`` gives them."""

    def __init__(self, points: dict[tuple[str, str], tuple[tuple[int, float], ...]],
                 fallback_bytes_per_s: float) -> None:
        self._points = {key: (tuple(b for b, _ in rows), rows) for key, rows in points.items()
                        if rows}
        self._fallback = fallback_bytes_per_s

    def measured(self, direction: str, pinned: bool) -> bool:
        return (direction, "pinned" if pinned else "pageable") in self._points

    def time_s(self, direction: str, num_bytes: float, *, pinned: bool) -> float:
        if num_bytes <= 0:
            return 0.0
        found = self._points.get((direction, "pinned" if pinned else "pageable"))
        if found is None:
            return num_bytes / self._fallback
        sizes, points = found
        i = bisect_left(sizes, num_bytes)
        if i < len(points) and sizes[i] == num_bytes:
            return points[i][1]
        if i == 0 or i == len(points):  # outside the measured sizes: the nearest one's bandwidth
            b, t = points[0] if i == 0 else points[-1]
            return num_bytes * t / b
        (b0, t0), (b1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (num_bytes - b0) / (b1 - b0)
