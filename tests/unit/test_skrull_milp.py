"""The DACP MILP (ltsim/strategies/skrull_milp.py) against an independent oracle, brute force over
every placement of Skrull's Eq. 6-7 on tiny micro-batches, and against the heuristic it is the
reference for (dacp.dacp), on random instances and on PAPERS.md 3.2's golden instance."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from ltsim.strategies.dacp import DISTRIBUTED, MicroBatchCosts, dacp, objective
from ltsim.strategies.skrull_milp import MilpResult, solve_dacp_milp


def _eq7_holds(ret, lengths, num_ranks: int, capacity: float) -> bool:
    """Eq. 7 checked directly: each rank's local tokens plus 1/N of every distributed one <= C."""
    shared = sum(s for s, r in zip(lengths, ret) if r == DISTRIBUTED) / num_ranks
    return all(sum(s for s, r in zip(lengths, ret) if r == j) + shared <= capacity + 1e-9
               for j in range(num_ranks))


def _eq6_holds(ret, num_ranks: int) -> bool:
    """Eq. 6: each sequence is exactly one of distributed or whole on one existing rank."""
    return all(r == DISTRIBUTED or 0 <= r < num_ranks for r in ret)


def _brute_force(lengths, num_ranks: int, capacity: float, costs: MicroBatchCosts):
    """The least Eq. 1 value over all placements satisfying Eq. 7; None when none does."""
    values = [objective(ret, costs, num_ranks)
              for ret in itertools.product(range(-1, num_ranks), repeat=len(lengths))
              if _eq7_holds(ret, lengths, num_ranks, capacity)]
    return min(values) if values else None


def _random_costs(rng: random.Random, lengths, num_ranks: int) -> MicroBatchCosts:
    """Milliseconds, linear + quadratic compute, sharding overhead, comm linear in S (Eq. 13-16)."""
    local = [1e-6 * s * rng.uniform(0.5, 2) + 1e-8 * s * s * rng.uniform(0.5, 2) for s in lengths]
    return MicroBatchCosts(
        local_s=tuple(local),
        dist_s=tuple(t / num_ranks * rng.uniform(1.0, 1.4) for t in local),
        comm_s=tuple(2e-7 * s * rng.uniform(0.5, 2) for s in lengths),
        comm_fixed_s=rng.uniform(0, 2e-5))


def _tiny_instances(count: int = 15):
    rng = random.Random(20250607)
    for _ in range(count):
        num_ranks, k = rng.randint(2, 3), rng.randint(2, 5)
        lengths = [rng.randint(1, 300) for _ in range(k)]
        capacity = rng.uniform(0.8, 1.6) * sum(lengths) / num_ranks
        yield lengths, num_ranks, capacity, _random_costs(rng, lengths, num_ranks)


def test_tiny_instances_match_brute_force():
    feasible = infeasible = 0
    for lengths, n, capacity, costs in _tiny_instances():
        best = _brute_force(lengths, n, capacity, costs)
        got = solve_dacp_milp(lengths, n, capacity, costs)
        where = f"S={lengths} N={n} C={capacity:.2f}: {got}"
        if best is None:
            infeasible += 1
            assert got.status == "infeasible" and got.ret is None, where
            assert got.objective_s is None and got.gap is None, where
            continue
        feasible += 1
        assert got.status == "optimal" and got.gap == 0.0, where
        assert _eq7_holds(got.ret, lengths, n, capacity), where
        assert math.isclose(got.objective_s, best, rel_tol=1e-9), (where, best)
        assert got.bound_s <= best * (1 + 1e-6), where
    assert feasible >= 8 and infeasible >= 2, (feasible, infeasible)  # both branches exercised


def test_never_worse_than_dacp():
    rng, compared = random.Random(7), 0
    while compared < 20:
        num_ranks, k = rng.randint(2, 8), rng.randint(1, 12)
        lengths = [rng.randint(64, 32768) for _ in range(k)]
        capacity = rng.uniform(1.0, 1.5) * max(sum(lengths) / num_ranks, max(lengths) / num_ranks)
        costs = _random_costs(rng, lengths, num_ranks)
        heuristic = dacp(lengths, num_ranks, capacity, lambda i: costs.local_s[i])
        if heuristic is None or not heuristic.fits:
            continue
        compared += 1
        got = solve_dacp_milp(lengths, num_ranks, capacity, costs)
        where = f"S={lengths} N={num_ranks} C={capacity:.1f}: {got}"
        assert got.status == "optimal", where
        assert len(got.ret) == k and _eq6_holds(got.ret, num_ranks), where
        assert _eq7_holds(got.ret, lengths, num_ranks, capacity), where
        assert got.objective_s <= objective(heuristic.ret, costs, num_ranks) * (1 + 1e-9), where


