"""Trace: frozen event records per device stream, plus each device's memory timelines (device and
host). Simulated (ltsim.sim.engine) and measured (ltsim.executor) traces share this type, so it sits
low in the import order, beside the plan."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from math import fsum
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

import numpy as np

import ltsim.optable as optable
from ltsim.files import replaced_atomically, write_text_atomically
from ltsim.plan import STREAMS, OpKind

if TYPE_CHECKING:
    import pandas as pd

    from ltsim.optable import OpTable

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


class EventTable(Sequence):
    """A replay's events kept as the engine's columns (the plan's op table, per row the start and
    end), written out as :class:`Event` tuples, sorted by (start, device, stream), only when
    something reads them (issue 13: a sweep needs the makespan and the busy time, which come from
    the columns). A sequence of Events otherwise, equal to the tuple it stands for."""

    __slots__ = ("_table", "_start", "_finish", "_events", "_spans")

    def __init__(self, table: "OpTable", start: Sequence[float], finish: Sequence[float]) -> None:
        self._table = table  # the plan's ops (ltsim/optable.py), by row
        self._start = start  # per row
        self._finish = finish
        self._events: tuple[Event, ...] | None = None
        self._spans: np.ndarray | None = None  # per row, end - start: made once, on first use

    def _written(self) -> tuple[Event, ...]:
        events = self._events
        if events is None:
            out = []
            append = out.append
            table, start, finish = self._table, self._start, self._finish
            keys = table.keys()
            kind_text = {k: k.value for k in OpKind}  # Enum.value is a descriptor call
            for device, stream, rows in table.programs:
                for i in rows:
                    key = keys[i]
                    append(Event(device, stream, key.token, kind_text[key.kind], key.stage,
                                 key.chunk, start[i], finish[i]))
            out.sort(key=attrgetter("start_s", "device", "stream"))  # C, not a lambda per event
            events = self._events = tuple(out)
        return events

    def __len__(self) -> int:
        return sum(len(rows) for _, _, rows in self._table.programs)

    def __getitem__(self, index):
        return self._written()[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._written())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventTable, tuple)):
            return self._written() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a list's: compared, never a key

    def __repr__(self) -> str:
        return f"EventTable({len(self)} events)"

    @property
    def makespan_s(self) -> float:
        return max(self._finish, default=0.0)

    def seconds_by_device(self, kinds: frozenset[str], stream: str | None = None) -> dict[int, float]:
        """Per device, the time its ops of ``kinds`` (op kind text) ran, on ``stream`` only when
        given; summed exactly (math.fsum), so the order of the ops does not matter."""
        table = self._table
        if len(table) < optable.SMALL:  # op by op
            wanted_kinds = [k.value in kinds for k in OpKind]
            kind, start, finish = table.kind, self._start, self._finish
            spans: dict[int, list[float]] = {}
            for device, program_stream, rows in table.programs:
                if stream is None or program_stream == stream:
                    mine = [finish[i] - start[i] for i in rows if wanted_kinds[kind[i]]]
                    if mine:
                        spans.setdefault(device, []).extend(mine)
            return {device: fsum(values) for device, values in spans.items()}
        order = table.order()
        programs = table.programs
        sizes = [len(rows) for _, _, rows in programs]
        device = np.repeat(np.array([d for d, _, _ in programs], dtype=np.int64), sizes)
        wanted = np.array([k.value in kinds for k in OpKind])[table.array("kind")[order]]
        if stream is not None:
            wanted &= np.repeat(np.array([s == stream for _, s, _ in programs], dtype=bool), sizes)
        rows, device = order[wanted], device[wanted]
        if self._events is None and len(self._finish) == len(table):
            if self._spans is None:  # the metrics ask twice (compute, then communication)
                self._spans = (np.fromiter(self._finish, float, len(table))
                               - np.fromiter(self._start, float, len(table)))
            spans = self._spans[rows]
        else:
            spans = np.array([self._finish[i] - self._start[i] for i in rows.tolist()])
        by_device = np.argsort(device, kind="stable")
        devices, first = np.unique(device[by_device], return_index=True)
        return {d: fsum(values) for d, values in zip(
            devices.tolist(), (part.tolist() for part in np.split(spans[by_device], first[1:])))}


def _peaks(samples, peaks: list[int]) -> list[int]:
    """Per device, the highest of its level in ``peaks`` and its samples'."""
    if isinstance(samples, Samples):
        for device, level in samples.peaks.items():
            if level > peaks[device]:
                peaks[device] = level
        return peaks
    for _, device, level in samples:
        if level > peaks[device]:
            peaks[device] = level
    return peaks


