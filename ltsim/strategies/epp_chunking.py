"""InfiniPipe's workload-balanced chunking (Wang et al. 2025, Alg. 1; PAPERS.md 4.2), and the fixed
chunking its ablation and the enhanced Seq1F1B use.

The input is one DP replica's sequences and a chunk time ``T(slices)``: the backward of a chunk
holding those slices, each the tokens [start, stop) of a sequence with its context, from ltsim's
cost model (Eq. 4's reading). A bucket is priced as the chunk it becomes, not as the sum of its
slices alone: a chunk pays its fixed per-op costs once, whatever it packs.

1. **Mesh** (line 1): the longest sequence is cut into ``N`` slices of equal backward time. Time
   is additive over a sequence (a slice's attention covers exactly the query rows the causal whole
   would, Eq. 1's (C+s)^2 - C^2), so boundary i is where the prefix time reaches i/N of the whole;
   found by bisection on the prefix time of the sequence alone. T_t is the longest slice time,
   T_m the first slice's tokens (the mesh's largest).
2. **Split** (line 2): a sequence longer than T_m (PAPERS.md F2: "short" means <= T_m) is cut into
   the mesh's slices in order; its remainder, at most the next mesh slice, is its tail slice
   (mesh {8K, 4K, 2K}: 13K -> 8K + 4K + 1K tail, 10K -> 8K + 2K tail).
3. **Pack** (lines 3-16): one bucket per tail slice (so no chunk ever holds two tails, footnote 2),
   short sequences in descending time into the bucket of lowest time per token that stays within
   T_t and T_m (best fit on the metric of line 9); a sequence that fits no bucket's tokens opens a
   new one; one that fits some bucket's tokens but no bucket's time raises T_t to the least
   time of the chunks it could join, the buckets whose tokens fit (PAPERS.md F1: the printed
   line 15 takes the minimum over all buckets and can loop forever when that bucket fails on
   tokens).

``time-only`` (Table 2's "Balance Time"): the same split, but short sequences packed best fit
decreasing on time alone: each into the bucket it leaves fullest within T_t, a new bucket when
none has room, tokens bounded only by the token capacity (not T_m): chunks balanced on time alone.
``fixed`` (the ablation without balanced chunking; the enhanced Seq1F1B): long sequences cut into
slices of T_m tokens, short ones packed first-fit-decreasing into chunks of at most T_m tokens.

A chunk is a :class:`Piece` list; a *unit* is what the scheduler orders: a long sequence's chunks
in order (the last one its tail, maybe with short sequences: a hybrid chunk) or one batched chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ltsim.plan import Slice

CHUNKINGS = ("balanced", "time-only", "fixed")
ChunkTime = Callable[[tuple[Slice, ...]], float]


@dataclass(frozen=True, slots=True)
class Mesh:
    """Slice lengths in tokens (first the longest), the longest slice time T_t and T_m tokens."""

    slices: tuple[int, ...]
    time_s: float
    tokens: int


@dataclass(slots=True)
class _Bucket:
    slices: list[Slice]
    time_s: float
    tokens: int


@dataclass(frozen=True, slots=True)
class Unit:
    """Chunks (each a tuple of slices) the scheduler keeps together: the chunks of one long
    sequence in order, its last the tail (``split``), or one batched chunk of short sequences."""

    chunks: tuple[tuple[Slice, ...], ...]
    split: bool = False

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for chunk in self.chunks for s in chunk)


def mesh(length: int, num_slices: int, time_of: ChunkTime) -> Mesh:
    """Alg. 1 line 1: ``length`` tokens in ``num_slices`` slices of equal backward time."""
    num_slices = max(1, min(num_slices, length))
    whole = time_of((Slice(0, 0, length),))

    def prefix(tokens: int) -> float:
        return time_of((Slice(0, 0, tokens),)) if tokens > 0 else 0.0

    bounds = [0]
    for i in range(1, num_slices):
        lo, target = bounds[-1] + 1, whole * i / num_slices
        below = (lo - 1, prefix(lo - 1))
        bounds.append(first_reaching(prefix, target, lo, length - (num_slices - i), below=below,
                                     above=(length, whole),
                                     guess=_quadratic_guess(below, (length, whole), target)))
    bounds.append(length)
    sizes = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    time_s = max(time_of((Slice(0, a, b),)) for a, b in zip(bounds, bounds[1:]))
    return Mesh(sizes, time_s, max(sizes))


def _quadratic_guess(a: tuple[int, float], b: tuple[int, float], target: float) -> int | None:
    """Where t(m) = p m + q m^2 through two points reaches ``target``: Eq. 1's shape of the prefix
    time (token-linear work plus causal attention), a first probe that lands within a few tokens."""
    (x1, y1), (x2, y2) = a, b
    if not 0 < x1 < x2:
        return None
    q = (y1 / x1 - y2 / x2) / (x1 - x2)
    p = y2 / x2 - q * x2
    if q <= 0 or p < 0:
        return None
    return round((-p + math.sqrt(p * p + 4 * q * target)) / (2 * q))


def first_reaching(f: Callable[[int], float], target: float, lo: int, hi: int,
                   below: tuple[int, float], above: tuple[int, float],
                   guess: int | None = None) -> int:
    """The least m in [lo, hi) with f(m) >= target, else hi, for f non-decreasing: what bisection
    finds, in fewer calls of f (each prices a new prefix of the sequence, and InfiniPipe's N
    search places about N^2 / 2 boundaries: validation/perf/README.md). Each probe is guessed by
    the secant through the last two points (a smooth f converges superlinearly), kept inside the interval
    left; when four probes in a row fail to halve it, a bisection step. ``below`` and ``above``:
    points (m, f(m)) outside [lo, hi) that guide the first guess, unless ``guess`` is given."""
    (x0, y0), (x1, y1) = below, above
    y0, y1 = y0 - target, y1 - target
    stalls = 0
    while lo < hi:
        width = hi - lo
        if guess is not None:
            mid, guess = min(hi - 1, max(lo, guess)), None
        elif stalls >= 4 or y1 == y0:
            mid, stalls = (lo + hi) // 2, 0
        else:
            mid = min(hi - 1, max(lo, round(x1 - y1 * (x1 - x0) / (y1 - y0))))
        value = f(mid) - target
        if value >= 0:
            hi = mid
        else:
            lo = mid + 1
        (x0, y0), (x1, y1) = (x1, y1), (mid, value)
        stalls = stalls + 1 if 2 * (hi - lo) > width else 0
    return lo


def split_on_mesh(seq: int, length: int, sizes: tuple[int, ...]) -> list[Slice]:
    """Alg. 1 line 2 for one sequence longer than the mesh's first slice."""
    out, start = [], 0
    for size in sizes:
        stop = min(length, start + size)
        out.append(Slice(seq, start, stop))
        start = stop
        if start >= length:
            break
    return out


