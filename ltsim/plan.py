"""The plan IR: slices, work, devices, ops, programs and plans; op keys and tokens; validation.

A Plan is the one shared language of ltsim: strategies emit it, the simulator replays it against a
cost model, the executor runs it, the figures draw it. It holds no durations or byte counts: those
come from the CostModel, which prices every op from the op alone (STYLE.md principle 2). So an op
says what it does:

- a compute op (F, B, W, R) carries a :class:`Work`: its slices, its layer range, how it is split
  over GPUs (tp; cp degree and kind, cp = 1 meaning "whole on this rank"), whether it includes the
  embedding or the LM head; and, for a forward, what it :class:`Keep`\\ s for backward. ``part``
  says whether it is the whole layer stack or only its attention kernels ("attn") or everything but
  them ("dense"), which is how communication that overlaps only attention is expressed.
- a comm op (SEND_F, SEND_B, COLL, COPY) carries a :class:`Comm`: the collective or copy, which
  tensor of which work it moves, and the group it runs over.
- memory effects are :class:`Buffer` values (device or host) allocated at an op's start and freed at
  an op's end; a buffer names the work whose tensors it holds.

Op kinds and streams are described once, in :data:`KINDS` and :data:`STREAMS`; everything else
reads them. Op keys are typed (:class:`OpKey`) and made by one function, :func:`op_key`. Tokens
follow torch pipelining's ``_Action`` (``2F0``), prefixed with ``s``: ``s2F3`` is stage 2, forward,
chunk 3; ``s1SEND_F3`` sends chunk 3's activations from stage 1; ``s0COLL[dp-grad]`` a named
collective. Tokens round-trip through :func:`parse_token`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from ltsim.errors import PlanError
from ltsim.work import NO_TILING, Buffer, Chunk, Comm, Keep, Slice, Split, Tiling, Work

if TYPE_CHECKING:
    from ltsim.optable import OpTable

__all__ = ["BUSY_KINDS", "KINDS", "NO_TILING", "STREAMS", "WORK_KINDS", "Buffer", "Chunk",
           "Comm", "Device", "KindInfo", "Keep", "Mirror", "Op", "OpKey", "OpKind", "Plan", "Program",
           "Slice", "Split", "Tiling", "Work", "make_op", "op_key", "parse_token"]


class OpKind(str, Enum):
    F = "F"  # forward
    B = "B"  # backward (input and weight gradients unless W is split off)
    W = "W"  # weight gradient, when split from B (zero-bubble schedules)
    R = "R"  # recompute-forward (activation checkpointing, ChunkFlow's second forward)
    SEND_F = "SEND_F"  # activations to the next stage
    SEND_B = "SEND_B"  # gradients to the previous stage
    COLL = "COLL"  # collective (CP exchange, ZeRO gather, DP gradient reduction, ...)
    COPY = "COPY"  # host <-> device copy (activation offload)
    OPT = "OPT"  # optimizer step

    # Enum's own __hash__ is Python code; op keys hold a kind and are hashed on every lookup
    __hash__ = str.__hash__


@dataclass(frozen=True, slots=True)
class KindInfo:
    stream: str  # the stream an op of this kind runs on
    busy: bool  # counts as busy compute time in the bubble ratio
    work: bool  # carries a Work and is priced by CostModel.compute_s
    executor: bool  # the executor (ltsim/executor) can run it


#: The streams of a device: compute kernels, point-to-point pipeline traffic, CP traffic, collectives
#: (ZeRO, DP; NCCL runs each on its own communicator and stream), and host copies.
STREAMS = ("compute", "comm", "cp", "coll", "copy")
KINDS: dict[OpKind, KindInfo] = {
    OpKind.F: KindInfo("compute", busy=True, work=True, executor=True),
    OpKind.B: KindInfo("compute", busy=True, work=True, executor=True),
    OpKind.W: KindInfo("compute", busy=True, work=True, executor=False),
    OpKind.R: KindInfo("compute", busy=True, work=True, executor=True),
    OpKind.SEND_F: KindInfo("comm", busy=False, work=False, executor=True),
    OpKind.SEND_B: KindInfo("comm", busy=False, work=False, executor=True),
    OpKind.COLL: KindInfo("coll", busy=False, work=False, executor=True),
    OpKind.COPY: KindInfo("copy", busy=False, work=False, executor=True),
    OpKind.OPT: KindInfo("compute", busy=True, work=False, executor=True),
}
_KIND_TEXT = {k: k.value for k in OpKind}  # Enum.value is a descriptor call; tokens are hot
WORK_KINDS = frozenset(k for k, info in KINDS.items() if info.work)
BUSY_KINDS = frozenset(k for k, info in KINDS.items() if info.busy)
_TOKEN_RE = re.compile(r"^s(\d+)(" + "|".join(sorted((k.value for k in OpKind), key=len, reverse=True))
                       + r")(\d+)?(?:\[([\w.:-]+)\])?$")


class OpKey(NamedTuple):
    """The identity of an op: unique within a plan."""

    device: int
    stage: int
    kind: OpKind
    chunk: int = -1
    name: str = ""

    @property
    def token(self) -> str:
        text = f"s{self.stage}{_KIND_TEXT[self.kind]}"
        if self.chunk >= 0:
            text += str(self.chunk)
        return text + f"[{self.name}]" if self.name else text

    def __str__(self) -> str:
        return f"{self.device}:{self.token}"


def op_key(device: int, stage: int, kind: OpKind, chunk: int = -1, name: str = "") -> OpKey:
    """The one way to make an op key (deps are lists of these)."""
    return _tuple_new(OpKey, (device, stage, kind, chunk, name))  # NamedTuple's own __new__ is Python


class _OpFields(NamedTuple):
    kind: OpKind
    device: int
    stage: int
    chunk: int = -1
    name: str = ""
    stream: str = ""  # "" -> KINDS[kind].stream
    work: Work | None = None
    keep: Keep = Keep.ALL
    part: str = ""
    comm: Comm | None = None
    deps: tuple[OpKey, ...] = ()
    start_deps: tuple[OpKey, ...] = ()
    allocs: tuple[Buffer, ...] = ()
    frees: tuple[Buffer, ...] = ()
    group: tuple[int, ...] = ()
    key: OpKey | None = None  # derived: always recomputed from the fields above


class Op(_OpFields):
    """One step of one device stream.

    ``deps``: ops that must finish before this one starts; ``start_deps``: ops that must have
    started (a collective that overlaps a compute op starts with it). Ops of one stream also run
    in program order. ``allocs`` are charged when the op starts, ``frees`` released when it ends.
    ``group`` lists the member devices of a COLL (all must arrive before it starts) or the peer of a
    SEND. Compute ops carry ``work`` (and ``keep``, ``part``); comm ops carry ``comm``.

    An immutable named tuple rather than a frozen dataclass (STYLE.md's default for values): a plan
    holds 10^4 ops and the lowering builds each once or twice, and a tuple is built five times
    faster (validation/perf/README.md). Build it with keywords; ``key`` is derived.
    """

    __slots__ = ()

    def __new__(cls, kind: OpKind, device: int, stage: int, chunk: int = -1, name: str = "",
                stream: str = "", work: Work | None = None, keep: Keep = Keep.ALL, part: str = "",
                comm: Comm | None = None, deps: tuple = (), start_deps: tuple = (),
                allocs: tuple = (), frees: tuple = (), group: tuple = (), key: object = None) -> "Op":
        return _tuple_new(cls, (kind, device, stage, chunk, name, stream or KINDS[kind].stream, work,
                                keep, part, comm, deps, start_deps, allocs, frees, group,
                                _tuple_new(OpKey, (device, stage, kind, chunk, name))))

    @property
    def token(self) -> str:
        return self.key.token

    def evolve(self, **changes: Any) -> "Op":
        """A copy with ``changes`` (the key follows)."""
        return Op(**{**self._asdict(), **changes})

    def with_deps(self, extra: tuple[OpKey, ...]) -> "Op":
        """A copy that also waits for ``extra`` (the passes' most common change)."""
        return _tuple_new(Op, (*self[:10], self.deps + extra, *self[11:]))


_tuple_new = tuple.__new__


def make_op(kind: OpKind, device: int, stage: int, chunk: int, name: str, stream: str,
            work: Work | None, keep: Keep, part: str, comm: Comm | None, deps: tuple,
            start_deps: tuple, allocs: tuple, frees: tuple, group: tuple) -> Op:
    """``Op(...)`` with every field given by position, for the lowering's hot loops (keyword
    calls cost a third of an op's construction)."""
    return _tuple_new(Op, (kind, device, stage, chunk, name, stream, work, keep, part, comm, deps,
                           start_deps, allocs, frees, group,
                           _tuple_new(OpKey, (device, stage, kind, chunk, name))))


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
class Device:
    """A simulated device: one pipeline stage of one DP replica, either a tp x cp group in lockstep
    (``cp_width`` = cp, ``cp_rank`` = -1: Megatron, ChunkFlow) or one rank of a CP group
    (``cp_width`` = 1, ``cp_rank`` >= 0: ranks doing different work, Skrull). It holds the
    parameters of ``layers`` (+ embedding / LM head), split over ``tp``, with ZeRO stage
    ``zero_stage`` sharding its states over ``num_shards`` ranks, gradients and Adam state in
    ``grad_dtype`` / ``optimizer_dtype`` ("fp32" or "model"), the gradients reduced over the DP
    group from the start of the backward that makes them (``overlap_grad_reduce``) or after it;
    ``offload_optimizer``: its fp32 gradients and optimizer state live in host memory and the
    optimizer steps on the CPU (DeepSpeed ZeRO-Offload). Every number is per GPU."""

    index: int
    stage: int
    replica: int
    layers: tuple[int, int]
    embed: bool
    head: bool
    tp: int = 1
    cp_width: int = 1
    cp_rank: int = -1
    zero_stage: int = 1
    num_shards: int = 1
    grad_dtype: str = "fp32"  # ParallelConfig's: the gradients' and the optimizer state's dtypes
    optimizer_dtype: str = "fp32"
    overlap_grad_reduce: bool = True
    offload_optimizer: bool = False

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


class Mirror(NamedTuple):
    """A DP replica that runs exactly what an earlier one runs (issue 13): chunks of the same token
    layout in the same order, so the same programs with devices, chunks, sequences and GPU ranks
    renumbered. A plan holds the programs of the ``source`` replica only: the engine replays them
    once and reports them for both, and :meth:`Plan.expand` writes the copies out.

    ``devices`` and ``chunks``: (source, copy) pairs; ``gpus``: the source replica's GPU ranks as
    (first, last) per device; ``gpu_shift``: what a copy adds to such a rank (Megatron-LM's rank
    order puts a replica's GPUs at a fixed offset from another's)."""

    replica: int
    source: int
    devices: tuple[tuple[int, int], ...]
    chunks: tuple[tuple[int, int], ...]
    gpus: tuple[tuple[int, int], ...]
    gpu_shift: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """All programs of one global batch, plus the chunks, the devices and the strategy's choices.

    ``grad_chunks``: the chunks that get a backward (None: all of them; SpaCO back-propagates a
    sampled subset). ``grad_scales``: (chunk, loss scale, K/V-gradient scale) for chunks whose
    gradients are rescaled (SpaCO's compensation): the chunk's loss is multiplied by the first, and
    the dK/dV it received from later chunks by the second before it back-propagates them.
    ``mirrors``: DP replicas that repeat another's programs, which ``programs`` then leaves out
    (:class:`Mirror`; :meth:`expand` gives the plan with every program written out).
    ``table``: the ops, as columns (ltsim/optable.py); ``programs`` writes them out as Op tuples
    when first read, and :meth:`with_programs` makes a plan from programs of Op tuples.
    """

    strategy: str
    options: dict[str, Any]
    seq_lengths: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    table: "OpTable"
    devices: tuple[Device, ...]
    grad_chunks: frozenset[int] | None = None
    grad_scales: tuple[tuple[int, float, float], ...] = ()
    mirrors: tuple[Mirror, ...] = ()

    @property
    def programs(self) -> tuple[Program, ...]:
        """The ordered ops of every device stream, as Op tuples (written out once)."""
        return self.table.to_programs()

    def with_programs(self, programs: tuple[Program, ...]) -> "Plan":
        """This plan with other programs (a hand-made change; tests, mirrors written out)."""
        from dataclasses import replace

        from ltsim.optable import OpTable

        return replace(self, table=OpTable.from_programs(programs, self.chunks))

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_stages(self) -> int:
        return 1 + max(d.stage for d in self.devices)

    @property
    def device_stage(self) -> tuple[int, ...]:
        return tuple(d.stage for d in self.devices)

    @property
    def stage_layers(self) -> tuple[tuple[int, int], ...]:
        layers = {d.stage: d.layers for d in self.devices}
        return tuple(layers[s] for s in range(self.num_stages))

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lengths)

    def expand(self) -> "Plan":
        """This plan with the programs of its mirrored replicas written out (itself when none)."""
        if not self.mirrors:
            return self
        from ltsim.mirrors import expand_plan  # kept apart so this module stays small

        return expand_plan(self)

    def gets_grad(self, chunk: int) -> bool:
        return self.grad_chunks is None or chunk in self.grad_chunks

    def ops(self) -> Iterator[Op]:
        for program in self.programs:
            yield from program.ops

    def program(self, device: int, stream: str = "compute") -> Program:
        for program in self.programs:
            if program.device == device and program.stream == stream:
                return program
        return Program(device, stream, ())

    def grid(self, mark: OpKey | None = None) -> str:
        """One line per device stream; the op with key ``mark`` is shown as ``>>token<<``."""
        lines = []
        for program in sorted(self.programs, key=lambda p: (p.device, STREAMS.index(p.stream))):
            if not program.ops:
                continue
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
