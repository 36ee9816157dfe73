"""The exact reference for Skrull's DACP on one micro-batch (Xu et al., NeurIPS 2025; PAPERS.md
section 3.1): a MILP of Eq. 1-7 solved with SCIP (pyscipopt), against which the heuristic of
dacp.py is measured (PAPERS.md 3.5). It owns the formulation, its symmetry breaking and the
reading of SCIP's answer back into a DACP placement; the per-sequence times come from
``dacp.MicroBatchCosts`` and the answer is re-priced with ``dacp.objective``, so heuristic and
MILP are compared on one objective.

Formulation (K sequences of S_k tokens, N identical CP ranks, bucket C tokens per rank):
- binaries D_k (sequence k distributed), P_kj (sequence k whole on rank j), z (anything
  distributed); continuous A_j >= 0 (rank j's overlapped stage of Eq. 2) and T (Eq. 1);
- Eq. 6: sum_j P_kj + D_k = 1 for every k;
- Eq. 7: sum_k S_k P_kj + sum_k S_k D_k / N <= C for every j, stored multiplied by N so that
  integer lengths give integer coefficients (N S_k P_kj + S_k D_k <= N C);
- z >= D_k for every k, so T_fixed of Eq. 16 is paid once when anything is distributed;
- Eq. 2 linearised: A_j >= sum_k local_k P_kj (T_comp(Local_j), Eq. 3),
  A_j >= comm_fixed z + sum_k comm_k D_k (T_comm(V), Eq. 5 and 16),
  T >= A_j + sum_k dist_k D_k (+ T_comp(Dist), Eq. 4);
- Eq. 1: minimise T.

Numerics: the times are divided by their largest value before they reach SCIP (its tolerances
are absolute below 1, and per-sequence times are often milliseconds) and multiplied back after.
Eq. 7 holds to SCIP's relative feasibility tolerance (1e-6): exactly for integer lengths while
N C stays under 1e6 tokens (an overflow of one token is then a violation SCIP sees).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from ltsim.strategies import milp
from ltsim.strategies.dacp import DISTRIBUTED, MicroBatchCosts, objective


@dataclass(frozen=True, slots=True)
class MilpResult:
    """SCIP's answer for one micro-batch; times in seconds.

    ret: per sequence its CP rank or DISTRIBUTED, None when SCIP found no solution.
    objective_s: Eq. 1 of ``ret`` recomputed with ``dacp.objective`` (not SCIP's number).
    bound_s: SCIP's dual bound (a lower bound on Eq. 1), None when it is not finite.
    gap: the relative gap as SCIP reports it (0.0 when proven optimal; math.inf where SCIP's is
        infinite, e.g. stopped before any bound), None with no solution.
    status: SCIP's status string ("optimal", "timelimit", "infeasible", ...).
    solve_s: wall seconds spent in ``optimize``."""

    ret: tuple[int, ...] | None
    objective_s: float | None
    bound_s: float | None
    gap: float | None
    status: str
    solve_s: float


@dataclass(frozen=True, slots=True)
class _Model:
    scip: object
    dist: tuple  # D_k
    local: tuple  # local[k][j] = P_kj, or None where symmetry breaking removed it
    any_dist: object  # z
    stage: tuple  # A_j
    makespan: object  # T
    order: tuple[int, ...]  # the sequence order the symmetry breaking labels ranks by
    scale_s: float


def solve_dacp_milp(lengths: Sequence[int], num_ranks: int, capacity: float,
                    costs: MicroBatchCosts, *, time_limit_s: float = 5.0,
                    hint: Sequence[int] | None = None) -> MilpResult:
    """Minimise Eq. 1 over the placements of Eq. 6-7 for one micro-batch (module docstring).

    ``lengths`` in tokens, ``capacity`` C in tokens per rank, ``costs`` per sequence in seconds,
    ``time_limit_s`` SCIP's wall limit. ``hint``: a placement (a CP rank or DISTRIBUTED per
    sequence, e.g. DACP's ret) handed to SCIP as a starting solution; its ranks are relabelled
    to satisfy the symmetry breaking, and SCIP discards it if it breaks Eq. 7. No sequences:
    ret () with objective 0 and status "optimal", without SCIP. Deterministic unless the time
    limit cuts the search. Raises ValueError for num_ranks < 1, capacity <= 0, cost tuples or a
    hint whose length differs from lengths, or a hint rank outside -1..num_ranks-1."""
    _check(lengths, num_ranks, capacity, costs, hint)
    if not lengths:
        return MilpResult((), 0.0, 0.0, 0.0, "optimal", 0.0)
    model = _build(lengths, num_ranks, capacity, costs)
    scip = model.scip
    scip.hideOutput()
    scip.setParam("limits/time", float(time_limit_s))
    scip.setParam("randomization/randomseedshift", 0)
    if hint is not None:
        _add_hint(model, hint, costs, num_ranks)
    start = time.perf_counter()
    status = milp.optimize(scip)
    solve_s = time.perf_counter() - start
    found = scip.getNSols() > 0
    bound, gap, inf = scip.getDualbound(), scip.getGap(), scip.infinity()
    ret = _read(model) if found else None
    return MilpResult(ret=ret, objective_s=objective(ret, costs, num_ranks) if found else None,
                      bound_s=bound * model.scale_s if abs(bound) < inf else None,
                      gap=(gap if gap < inf else math.inf) if found else None, status=status,
                      solve_s=solve_s)


def _check(lengths, num_ranks: int, capacity: float, costs: MicroBatchCosts, hint) -> None:
    if num_ranks < 1:
        raise ValueError(f"'num_ranks' must be >= 1 (got {num_ranks!r})")
    if not capacity > 0:
        raise ValueError(f"'capacity' must be > 0 tokens (got {capacity!r})")
    for name in ("local_s", "dist_s", "comm_s"):
        got = len(getattr(costs, name))
        if got != len(lengths):
            raise ValueError(f"'costs.{name}' must have one entry per sequence, "
                             f"{len(lengths)} (got {got})")
    if hint is None:
        return
    if len(hint) != len(lengths):
        raise ValueError(f"'hint' must have one entry per sequence, {len(lengths)} "
                         f"(got {len(hint)})")
    bad = [r for r in hint if not (r == DISTRIBUTED or 0 <= r < num_ranks)]
    if bad:
        raise ValueError(f"'hint' must hold ranks in 0..{num_ranks - 1} or {DISTRIBUTED} "
                         f"(got {bad[0]!r})")


def _build(lengths, num_ranks: int, capacity: float, costs: MicroBatchCosts) -> _Model:
    from pyscipopt import Model, quicksum  # lazily: `import ltsim` stays free of SCIP's library

    n, ks = num_ranks, range(len(lengths))
    scale = max([*costs.local_s, *costs.dist_s, *costs.comm_s, costs.comm_fixed_s, 0.0]) or 1.0
    local_t, dist_t, comm_t = ([v / scale for v in vals]
                               for vals in (costs.local_s, costs.dist_s, costs.comm_s))
    # Symmetry breaking (ranks are identical, and a distributed sequence loads all alike): label
    # the used ranks in the order in which `order` first reaches them. Then the i-th sequence of
    # `order` sits on a rank j <= i, and on j >= 1 only when an earlier one sits on j - 1. Any
    # placement can be relabelled so, with the same Eq. 1 value: no optimum is cut off.
    order = tuple(sorted(ks, key=lambda k: (-lengths[k], k)))
    scip = Model("skrull-dacp")
    dist = tuple(scip.addVar(f"D_{k}", vtype="B") for k in ks)
    local: list[list] = [[None] * n for _ in ks]
    for i, k in enumerate(order):
        for j in range(min(i + 1, n)):
            local[k][j] = scip.addVar(f"P_{k}_{j}", vtype="B")
    any_dist = scip.addVar("z", vtype="B")
    stage = tuple(scip.addVar(f"A_{j}", lb=0.0) for j in range(n))
    makespan = scip.addVar("T", lb=0.0)
    on = [[(k, p) for k in ks if (p := local[k][j]) is not None] for j in range(n)]
    for k in ks:
        scip.addCons(quicksum(p for p in local[k] if p is not None) + dist[k] == 1)  # Eq. 6
        scip.addCons(any_dist >= dist[k])
    comm = costs.comm_fixed_s / scale * any_dist + quicksum(comm_t[k] * dist[k] for k in ks)
    shared = quicksum(dist_t[k] * dist[k] for k in ks)
    for j in range(n):
        scip.addCons(quicksum(n * lengths[k] * p for k, p in on[j])  # Eq. 7, times N
                     + quicksum(lengths[k] * dist[k] for k in ks) <= n * capacity)
        scip.addCons(stage[j] >= quicksum(local_t[k] * p for k, p in on[j]))  # Eq. 2-3
        scip.addCons(stage[j] >= comm)  # Eq. 2, 5, 16
        scip.addCons(makespan >= stage[j] + shared)  # Eq. 1-2, 4
    for i, k in enumerate(order):
        for j in range(1, min(i + 1, n)):
            earlier = (local[e][j - 1] for e in order[:i])
            scip.addCons(local[k][j] <= quicksum(p for p in earlier if p is not None))
    scip.setObjective(makespan, "minimize")
    return _Model(scip, dist, tuple(map(tuple, local)), any_dist, stage, makespan, order, scale)


def _canonical(ret: Sequence[int], order: Sequence[int]) -> list[int]:
    """``ret`` with its ranks relabelled in the order ``order`` first reaches them."""
    label: dict[int, int] = {}
    for k in order:
        if ret[k] != DISTRIBUTED and ret[k] not in label:
            label[ret[k]] = len(label)
    return [DISTRIBUTED if r == DISTRIBUTED else label[r] for r in ret]


def _add_hint(model: _Model, hint: Sequence[int], costs: MicroBatchCosts, n: int) -> None:
    """A starting solution; SCIP checks it when the problem is transformed (trySol may not be
    called before that stage) and drops it if it is infeasible."""
    scip, ret = model.scip, _canonical(hint, model.order)
    sol = scip.createSol()
    dist = [k for k, r in enumerate(ret) if r == DISTRIBUTED]
    for k, r in enumerate(ret):
        scip.setSolVal(sol, model.dist[k], 1.0 if r == DISTRIBUTED else 0.0)
        for j, p in enumerate(model.local[k]):
            if p is not None:
                scip.setSolVal(sol, p, 1.0 if r == j else 0.0)
    scip.setSolVal(sol, model.any_dist, 1.0 if dist else 0.0)
    comm = (costs.comm_fixed_s + sum(costs.comm_s[k] for k in dist)) if dist else 0.0
    for j in range(n):
        local = sum(costs.local_s[k] for k, r in enumerate(ret) if r == j)
        scip.setSolVal(sol, model.stage[j], max(comm, local) / model.scale_s)
    scip.setSolVal(sol, model.makespan, objective(ret, costs, n) / model.scale_s)
    scip.addSol(sol)


def _read(model: _Model) -> tuple[int, ...]:
    """The best solution's placement; binaries are rounded (SCIP holds them to a tolerance)."""
    scip, sol = model.scip, model.scip.getBestSol()
    ret = []
    for k, d in enumerate(model.dist):
        if scip.getSolVal(sol, d) > 0.5:
            ret.append(DISTRIBUTED)
            continue
        ranks = [j for j, p in enumerate(model.local[k])
                 if p is not None and scip.getSolVal(sol, p) > 0.5]
        assert len(ranks) == 1, f"Eq. 6 broken in SCIP's solution for sequence {k}: {ranks}"
        ret.append(ranks[0])
    return tuple(ret)
