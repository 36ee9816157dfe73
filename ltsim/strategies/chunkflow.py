"""ChunkFlow (Yuan et al., ICML 2025; seeds/chunkflow.md): chunk construction, state-aware chunk
scheduling (Algorithm 2) and state-aware 1F1B.

Chunk construction (Algorithm 1): a sequence longer than ``chunk_size`` is cut into dependent chunks
of ``chunk_size`` tokens (the last one shorter); the other sequences are bin-packed into the fewest
chunks of at most ``chunk_size`` tokens (``packing`` policy, see packing.py).

State-aware chunk scheduling, for a group of N dependent chunks 0..N-1 of one sequence and K:
forward all N in order. The *last* K chunks keep their activations; the first N-K keep only their
K/V (and their stage input, for the second forward) and discard the rest. Backward then runs from
chunk N-1 down to 0; each discarded chunk is forwarded again (an R op) right before its backward.
Why this order and not the printed listing's: (1) the text says "the forward passes of the first
(N - K) chunks are executed twice", so the kept chunks are the last K (the listing's ``Idx >= K``
test keeps N-K chunks, contradicting it whenever N != 2K); (2) chunk j's backward produces dK/dV for
every chunk i < j, so chunk i may run backward only after all later chunks did; the listing
re-runs discarded chunks in ascending order, which for N-K >= 2 would back-propagate chunk 0 before
chunk 1's dK/dV reached it. Descending order is the only one that keeps gradients exact (the
executor's state store checks it). Peak activation memory per group is K chunks, plus the K/V
state (and its gradients) of the sequence.

Memory effects per stage: a kept chunk's F keeps its activations (``act``, its K/V among them); a
discarded one runs its F without autograd (Keep.KV), keeping only ``input`` (its stage input) and
``kv`` (its K/V, unless it is the last chunk) until its B; its R rebuilds ``act``. The K/V stay
to the chunk's own B: they are the leaves that hold its dK/dV (ltsim/executor/state.py). The
group's first backward (chunk N-1) allocates ``kv_grad`` for chunks 0..N-2; each chunk's B frees
its own buffers, but ``input``, which its R frees: the rebuilt activations hold the stage input
as their first layer's (one tensor in the executor). The executor reads these keep policies from
the plan.

State-aware 1F1B: each stage walks a forward list and a backward list (backwards of a group in
descending order). Like Megatron's 1F1B it keeps at most p - stage chunks in flight (warm-up of
p - stage - 1 forwards, then one forward one backward), except that a backward whose chunk has not
been forwarded on this stage yet is not admissible: then it forwards further first. While a
dependent group drains (in flight above the cap) it runs backwards only, so other chunks'
activations do not pile up behind it. With no dependent chunks this is exactly Megatron's 1F1B
(both use pipeline.interleave_1f1b).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Keep, OpKind, Plan
from ltsim.strategies.base import PlanContext, deal_replicas, positive
from ltsim.strategies.chunking import pack_sequences, renumber, split_sequence
from ltsim.strategies.lowering import lower
from ltsim.strategies.packing import POLICIES
from ltsim.strategies.pipeline import interleave_1f1b, kept_actions
from ltsim.strategies.schedule import (Action, Layout, Mem, Schedule, check_chunk_count,
                                      context_grads, joined, keep_policy, mems, own_key)

NAME = "chunkflow"
ORDERS = ("dependent-first", "dependent-last", "longest-first")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    chunk_size: int = 8192  # ChunkSize: most tokens per chunk
    k: int = 1  # K: dependent chunks per group that keep their activations
    packing: str = "min-bins"  # bin-packing policy for short sequences
    order: str = "dependent-last"  # where dependent groups go in the pipeline order (see docstring)

    def validate(self) -> None:
        positive("chunk_size", self.chunk_size)
        positive("k", self.k)
        if self.packing not in POLICIES:
            raise ConfigError("strategy.packing", f"one of {', '.join(POLICIES)}", self.packing)
        if self.order not in ORDERS:
            raise ConfigError("strategy.order", f"one of {', '.join(ORDERS)}", self.order)


def construct_chunks(seq_ids: list[int], lengths: tuple[int, ...], options: Options,
                     first_index: int = 0, replica: int = 0, spent: list | None = None
                     ) -> tuple[list[Chunk], list[list[int]]]:
    """Algorithm 1. Returns the chunks and the dependent groups (chunk indices, in sequence order).
    The same batch and ChunkSize give the same chunks whatever K is, so a sweep over K (or the
    batches a run repeats) construct them once (``_chunks``, a small memo of immutable chunks).
    ``spent``: True appended when the packer's search ran out of budget (packing.pack)."""
    chunks, groups, unproven = _chunks(tuple(seq_ids), tuple(lengths), options.chunk_size,
                                       options.packing, options.order, first_index, replica)
    if unproven and spent is not None:
        spent.append(True)
    return list(chunks), [list(g) for g in groups]


@lru_cache(maxsize=64)
def _chunks(seq_ids: tuple[int, ...], lengths: tuple[int, ...], size: int, packing: str,
            order: str, first_index: int, replica: int
            ) -> tuple[tuple[Chunk, ...], tuple[tuple[int, ...], ...], bool]:
    # (the chunk count is bounded by ``plan``, for the whole batch, before any replica's chunks)
    groups = [split_sequence(s, lengths[s], size, replica) for s in seq_ids if lengths[s] > size]
    short_ids = [s for s in seq_ids if lengths[s] <= size]
    spent: list = []
    standalone = pack_sequences(short_ids, lengths, size, packing, replica, spent)
    if order == "dependent-last":
        units = [[c] for c in standalone] + groups
    elif order == "longest-first":
        units = sorted(groups + [[c] for c in standalone], key=lambda u: -sum(c.num_tokens for c in u))
    else:
        units = groups + [[c] for c in standalone]
    chunks, dependent = renumber(units, first_index)
    return tuple(chunks), tuple(tuple(g) for g in dependent), bool(spent)


