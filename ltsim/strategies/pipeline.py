"""1F1B ordering, the pipeline toolkit strategies share: per-stage action orders.

A strategy builds, per chunk (or dependent group), its forward items and backward items (lists of
:class:`~ltsim.strategies.schedule.Action`), and ``interleave_1f1b`` orders them for one stage.
``kept_actions`` gives the buffer effects of a forward kept until its backward under a recompute
policy. The lowering passes (lowering.py) then add P2P, CP, ZeRO and DP plumbing.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain
from operator import attrgetter

from ltsim.plan import Keep, OpKind
from ltsim.strategies.schedule import Action, Mem, mems


@lru_cache(maxsize=1 << 16)
def kept_actions(chunk: int, keep: Keep) -> tuple[tuple[Action, ...], tuple[Action, ...]]:
    """The forward and the backward (preceded by a recompute under full recompute) of a chunk whose
    forward keeps ``keep``: "act" from F to B, or, with Keep.INPUT, each layer's input ("ckpt")
    and a one-layer working set while R rebuilds the layers (Megatron's full recompute; the
    recompute does not rebuild the logits). Immutable, and made once for every stage (and batch)
    that asks."""
    if keep is Keep.INPUT:
        work = Mem("act", keep=Keep.ALL, one_layer=True)
        return ((Action(OpKind.F, chunk, keep, allocs=mems("ckpt")),),
                (Action(OpKind.R, chunk, keep, allocs=(work,), head=False),
                 Action(OpKind.B, chunk, keep, frees=(work, Mem("ckpt")))))
    return ((Action(OpKind.F, chunk, keep, allocs=mems("act")),),
            (Action(OpKind.B, chunk, keep, frees=mems("act")),))


def one_f_one_b(chunks: list[int], stage: int, num_stages: int, keep: Keep) -> list[Action]:
    """Megatron-LM's non-interleaved 1F1B order for one stage.

    warm-up = min(p - stage - 1, m) forwards, then one forward one backward, then cool-down
    backwards (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_without_interleaving).
    """
    fwd, bwd = _items(chunks, keep)
    return interleave_1f1b(fwd, bwd, stage, num_stages)


def one_f_one_b_stages(chunks: list[int], num_stages: int, keep: Keep) -> list[list[Action]]:
    """``one_f_one_b`` of every stage, the chunks' actions made once."""
    fwd, bwd = _items(chunks, keep)
    return [interleave_1f1b(fwd, bwd, stage, num_stages) for stage in range(num_stages)]


def _items(chunks: list[int], keep: Keep) -> tuple[list, list]:
    """The forward items and the backward items of ``chunks`` (``kept_actions``)."""
    pairs = [kept_actions(c, keep) for c in chunks]
    return [f for f, _ in pairs], [b for _, b in pairs]


def interleave_1f1b(fwd: list[list[Action]], bwd: list[list[Action]], stage: int,
                    num_stages: int) -> list[Action]:
    """Interleave forward items and backward items 1F1B-style; item i of each list is one chunk.

    A stage keeps at most ``num_stages - stage`` chunks in flight (forwarded, not yet backwarded;
    a forward with no backward item, a chunk that gets no gradient, does not count):
    warm-up of p - stage - 1 forwards, then one forward one backward, then the cool-down. It
    forwards beyond that cap only while the next backward is not admissible (its chunk not yet
    forwarded here), which ChunkFlow's dependent groups need. With backwards in forward order this
    is exactly Megatron's 1F1B.
    """
    cap = num_stages - stage
    steady = _steady(fwd, bwd, cap)
    if steady is not None:
        return steady
    done: set[int] = set()
    order: list[Action] = []
    with_grad = {item[-1].chunk for item in bwd}  # a forward without a backward is not in flight
    f = b = in_flight = 0
    while b < len(bwd):
        while f < len(fwd) and (in_flight < cap or bwd[b][-1].chunk not in done):
            order.extend(fwd[f])
            done.add(fwd[f][0].chunk)
            in_flight += fwd[f][0].chunk in with_grad
            f += 1
        order.extend(bwd[b])
        in_flight -= 1
        b += 1
    order.extend(a for item in fwd[f:] for a in item)  # forwards after the last backward
    return order


def _steady(fwd: list[list[Action]], bwd: list[list[Action]], cap: int) -> list[Action] | None:
    """``interleave_1f1b``'s order, written at once, when every item is one action and the
    backwards come in the forwards' order, every chunk with one (Megatron's micro-batches):
    the first min(cap, m) forwards, then one backward one forward, then the remaining
    backwards. None otherwise."""
    m = len(fwd)
    if len(bwd) != m or not {*map(len, fwd), *map(len, bwd)} <= _ONE:
        return None
    forwards = [item[0] for item in fwd]
    backwards = [item[0] for item in bwd]
    if list(map(_CHUNK, forwards)) != list(map(_CHUNK, backwards)):
        return None
    k = min(cap, m)
    return forwards[:k] + list(chain.from_iterable(zip(backwards, forwards[k:]))) + backwards[m - k:]


_ONE = {1}  # the lengths of items of one action each
_CHUNK = attrgetter("chunk")
