"""Skrull (Xu et al., NeurIPS 2025; seeds/skrull.md): GDS forms each DP rank's micro-batches, DACP
places each micro-batch's sequences on the CP group, on DeepSpeed ZeRO without pipelining.

Devices are the individual CP ranks (Layout.rank_devices): a sequence DACP keeps local runs whole
on one rank with no CP traffic; the distributed ones are sharded over the group (ring or Ulysses,
``parallel.cp_kind``). Per micro-batch, a rank runs forward over its local sequences, then over its
share of the distributed ones, then backward in the same order. The distributed sequences'
exchange starts with the local work and the distributed attention waits for it (the lowering's
reading of Eq. 2: max(T_comm, T_local) + T_dist), and the ranks meet there, so a rank with little
local work waits for the others. ZeRO-2's per-micro-step gradient reduce-scatter (lowering) makes
the DP ranks wait for each other every micro-step too.

Options: ``bucket_size`` C (tokens per rank, or "auto": Eq. 12 on ltsim's memory model, see
deepspeed_cp.bucket_tokens); ``placement`` "dacp" (Algorithm 1) or "round-robin" (Appendix B.2);
``scheduling`` "gds" (Algorithm 2) or "none" (micro-batches packed in batch order up to C x N, as
the baseline); ``rollback``; ``cost_model``: what the heuristics balance, "paper" (Eq. 13 FLOPs)
or "ltsim" (ltsim's own forward time of each sequence). The simulation always prices the plan with
ltsim's cost model. A micro-batch DACP cannot place (a sequence longer than C x N, or no rollback
left) runs with every sequence distributed; its memory then exceeds the bucket and the result says
the plan does not fit, with the device and bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Keep, OpKind, Plan, Slice, Split, Work
from ltsim.strategies import dacp as sched
from ltsim.strategies.base import PlanContext, deal_replicas
from ltsim.strategies.deepspeed_cp import bucket_tokens, check_bucket, check_no_pipeline, pack_in_order
from ltsim.strategies.lowering import lower
from ltsim.strategies.schedule import Action, Layout, Mem, Schedule, keep_policy, mems

NAME = "skrull"
SCHEDULINGS = ("gds", "none")
COST_MODELS = ("paper", "ltsim")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    bucket_size: int | str = "auto"  # C: tokens per CP rank (Eq. 7), or "auto"
    placement: str = "dacp"  # "dacp" (Algorithm 1) | "round-robin" (Appendix B.2)
    scheduling: str = "gds"  # "gds" (Algorithm 2) | "none"
    rollback: bool = True  # Algorithm 1 line 18 (False: overflow instead, the paper's OOM rows)
    cost_model: str = "paper"  # what DACP/GDS balance: "paper" (Eq. 13) | "ltsim"

    def validate(self) -> None:
        check_bucket(self.bucket_size)
        for key, allowed in (("placement", sched.PLACEMENTS), ("scheduling", SCHEDULINGS),
                             ("cost_model", COST_MODELS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"strategy.{key}", f"one of {', '.join(allowed)}", getattr(self, key))


def sequence_loads(batch: tuple[int, ...], ctx: PlanContext, cost_model: str) -> list[float]:
    """What the heuristics balance per sequence: Eq. 13 FLOPs, or ltsim's forward time of the
    sequence whole on one rank over all layers."""
    if cost_model == "paper":
        return [sched.flops_eq13(ctx.model, n) for n in batch]
    par = ctx.parallel
    split = Split(tp=par.tp, sp=par.sequence_parallel)
    layers = (0, ctx.model.num_layers)
    return [ctx.cost.compute_s(OpKind.F, Work(chunk=0, slices=(Slice(k, 0, n),), layers=layers,
                                                split=split)) for k, n in enumerate(batch)]


def micro_batches(batch, ctx: PlanContext, options: Options, capacity: int,
                  loads: list[float]) -> list[list[list[int]]]:
    """Per DP rank, its micro-batches as lists of sequence ids."""
    par = ctx.parallel
    if options.scheduling == "none":
        return [pack_in_order(ids, batch, capacity * par.cp) for ids in deal_replicas(batch, par.dp)]

    def fits(mb: list[int]) -> bool:
        found = _place(mb, batch, par.cp, capacity, loads, options)
        return found is not None and found.fits

    out = []
    for ids in sched.balance_ranks(loads, par.dp):
        found = sched.gds_rank(ids, batch, par.cp, capacity, fits)
        out.append(found if found is not None else [[k] for k in sorted(ids, key=batch.__getitem__)])
    return out


def _place(mb: list[int], batch, num_ranks: int, capacity: int, loads, options: Options):
    return sched.dacp([batch[k] for k in mb], num_ranks, capacity, lambda i: loads[mb[i]],
                      placement=options.placement, rollback=options.rollback)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    check_no_pipeline(ctx, NAME)
    par = ctx.parallel
    layout = Layout.of(par, ctx.model.num_layers)
    capacity = bucket_tokens(ctx, layout, options.bucket_size)
    loads = sequence_loads(batch, ctx, options.cost_model)
    keep = keep_policy(par.recompute)
    local = Split(tp=par.tp, cp=1, cp_kind=par.cp_kind, sp=par.sequence_parallel)
    shared = local._replace(cp=par.cp)
    chunks: list[Chunk] = []
    orders: dict[int, list[Action]] = {layout.rank_device(r, 0, j): [] for r in range(par.dp)
                                       for j in range(par.cp)}
    for replica, mbs in enumerate(micro_batches(batch, ctx, options, capacity, loads)):
        for mb in mbs:
            found = _place(mb, batch, par.cp, capacity, loads, options)
            ret = found.ret if found is not None else (sched.DISTRIBUTED,) * len(mb)
            chunk = Chunk(len(chunks), tuple(Slice(k, 0, batch[k]) for k in mb), replica)
            chunks.append(chunk)
            for rank in range(par.cp):
                mine = tuple(s for s, r in zip(chunk.slices, ret) if r == rank)
                dist = tuple(s for s, r in zip(chunk.slices, ret) if r == sched.DISTRIBUTED)
                orders[layout.rank_device(replica, 0, rank)] += _actions(
                    chunk.index, keep, ((mine, local, "local"), (dist, shared, "dist")))
    return lower(Schedule(strategy=NAME, options=asdict(options), seq_lengths=tuple(batch),
                          chunks=tuple(chunks), devices=layout.rank_devices(), orders=orders),
                 layout)


def _actions(chunk: int, keep: Keep, parts) -> list[Action]:
    """Forward over the local then the distributed slices, backward in the same order. Under full
    recompute (Keep.INPUT) each part's forward keeps its layer inputs and its backward is preceded
    by a recompute with a one-layer working set, as ``pipeline.kept_actions`` makes them (what
    ``bucket_tokens`` sizes the bucket for); the recomputes of both parts run before their
    backwards, so each distributed step still follows its local one (Eq. 2's overlap)."""
    present = [(slices, split, name) for slices, split, name in parts if slices]
    if keep is Keep.INPUT:
        work = Mem("act", keep=Keep.ALL, one_layer=True)
        forward = [Action(OpKind.F, chunk, keep, allocs=mems("ckpt"), slices=s, split=p, name=n)
                   for s, p, n in present]
        redo = [Action(OpKind.R, chunk, keep, allocs=(work,), head=False, slices=s, split=p, name=n)
                for s, p, n in present]
        backward = [Action(OpKind.B, chunk, keep, frees=(work, Mem("ckpt")), slices=s, split=p,
                           name=n) for s, p, n in present]
        return forward + redo + backward
    forward = [Action(OpKind.F, chunk, keep, allocs=mems("act"), slices=s, split=p, name=n)
               for s, p, n in present]
    backward = [Action(OpKind.B, chunk, keep, frees=mems("act"), slices=s, split=p, name=n)
                for s, p, n in present]
    return forward + backward
