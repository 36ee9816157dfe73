"""CostModel: the only source of durations and byte counts (STYLE.md principle 2).

``UnitCostModel`` implements DESIGN.md's ``unit`` hardware preset, the model the seed papers draw
their examples with: a chunk's forward on one stage takes as many seconds as it has tokens,
backward twice that, recompute-forward equals forward, communication is free, activation memory is
one byte per token (K/V state and checkpoints are free). The table-backed model for real hardware lives in ``costs_table.py``.
"""

from __future__ import annotations

from typing import Protocol

from ltsim.plan import Buffer, Chunk, Op, OpKind, Plan


class CostModel(Protocol):
    """What the engine and the metrics ask of a cost model. All seconds and bytes."""

    memory_limit_bytes: int
    peak_flops_per_s: float  # per GPU; 0 when FLOPs are not meaningful (unit preset)
    gpus_per_sim_device: int  # GPUs one simulated device stands for (tp * cp)

    def duration_s(self, op: Op, plan: Plan) -> float:
        """Seconds ``op`` occupies its stream."""
        ...

    def buffer_bytes(self, buffer: Buffer, plan: Plan) -> int:
        """Bytes a buffer holds on one GPU of its device."""
        ...

    def static_memory_bytes(self, device: int, plan: Plan) -> int:
        """Weights, gradients, optimizer state and fixed workspaces on one GPU of ``device``."""
        ...

    def model_flops(self, chunk: Chunk, plan: Plan) -> float:
        """Training FLOPs (forward + backward, no recompute) of one chunk over the whole model."""
        ...

    def warnings(self) -> list[str]:
        """Lookups outside measured ranges and other caveats, de-duplicated."""
        ...


class UnitCostModel:
    """DESIGN.md section 4's toy preset: time = tokens, backward = 2x, free comm, 1 byte/token."""

    memory_limit_bytes = 2**62
    peak_flops_per_s = 0.0
    gpus_per_sim_device = 1

    def __init__(self, memory_limit_bytes: int | None = None) -> None:
        if memory_limit_bytes is not None:
            self.memory_limit_bytes = memory_limit_bytes
        self._tokens: dict[int, int] = {}
        self._plan_id = -1

    def _chunk_tokens(self, plan: Plan, chunk: int) -> int:
        if self._plan_id != id(plan):
            self._tokens = {c.index: c.num_tokens for c in plan.chunks}
            self._plan_id = id(plan)
        return self._tokens[chunk]

    def duration_s(self, op: Op, plan: Plan) -> float:
        if op.kind in (OpKind.F, OpKind.R):
            return float(self._chunk_tokens(plan, op.chunk))
        if op.kind is OpKind.B:
            return 2.0 * self._chunk_tokens(plan, op.chunk)
        return 0.0  # W is not split in the unit model; communication and optimizer are free

    def buffer_bytes(self, buffer: Buffer, plan: Plan) -> int:
        # Only activations count, as in the papers' figures: K/V state, its gradients and
        # recompute checkpoints are free here (the table-backed model charges them).
        return self._chunk_tokens(plan, buffer.chunk) if buffer.kind == "act" else 0

    def static_memory_bytes(self, device: int, plan: Plan) -> int:
        return 0

    def model_flops(self, chunk: Chunk, plan: Plan) -> float:
        return 0.0

    def warnings(self) -> list[str]:
        return []