def group_actions(ids: list[int], k: int, keep: Keep
                  ) -> tuple[list[list[Action]], list[list[Action]]]:
    """Forward items and backward items (descending) of one group under Algorithm 2 (see above).

    ``keep``: what a kept forward keeps (the recompute policy); with Keep.INPUT (full recompute)
    every chunk is a Megatron full-recompute chunk and the group only orders the backwards."""
    n = len(ids)
    full = keep is Keep.INPUT
    kept = set() if full else set(ids[max(n - k, 0):])
    fwd: list[list[Action]] = []
    bwd: list[list[Action]] = []
    for i in range(n - 1, -1, -1):
        c = ids[i]
        # the last chunk's backward gives every earlier chunk its dK/dV; its own share of their
        # concatenation stays until the first chunk's backward releases the last view of it
        grads = context_grads(ids, i) if i == n - 1 else ()
        frees = ((mems("kv_grad") if i < n - 1 else ())
                 + ((Mem("kv_grad", ids[n - 1]),) if i == 0 and n > 1 else ()))
        deps = (own_key(OpKind.B, ids[i + 1]),) if i < n - 1 else ()
        state = ("kv",) if i < n - 1 else ()
        # the K/V later chunks attend to stay until the chunk's own backward: they are the leaves
        # that hold its dK/dV (ltsim/executor/state.py)
        if full:  # layer inputs kept
            (f_act,), (redo, back) = kept_actions(c, keep)
            f_item = [f_act._replace(allocs=joined(f_act.allocs, mems(*state)))]
            bwd.append([redo, back._replace(allocs=grads,
                                            frees=joined(back.frees, frees, mems(*state)),
                                            deps=deps)])
        elif c in kept:  # its K/V live inside its activations until its backward
            f_item, (back,) = kept_actions(c, keep)
            if n > 1:  # a standalone chunk's backward is the plain one
                back = back._replace(allocs=grads, frees=joined(back.frees, frees), deps=deps)
            bwd.append([back])
        else:
            # run without autograd: only the stage input and the K/V stay (one layer's working
            # set is transient and not modelled)
            f_item = [Action(OpKind.F, c, Keep.KV, allocs=mems("input", *state))]
            # the rebuilt activations hold the stage input as their first layer's (one tensor)
            redo = Action(OpKind.R, c, keep, allocs=mems("act"), frees=mems("input"))
            bwd.append([redo, Action(OpKind.B, c, keep, allocs=grads,
                                     frees=joined(mems("act", *state), frees), deps=deps)])
        fwd.insert(0, f_item)
    return fwd, bwd


def maxlen_period(options: Options) -> int:
    """A sequence is cut into chunks of ``chunk_size`` tokens (``Strategy.maxlen_period``)."""
    return options.chunk_size


def check_batch(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> None:
    """Raise ConfigError for a batch cut into more than MAX_CHUNKS chunks (at least a chunk per
    chunk_size tokens of each sequence)."""
    size = options.chunk_size
    check_chunk_count(sum(-(-n // size) for n in batch), "strategy.chunk_size", size)
    # over the stages, the chunks it certainly makes: short sequences share chunks
    check_chunk_count(-(-sum(batch) // size), "strategy.chunk_size", size, stages=ctx.parallel.pp,
                      fix="use larger chunks (strategy.chunk_size)")


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    layout = Layout.of(ctx.parallel, ctx.model.num_layers)
    keep = keep_policy(ctx.parallel.recompute)
    check_batch(batch, ctx, options)  # the whole batch, before any replica is built
    chunks: list[Chunk] = []
    replicas = []
    spent: list = []
    for replica, seq_ids in enumerate(deal_replicas(batch, ctx.parallel.dp)):
        mine, groups = construct_chunks(seq_ids, batch, options, len(chunks), replica, spent)
        chunks += mine
        replicas.append((mine, groups))
    mirrors = layout.mirrors([mine for mine, _ in replicas], batch)  # not planned: they repeat one
    mirrored = {m.replica for m in mirrors}
    orders: dict[int, list[Action]] = {}
    for replica, (mine, groups) in enumerate(replicas):
        if replica in mirrored:
            continue
        grouped = {c for g in groups for c in g}
        units = groups + [[c.index] for c in mine if c.index not in grouped]
        units.sort(key=lambda u: u[0])
        # a unit's actions name no device: built once for every stage
        fwd: list[list[Action]] = []
        bwd: list[list[Action]] = []
        for unit in units:
            f_items, b_items = group_actions(unit, options.k, keep)
            fwd += f_items
            bwd += b_items
        for stage in range(ctx.parallel.pp):
            orders[layout.device(replica, stage)] = interleave_1f1b(fwd, bwd, stage,
                                                                    ctx.parallel.pp)
    resolved = asdict(options)
    if spent:  # Plan.options' "notes" are the run's warnings (runner.run)
        resolved["notes"] = (f"chunkflow: packing {len(spent)} replica(s)' short sequences ran "
                             "out of search budget; first-fit decreasing's chunks were kept, not "
                             "proven the fewest (at most 11/9 of the fewest + 6/9)",)
    return lower(Schedule(strategy=NAME, options=resolved, seq_lengths=tuple(batch),
                          chunks=tuple(chunks), devices=layout.devices(), orders=orders,
                          mirrors=mirrors), layout)
