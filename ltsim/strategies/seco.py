"""SeCO, sequential chunk-wise optimization (Li et al., ACL Findings 2025; seeds/seco-spaco.md,
PAPERS.md section 5), and the chunk schedule it shares with SpaCO (spaco.py).

Every sequence is cut into chunks of ``chunk_size`` tokens (the last one shorter). Algorithm 1:
forward all chunks of the sequence in order without autograd, keeping only each chunk's K/V (the
"KV cache" m'_i the later chunks attend to) and its stage input (on the first stage counted at
the hidden width too, where the real input is the token ids: about 2% of its peak); then,
from the last chunk down to the first, forward the chunk again with its graph (an R op) and run its
backward, which adds dK/dV to the cached K/V of every earlier chunk; a chunk's backward sends that
accumulated gradient through its own rebuilt graph (m_i.grad <- m'_i.grad). Descending order is
the only one in which each chunk's K/V gradient is complete when it back-propagates. Gradients
equal whole-sequence training (tests/integration/test_executor.py checks it in float64).

Memory (PAPERS.md 5.1 H4): the K/V of every chunk of the sequence, their gradients (allocated at
the first backward, for every chunk before it), and one chunk's activations. Time: each chunk is
forwarded twice, 2F + B: about 4F against plain training's 3F, the paper's "estimated 33%" (its
Fig. 6 measures ~30%). Sequences run one after another (gradient accumulation) on each DP replica;
with pipeline stages the chunks flow 1F1B-style (pipeline.interleave_1f1b), each backward admitted
once its chunk has been forwarded on the stage.

``parallel.recompute`` sets what the re-forward keeps ("none" or "selective"); "full" is refused:
SeCO's re-forward is its checkpoint, and layer checkpointing inside it is not the paper's scheme.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Keep, OpKind, Plan, op_key
from ltsim.strategies.base import PlanContext, deal_replicas, positive
from ltsim.strategies.chunking import split_sequence
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import interleave_1f1b
from ltsim.strategies.schedule import (Action, Layout, Mem, Schedule, check_chunk_count,
                                      context_grads, keep_policy, mems)

NAME = "seco"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    chunk_size: int = 1024  # tokens per chunk (the paper runs 64-512 on an RTX 3090)

    def validate(self) -> None:
        positive("chunk_size", self.chunk_size)


def check_recompute(ctx: PlanContext, name: str) -> Keep:
    """What the re-forward keeps; "full" recompute is refused (see the module docstring)."""
    if ctx.parallel.recompute == "full":
        raise ConfigError("parallel.recompute", f'"none" or "selective" for {name} (its re-forward '
                          "is the checkpoint)", "full", 'set parallel.recompute = "selective"')
    return keep_policy(ctx.parallel.recompute)


def maxlen_period(options: Options) -> int:
    """A sequence is cut into chunks of ``chunk_size`` tokens (``Strategy.maxlen_period``)."""
    return options.chunk_size


def check_batch(batch: tuple[int, ...], ctx: PlanContext, options: Any) -> None:
    """Raise ConfigError for a batch cut into more than MAX_CHUNKS chunks (SeCO's and SpaCO's:
    their options' chunk_size)."""
    check_chunk_count(sum(-(-n // options.chunk_size) for n in batch), "strategy.chunk_size",
                      options.chunk_size, stages=ctx.parallel.pp)


def sequence_chunks(batch: tuple[int, ...], ctx: PlanContext, chunk_size: int
                    ) -> tuple[list[Chunk], list[list[int]]]:
    """Every sequence of every replica cut into chunks; the chunk ids of each sequence, in order."""
    check_chunk_count(sum(-(-n // chunk_size) for n in batch), "strategy.chunk_size", chunk_size)
    chunks: list[Chunk] = []
    sequences: list[list[int]] = []
    for replica, seq_ids in enumerate(deal_replicas(batch, ctx.parallel.dp)):
        for seq in seq_ids:
            pieces = split_sequence(seq, batch[seq], chunk_size, replica)
            sequences.append(list(range(len(chunks), len(chunks) + len(pieces))))
            chunks += [Chunk(i, c.slices, replica) for i, c in zip(sequences[-1], pieces)]
    return chunks, sequences


def sequence_actions(ids: list[int], selected: frozenset[int] | set[int], keep: Keep, device: int,
                     stage: int) -> tuple[list[list[Action]], list[list[Action]]]:
    """Forward items (every chunk) and backward items (the ``selected`` chunks, descending) of one
    sequence's chunks ``ids`` on one stage.

    F: no autograd; keeps its K/V ("kv") if a later chunk attends to it, and its stage input
    ("input") if it will be re-forwarded. The first backward allocates the K/V gradients
    ("kv_grad") of every chunk before it, and keeps its own share of their concatenation (they
    are views of it) until the sequence's last backward. R rebuilds the activations ("act") and
    frees the input (they hold it as their first layer's); B frees them, the chunk's own "kv"
    (the leaves holding its dK/dV: the executor's state store keeps them to the producer's
    backward) and "kv_grad". The sequence's last backward
    (or, with nothing selected, its last forward) also frees the K/V and K/V gradients of the
    chunks that were not selected (SpaCO)."""
    n = len(ids)
    chosen = [i for i in range(n) if ids[i] in selected]
    top = chosen[-1] if chosen else -1
    is_chosen = set(chosen)
    dropped = [i for i in range(n) if ids[i] not in selected]
    leftovers = (tuple(Mem("kv", ids[j]) for j in dropped if j < n - 1)
                 + tuple(Mem("kv_grad", ids[j]) for j in dropped if j < top))
    fwd: list[list[Action]] = []
    for i, c in enumerate(ids):
        state = ("kv",) if i < n - 1 else ()
        allocs = mems(*(("input",) if i in is_chosen else ()), *state)
        frees = leftovers if i == n - 1 and not chosen else ()
        fwd.append([Action(OpKind.F, c, Keep.KV if state else Keep.NOTHING, allocs=allocs,
                           frees=frees)])
    bwd: list[list[Action]] = []
    for rank, i in enumerate(reversed(chosen)):
        c = ids[i]
        # the top chunk's own share of its concatenated dK/dV stays until the last backward
        grads = context_grads(ids, i) if i == top else ()
        own = mems("kv_grad") if i < top else ()
        last = rank == len(chosen) - 1
        pinned = (Mem("kv_grad", ids[top]),) if last and top > 0 else ()
        deps = (op_key(device, stage, OpKind.B, ids[chosen[len(chosen) - rank]]),) if rank else ()
        # the rebuilt activations hold the stage input as their first layer's (one tensor)
        bwd.append([Action(OpKind.R, c, keep, allocs=mems("act"), frees=mems("input")),
                    Action(OpKind.B, c, keep, allocs=grads, deps=deps,
                           frees=mems("act", *(("kv",) if i < n - 1 else ())) + own
                           + (leftovers + pinned if last else ()))])
    return fwd, bwd


def chunked_schedule(batch: tuple[int, ...], ctx: PlanContext, chunk_size: int, name: str,
                     options: dict, select=None) -> Schedule:
    """The SeCO / SpaCO schedule: ``select(chunk ids of a sequence, sequence id)`` -> the chunks
    that back-propagate (None: every chunk, SeCO)."""
    keep = check_recompute(ctx, name)
    layout = Layout.of(ctx.parallel, ctx.model.num_layers)
    chunks, sequences = sequence_chunks(batch, ctx, chunk_size)
    selected = (frozenset(c.index for c in chunks) if select is None else
                frozenset(c for ids in sequences for c in select(ids, chunks[ids[0]].slices[0].seq)))
    orders: dict[int, list[Action]] = {}
    for stage in range(ctx.parallel.pp):
        for replica in range(ctx.parallel.dp):
            device = layout.device(replica, stage)
            fwd: list[list[Action]] = []
            bwd: list[list[Action]] = []
            for ids in sequences:
                if chunks[ids[0]].replica == replica:
                    f_items, b_items = sequence_actions(ids, selected, keep, device, stage)
                    fwd += f_items
                    bwd += b_items
            orders[device] = interleave_1f1b(fwd, bwd, stage, ctx.parallel.pp)
    return Schedule(strategy=name, options=options, seq_lengths=tuple(batch), chunks=tuple(chunks),
                    devices=layout.devices(), orders=orders,
                    grad_chunks=None if select is None else selected)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    schedule = chunked_schedule(batch, ctx, options.chunk_size, NAME, asdict(options))
    return lower(schedule, Layout.of(ctx.parallel, ctx.model.num_layers))
