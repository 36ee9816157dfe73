"""DeepSpeed ZeRO with context parallelism over the whole CP group: Skrull's main baseline
(seeds/skrull.md section 5; PAPERS.md sections 3.3 and 7).

Every sequence is sharded over all cp ranks (ring or Ulysses, ``parallel.cp_kind``). A DP rank's
share of the global batch is cut, in batch order, into micro-batches of at most C x cp tokens,
C being the per-rank BucketSize Skrull uses; a longer sequence gets a micro-batch to itself
(``micro_batch_size = n`` instead takes n sequences per micro-batch, DeepSpeed's
``train_micro_batch_size_per_gpu``). Each
micro-batch runs forward then backward (gradient accumulation, no pipeline). With ZeRO-2
(``parallel.zero_stage = 2``, the paper's setting) the lowering adds a gradient reduce-scatter per
micro-step, so every micro-step waits for the slowest rank; ZeRO-2's memory (sharded gradients and
optimizer state) is the memory model's. Reading [I] of PAPERS.md 3.3: the paper does not say how
its baseline forms micro-batches; this is the reading its step-by-step study implies.

Also the home of what DeepSpeed-based strategies share: the BucketSize (``bucket_tokens``) and
the in-order packing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsim.errors import ConfigError
from ltsim.plan import Buffer, Chunk, Keep, OpKind, Plan, Slice, Split, Work
from ltsim.strategies.base import PlanContext, deal_replicas, positive
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import kept_actions
from ltsim.strategies.schedule import Action, Layout, Schedule, keep_policy, one_layer_work

NAME = "deepspeed-cp"
_PROBE_TOKENS = 1 << 20  # activation bytes are linear in tokens; a large probe avoids rounding


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    bucket_size: int | str = "auto"  # C: tokens per rank per micro-batch, or "auto" (bucket_tokens)
    micro_batch_size: int = 0  # 0: pack up to C x cp tokens; n: n sequences (DeepSpeed's
    # train_micro_batch_size_per_gpu; gradient accumulation over the rest)
    IGNORED_UNLESS = {"bucket_size": ("micro_batch_size", 0)}  # n sequences: no bucket

    def validate(self) -> None:
        check_bucket(self.bucket_size)
        positive("micro_batch_size", self.micro_batch_size, allow_zero=True)


def check_bucket(value: int | str) -> None:
    if value != "auto" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError("strategy.bucket_size", 'a positive number of tokens or "auto"', value,
                          'e.g. strategy.bucket_size = 13312, or "auto" to derive it from memory')


def check_no_pipeline(ctx: PlanContext, name: str) -> None:
    if ctx.parallel.pp != 1:
        raise ConfigError("parallel.pp", f"1 for {name} (DeepSpeed ZeRO runs without pipeline "
                          "parallelism)", ctx.parallel.pp, "set parallel.pp = 1")


def bucket_tokens(ctx: PlanContext, layout: Layout, value: int | str, *,
                  sharded: bool = False) -> int:
    """BucketSize C in tokens per rank. "auto": Skrull's Eq. 12, Memory(S) = alpha S + beta, solved
    for the largest S that fits: (usable device memory - static memory) / bytes per token of one
    whole sequence on one rank (all layers, embedding and logits, the recompute policy's
    activations, and the loss's working set at its backward peak), from ltsim's memory model.
    Under full recompute the activations are what the plan holds at the backward: every layer's
    input and one layer's activations with the logits (pipeline.kept_actions). ``sharded``: the
    plan shards every sequence over the CP group (deepspeed-cp, deepspeed-ulysses), so the bytes
    per token are those of a sequence of C x cp tokens on one rank, with what its CP kind keeps
    beyond the plain share (Ulysses' gathered attention output: its buckets did not fit)."""
    if value != "auto":
        return int(value)
    device = layout.rank_devices()[0]
    par = ctx.parallel
    cp = par.cp if sharded else 1
    split = Split(tp=par.tp, cp=cp, cp_kind=par.cp_kind if sharded else "ring",
                  sp=par.sequence_parallel)
    work = Work(chunk=0, slices=(Slice(0, 0, _PROBE_TOKENS * cp),), layers=device.layers,
                split=split, embed=True, head=True)
    keep = keep_policy(par.recompute)
    if keep is Keep.INPUT:  # what kept_actions holds at the backward: the layer inputs, and one
        # layer's activations with the embedding input and the logits
        plain = Work(chunk=0, slices=work.slices, layers=work.layers, split=work.split)
        held = (ctx.cost.buffer_bytes(Buffer("ckpt", plain))
                + ctx.cost.buffer_bytes(Buffer("act", one_layer_work(work, embed=True, head=True),
                                               Keep.ALL)))
    else:
        held = ctx.cost.buffer_bytes(Buffer("act", work, keep))
    per_token = (held + ctx.cost.working_bytes(OpKind.B, work, keep=keep)) / _PROBE_TOKENS  # + loss's peak
    free = ctx.cost.memory_limit_bytes - ctx.cost.static_memory_bytes(device)
    if per_token <= 0:
        return 1 << 40  # the unit preset's toy model charges no memory per token here
    return max(1, int(free / per_token))


def pack_in_order(seq_ids: list[int], lengths: tuple[int, ...], limit: int) -> list[list[int]]:
    """Consecutive sequences up to ``limit`` tokens per micro-batch (a longer one alone)."""
    groups: list[list[int]] = []
    used = 0
    for seq in seq_ids:
        if not groups or used + lengths[seq] > limit:
            groups.append([])
            used = 0
        groups[-1].append(seq)
        used += lengths[seq]
    return groups


def schedule(batch: tuple[int, ...], ctx: PlanContext, options: Options, name: str,
             block: int = 1) -> Schedule:
    """Micro-batches of whole sequences, sharded over the CP group, on lockstep devices; the
    batch dealt over the DP ranks ``block`` sequences at a time (``deal_replicas``: DeepSpeed's
    DistributedSampler deals one)."""
    check_no_pipeline(ctx, name)
    layout = Layout.of(ctx.parallel, ctx.model.num_layers)
    size = options.micro_batch_size
    limit = 0 if size else bucket_tokens(ctx, layout, options.bucket_size,
                                         sharded=True) * ctx.parallel.cp
    keep = keep_policy(ctx.parallel.recompute)
    chunks: list[Chunk] = []
    replicas: list[list[Chunk]] = []
    for replica, seq_ids in enumerate(deal_replicas(batch, ctx.parallel.dp, block)):
        groups = ([seq_ids[i:i + size] for i in range(0, len(seq_ids), size)] if size else
                  pack_in_order(seq_ids, batch, limit))
        replicas.append([])
        for group in groups:
            chunk = Chunk(len(chunks), tuple(Slice(s, 0, batch[s]) for s in group), replica)
            chunks.append(chunk)
            replicas[-1].append(chunk)
    mirrors = layout.mirrors(replicas, batch)  # replicas that repeat another are not planned
    mirrored = {m.replica for m in mirrors}
    orders: dict[int, list[Action]] = {}
    for replica, mine in enumerate(replicas):
        if replica not in mirrored:
            actions: list[Action] = []
            for chunk in mine:
                forward, backward = kept_actions(chunk.index, keep)
                actions += forward + backward
            orders[layout.device(replica, 0)] = actions
    return Schedule(strategy=name, options=asdict(options), seq_lengths=tuple(batch),
                    chunks=tuple(chunks), devices=layout.devices(), orders=orders, mirrors=mirrors)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    return lower(schedule(batch, ctx, options, NAME), Layout.of(ctx.parallel, ctx.model.num_layers))

