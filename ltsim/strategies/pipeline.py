"""Turns per-stage action orders into a Plan: P2P sends, dependencies, memory effects, DP reduction.

A strategy decides *what* each stage does in which order (``Action`` lists per replica and stage);
this builder adds the plumbing every pipeline shares, so that no strategy re-derives it:

- F(s, c) on stage s > 0 waits for SEND_F(s-1, c); SEND_F(s, c) follows F(s, c) on the comm stream;
- B(s, c) on stage s < last waits for SEND_B(s+1, c); SEND_B(s, c) follows B(s, c);
- an Action's ``extra_deps`` adds same-replica dependencies (e.g. ChunkFlow's dK/dV order);
- at the end each device reduces its gradients with its DP peers (COLL[dp-grad] on the comm stream)
  and then steps its optimizer (OPT).
Comm-stream ops are ordered as their producers run, so the comm stream can never deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ltsim.plan import Buffer, Chunk, Op, OpKind, Plan, Program, op_key
from ltsim.strategies.base import PlanContext, even_stage_layers


@dataclass(frozen=True, slots=True)
class Action:
    """One compute step of a stage: kind F/B/R/W on a chunk, with its buffer effects.

    A buffer effect is a kind (``"act"``: that buffer of this chunk on this stage) or a
    ``(kind, chunk)`` pair for another chunk's buffer (e.g. dK/dV of earlier chunks).
    """

    kind: OpKind
    chunk: int
    allocs: tuple[str | tuple[str, int], ...] = ()
    frees: tuple[str | tuple[str, int], ...] = ()
    extra_deps: tuple[tuple[int, OpKind, int], ...] = ()  # (stage, kind, chunk) on this replica


def default_actions(recompute: str) -> tuple[dict, dict, bool]:
    """Buffer effects of a kept forward and its backward for a recompute policy.

    Returns (forward effects, backward effects, needs an R before B). With full recompute the
    forward keeps only its input (a checkpoint) and R rebuilds the activations before B.
    """
    if recompute == "full":
        return {"allocs": ("ckpt",)}, {"frees": ("act", "ckpt")}, True
    return {"allocs": ("act",)}, {"frees": ("act",)}, False


def one_f_one_b(chunks: list[int], stage: int, num_stages: int, recompute: str) -> list[Action]:
    """Megatron-LM's non-interleaved 1F1B order for one stage.

    warm-up = min(p - stage - 1, m) forwards, then one forward one backward, then cool-down
    backwards (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_without_interleaving).
    """
    fwd, bwd, needs_r = default_actions(recompute)
    forwards = [[Action(OpKind.F, c, **fwd)] for c in chunks]
    backwards = [([Action(OpKind.R, c, allocs=("act",))] if needs_r else [])
                 + [Action(OpKind.B, c, **bwd)] for c in chunks]
    return interleave_1f1b(forwards, backwards, stage, num_stages)


def interleave_1f1b(fwd: list[list[Action]], bwd: list[list[Action]], stage: int,
                    num_stages: int) -> list[Action]:
    """Interleave forward items and backward items 1F1B-style; item i of each list is one chunk.

    A stage keeps at most ``num_stages - stage`` chunks in flight (forwarded, not yet backwarded):
    warm-up of p - stage - 1 forwards, then one forward one backward, then the cool-down. It
    forwards beyond that cap only while the next backward is not admissible (its chunk not yet
    forwarded here), which ChunkFlow's dependent groups need. With backwards in forward order this
    is exactly Megatron's 1F1B.
    """
    done: set[int] = set()
    order: list[Action] = []
    cap = num_stages - stage
    f = b = 0
    while b < len(bwd):
        while f < len(fwd) and (f - b < cap or bwd[b][-1].chunk not in done):
            order.extend(fwd[f])
            done.add(fwd[f][0].chunk)
            f += 1
        order.extend(bwd[b])
        b += 1
    return order


def build_plan(*, strategy: str, options: dict[str, Any], ctx: PlanContext,
               seq_lengths: tuple[int, ...], chunks: tuple[Chunk, ...],
               orders: dict[tuple[int, int], list[Action]],
               notes: tuple[str, ...] = ()) -> Plan:
    """Assemble a validated Plan from ``orders[(replica, stage)]``."""
    par = ctx.parallel
    num_stages = par.pp
    devices = {(r, s): par.sim_device(dp_rank=r, stage=s) for r in range(par.dp)
               for s in range(num_stages)}
    programs: list[Program] = []
    for (replica, stage), actions in sorted(orders.items()):
        device = devices[(replica, stage)]
        compute, comm = _stage_ops(actions, replica, stage, num_stages, device, devices)
        group = tuple(devices[(r, stage)] for r in range(par.dp))
        last = compute[-1].key if compute else None
        coll = Op(kind=OpKind.COLL, device=device, stage=stage, name="dp-grad", stream="comm",
                  deps=(last,) if last else (), group=group, collective="all_reduce")
        comm.append(coll)
        compute.append(Op(kind=OpKind.OPT, device=device, stage=stage, deps=(coll.key,)))
        programs.append(Program(device, "compute", tuple(compute)))
        programs.append(Program(device, "comm", tuple(comm)))
    plan = Plan(strategy=strategy, options=options, seq_lengths=seq_lengths, chunks=chunks,
                programs=tuple(programs), num_stages=num_stages,
                stage_layers=even_stage_layers(ctx.model.num_layers, num_stages),
                device_stage=tuple(par.stage_of(d) for d in range(par.num_sim_devices)),
                notes=notes)
    # The cycle search is left to the engine (a cycle deadlocks the replay, which reports it with
    # the grid); the conformance suite runs the full validate() on every registered strategy.
    return plan.validate(check_cycles=False)


def _stage_ops(actions, replica, stage, num_stages, device, devices):
    compute: list[Op] = []
    comm: list[Op] = []
    prev_dev = devices.get((replica, stage - 1))
    next_dev = devices.get((replica, stage + 1))
    for action in actions:
        deps: list[str] = [op_key(devices[(replica, s)], f"s{s}{k.value}{c}")
                           for s, k, c in action.extra_deps]
        if action.kind is OpKind.F and stage > 0:
            deps.append(op_key(prev_dev, f"s{stage - 1}SEND_F{action.chunk}"))
        if action.kind is OpKind.B and stage < num_stages - 1:
            deps.append(op_key(next_dev, f"s{stage + 1}SEND_B{action.chunk}"))
        op = Op(kind=action.kind, device=device, stage=stage, chunk=action.chunk, deps=tuple(deps),
                allocs=tuple(_buffer(b, action.chunk, stage) for b in action.allocs),
                frees=tuple(_buffer(b, action.chunk, stage) for b in action.frees))
        compute.append(op)
        if action.kind is OpKind.F and stage < num_stages - 1:
            comm.append(Op(kind=OpKind.SEND_F, device=device, stage=stage, chunk=action.chunk,
                           stream="comm", deps=(op.key,), group=(next_dev,)))
        if action.kind is OpKind.B and stage > 0:
            comm.append(Op(kind=OpKind.SEND_B, device=device, stage=stage, chunk=action.chunk,
                           stream="comm", deps=(op.key,), group=(prev_dev,)))
    return compute, comm


def _buffer(effect: str | tuple[str, int], chunk: int, stage: int) -> Buffer:
    if isinstance(effect, str):
        return Buffer(effect, chunk, stage)
    return Buffer(effect[0], effect[1], stage)