class Samples(tuple):
    """Memory samples, (time_s, device, bytes) tuples, with each device's highest (``peaks``)
    and last (``finals``) level beside them, which the engine knows as it makes them: a tuple
    otherwise."""

    def __new__(cls, samples, peaks: dict[int, int], finals: dict[int, int]) -> "Samples":
        out = super().__new__(cls, samples)
        out.peaks, out.finals = peaks, finals
        return out

    def __reduce__(self):
        return (Samples, (tuple(self), self.peaks, self.finals))


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

    events: tuple[Event, ...] | EventTable
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
        if isinstance(self.events, EventTable):
            return self.events.makespan_s
        return max((e.end_s for e in self.events), default=0.0)

    def seconds_by_device(self, kinds: frozenset[str], stream: str | None = None) -> dict[int, float]:
        """Per device in the trace, the time its events of ``kinds`` (op kind text) took, on
        ``stream`` only when given (exact sums: math.fsum)."""
        if isinstance(self.events, EventTable):
            return self.events.seconds_by_device(kinds, stream)
        spans: dict[int, list[float]] = {}
        for e in self.events:
            if e.kind in kinds and (stream is None or e.stream == stream):
                spans.setdefault(e.device, []).append(e.end_s - e.start_s)
        return {device: fsum(values) for device, values in spans.items()}

    def peak_memory_bytes(self) -> list[int]:
        return self._mirrored(_peaks(self.memory, list(self.static_bytes)))

    def peak_host_memory_bytes(self) -> list[int]:
        return self._mirrored(_peaks(self.host_memory,
                                     list(self.host_static_bytes) or [0] * self.num_devices))

    def final_memory_bytes(self) -> list[int]:
        final = list(self.static_bytes)
        if isinstance(self.memory, Samples):
            for device, level in self.memory.finals.items():
                final[device] = level
            return self._mirrored(final)
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

    def to_chrome_trace(self, *, process_name: str = "ltsim", tokens: bool = False
                        ) -> dict[str, Any]:
        """Chrome trace-event JSON (opens in Perfetto / chrome://tracing). Times in microseconds.

        One process per device, one thread per stream, and memory counter tracks per device, in
        GiB, or with ``tokens`` (the unit preset's memory, tokens of activation) in tokens.
        """
        def level_of(value: int) -> dict[str, float]:
            return {"tokens": value} if tokens else {"GiB": value / 2**30}

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
                        "args": level_of(level)})
        for time_s, device, level in self.memory:
            out.append({"ph": "C", "name": "memory", "pid": device, "ts": time_s * 1e6,
                        "args": level_of(level)})
        for time_s, device, level in self.host_memory:
            out.append({"ph": "C", "name": "host memory", "pid": device, "ts": time_s * 1e6,
                        "args": level_of(level)})
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | Path, *, tokens: bool = False) -> Path:
        out = Path(path)
        text = json.dumps(self.to_chrome_trace(tokens=tokens))
        if out.suffix.lower() == ".gz":  # gzipped JSON, which Perfetto opens as it is
            import gzip

            with replaced_atomically(out) as temp:
                temp.write_bytes(gzip.compress(text.encode(), mtime=0))
        else:
            write_text_atomically(out, text)
        return out
