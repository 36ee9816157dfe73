"""Trace: frozen event records per device stream, plus each device's memory timelines (device and
host). Simulated (ltsim.sim.engine) and measured (ltsim.executor) traces share this type, so it sits
low in the import order, beside the plan."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ltsim.plan import STREAMS

if TYPE_CHECKING:
    import pandas as pd

EVENT_COLUMNS = ("device", "stream", "token", "kind", "stage", "chunk", "start_s", "end_s")


class Event(NamedTuple):
    """One op as it ran (a named tuple: a trace holds one per op, and tuples are cheap to build)."""

    device: int
    stream: str
    token: str
    kind: str
    stage: int
    chunk: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """What happened (simulated or measured) in one global batch.

    ``memory`` holds (time_s, device, bytes) samples taken after every change; ``static_bytes`` the
    per-device level before the first op; ``host_memory`` the same for host memory (offloaded
    buffers), from ``host_static_bytes`` (an offloaded optimizer's state; 0 when empty). Memory
    is per GPU of the device. ``mirror_of``: when the plan has mirrored DP replicas (ltsim/mirrors.py)
    the trace holds the events and samples of the devices replayed, and this names, per device,
    the replayed device whose timeline it repeats (empty: every device is in the trace).
    """

    events: tuple[Event, ...]
    memory: tuple[tuple[float, int, int], ...]
    static_bytes: tuple[int, ...]
    host_memory: tuple[tuple[float, int, int], ...] = ()
    host_static_bytes: tuple[int, ...] = ()
    source: str = "simulated"  # or "measured"
    mirror_of: tuple[int, ...] = ()

    @property
    def num_devices(self) -> int:
        return len(self.static_bytes)

    @property
    def makespan_s(self) -> float:
        return max((e.end_s for e in self.events), default=0.0)

    def peak_memory_bytes(self) -> list[int]:
        peaks = list(self.static_bytes)
        for _, device, level in self.memory:
            if level > peaks[device]:
                peaks[device] = level
        return self._mirrored(peaks)

    def peak_host_memory_bytes(self) -> list[int]:
        peaks = list(self.host_static_bytes) or [0] * self.num_devices
        for _, device, level in self.host_memory:
            if level > peaks[device]:
                peaks[device] = level
        return self._mirrored(peaks)

    def final_memory_bytes(self) -> list[int]:
        final = list(self.static_bytes)
        for _, device, level in self.memory:
            final[device] = level
        return self._mirrored(final)

    def _mirrored(self, per_device: list[int]) -> list[int]:
        """Per-device values with each mirrored device given its replayed device's."""
        if self.mirror_of:
            return [per_device[source] for source in self.mirror_of]
        return per_device

    def to_frame(self) -> "pd.DataFrame":
        import pandas as pd

        return pd.DataFrame([[getattr(e, c) for c in EVENT_COLUMNS] for e in self.events],
                            columns=list(EVENT_COLUMNS))

    def memory_frame(self) -> "pd.DataFrame":
        import pandas as pd

        rows = [(0.0, d, b) for d, b in enumerate(self.static_bytes)] + list(self.memory)
        return pd.DataFrame(rows, columns=["time_s", "device", "bytes"])

    def to_chrome_trace(self, *, process_name: str = "ltsim") -> dict[str, Any]:
        """Chrome trace-event JSON (opens in Perfetto / chrome://tracing). Times in microseconds.

        One process per device, one thread per stream, and memory counter tracks per device.
        """
        out: list[dict[str, Any]] = []
        used = {e.stream for e in self.events}
        streams = {s: i for i, s in enumerate(STREAMS) if s in used or s == "compute"}
        for device in range(self.num_devices):
            out.append({"ph": "M", "name": "process_name", "pid": device, "tid": 0,
                        "args": {"name": f"{process_name} device {device}"}})
            for stream, tid in streams.items():
                out.append({"ph": "M", "name": "thread_name", "pid": device, "tid": tid,
                            "args": {"name": stream}})
        for e in self.events:
            out.append({"ph": "X", "name": e.token, "cat": e.kind, "pid": e.device,
                        "tid": streams.get(e.stream, len(STREAMS)), "ts": e.start_s * 1e6,
                        "dur": (e.end_s - e.start_s) * 1e6,
                        "args": {"stage": e.stage, "chunk": e.chunk}})
        for device, level in enumerate(self.static_bytes):
            out.append({"ph": "C", "name": "memory", "pid": device, "ts": 0.0,
                        "args": {"GiB": level / 2**30}})
        for time_s, device, level in self.memory:
            out.append({"ph": "C", "name": "memory", "pid": device, "ts": time_s * 1e6,
                        "args": {"GiB": level / 2**30}})
        for time_s, device, level in self.host_memory:
            out.append({"ph": "C", "name": "host memory", "pid": device, "ts": time_s * 1e6,
                        "args": {"GiB": level / 2**30}})
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_text(json.dumps(self.to_chrome_trace()))
        return out
