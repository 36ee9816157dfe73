"""The K/V state store of dependent chunks and the chunk-level forward / recompute / backward API.

A slice (seq, start, stop) with start > 0 attends to the post-RoPE K and the V of tokens [0, start)
of its sequence at every layer. The chunk that computed those tokens puts them in a `StateStore` as
*leaf* tensors (detached from its graph, requires_grad=True), one `KVEntry` per (seq, layer, slice).
Consumers read them through `torch.cat`, so a consumer's backward accumulates dK/dV into the leaves'
`.grad`. When the producer later runs backward (from its kept graph, or from a graph rebuilt by
`recompute_chunk`), it back-propagates its loss (or output grad) together with its K/V outputs and
the accumulated dK/dV in one call: `torch.autograd.backward([out, k, v, ...], [g, dk, dv, ...])`.
This is SeCO's "transfer gradients from the cache to the rebuilt chunk" (seeds/seco-spaco.md 4.1).

Every consumer is registered when it first reads an entry (in any forward), and a producer's
backward raises PlanError while any consumer has not run backward: chunks of a sequence must go
backward from last to first. After its backward a producer's entries are released.

Stages: each pipeline stage keeps its own store for its layers. `forward_chunk` takes the previous
stage's output as `hidden`, `ChunkHandle.output` is what goes to the next stage (or the loss), and
`backward_chunk` takes the next stage's input grad as `output_grad` and returns this stage's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ltsim.errors import ConfigError, PlanError
from ltsim.executor.model import PackedBatch, Transformer


@dataclass(eq=False, slots=True, kw_only=True)
class KVEntry:
    """K/V (num_tokens, num_kv_heads, head_dim) of tokens [start, stop) of `seq` at `layer`."""

    seq: int
    layer: int
    start: int
    stop: int
    producer: int  # chunk id
    k: torch.Tensor  # leaf, requires_grad; .grad is dK summed over consumers
    v: torch.Tensor
    pending: set[int] = field(default_factory=set)  # consumers that have not run backward

    @property
    def nbytes(self) -> int:
        tensors = [self.k, self.v, self.k.grad, self.v.grad]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class StateStore:
    """K/V state per (seq, layer) for one stage; values and accumulated grads."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], list[KVEntry]] = {}
        self._produced: dict[int, list[KVEntry]] = {}
        self._consumed: dict[int, list[KVEntry]] = {}
        self._ids = itertools.count()

    def new_chunk_id(self) -> int:
        """The next automatic chunk id (0, 1, ...). Callers such as a Plan runtime pass their own ids
        instead; do not mix both kinds in one store."""
        return next(self._ids)

    def put(self, entry: KVEntry) -> KVEntry:
        self._entries.setdefault((entry.seq, entry.layer), []).append(entry)
        self._produced.setdefault(entry.producer, []).append(entry)
        return entry

    def find(self, seq: int, layer: int, start: int) -> KVEntry:
        """The entry of tokens from `start` (a recomputed chunk pairs its K/V with it)."""
        for entry in self._entries.get((seq, layer), ()):
            if entry.start == start:
                return entry
        raise PlanError(f"no K/V state for seq {seq} layer {layer} from token {start}; "
                        "a recomputed chunk must keep its first forward's state")

    def past(self, seq: int, layer: int, start: int, consumer: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of tokens [0, start) of `seq` at `layer`; registers `consumer`. Raises PlanError."""
        entries = sorted((e for e in self._entries.get((seq, layer), ()) if e.stop <= start),
                         key=lambda e: e.start)
        covered = 0
        for entry in entries:
            if entry.start != covered:
                break
            covered = entry.stop
        if covered != start:
            raise PlanError(f"chunk {consumer} needs K/V of seq {seq} tokens [0, {start}) at layer "
                            f"{layer}, the store holds [0, {covered}); forward the earlier chunks "
                            "of the sequence first and run backward from the last chunk to the "
                            "first")
        for entry in entries:
            if consumer not in entry.pending:
                entry.pending.add(consumer)
                self._consumed.setdefault(consumer, []).append(entry)
        return torch.cat([e.k for e in entries]), torch.cat([e.v for e in entries])

    def produced(self, producer: int) -> list[KVEntry]:
        return list(self._produced.get(producer, ()))

    def forget(self, chunk: int) -> None:
        """A chunk that gets no backward (SpaCO): earlier chunks stop waiting for it."""
        for entry in self._consumed.pop(chunk, ()):
            entry.pending.discard(chunk)

    def release(self, producer: int) -> None:
        """Drop the entries of a chunk that gets no backward (its K/V and their gradients)."""
        for entry in self._produced.pop(producer, ()):
            self._entries[(entry.seq, entry.layer)].remove(entry)

    def finish(self, chunk: int) -> None:
        """After chunk's backward: it no longer waits on earlier entries; its own are released."""
        for entry in self._consumed.pop(chunk, ()):
            entry.pending.discard(chunk)
        for entry in self._produced.pop(chunk, ()):
            self._entries[(entry.seq, entry.layer)].remove(entry)

    def tensors(self):
        """Every entry's K and V and their accumulated gradients (None until a backward), whether
        or not its chunk still has a graph: the state a later chunk reads stays held."""
        for entries in self._entries.values():
            for e in entries:
                yield from (e.k, e.v, e.k.grad, e.v.grad)

    @property
    def nbytes(self) -> int:
        """Bytes held: K/V values plus accumulated dK/dV (values shared with a kept graph count)."""
        return sum(e.nbytes for entries in self._entries.values() for e in entries)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._entries.values())