def test_golden_instance_beats_or_ties_dacp():
    """PAPERS.md 3.2 (C2): N=2, C=10, S=[2,3,4,9], quadratic compute, free communication. DACP
    gives ret [-1, 1, 0, -1] (58.5); distributing everything costs (4+9+16+81)/2 = 55."""
    lengths, n, capacity = [2, 3, 4, 9], 2, 10
    costs = MicroBatchCosts(local_s=tuple(float(s * s) for s in lengths),
                            dist_s=tuple(s * s / n for s in lengths), comm_s=(0.0,) * 4)
    heuristic = dacp(lengths, n, capacity, lambda k: costs.local_s[k])
    assert heuristic.ret == (-1, 1, 0, -1) and objective(heuristic.ret, costs, n) == 58.5
    got = solve_dacp_milp(lengths, n, capacity, costs)
    assert got.status == "optimal" and _eq7_holds(got.ret, lengths, n, capacity)
    assert got.objective_s <= 58.5
    assert got.objective_s == pytest.approx(55.0)
    assert got.objective_s == _brute_force(lengths, n, capacity, costs)


def test_hint_is_relabelled_and_used():
    """With no time to search, SCIP's only solution is the hint (its ranks relabelled to the
    symmetry breaking's order), so the answer is exactly as good as the hint."""
    rng = random.Random(3)
    lengths = [rng.randint(100, 5000) for _ in range(10)]
    n, capacity = 4, 1.2 * sum(lengths) / 4
    costs = _random_costs(rng, lengths, n)
    heuristic = dacp(lengths, n, capacity, lambda k: costs.local_s[k])
    hint = tuple(DISTRIBUTED if r == DISTRIBUTED else n - 1 - r for r in heuristic.ret)
    got = solve_dacp_milp(lengths, n, capacity, costs, time_limit_s=0.0, hint=hint)
    assert got.ret is not None and _eq7_holds(got.ret, lengths, n, capacity)
    assert got.objective_s <= objective(hint, costs, n) * (1 + 1e-12)


def test_time_limit_is_respected_on_a_hard_instance():
    rng = random.Random(1)
    lengths = [rng.randint(100, 20000) for _ in range(40)]
    n, capacity, limit_s = 8, 1.1 * sum(lengths) / 8, 5.0
    costs = _random_costs(rng, lengths, n)
    heuristic = dacp(lengths, n, capacity, lambda k: costs.local_s[k])
    got = solve_dacp_milp(lengths, n, capacity, costs, time_limit_s=limit_s, hint=heuristic.ret)
    assert got.solve_s < limit_s + 2.0
    assert isinstance(got.status, str) and got.status in ("optimal", "timelimit")
    assert isinstance(got.gap, float) and got.gap >= 0.0
    assert got.objective_s <= objective(heuristic.ret, costs, n) * (1 + 1e-9)
    assert got.bound_s <= got.objective_s * (1 + 1e-6)


def test_empty_micro_batch_skips_the_solver():
    got = solve_dacp_milp([], 4, 100.0, MicroBatchCosts((), (), ()))
    assert got == MilpResult(ret=(), objective_s=0.0, bound_s=0.0, gap=0.0, status="optimal",
                             solve_s=0.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_ranks=0), r"'num_ranks' must be >= 1 \(got 0\)"),
    (dict(capacity=0.0), r"'capacity' must be > 0 tokens \(got 0.0\)"),
    (dict(costs=MicroBatchCosts((1.0,), (0.5, 0.5), (0.0, 0.0))),
     r"'costs.local_s' must have one entry per sequence, 2 \(got 1\)"),
    (dict(costs=MicroBatchCosts((1.0, 1.0), (0.5, 0.5), (0.0,))),
     r"'costs.comm_s' must have one entry per sequence, 2 \(got 1\)"),
    (dict(hint=(0,)), r"'hint' must have one entry per sequence, 2 \(got 1\)"),
    (dict(hint=(0, 2)), r"'hint' must hold ranks in 0..1 or -1 \(got 2\)"),
])
def test_bad_arguments_raise(kwargs, message):
    args = dict(lengths=[3, 4], num_ranks=2, capacity=10.0,
                costs=MicroBatchCosts((1.0, 1.0), (0.5, 0.5), (0.0, 0.0)))
    args.update(kwargs)
    lengths, n, capacity, costs = (args.pop(key) for key in ("lengths", "num_ranks", "capacity",
                                                              "costs"))
    with pytest.raises(ValueError, match=message):
        solve_dacp_milp(lengths, n, capacity, costs, **args)
