"""Plan export (DESIGN.md section 6, ``ltsim export``): one pipeline's simulated schedule, written
for the runtime that runs it. It owns the mapping from a Plan to other runtimes' schedule formats.

``torch-pipelining``: the *compute-only* CSV of ``torch.distributed.pipelining.schedules``, the
format ``PipelineScheduleMulti._load_csv`` and ``_PipelineScheduleRuntime._load_csv(path)`` (its
default ``format="compute_only"``) read, written as their ``_dump_csv`` writes it (``csv.writer``):
one row per pipeline rank, row r for the device of stage r, each cell an ``_Action`` string
``{stage}{type}{micro-batch}``. ``2F0`` forwards micro-batch 0 on stage 2 and ``2B0`` runs its full
backward; a plan that splits off W exports that backward as ``2I0`` and ``2W0``.

Why compute-only: it is the only format ``PipelineScheduleMulti`` loads, and the runtime's lowering
adds the rest where ltsim's lowering puts it: SEND_F after the forward, SEND_B after the backward
and the peer's RECV (``_add_send_recv``, ltsim's ``add_p2p``), REDUCE_GRAD after a stage's last
backward (``_add_reduce_grad``, ltsim's ``COLL[dp-grad]`` started with it). ltsim runs sends on a
comm stream of their own, so the plan fixes no place for them in one per-rank list. OPT and
``COLL[dp-params]`` (a distributed optimizer's parameter all-gather) follow ``step()`` in the
training loop and are not exported.

One DP replica (``replica``, the command line's is 0): a torch pipelining schedule drives one
pipeline; data parallelism is orthogonal (each replica runs its own schedule, DP groups reduce the
gradients), and replicas of one plan may hold different micro-batches. ltsim's chunk indices are
global over replicas, so the replica's chunks are renumbered 0..n-1 in index order;
``microbatches[i]`` is the Chunk (sequences and token ranges) micro-batch i must hold. torch splits
a batch into equal parts, so pass these pre-split (``_step_microbatches(arg_mbs=...)``).

Cannot be expressed (ConfigError on ``--format`` naming the first such op): recompute-forwards (R;
ChunkFlow whenever a sequence has more chunks than K: torch has no action that re-runs a discarded
forward), CP-split ops and per-rank CP devices, host copies (COPY), collectives other than the
step-end DP reduction (ZeRO-3 gathers, ZeRO-2 per-step reductions), more than one compute op per
micro-batch and stage (layer ranges), and a micro-batch without a backward. ChunkFlow's dependent
chunks with K >= the chunk count (no R) export in the simulated order, but torch treats
micro-batches as independent: carrying a sequence's K/V from one chunk to the next is the stage
module's job.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Callable

from ltsim.errors import ConfigError, check_argument
from ltsim.plan import Chunk, Op, OpKind, Plan

_STEP_END = ("dp-grad", "dp-params")  # COLLs after the backwards: not in a torch schedule
_REFUSALS = {  # what the plan has that a torch pipelining schedule cannot: (what, why, fix)
    "R": ("a recompute-forward (R)",
          "torch.distributed.pipelining has no action that re-runs a discarded forward (ChunkFlow "
          "re-forwards when a sequence has more chunks than K)",
          "set strategy.k to at least the most chunks of one sequence, or strategy.chunk_size "
          "to at least the longest sequence"),
    "cp": ("context-parallel work", "torch pipelining schedules whole stages; CP runs inside the "
           "stage module", "export with parallel.cp = 1"),
    "copy": ("a host copy (COPY)", "torch pipelining has no offload action",
             "turn activation offload off"),
    "coll": ("a collective inside the step", "torch pipelining adds REDUCE_GRAD itself and "
             "schedules no per-op gathers or reductions", "use parallel.zero_stage 0, 1 or 2"),
    "split": ("a micro-batch computed as several ops a stage (by layer range, or by slices: "
              "Skrull's local and distributed parts)", "torch pipelining runs a stage's layers "
              "over a micro-batch as one action", "simulate a strategy that runs each "
              "micro-batch as one forward and one backward a stage"),
    "grad": ("a micro-batch without a backward", "torch validates one backward per micro-batch "
             "and stage", "simulate with gradients for every chunk"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSchedule:
    """One pipeline's compute order: ``rows[rank]`` the action strings of PP rank ``rank``;
    ``microbatches[i]`` the plan's Chunk behind micro-batch i."""

    strategy: str
    replica: int
    num_replicas: int
    rows: tuple[tuple[str, ...], ...]
    microbatches: tuple[Chunk, ...]

    @property
    def num_stages(self) -> int:
        return len(self.rows)

    def to_csv(self) -> str:
        """The CSV text, as torch's ``_dump_csv`` writes it (write it with ``newline=""``)."""
        out = io.StringIO()
        csv.writer(out).writerows(self.rows)
        return out.getvalue()

    def describe(self) -> str:
        """One line per micro-batch: the chunk and the sequence slices it holds."""
        lines = [f"{self.strategy}: {self.num_stages} pipeline ranks, {len(self.microbatches)} "
                 f"micro-batches, DP replica {self.replica} of {self.num_replicas}"]
        for i, chunk in enumerate(self.microbatches):
            parts = " ".join(f"{s.seq}[{s.start}:{s.stop}]" for s in chunk.slices)
            lines.append(f"  micro-batch {i} = chunk {chunk.index}, {chunk.num_tokens} tokens: "
                         f"{parts}")
        return "\n".join(lines)


