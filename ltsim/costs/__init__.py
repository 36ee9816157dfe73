"""CostModel: the only source of durations and byte counts (STYLE.md principle 2).

A cost model answers from one op, buffer or device alone, never from a plan or global settings:
the op says what it computes or moves (ltsim.plan), and the model knows only the hardware and the
model shape. Every layer of a model is alike: a work's cost depends on how many layers it covers,
not which (``Work.cost_shape``; the engine prices each shape once). The same methods are the query
face a planner uses before any plan exists::

    work = Work(chunk=0, slices=(Slice(0, 4096, 8192),), layers=(0, 4), split=Split(tp=4, cp=2))
    cost.compute_s(OpKind.F, work)           # seconds of that forward on one GPU
    cost.buffer_bytes(Buffer("act", work))   # bytes it keeps for backward

Implementations: ``UnitCostModel`` (unit.py, the seed papers' toy preset) and ``TableCostModel``
(table.py, profile tables + the memory model). ``duration_s(op)`` dispatches an op to
``compute_s`` / ``comm_s`` / ``optimizer_s``; the engine calls only it.
Warnings (lookups outside the tables) belong to the model instance, i.e. to one run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol, TypeVar

from ltsim.costs.unit import UnitCostModel
from ltsim.plan import Buffer, Chunk, Comm, Device, Keep, Op, OpKind, Work

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CostModel", "UnitCostModel", "duration_s"]

T = TypeVar("T")


class CostModel(Protocol):
    """What the engine, the metrics and the planners ask of a cost model. All seconds and bytes,
    per GPU."""

    memory_limit_bytes: int  # usable device memory for tensors (allocator allowance applied)
    host_memory_limit_bytes: int  # host memory one GPU's share may hold
    peak_flops_per_s: float  # per GPU; 0 when FLOPs are not meaningful (unit preset)

    def compute_s(self, kind: OpKind, work: Work, *, part: str = "", keep: Keep = Keep.ALL) -> float:
        """Seconds of a compute op (F, B, W, R) over ``work`` on one GPU; ``part`` "attn" is its
        attention kernels only, "dense" everything else, "" both."""
        ...

    def comm_s(self, comm: Comm) -> float:
        """Seconds a comm op (P2P, collective, host copy) occupies its stream."""
        ...

    def comm_key(self, comm: Comm) -> Hashable:
        """What ``comm_s(comm)`` depends on: comms with equal keys take equal time (the engine
        prices once per key; the 1024-GPU plan of validation/perf/phases.py holds 57,344 sends)."""
        ...

    def comm_scopes(self, low: "np.ndarray", high: "np.ndarray") -> "np.ndarray":
        """What ``comm_key`` reads of a comm's GPUs (its lowest and highest rank), one integer per
        comm (whether they share a node): comms alike but for GPUs of one scope have one key,
        so the engine asks for it once. A model without this method keys every GPU pair."""
        ...

    def optimizer_s(self, device: Device) -> float:
        """Seconds of the optimizer step of ``device``'s parameter shard."""
        ...

    def buffer_bytes(self, buffer: Buffer) -> int:
        """Bytes a buffer holds on one GPU (or in host memory for one GPU, when ``buffer.host``)."""
        ...

    def working_bytes(self, kind: OpKind, work: Work, *, part: str = "",
                      keep: Keep | None = None) -> int:
        """Transient bytes a compute op holds while it runs, beyond the buffers it allocates
        (e.g. the LM head's loss); charged at its start and released at its end. ``keep``: what
        the op's forward kept (a backward after a full recompute holds less beside its loss)."""
        ...

    def static_memory_bytes(self, device: Device) -> int:
        """Weights, gradients and optimizer state on one GPU of ``device``."""
        ...

    def static_host_bytes(self, device: Device) -> int:
        """Gradients and optimizer state ``device`` keeps in host memory (optimizer offload)."""
        ...

    def model_flops(self, chunk: Chunk, *, backward: bool = True) -> float:
        """Training FLOPs (forward + backward, no recompute) of one chunk over the whole model;
        the forward alone with ``backward=False`` (a chunk that gets no gradient)."""
        ...

    def warnings(self) -> list[str]:
        """Lookups outside measured ranges and other caveats of this model's lookups, de-duplicated."""
        ...

    def price_scope(self) -> Hashable | None:
        """Models with equal scopes give every op, buffer and device the same price and notes
        (the engine shares one price cache among them: the points of a sweep, maxlen's probes);
        None: share nothing."""
        ...

    def noted(self, fn: Callable[..., T], *args: Any) -> tuple[T, tuple]:
        """(``fn(*args)``, the notes (would-be warnings) it made, for ``renote``)."""
        ...

    def renote(self, notes: tuple) -> None:
        """Make ``notes`` again: a price taken from a shared cache warns as if computed here."""
        ...


def duration_s(cost: CostModel, op: Op) -> float:
    """Seconds ``op`` occupies its stream, from the op alone."""
    if op.work is not None:
        return cost.compute_s(op.kind, op.work, part=op.part, keep=op.keep)
    if op.comm is not None:
        return cost.comm_s(op.comm)
    if op.kind is OpKind.OPT:
        raise ValueError("an OPT op is priced with optimizer_s(device)")
    raise ValueError(f"op {op.token} carries neither work nor comm")
