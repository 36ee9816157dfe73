"""Megatron-LM 1F1B baseline: micro-batches of whole sequences through a non-interleaved 1F1B pipeline.

Micro-batches hold ``micro_batch_size`` sequences in batch order, or, with ``pack_tokens``, as many
consecutive sequences as fit in that many tokens (a longer sequence gets a micro-batch to itself,
as Megatron's packed-sequence path would have to). Activations are held from forward to backward;
each DP replica runs its share of the global batch and the replicas reduce gradients at the end.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import chain, repeat

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Plan
from ltsim.work import make_chunk, make_slice, slice_columns, whole_columns, whole_sequences
from ltsim.strategies.base import PlanContext, deal_replicas, positive
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import one_f_one_b_stages
from ltsim.strategies.schedule import Layout, Schedule, check_chunk_count, keep_policy

NAME = "megatron-1f1b"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    micro_batch_size: int = 1  # sequences per micro-batch
    pack_tokens: int = 0  # > 0: pack consecutive sequences up to this many tokens instead

    def validate(self) -> None:
        positive("micro_batch_size", self.micro_batch_size)
        positive("pack_tokens", self.pack_tokens, allow_zero=True)
        if self.pack_tokens and self.micro_batch_size != 1:  # packing decides the sizes
            raise ConfigError("strategy.micro_batch_size", "1 (the default) with pack_tokens, "
                              "which fills each micro-batch by tokens, not by a count",
                              self.micro_batch_size, "drop micro_batch_size or pack_tokens")


def group_sequences(seq_ids: list[int], lengths: tuple[int, ...], options: Options) -> list[list[int]]:
    """Micro-batches as lists of sequence ids, in batch order."""
    if not options.pack_tokens:
        size = options.micro_batch_size
        return [seq_ids[i:i + size] for i in range(0, len(seq_ids), size)]
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for seq in seq_ids:
        if current and used + lengths[seq] > options.pack_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(seq)
        used += lengths[seq]
    if current:
        groups.append(current)
    return groups


def check_batch(batch: tuple[int, ...], ctx: PlanContext, options: Options,
                dealt: list[list[int]] | None = None) -> None:
    """Raise ConfigError for a batch of more micro-batches than a plan may hold, over its stages
    (schedule.check_chunk_count); ``dealt``: deal_replicas' answer, if made."""
    dealt = dealt if dealt is not None else _dealt(batch, ctx, options)
    count = (sum(len(group_sequences(ids, batch, options)) for ids in dealt)
             if options.pack_tokens else sum(-(-len(ids) // options.micro_batch_size)
                                             for ids in dealt))
    check_chunk_count(count, "strategy.micro_batch_size", options.micro_batch_size,
                      what="micro-batches", fix="use larger micro-batches (micro_batch_size or "
                      "pack_tokens) or fewer sequences a global batch", stages=ctx.parallel.pp)


def _dealt(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> list[list[int]]:
    """Megatron's sampler hands each rank micro_batch_size consecutive samples a micro-step."""
    return deal_replicas(batch, ctx.parallel.dp, options.micro_batch_size)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    layout = Layout.of(ctx.parallel, ctx.model.num_layers)
    keep = keep_policy(ctx.parallel.recompute)
    chunks: list[Chunk] = []
    replicas: list[list[Chunk]] = []
    dealt = _dealt(batch, ctx, options)
    check_batch(batch, ctx, options, dealt)
    for replica, seq_ids in enumerate(dealt):
        if options.micro_batch_size == 1 and not options.pack_tokens:  # a sequence a chunk
            mine = whole_sequences(seq_ids, batch, len(chunks), replica)
        else:
            mine = [make_chunk(index, tuple([make_slice(s, 0, batch[s]) for s in group]),
                               replica)
                    for index, group in enumerate(group_sequences(seq_ids, batch, options),
                                                  len(chunks))]
        chunks += mine
        replicas.append(mine)
    every = tuple(chunks)
    columns = None  # the chunks' slices as columns (Layout.mirrors and the checks read them)
    if len(replicas) > 1 and options.micro_batch_size == 1 and not options.pack_tokens:
        owners = chain.from_iterable(repeat(r, len(ids)) for r, ids in enumerate(dealt))
        columns = whole_columns(list(chain.from_iterable(dealt)), batch, 0, list(owners))
    elif len(replicas) > 1:
        columns = slice_columns(every)
    mirrors = layout.mirrors(replicas, batch, columns)  # replicas that repeat another: not planned
    mirrored = {m.replica for m in mirrors}
    orders = {}
    for replica, mine in enumerate(replicas):
        if replica not in mirrored:
            stages = one_f_one_b_stages([c.index for c in mine], ctx.parallel.pp, keep)
            for stage, order in enumerate(stages):
                orders[layout.device(replica, stage)] = order
    resolved = asdict(options)
    step = options.micro_batch_size * ctx.parallel.dp
    if not options.pack_tokens and len(batch) % step:  # Plan.options' notes: the run's warnings
        resolved["notes"] = (f"global batch: Megatron-LM refuses a global batch of {len(batch)} "
                             f"sequences, not a multiple of micro_batch_size x dp = {step} "
                             "(simulated with a short last round of micro-batches); set "
                             "workload.global_batch_size to a multiple of it",)
    return lower(Schedule(strategy=NAME, options=resolved, seq_lengths=tuple(batch),
                          chunks=every, devices=layout.devices(), orders=orders,
                          mirrors=mirrors, columns=columns), layout)
