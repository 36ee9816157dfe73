"""Host offload, a lowering pass a strategy may add (ALST's activation-checkpoint offload): forward
buffers copied to host memory on the copy stream after the forward, and back before the first
recompute or backward of the chunk that covers the buffer's layers (with per-layer ops, each
layer's checkpoint comes back just before that layer's recompute)."""

from __future__ import annotations

from bisect import bisect_right

from ltsim.optable import B, COPY, F, R, STREAM_CODE
from ltsim.plan import Comm
from ltsim.strategies.lowering import Draft, Pass

_COPY_STREAM = STREAM_CODE["copy"]


def offload(kinds: tuple[str, ...] = ("ckpt",), *, sync: bool = False) -> Pass:
    """A pass copying forward buffers of ``kinds`` to host memory after the forward and back before
    the chunk's first recompute or backward over the buffer's layers (the copy back is prefetched:
    it may start once the op before that one has finished). ``sync``: the compute stream waits for
    each copy to the host, a plain copy through pageable host memory (ALST's reference code:
    ``tensor.to("cpu")``); otherwise only the consumer waits for the copy back, which goes through
    pinned host memory (an asynchronous copy needs page-locked buffers)."""

    def run(draft: Draft) -> Draft:
        buffers = draft.buffers
        for device in draft.schedule.live_devices:
            compute = draft.rows(device.index)
            copies = list(draft.rows(device.index, "copy"))
            producers: dict[int, int] = {}  # buffer id -> position of the forward allocating it
            readers: dict[int, _Readers] = {}  # chunk -> its R/B ops
            for i, row in enumerate(compute):
                kind, chunk = draft.get(row, "kind"), draft.get(row, "chunk")
                if kind == F:
                    for b in draft.allocs[row]:
                        buf = buffers[b]
                        if buf.kind in kinds and not buf.host:
                            producers.setdefault(b, i)
                elif kind == R or kind == B:
                    readers.setdefault(chunk, _Readers()).add(i, draft.work(row).layers)
            for b, producer in producers.items():
                buf = buffers[b]
                chunk_readers = readers.get(buf.work.chunk)
                consumer = (chunk_readers.first_after(producer, buf.work.layers)
                            if chunk_readers is not None else None)
                if consumer is None:
                    continue
                low = buf.work.layers[0]
                host = draft.buffers.of(buf._replace(host=True))
                tag = f"{buf.kind}-L{low}"
                out = draft.add(COPY, device.index, device.stage, buf.work.chunk, f"d2h-{tag}",
                                _COPY_STREAM, deps=(compute[producer],), frees=(b,), allocs=(host,),
                                comm=draft.comms.of(Comm("d2h", buf.kind, buf.work,
                                                         pinned=not sync)))
                back = draft.add(COPY, device.index, device.stage, buf.work.chunk, f"h2d-{tag}",
                                 _COPY_STREAM, allocs=(b,), frees=(host,),
                                 comm=draft.comms.of(Comm("h2d", buf.kind, buf.work,
                                                          pinned=not sync)),
                                 deps=(out,) + ((compute[consumer - 1],) if consumer > 0 else ()))
                copies += [out, back]
                draft.add_deps(compute[consumer], (back,))
                if sync and producer + 1 < len(compute):
                    draft.add_deps(compute[producer + 1], (out,))
            draft.programs[(device.index, "copy")] = _ordered_copies(draft, copies, compute)
        return draft

    return run


class _Readers:
    """The R and B ops of one chunk by the layers they cover, to find the first op after a
    buffer's producer that reads any of its layers in O(layers x log ops) (scanning every reader
    for every buffer took 10 s for a 4,096-layer ALST plan)."""

    __slots__ = ("by_layer", "empty")

    def __init__(self) -> None:
        self.by_layer: dict[int, list[int]] = {}  # layer -> op positions, increasing
        self.empty: list[tuple[int, tuple[int, int]]] = []  # ops over no layer (the head alone)

    def add(self, position: int, layers: tuple[int, int]) -> None:
        first, stop = layers
        if first >= stop:
            self.empty.append((position, layers))
        for layer in range(first, stop):
            self.by_layer.setdefault(layer, []).append(position)

    def first_after(self, producer: int, layers: tuple[int, int]) -> int | None:
        """The first op after ``producer`` whose layers overlap ``layers`` (None if none)."""
        low, high = layers
        found = [ops[k] for ops in (self.by_layer.get(layer) for layer in range(low, high))
                 if ops and (k := bisect_right(ops, producer)) < len(ops)]
        found += [i for i, (first, stop) in self.empty
                  if i > producer and first < high and low < stop]
        return min(found, default=None)


def _ordered_copies(draft: Draft, copies: list[int], compute: list[int]) -> list[int]:
    """Copies in the order their triggers run on the compute stream (so the stream cannot stall
    on a copy whose trigger comes later)."""
    position = {row: i for i, row in enumerate(compute)}

    def trigger(row: int) -> float:
        return (max((position.get(d, -1) for d in draft.deps[row]), default=-1)
                + (0.5 if "h2d" in draft.names[draft.get(row, "name")] else 0))

    return sorted(copies, key=trigger)
