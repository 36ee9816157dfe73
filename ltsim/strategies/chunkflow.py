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

Memory effects per stage: a kept chunk allocates ``act`` at F (its K/V are part of it); a
discarded one runs its F without autograd, keeping only ``ckpt`` (its stage input) and ``kv`` (its
K/V, unless it is the last chunk) until its R, which rebuilds ``act`` and releases ``kv``; the group's first backward (chunk N-1) allocates ``kv_grad`` for chunks
0..N-2; each chunk's B frees its own buffers.

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

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, OpKind, Plan, Slice
from ltsim.strategies.base import PlanContext, positive, split_replicas
from ltsim.strategies.packing import POLICIES, pack
from ltsim.strategies.pipeline import Action, build_plan, interleave_1f1b

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
                     first_index: int = 0, replica: int = 0) -> tuple[list[Chunk], list[list[int]]]:
    """Algorithm 1. Returns the chunks and the dependent groups (chunk indices, in sequence order)."""
    size = options.chunk_size
    long_ids = [s for s in seq_ids if lengths[s] > size]
    short_ids = [s for s in seq_ids if lengths[s] <= size]
    groups: list[list[Chunk]] = []
    for seq in long_ids:
        cuts = range(0, lengths[seq], size)
        groups.append([Chunk(0, (Slice(seq, a, min(a + size, lengths[seq])),), replica) for a in cuts])
    bins = pack([lengths[s] for s in short_ids], size, options.packing)
    standalone = [Chunk(0, tuple(Slice(short_ids[i], 0, lengths[short_ids[i]]) for i in b), replica)
                  for b in bins]
    if options.order == "dependent-last":
        units = [[c] for c in standalone] + groups
    elif options.order == "longest-first":
        units = sorted(groups + [[c] for c in standalone], key=lambda u: -sum(c.num_tokens for c in u))
    else:
        units = groups + [[c] for c in standalone]
    chunks: list[Chunk] = []
    dependent: list[list[int]] = []
    for unit in units:
        ids = []
        for chunk in unit:
            ids.append(first_index + len(chunks))
            chunks.append(Chunk(ids[-1], chunk.slices, replica))
        if len(unit) > 1:
            dependent.append(ids)
    return chunks, dependent


def group_actions(ids: list[int], k: int, full_recompute: bool) -> tuple[list[list[Action]], list[list[Action]]]:
    """Forward items and backward items (descending) of one group under Algorithm 2 (see above)."""
    n = len(ids)
    kept = set(ids[max(n - k, 0):]) if not full_recompute else set()
    fwd: list[list[Action]] = []
    for i, c in enumerate(ids):
        if c in kept:  # its K/V live inside its activations until its backward
            fwd.append([Action(OpKind.F, c, allocs=("act",))])
        else:
            state = ("kv",) if i < n - 1 else ()
            # run without autograd: only the stage input and the K/V stay (one layer's working
            # set is transient and not modelled)
            fwd.append([Action(OpKind.F, c, allocs=("ckpt",) + state)])
    bwd: list[list[Action]] = []
    for i in range(n - 1, -1, -1):
        c = ids[i]
        grads = tuple(("kv_grad", ids[j]) for j in range(i)) if i == n - 1 else ()
        frees = ("act",) + (("kv_grad",) if i < n - 1 else ())
        deps = ((OpKind.B, ids[i + 1]),) if i < n - 1 else ()
        item = []
        if c not in kept:  # second forward; its K/V are again part of the activations
            item.append(Action(OpKind.R, c, allocs=("act",), frees=("kv",) if i < n - 1 else ()))
            frees += ("ckpt",)
        item.append(Action(OpKind.B, c, allocs=grads, frees=frees, extra_deps=deps))
        bwd.append(item)
    return fwd, bwd


def _with_stage_deps(actions: list[Action], stage: int) -> list[Action]:
    out = []
    for a in actions:
        deps = tuple((stage, kind, chunk) for kind, chunk in a.extra_deps)
        out.append(Action(a.kind, a.chunk, a.allocs, a.frees, deps))
    return out


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    chunks: list[Chunk] = []
    orders: dict[tuple[int, int], list[Action]] = {}
    full = ctx.parallel.recompute == "full"
    for replica, seq_ids in enumerate(split_replicas(batch, ctx.parallel.dp)):
        mine, groups = construct_chunks(seq_ids, batch, options, len(chunks), replica)
        chunks += mine
        grouped = {c for g in groups for c in g}
        units = groups + [[c.index] for c in mine if c.index not in grouped]
        units.sort(key=lambda u: u[0])
        fwd: list[list[Action]] = []
        bwd: list[list[Action]] = []
        for unit in units:
            f_items, b_items = group_actions(unit, options.k, full)
            fwd += f_items
            bwd += b_items
        for stage in range(ctx.parallel.pp):
            steps = interleave_1f1b(fwd, bwd, stage, ctx.parallel.pp)
            orders[(replica, stage)] = _with_stage_deps(steps, stage)
    return build_plan(strategy=NAME, options=asdict(options), ctx=ctx, seq_lengths=tuple(batch),
                      chunks=tuple(chunks), orders=orders)
