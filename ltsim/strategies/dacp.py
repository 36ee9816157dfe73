"""Skrull's schedulers (Xu et al., NeurIPS 2025; seeds/skrull.md, PAPERS.md section 3): DACP
(Algorithms 1 and 3), its round-robin baseline (Appendix B.2), GDS (Algorithm 2), the FLOPs model
of Eq. 13 and the per-micro-batch objective of Eq. 1-2.

What the heuristics *decide* with and what the simulation *prices* with are kept apart: DACP and
GDS balance a per-sequence ``load`` (Eq. 13 FLOPs by default, or ltsim's own compute time of the
sequence, skrull's ``cost_model`` option) under the per-rank token budget C (BucketSize, Eq. 7).
``objective`` evaluates Eq. 1-2 for a placement from per-sequence times (``MicroBatchCosts``),
which skrull.py fills from ltsim's cost model; the MILP reference (skrull_milp.py) minimises the
same objective. The plan itself is then priced by the engine like any other.

Readings of the printed algorithms (PAPERS.md 3.2), all deterministic:
- C1/C2 RollBack: turning rank t's local sequence v into a distributed one frees S_v - S_v/N on t
  and charges S_v/N on every other rank, as UpdateAll does (the printed version subtracts on t and
  charges nobody; ``rollback_rule="printed"`` keeps it, to show it fails on a feasible instance).
- C3: the victim is the first local sequence of that rank in sorted (ascending) order.
- C4: after a rollback the same sequence is tried again.
- C5: FLOPs(S, N) = FLOPs(S) / N.
- C6: argmin / argmax break ties by the lowest rank.
- D1-D4 (GDS): init = ceil(Sum / (C N)) - 1; micro-batch j = Subset[j::init] (strided); on an
  overloaded micro-batch or a DACP failure try init + 1; the coarse DP balance is longest-first
  greedy partitioning by load (LPT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ltsim.model import ModelSpec

DISTRIBUTED = -1
PLACEMENTS = ("dacp", "round-robin")


def flops_eq13(model: ModelSpec, tokens: float) -> float:
    """Skrull Eq. 13 (Appendix C.2), b = 1: 20 h^2 S + 4 h h_kv S + 4 h S^2, one layer's forward
    as the paper writes it (a 4h MLP, no causal halving)."""
    h, kv = model.hidden_size, model.kv_hidden_size
    return 20 * h * h * tokens + 4 * h * kv * tokens + 4 * h * tokens * tokens


@dataclass(frozen=True, slots=True)
class Placement:
    """DACP's answer for one micro-batch: ``ret[k]`` is a CP rank (sequence k whole there) or
    DISTRIBUTED (sharded over all N ranks); ``remaining`` the bucket left per rank (Eq. 7 holds
    when none is negative); ``rollbacks`` how many local sequences were turned distributed."""

    ret: tuple[int, ...]
    remaining: tuple[float, ...]
    rollbacks: int

    @property
    def fits(self) -> bool:
        return min(self.remaining) >= -1e-9


def dacp(lengths: Sequence[int], num_ranks: int, capacity: float, load: Callable[[int], float], *,
         placement: str = "dacp", rollback: bool = True,
         rollback_rule: str = "corrected") -> Placement | None:
    """Algorithm 1 (or B.2's round-robin with ``placement="round-robin"``) on one micro-batch.

    ``load(k)``: sequence k's load when whole on one rank; distributed, each rank gets load / N.
    Returns None when a rollback is needed and no local sequence is left on that rank (the
    paper's "DACP scheduling error"). With ``rollback=False`` a sequence that fits nowhere is
    distributed anyway and the placement overflows its bucket (``fits`` False: the paper's OOM).
    """
    n, order = num_ranks, sorted(range(len(lengths)), key=lambda k: (lengths[k], k))
    # the buckets in units of 1/N token, so that a distributed sequence's S/N shares add up
    # exactly (in tokens, 5/3 + 1/3 + ... left 3.9999999999999996 of a bucket a share of 4 needed:
    # "no placement" on instances that have one, a review)
    remaining, loads = [capacity * n] * n, [0.0] * n
    ret: dict[int, int] = {}
    rollbacks, i = 0, 0
    while i < len(order):
        k = order[i]
        size = lengths[k]
        rank = _argmin(loads) if placement == "dacp" else _argmax(remaining)
        if remaining[rank] < size * n:
            rank = _argmax(remaining)
        if remaining[rank] >= size * n:
            ret[k] = rank
            remaining[rank] -= size * n
            loads[rank] += load(k)
        elif remaining[_argmin(remaining)] >= size or not rollback:
            ret[k] = DISTRIBUTED
            for r in range(n):
                remaining[r] -= size
                loads[r] += load(k) / n
        else:
            tight = _argmin(remaining)
            victim = next((v for v in order[:i] if ret[v] == tight), None)
            if victim is None:
                return None
            _roll_back(victim, tight, lengths, load, ret, remaining, loads, n, rollback_rule)
            rollbacks += 1
            continue  # C4: the same sequence again
        i += 1
    return Placement(tuple(ret[k] for k in range(len(lengths))),
                     tuple(left / n for left in remaining), rollbacks)


def _roll_back(victim: int, rank: int, lengths, load, ret, remaining, loads, n: int,
               rule: str) -> None:
    size = lengths[victim]  # (``remaining`` in units of 1/N token, as dacp keeps it)
    ret[victim] = DISTRIBUTED
    if rule == "printed":  # Algorithm 3 as printed: RB[rank] <- RB[rank] - S + S/N, others untouched
        remaining[rank] -= size * n - size
        loads[rank] -= load(victim) - load(victim) / n
        return
    remaining[rank] += size * n - size  # C1: frees S - S/N here
    loads[rank] -= load(victim) - load(victim) / n
    for r in range(n):  # C2: and charges S/N everywhere else, as UpdateAll does
        if r != rank:
            remaining[r] -= size
            loads[r] += load(victim) / n


def _argmin(values: list[float]) -> int:
    return min(range(len(values)), key=lambda r: (values[r], r))


def _argmax(values: list[float]) -> int:
    return min(range(len(values)), key=lambda r: (-values[r], r))


# -- Eq. 1-2 ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MicroBatchCosts:
    """Per-sequence terms of Eq. 2 for one micro-batch on a CP group of N ranks (seconds).

    local_s[k]: compute of sequence k whole on one rank; dist_s[k]: one rank's compute of its 1/N
    share when sharded; comm_s[k]: its part of T_comm(V) (V is linear in the sequence lengths,
    Eq. 5 and 16); comm_fixed_s: T_fixed of Eq. 16, paid once when anything is distributed."""

    local_s: tuple[float, ...]
    dist_s: tuple[float, ...]
    comm_s: tuple[float, ...]
    comm_fixed_s: float = 0.0


def objective(ret: Sequence[int], costs: MicroBatchCosts, num_ranks: int) -> float:
    """Eq. 1-2: max over ranks j of max(T_comm(V), T_comp(Local_j)) + T_comp(Dist)."""
    dist = [k for k, r in enumerate(ret) if r == DISTRIBUTED]
    comm = (costs.comm_fixed_s + sum(costs.comm_s[k] for k in dist)) if dist else 0.0
    shared = sum(costs.dist_s[k] for k in dist)
    local = [0.0] * num_ranks
    for k, r in enumerate(ret):
        if r != DISTRIBUTED:
            local[r] += costs.local_s[k]
    return max(max(comm, lj) for lj in local) + shared


# -- GDS ------------------------------------------------------------------------------------------
def balance_ranks(loads: Sequence[float], num_ranks: int) -> list[list[int]]:
    """Line 1's coarse DP balance (D4): longest-processing-time first onto the least-loaded rank."""
    bins: list[list[int]] = [[] for _ in range(num_ranks)]
    totals = [0.0] * num_ranks
    for k in sorted(range(len(loads)), key=lambda k: (-loads[k], k)):
        r = _argmin(totals)
        bins[r].append(k)
        totals[r] += loads[k]
    return bins


def strided(subset: Sequence[int], count: int) -> list[list[int]]:
    """D2: micro-batch j = subset[j::count] (pairs long and short sequences)."""
    return [list(subset[j::count]) for j in range(count) if subset[j::count]]


def gds_rank(seq_ids: Sequence[int], lengths: Sequence[int], num_ranks: int, capacity: float,
             fits: Callable[[list[int]], bool], *, at_least: int = 1) -> list[list[int]] | None:
    """Algorithm 2 for one DP rank: the fewest strided micro-batches (from D1's start, and at least
    ``at_least``) that each hold at most C x N tokens and that ``fits`` (DACP succeeds on).
    None when even one sequence per micro-batch fails."""
    subset = sorted(seq_ids, key=lambda k: (lengths[k], k))
    if not subset:
        return []
    limit = capacity * num_ranks
    start = max(at_least, math.ceil(sum(lengths[k] for k in subset) / limit))
    for count in range(start, len(subset) + 1):
        mbs = strided(subset, count)
        tokens = [sum(lengths[k] for k in mb) for mb in mbs]
        # the same test as all(... and fits(mb) for mb in mbs); the fullest micro-batches first,
        # as the likeliest to fail: an infeasible count costs a DACP run or two, not dozens
        if max(tokens) <= limit and all(fits(mbs[j]) for j in sorted(
                range(len(mbs)), key=lambda j: (-tokens[j], j))):
            return mbs
    return None
