"""Host offload, a lowering pass a strategy may add (ALST's activation-checkpoint offload): forward
buffers copied to host memory on the copy stream after the forward, and back before the first
recompute or backward of the chunk that covers the buffer's layers (with per-layer ops, each
layer's checkpoint comes back just before that layer's recompute)."""

from __future__ import annotations

from bisect import bisect_right

from ltsim.plan import Comm, Op, OpKind
from ltsim.strategies.lowering import Draft, Pass


def offload(kinds: tuple[str, ...] = ("ckpt",), *, sync: bool = False) -> Pass:
    """A pass copying forward buffers of ``kinds`` to host memory after the forward and back before
    the chunk's first recompute or backward over the buffer's layers (the copy back is prefetched:
    it may start once the op before that one has finished). ``sync``: the compute stream waits for
    each copy to the host, a plain copy through pageable host memory (ALST's reference code:
    ``tensor.to("cpu")``); otherwise only the consumer waits for the copy back, which goes through
    pinned host memory (an asynchronous copy needs page-locked buffers)."""

    def run(draft: Draft) -> Draft:
        changes = {}
        for device in draft.schedule.live_devices:
            compute = list(draft.ops(device.index))
            copies = list(draft.ops(device.index, "copy"))
            producers: dict = {}  # buffer -> index of the forward that allocates it
            readers: dict[int, _Readers] = {}  # chunk -> its R/B ops
            for i, op in enumerate(compute):
                if op.kind is OpKind.F:
                    for buf in op.allocs:
                        if buf.kind in kinds and not buf.host:
                            producers.setdefault(buf, i)
                elif op.kind in (OpKind.R, OpKind.B):
                    readers.setdefault(op.chunk, _Readers()).add(i, op.work.layers)
            for buf, producer in producers.items():
                chunk_readers = readers.get(buf.work.chunk)
                consumer = (chunk_readers.first_after(producer, buf.work.layers)
                            if chunk_readers is not None else None)
                if consumer is None:
                    continue
                low = buf.work.layers[0]
                host = buf._replace(host=True)
                tag = f"{buf.kind}-L{low}"
                out = Op(kind=OpKind.COPY, device=device.index, stage=device.stage,
                         chunk=buf.work.chunk, name=f"d2h-{tag}", deps=(compute[producer].key,),
                         comm=Comm("d2h", buf.kind, buf.work, pinned=not sync),
                         frees=(buf,), allocs=(host,))
                back = Op(kind=OpKind.COPY, device=device.index, stage=device.stage,
                          chunk=buf.work.chunk, name=f"h2d-{tag}", allocs=(buf,), frees=(host,),
                          comm=Comm("h2d", buf.kind, buf.work, pinned=not sync),
                          deps=(out.key,) + ((compute[consumer - 1].key,) if consumer > 0 else ()))
                copies += [out, back]
                compute[consumer] = compute[consumer].with_deps((back.key,))
                if sync and producer + 1 < len(compute):
                    compute[producer + 1] = compute[producer + 1].with_deps((out.key,))
            changes[(device.index, "compute")] = compute
            changes[(device.index, "copy")] = _ordered_copies(copies, compute)
        return draft.update(changes)

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


def _ordered_copies(copies: list[Op], compute: list[Op]) -> list[Op]:
    """Copies in the order their triggers run on the compute stream (so the stream cannot stall
    on a copy whose trigger comes later)."""
    position = {op.key: i for i, op in enumerate(compute)}

    def trigger(op: Op) -> float:
        return max((position.get(d, -1) for d in op.deps), default=-1) + (0.5 if "h2d" in op.name else 0)

    return sorted(copies, key=trigger)