@dataclass(eq=False, slots=True, kw_only=True)
class ChunkHandle:
    """One chunk on one stage: `output` is the detached loss (last stage) or hidden to send on.

    Kept until backward: the hidden `output` and the stage `input`; backward frees both.
    """

    chunk_id: int
    batch: PackedBatch
    input: torch.Tensor | None  # previous stage's output, kept for a recompute; None on stage 0
    output: torch.Tensor | None = None
    input_grad: torch.Tensor | None = None  # set by backward_chunk on stages > 0
    has_graph: bool = False
    done: bool = False
    span: tuple[int, int, bool] | None = None  # a per-layer op's (first, stop, head); None: stage
    _root: torch.Tensor | None = None
    _input_leaf: torch.Tensor | None = None
    _kv: list[tuple[KVEntry, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    @property
    def loss(self) -> float:
        assert self.output is not None and self.output.dim() == 0, "loss exists on the last stage"
        return float(self.output)


class _KVHook:
    """The model's kv hook for one chunk forward: reads the past, puts or pairs this chunk's K/V."""

    def __init__(self, store: StateStore, handle: ChunkHandle, mode: str) -> None:
        self.store, self.handle, self.mode = store, handle, mode

    def __call__(self, layer: int, k: torch.Tensor, v: torch.Tensor
                 ) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        batch, chunk, past = self.handle.batch, self.handle.chunk_id, []
        for i, (seq, start, stop) in enumerate(batch.slices):
            past.append(self.store.past(seq, layer, start, chunk) if start > 0 else None)
            if not batch.continues[i]:
                continue
            rows = slice(batch.offsets[i], batch.offsets[i + 1])
            ki, vi = k[rows], v[rows]
            if self.mode == "recompute":
                entry = self.store.find(seq, layer, start)
            else:  # discard: clone so the leaf does not pin the whole chunk's K/V buffer
                entry = self.store.put(KVEntry(
                    seq=seq, layer=layer, start=start, stop=stop, producer=chunk,
                    k=_leaf(ki, self.mode == "discard"), v=_leaf(vi, self.mode == "discard")))
            if self.mode != "discard":
                self.handle._kv.append((entry, ki, vi))
        return past


def _leaf(x: torch.Tensor, copy: bool) -> torch.Tensor:
    x = x.detach()
    return (x.clone() if copy else x).requires_grad_()


def _run(model: Transformer, handle: ChunkHandle, store: StateStore, mode: str) -> None:
    graph = mode != "discard"
    x = None if handle.input is None else handle.input.detach().requires_grad_(graph)
    with torch.set_grad_enabled(graph):
        if handle.span is None:
            out = model(handle.batch, x, _KVHook(store, handle, mode))
        else:
            first, stop, head = handle.span
            out = model.run_blocks(x, handle.batch, _KVHook(store, handle, mode), (first, stop))
            if head:
                out = model.loss(out, handle.batch)
    handle.output = out.detach()
    handle.has_graph = graph
    if graph:
        handle._root, handle._input_leaf = out, x


def forward_chunk(model: Transformer, batch: PackedBatch, store: StateStore, *,
                  keep_graph: bool = True, chunk_id: int | None = None,
                  hidden: torch.Tensor | None = None) -> ChunkHandle:
    """Forward one chunk on one stage; raises PlanError if earlier K/V state is missing.

    keep_graph=False discards the activations (no autograd graph) and keeps only the K/V state and,
    on stages > 0, the input `hidden` for `recompute_chunk`.
    """
    handle = ChunkHandle(chunk_id=store.new_chunk_id() if chunk_id is None else chunk_id,
                         batch=batch, input=None if hidden is None else hidden.detach())
    _run(model, handle, store, "keep" if keep_graph else "discard")
    return handle


def forward_span(model: Transformer, batch: PackedBatch, store: StateStore, *,
                 span: tuple[int, int, bool], hidden: torch.Tensor, keep_graph: bool,
                 chunk_id: int) -> ChunkHandle:
    """Forward of a per-layer op (ALST's, HF's per-layer checkpointing): layers [first, stop) of
    the stage over ``hidden`` (the embedding's or the previous op's output), then the head and
    loss when ``head``. Without ``keep_graph`` only ``hidden`` is kept (the layer's checkpoint),
    for ``recompute_chunk``."""
    handle = ChunkHandle(chunk_id=chunk_id, batch=batch, input=hidden.detach(), span=span)
    _run(model, handle, store, "keep" if keep_graph else "discard")
    return handle


def recompute_chunk(model: Transformer, handle: ChunkHandle, store: StateStore) -> ChunkHandle:
    """Forward a discarded chunk again with its graph, reusing its stored K/V entries' grads."""
    if handle.has_graph or handle.done:
        raise PlanError(f"chunk {handle.chunk_id} can be recomputed only after a discarding "
                        "forward")
    _run(model, handle, store, "recompute")
    return handle


def backward_chunk(handle: ChunkHandle, store: StateStore,
                   output_grad: torch.Tensor | None = None, *, loss_scale: float = 1.0,
                   kv_scale: float = 1.0) -> torch.Tensor | None:
    """Backward of a chunk with a graph; returns d(input hidden) on stages > 0, else None.

    Accumulates parameter grads and dK/dV of earlier chunks' entries. ``loss_scale`` multiplies the
    chunk's loss (last stage), ``kv_scale`` the dK/dV its own K/V received from later chunks
    (SpaCO's compensation, Plan.grad_scales). Raises PlanError when the chunk has no graph or a
    later chunk that read its K/V has not run backward yet.
    """
    if not handle.has_graph:
        raise PlanError(f"chunk {handle.chunk_id} has no graph (discarded or already backwarded); "
                        "recompute it first")
    waiting = sorted({c for e in store.produced(handle.chunk_id) for c in e.pending})
    if waiting:
        raise PlanError(f"chunk {handle.chunk_id} ran backward before chunks {waiting} that read "
                        "its K/V; run backward from the last chunk of a sequence to the first")
    if output_grad is None and handle._root.dim() > 0:
        raise ConfigError("output_grad", "the next stage's input grad", None,
                          "a stage without the LM head needs the grad of its output")
    if output_grad is None and loss_scale != 1.0:
        output_grad = torch.full_like(handle._root, loss_scale)
    roots, grads = [handle._root], [output_grad]
    for entry, k, v in handle._kv:
        for out, leaf in ((k, entry.k), (v, entry.v)):
            if leaf.grad is not None:
                roots.append(out)
                grads.append(leaf.grad if kv_scale == 1.0 else leaf.grad * kv_scale)
    torch.autograd.backward(roots, grads)
    store.finish(handle.chunk_id)
    if handle._input_leaf is not None:
        handle.input_grad = handle._input_leaf.grad
    handle._root, handle._input_leaf, handle._kv, handle.input = None, None, [], None
    if handle.output is not None and handle.output.dim() > 0:
        handle.output = None  # a stage's hidden was sent on at forward; only the loss stays
    handle.has_graph, handle.done = False, True
    return handle.input_grad


def run_group(model: Transformer, batches: Sequence[PackedBatch], num_kept: int,
              store: StateStore | None = None) -> float:
    """Forward a dependent group in order keeping the graphs of the last `num_kept` chunks, then go
    backward from the last chunk to the first, recomputing each discarded chunk right before its
    backward. Returns the summed loss. Single stage (the model embeds and has the head).
    """
    store = StateStore() if store is None else store
    num_chunks = len(batches)
    handles = [forward_chunk(model, batch, store, keep_graph=i >= num_chunks - num_kept)
               for i, batch in enumerate(batches)]
    for handle in reversed(handles):  # chunk i's dK/dV come from every chunk j > i
        if not handle.has_graph:
            recompute_chunk(model, handle, store)
        backward_chunk(handle, store)
    return sum(handle.loss for handle in handles)


def run_chunkflow_group(model: Transformer, batches: Sequence[PackedBatch], k: int,
                        store: StateStore | None = None) -> float:
    """ChunkFlow Algorithm 2 (seeds/chunkflow.md 4.2) on one dependent group; returns the loss.

    N <= K: forward all, backward in reverse. N > K: forward all; the last K keep activations, the
    first N - K keep only K/V state; backward the kept ones last-to-first, then recompute+backward
    the first N - K from chunk N-K-1 down to chunk 0 (the paper's listing walks them upwards, which
    would run a chunk's backward before its dK/dV from the next discarded chunk exist).
    """
    if not isinstance(k, int) or k < 1:
        raise ConfigError("strategy.k", "an integer >= 1", k)
    return run_group(model, batches, min(k, len(batches)), store)


def run_seco_group(model: Transformer, batches: Sequence[PackedBatch],
                   store: StateStore | None = None) -> float:
    """SeCO (seeds/seco-spaco.md 4.1): forward every chunk keeping only K/V, then last to first
    re-forward each chunk and run its backward with the dK/dV gathered from later chunks."""
    return run_group(model, batches, 0, store)


def run_spaco_group(model: Transformer, batches: Sequence[PackedBatch], selected: set[int], *,
                    loss_scale: float = 1.0, kv_scale: float = 1.0,
                    store: StateStore | None = None) -> float:
    """SpaCO (seeds/seco-spaco.md Alg. 2) on one sequence's chunks: forward all keeping only K/V,
    then re-forward and back-propagate the chunks whose positions are in ``selected``, last first,
    each with its loss times ``loss_scale`` and the dK/dV it received times ``kv_scale``. Returns
    the summed (unscaled) loss. Single stage."""
    store = StateStore() if store is None else store
    handles = [forward_chunk(model, batch, store, keep_graph=False) for batch in batches]
    for i, handle in enumerate(handles):
        if i not in selected:
            store.forget(handle.chunk_id)
    for i in sorted(selected, reverse=True):
        recompute_chunk(model, handles[i], store)
        backward_chunk(handles[i], store, loss_scale=loss_scale, kv_scale=kv_scale)
    return sum(handle.loss for handle in handles)