def chunk_balanced(lengths: dict[int, int], num_slices: int, time_of: ChunkTime,
                   capacity: int, mode: str = "balanced") -> tuple[list[Unit], Mesh]:
    """Alg. 1 (``mode`` "balanced") or its time-only variant over sequences ``lengths``
    (id -> tokens). ``capacity``: the most tokens a chunk may hold (PAPERS.md F4)."""
    longest = max(lengths.values())
    grid = mesh(longest, num_slices, time_of)
    units: list[Unit] = []
    buckets: list[_Bucket] = []
    tails: dict[int, int] = {}  # bucket index -> index of the unit whose tail it holds
    shorts = []
    for seq, length in lengths.items():
        if length <= grid.tokens:
            shorts.append((time_of((Slice(seq, 0, length),)), length, seq))
            continue
        pieces = split_on_mesh(seq, length, grid.slices)
        units.append(Unit(tuple((p,) for p in pieces[:-1]), split=True))
        tails[len(buckets)] = len(units) - 1
        buckets.append(_Bucket([pieces[-1]], time_of((pieces[-1],)), pieces[-1].num_tokens))
    shorts.sort(key=lambda x: (-x[0], -x[1], x[2]))
    limit_t = grid.time_s
    limit_m = grid.tokens if mode == "balanced" else max(capacity, grid.tokens)
    for time_s, tokens, seq in shorts:
        piece = Slice(seq, 0, tokens)
        fits = [b for b in buckets if b.tokens + tokens <= limit_m]
        if not fits:  # line 7
            buckets.append(_Bucket([piece], time_s, tokens))
            continue
        if mode != "balanced":  # time only: best fit on time, a new bucket when none fits
            chosen = _best_fit_on_time(fits, piece, limit_t, time_of)
            if chosen is None:
                buckets.append(_Bucket([piece], time_s, tokens))
            continue
        fits.sort(key=lambda b: b.time_s / b.tokens)  # line 9: lowest time per token first
        chosen, after = None, {}
        for bucket in fits:  # the first in priority order whose chunk stays within T_t
            after[id(bucket)] = time_of(tuple(bucket.slices) + (piece,))
            if after[id(bucket)] <= limit_t:
                chosen = bucket
                break
        if chosen is None:  # line 15, F1: over the buckets whose tokens fit
            chosen = min(fits, key=lambda b: after[id(b)])
            limit_t = after[id(chosen)]
        chosen.slices.append(piece)
        chosen.time_s = after[id(chosen)]
        chosen.tokens += tokens
    for index, bucket in enumerate(buckets):
        owner = tails.get(index)
        if owner is None:
            units.append(Unit((tuple(bucket.slices),)))
        else:
            units[owner] = Unit(units[owner].chunks + (tuple(bucket.slices),), split=True)
    return units, grid


def _best_fit_on_time(fits: list[_Bucket], piece: Slice, limit_t: float,
                      time_of: ChunkTime) -> _Bucket | None:
    """Time-only packing: the bucket left fullest in time within T_t by ``piece`` (it joins it),
    or None. A bucket already at T_t cannot take more (a chunk's time grows with its slices)."""
    best, best_time = None, -1.0
    for bucket in fits:
        if bucket.time_s >= limit_t:
            continue
        after = time_of(tuple(bucket.slices) + (piece,))
        if best_time < after <= limit_t:
            best, best_time = bucket, after
    if best is not None:
        best.slices.append(piece)
        best.time_s = best_time
        best.tokens += piece.num_tokens
    return best


def chunk_fixed(lengths: dict[int, int], size: int) -> list[Unit]:
    """Long sequences in slices of ``size`` tokens; short ones packed first-fit-decreasing into
    chunks of at most ``size`` tokens."""
    units: list[Unit] = []
    bins: list[list[Slice]] = []
    room: list[int] = []
    for seq, length in sorted(lengths.items(), key=lambda kv: (-kv[1], kv[0])):
        if length > size:
            units.append(Unit(tuple((Slice(seq, a, min(a + size, length)),)
                                    for a in range(0, length, size)), split=True))
            continue
        for i, free in enumerate(room):
            if free >= length:
                bins[i].append(Slice(seq, 0, length))
                room[i] -= length
                break
        else:
            bins.append([Slice(seq, 0, length)])
            room.append(size - length)
    return units + [Unit((tuple(b),)) for b in bins]


def spread(values: list[float]) -> float:
    """Relative standard deviation (Table 2's RSD), as a fraction."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return var ** 0.5 / mean if mean else 0.0