def _refusal(op: Op) -> str | None:
    """The key in _REFUSALS that rules ``op`` out, or None."""
    if op.kind is OpKind.R:
        return "R"
    if op.part or op.stream == "cp":
        return "cp"
    if op.kind is OpKind.COPY:
        return "copy"
    if op.kind is OpKind.COLL and op.name not in _STEP_END:
        return "coll"
    if op.kind in (OpKind.F, OpKind.B, OpKind.W) and op.name:
        return "split"
    return None


def _refuse(plan: Plan, reason: str, where: str) -> ConfigError:
    what, why, fix = _REFUSALS[reason]
    if reason == "R" and plan.strategy != "chunkflow":  # activation checkpointing re-forwards
        why = ("torch.distributed.pipelining has no action that re-runs a discarded forward (the "
               "plan recomputes checkpointed activations)")
        fix = 'export a plan without recompute (parallel.recompute = "none", or the strategy\'s own ' \
              "checkpointing option off)"
    return ConfigError("--format", "a format that can express the plan", "torch-pipelining", fix,
                       context=f"the {plan.strategy} plan has {what} ({where}), and {why}")


def torch_pipelining(plan: Plan, *, replica: int = 0) -> PipelineSchedule:
    """DP replica ``replica``'s compute order as a torch pipelining schedule (module docstring).

    Raises ConfigError (key ``--format``) for a plan that format cannot express.
    """
    check_argument("plan", plan, Plan, "a Plan (ltsim.run(scenario).plans[0])")
    plan = plan.expand()  # a mirrored replica (ltsim/mirrors.py) has its own ops written out
    devices = [d for d in plan.devices if d.replica == replica]
    num_replicas = 1 + max(d.replica for d in plan.devices)
    if not devices:
        raise ConfigError("replica", f"a DP replica of the plan (0..{num_replicas - 1})", replica)
    for device in devices:
        if device.cp_rank >= 1:  # a group of several CP ranks (a rank 0 alone is no CP)
            raise _refuse(plan, "cp", f"device {device.index} is CP rank {device.cp_rank}")
    by_stage = {d.stage: d for d in devices}
    assert len(by_stage) == len(devices) == plan.num_stages, "lockstep: one device per stage"
    for op in plan.ops():
        if plan.devices[op.device].replica == replica and (reason := _refusal(op)):
            raise _refuse(plan, reason, f"{op.token} on device {op.device}")
    chunks = sorted((c for c in plan.chunks if c.replica == replica), key=lambda c: c.index)
    number = {c.index: i for i, c in enumerate(chunks)}
    rows = []
    for stage in range(plan.num_stages):
        ops = [op for op in plan.program(by_stage[stage].index).ops
               if op.kind in (OpKind.F, OpKind.B, OpKind.W)]
        split_w = {op.chunk for op in ops if op.kind is OpKind.W}
        for kind in (OpKind.F, OpKind.B):
            missing = sorted(set(number) - {op.chunk for op in ops if op.kind is kind})
            if missing:
                where = f"no s{stage}{kind.value}{missing[0]} on device {by_stage[stage].index}"
                raise _refuse(plan, "grad" if kind is OpKind.B else "split", where)
        rows.append(tuple(
            f"{op.stage}{'I' if op.kind is OpKind.B and op.chunk in split_w else op.kind.value}"
            f"{number[op.chunk]}" for op in ops))
    return PipelineSchedule(strategy=plan.strategy, replica=replica, num_replicas=num_replicas,
                            rows=tuple(rows), microbatches=tuple(chunks))


#: Export formats by name (the command line's ``--format``).
FORMATS: dict[str, Callable[..., PipelineSchedule]] = {"torch-pipelining": torch_pipelining}


def get_format(name: str) -> Callable[..., PipelineSchedule]:
    """The exporter called ``name`` (case-insensitive); ConfigError listing the formats if none."""
    exporter = FORMATS.get(name.lower()) if isinstance(name, str) else None
    if exporter is None:
        raise ConfigError("--format", f"one of {', '.join(sorted(FORMATS))}", name)
    return exporter
