"""UnitCostModel: DESIGN.md section 4's ``unit`` preset, the model the seed papers draw their
examples with. A forward of a work takes as many seconds as it has tokens, backward twice that,
recompute-forward equals forward (all per stage: the layer range does not matter), communication
and copies are free, activation memory is one byte per token (K/V state, checkpoints and stage
inputs are free), in device or host memory alike. A CP-sharded work counts its share (tokens / cp)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ltsim.plan import Buffer, Chunk, Comm, Device, Keep, OpKind, Work

T = TypeVar("T")


class UnitCostModel:
    """Time = tokens, backward = 2x, free communication, 1 byte of activation per token."""

    peak_flops_per_s = 0.0

    def __init__(self, memory_limit_bytes: int | None = None,
                 host_memory_limit_bytes: int | None = None) -> None:
        self.memory_limit_bytes = memory_limit_bytes if memory_limit_bytes is not None else 2**62
        self.host_memory_limit_bytes = (host_memory_limit_bytes if host_memory_limit_bytes is not None
                                        else 2**62)

    def compute_s(self, kind: OpKind, work: Work, *, part: str = "", keep: Keep = Keep.ALL) -> float:
        if part == "attn":
            return 0.0  # attention is inside the whole-layer unit cost
        tokens = work.num_tokens / work.split.cp
        if kind in (OpKind.F, OpKind.R):
            return float(tokens)
        if kind is OpKind.B:
            return 2.0 * tokens
        return 0.0  # W is not split in the unit model

    def comm_s(self, comm: Comm) -> float:
        return 0.0

    def comm_key(self, comm: Comm) -> str:
        return "free"

    def comm_scopes(self, low, high):
        return low * 0  # no comm reads its GPUs

    def optimizer_s(self, device: Device) -> float:
        return 0.0

    def buffer_bytes(self, buffer: Buffer) -> int:
        # Only activations count, as in the papers' figures.
        if buffer.kind != "act":
            return 0
        return int(buffer.work.num_tokens / buffer.work.split.cp)

    def working_bytes(self, kind: OpKind, work: Work, *, part: str = "",
                      keep: Keep | None = None) -> int:
        return 0  # the papers' figures count activations only

    def static_memory_bytes(self, device: Device) -> int:
        return 0

    def static_host_bytes(self, device: Device) -> int:
        return 0

    def model_flops(self, chunk: Chunk, *, backward: bool = True) -> float:
        return 0.0

    def warnings(self) -> list[str]:
        return []

    def price_scope(self) -> tuple:
        return (UnitCostModel,)  # the limits do not change a price

    def noted(self, fn: Callable[..., T], *args: Any) -> tuple[T, tuple]:
        return fn(*args), ()

    def renote(self, notes: tuple) -> None:
        pass
