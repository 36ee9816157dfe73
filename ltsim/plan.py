"""The plan IR: slices, chunks, ops, programs and plans; op tokens; validation.

A Plan is the one shared language of ltsim: strategies emit it, the simulator replays it against a
cost model, the executor runs it, the figures draw it. It holds no durations or byte counts: those
come from the CostModel (STYLE.md principle 2).

Op tokens follow torch pipelining's ``_Action`` (``2F0``), prefixed with ``s``: ``s2F3`` is stage 2,
forward, chunk 3; ``s1SEND_F3`` sends chunk 3's activations from stage 1; ``s0COLL[dp-grad]`` is a
named collective. Tokens round-trip through :func:`parse_token`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ltsim.errors import PlanError


class OpKind(str, Enum):
    F = "F"  # forward
    B = "B"  # backward (input and weight gradients unless W is split off)
    W = "W"  # weight gradient, when split from B (zero-bubble schedules)
    R = "R"  # recompute-forward (activation checkpointing, ChunkFlow's second forward)
    SEND_F = "SEND_F"  # activations to the next stage
    SEND_B = "SEND_B"  # gradients to the previous stage
    COLL = "COLL"  # collective over a group of devices (DP gradient reduction, ...)
    OPT = "OPT"  # optimizer step


COMPUTE_KINDS = frozenset({OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OPT})
STREAMS = ("compute", "comm")
_TOKEN_RE = re.compile(r"^s(\d+)(SEND_F|SEND_B|COLL|OPT|F|B|W|R)(\d+)?(?:\[([\w.-]+)\])?$")


@dataclass(frozen=True, slots=True)
class Slice:
    """Tokens [start, stop) of sequence ``seq``. Its context is ``start`` earlier tokens."""

    seq: int
    start: int
    stop: int

    @property
    def num_tokens(self) -> int:
        return self.stop - self.start

    @property
    def context_tokens(self) -> int:
        return self.start


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one micro-batch carries through the pipeline: one or more slices, on one DP replica."""

    index: int
    slices: tuple[Slice, ...]
    replica: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.slices)

    def kind(self, seq_lengths: dict[int, int]) -> str:
        """"standalone" (whole sequences), "dependent" (one piece of a long sequence) or "hybrid"."""
        whole = [s.start == 0 and s.stop == seq_lengths[s.seq] for s in self.slices]
        if all(whole):
            return "standalone"
        return "dependent" if len(self.slices) == 1 else "hybrid"


@dataclass(frozen=True, slots=True)
class Buffer:
    """A named piece of activation memory; its size comes from the CostModel.

    kind: "act" (what backward needs), "ckpt" (a recompute checkpoint: the stage input),
    "kv" (K/V state kept for later chunks of the same sequence), "kv_grad" (their gradients).
    """

    kind: str
    chunk: int
    stage: int

    @property
    def name(self) -> str:
        return f"{self.kind}:s{self.stage}c{self.chunk}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One step of one device stream.

    ``deps`` are keys (``"<device>:<token>"``) of ops that must finish first; ops of one stream also
    run in program order. ``allocs`` are charged when the op starts, ``frees`` released when it ends.
    ``group`` lists the member devices of a COLL (all must arrive before it starts) or the peer
    device of a SEND.
    """

    kind: OpKind
    device: int
    stage: int
    chunk: int = -1
    name: str = ""
    stream: str = "compute"
    deps: tuple[str, ...] = ()
    allocs: tuple[Buffer, ...] = ()
    frees: tuple[Buffer, ...] = ()
    group: tuple[int, ...] = ()
    collective: str = ""  # COLL: all_reduce | reduce_scatter | all_gather | all_to_all

    token: str = field(init=False, repr=False, compare=False)  # e.g. "s2F3", derived
    key: str = field(init=False, repr=False, compare=False)  # "<device>:<token>", derived

    def __post_init__(self) -> None:
        text = f"s{self.stage}{self.kind.value}"
        if self.chunk >= 0:
            text += str(self.chunk)
        if self.name:
            text += f"[{self.name}]"
        object.__setattr__(self, "token", text)
        object.__setattr__(self, "key", f"{self.device}:{text}")


def op_key(device: int, token: str) -> str:
    return f"{device}:{token}"


def parse_token(token: str) -> tuple[int, OpKind, int, str]:
    """``"s2F3"`` -> (stage 2, OpKind.F, chunk 3, name ""). Raises ValueError on a bad token."""
    match = _TOKEN_RE.match(token)
    if not match:
        raise ValueError(f"not an op token: {token!r} (expected e.g. s2F3, s0SEND_F1, s0COLL[dp-grad])")
    stage, kind, chunk, name = match.groups()
    return int(stage), OpKind(kind), int(chunk) if chunk is not None else -1, name or ""


@dataclass(frozen=True, slots=True)
class Program:
    """The ordered ops of one device stream."""

    device: int
    stream: str
    ops: tuple[Op, ...]

    @property
    def tokens(self) -> str:
        return " ".join(op.token for op in self.ops)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """All programs of one global batch, plus the chunks and the strategy's choices.

    ``stage_layers[s]`` is the (first, stop) layer range of stage s; ``device_stage[d]`` the stage
    that simulated device d runs (a device is one stage of one DP replica, see ParallelConfig).
    """

    strategy: str
    options: dict[str, Any]
    seq_lengths: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    programs: tuple[Program, ...]
    num_stages: int
    stage_layers: tuple[tuple[int, int], ...]
    device_stage: tuple[int, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def num_devices(self) -> int:
        return len(self.device_stage)

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lengths)

    def ops(self):
        for program in self.programs:
            yield from program.ops

    def program(self, device: int, stream: str = "compute") -> Program:
        for program in self.programs:
            if program.device == device and program.stream == stream:
                return program
        return Program(device, stream, ())

    def grid(self, mark: str | None = None) -> str:
        """One line per device stream; the op with key ``mark`` is shown as ``>>token<<``."""
        lines = []
        for program in sorted(self.programs, key=lambda p: (p.device, STREAMS.index(p.stream))):
            cells = [f">>{op.token}<<" if op.key == mark else op.token for op in program.ops]
            lines.append(f"d{program.device} {program.stream:<7}| " + " ".join(cells))
        return "\n".join(lines)

    def validate(self, *, check_cycles: bool = True) -> "Plan":
        """Check the plan; raises PlanError with the grid and the bad op marked.

        ``check_cycles=False`` skips the dependency-cycle search (the costliest rule); the engine
        still reports a cycle as a deadlock, with the grid, when it replays the plan.
        """
        from ltsim.plan_check import check_plan  # kept apart so this module stays small

        problem = check_plan(self, check_cycles=check_cycles)
        if problem is not None:
            message, bad_key = problem
            raise PlanError(f"{self.strategy}: {message}\n{self.grid(mark=bad_key)}")
        return self
