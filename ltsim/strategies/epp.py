"""InfiniPipe's chunk scheduler (Wang et al. 2025, section 3.3; PAPERS.md 4.3): 1F1B pipelines of
chunks, longest sequences first, the grouping DP of Eq. 14 and the stage-aware chunk-level
adaptive checkpointing MILP of Eq. 15-20 / Alg. 2, solved with SCIP (pyscipopt). What it asks the
cost model (a chunk's times and memory coefficients) is ltsim/strategies/epp_costs.py.

- **Order.** A pipeline forwards its units (epp_chunking.Unit) longest first, each unit's chunks in
  order, and backwards each unit's chunks last to first (a slice's dK/dV comes from the slices
  after it). Stage s (0-based, p = s + 1) forwards ``d_p - p + N_prefill - 1`` chunks before its
  first backward (``warmup = "prefill"``), so it holds Eq. 7's |W_p| = d_p - p + N_prefill chunks
  in the steady phase; ``warmup = "1f1b"`` keeps Megatron's d_p - p and forwards further only while
  no backward is admissible (ChunkFlow's state-aware 1F1B), the schedule of Fig. 6(a).
- **Windows** (PAPERS.md W1): for each stage, the chunks forwarded and not yet backwarded at each
  backward of the stage's order, read from the very order the plan runs.
- **MILP** (Alg. 2): one integer C_j in [0, L/d_p] per anti-diagonal, n + d_p - 1 of them; chunk k
  on stage p checkpoints C[d_p - p + f2b[k]] layers (Eq. 15-16, f2b[k] its place in the backward
  order). One constraint per stage and window: sum_k (I_pk - F_pk C) <= G_p, where I_pk is the
  chunk's memory on that stage without checkpointing (its activations, plus its K/V gradients when
  later slices of its sequence exist: Eq. 5), F_pk what one checkpointed layer saves (its
  activations less the layer input and, for a slice later slices attend to, its K/V: Eq. 9-10),
  and G_p the device memory less the stage's static memory and the largest transient working set
  (forward, recompute or backward) of the window's chunks. All from ltsim's own memory model
  (the buffers the plan allocates), so the simulated peak stays within the limit the MILP used.
  Minimise sum C (Eq. 17-20); the time is T_ckpt = F_hat sum C, F_hat the group's mean forward
  time of one layer.
- **DP** (Eq. 14): units grouped by chunk count i; dp[i] = min_{k<i} dp[k] + cost(units with
  k+1..i chunks), cost = delta + T_ckpt (an empty range costs nothing, an infeasible one is
  infinite: PAPERS.md W2), delta = (d_p - 1) x the group's mean chunk time (forward + backward of
  one stage). n(n+1)/2 transitions for a longest sequence of n chunks; ranges holding the same
  units (chunk counts no unit has) share one solve, so a batch with units of every count 1..n
  makes n(n+1)/2 solver calls, and one with m distinct counts m(m+1)/2 + 1 at most. (InfiniPipe's
  planner makes these calls on LP relaxations and solves only the chosen pipelines' MILPs.)

``checkpointing``: "milp" (the above), "none" (C = 0), "full" (C = L/d_p), "uniform" (one C for
every chunk and stage: the smallest that fits, the enhanced Seq1F1B's). The solver answers
without SCIP where the answer is certain: C = 0 fits, or not even C = L/d_p fits.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import chain
from operator import add, attrgetter

import numpy as np

from ltsim.plan import OpKind
from ltsim.strategies import milp
from ltsim.strategies.epp_costs import ChunkCost, unlimited

CHECKPOINTINGS = ("milp", "none", "full", "uniform")
WARMUPS = ("prefill", "1f1b")
GAP_LIMIT = 0.01  # SCIP stops within 1 % of its bound (the gap is reported)
_FWD, _BWD, _LAYER_FWD = attrgetter("fwd_s"), attrgetter("bwd_s"), attrgetter("layer_fwd_s")


# -- order and windows ----------------------------------------------------------------------------
def pipeline_order(units: list[list[int]], stage: int, num_stages: int, warmup: str
                   ) -> list[tuple[OpKind, int]]:
    """(F or B, chunk) in one stage's order for units (chunk ids each, in sequence order) already
    sorted longest first: pipeline.interleave_1f1b's rule on chunk ids alone (the solver builds
    thousands; tests/unit/test_infinipipe.py checks it against interleave_1f1b)."""
    fwd = [c for u in units for c in u]
    bwd = [c for u in units for c in reversed(u)]
    prefill = max((len(u) for u in units), default=1)
    cap = (num_stages + prefill - 1 if warmup == "prefill" else num_stages) - stage
    done: set[int] = set()
    order: list[tuple[OpKind, int]] = []
    f = in_flight = 0
    F, B = OpKind.F, OpKind.B
    for chunk in bwd:
        while f < len(fwd) and (in_flight < cap or chunk not in done):
            order.append((F, fwd[f]))
            done.add(fwd[f])
            in_flight += 1
            f += 1
        order.append((B, chunk))
        in_flight -= 1
    return order


def backward_rank(units: list[list[int]]) -> dict[int, int]:
    """f2b: each chunk's place in the backward order."""
    order = [c for u in units for c in reversed(u)]
    return {c: i for i, c in enumerate(order)}


def windows(order: list[tuple[OpKind, int]]) -> list[tuple[int, ...]]:
    """The distinct sets of chunks in flight (forwarded, not backwarded) at each backward."""
    live: dict[int, None] = {}
    seen: dict[tuple[int, ...], None] = {}
    for kind, chunk in order:
        if kind is OpKind.F:
            live[chunk] = None
        else:
            seen[tuple(sorted(live))] = None
            live.pop(chunk, None)
    return list(seen)


def in_flight_pairs(order: list[tuple[OpKind, int]]) -> int:
    """The chunks in flight summed over the backwards of ``order``: what ``windows`` holds, and
    more where a set repeats; counted without making them."""
    live: set[int] = set()
    pairs = 0
    for kind, chunk in order:
        if kind is OpKind.F:
            live.add(chunk)
        else:
            pairs += len(live)
            live.discard(chunk)
    return pairs


#: The most (window, chunk) pairs the checkpointing problems of one planning pass may hold
#: together (counted by ``in_flight_pairs`` before a problem is made; ``SolverLog.spend``): one
#: problem per range of the grouping DP, then the chosen pipelines again. A window is the chunks
#: in flight at a backward, so a long sequence of n chunks, all in flight before its first
#: backward, makes about n^2 / 2 per stage: 4,095 chunks of one sequence on 2 stages (16.8M
#: pairs) plan in about 5 s and 0.9 GB; 8,192 took 70 s, and the search went on past 8 GB (a
#: probe of `ltsim maxlen` with a petabyte memory limit, killed at 120 s with 8.3 GB resident).
#: A DP over many ranges adds up the same way: GPT-7B's bundled batch at num_slices = 64 makes
#: 530 problems of 34.9M pairs in all, 17 s to plan (GPT-30B's ran past 120 s). The bundled
#: scenarios' largest pass holds 224,112 (GPT-13B at a 192K context); a Seq1F1B batch of 4,096
#: sequences in 2K chunks (7,177 chunks) 959,538.
MAX_WINDOW_PAIRS = 1 << 24
#: The most nonzero entries the LP relaxations of one planning pass may hold together (SoPlex
#: solves them without a time limit, at about 3.5 us an entry): GPT-30B's bundled batch at
#: num_slices = 32 solved 259 LPs of 5.9M entries in 20.4 s, at 64 it ran past 50 s, and at 20
#: (1.07M) planned in 6.8 s, at 26 in 13 s; at this limit 32 and 64 are refused in 11-15 s. The
#: bundled scenarios' largest pass holds 204,308 (GPT-13B at a 192K context, 0.32 s).
MAX_LP_ENTRIES = 1 << 22


class ProblemTooLarge(Exception):
    """One planning pass's checkpointing problems past MAX_WINDOW_PAIRS (window, chunk) pairs or
    their LP relaxations past MAX_LP_ENTRIES entries; its strategy says which of its options made
    them (ltsim/strategies/infinipipe.py build)."""

    def __init__(self, amount: int, limit: int, unit: str) -> None:
        super().__init__(f"{amount:,} {unit}, past {limit:,}")
        self.amount, self.limit, self.unit = amount, limit, unit


def ckpt_index(stage: int, num_stages: int, rank: int) -> int:
    """Eq. 15-16: the anti-diagonal variable of the chunk ranked ``rank`` in backward order on
    ``stage`` (0-based; the paper's p = stage + 1): C[d_p - p + f2b[k]]."""
    return num_stages - 1 - stage + rank


# -- the MILP -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Checkpointing:
    """The solver's answer for one pipeline: layers per anti-diagonal (None: nothing fits)."""

    values: tuple[int, ...] | None
    status: str  # "trivial" (no SCIP needed), or SCIP's status
    gap: float = 0.0
    solve_s: float = 0.0

    def layers(self, stage: int, num_stages: int, rank: int) -> int:
        return self.values[ckpt_index(stage, num_stages, rank)]


@dataclass(frozen=True, slots=True, eq=False)
class Problem:
    """Alg. 2's data for one pipeline, rearranged as covering rows: for every stage and window,
    sum_j matrix[r, j] C_j >= need[r], with matrix[r, j] the bytes the window's chunks on
    anti-diagonal j save per checkpointed layer (F) and need[r] = sum I - G (Eq. 20)."""

    num_vars: int
    max_layers: int
    matrix: np.ndarray  # rows x num_vars
    need: np.ndarray

    def feasible(self, values) -> bool:
        lhs = self.matrix @ np.asarray(values, dtype=float)
        return bool(np.all(lhs >= self.need - 1e-6 * np.maximum(1.0, np.abs(self.need))))

    def shortfall(self, values) -> float:
        """The most bytes a stage and window lacks with ``values`` (0 when they fit)."""
        if not len(self.need):
            return 0.0
        return max(0.0, float(np.max(self.need - self.matrix @ np.asarray(values, dtype=float))))


def build_problem(units: list[list[int]], costs: dict[int, ChunkCost], budgets: list[float],
                  warmup: str, max_layers: int, log: SolverLog | None = None) -> Problem:
    """Per stage and window: sum_k F_pk C[idx] >= sum_k I_pk - G_p (Eq. 20 rearranged), G_p the
    stage's budget less the largest working set among the window's chunks. Raises
    ProblemTooLarge past MAX_WINDOW_PAIRS (window, chunk) pairs: this problem's, or with
    ``log``, those of the planning pass it keeps (``SolverLog.spend``)."""
    num_stages = len(budgets)
    orders = [pipeline_order(units, stage, num_stages, warmup) for stage in range(num_stages)]
    pairs = sum(map(in_flight_pairs, orders))  # before any is held
    (log or SolverLog()).spend(pairs)
    rank = backward_rank(units)
    num_vars = len(rank) + num_stages - 1
    rows: dict[tuple, None] = {}
    for stage, order in enumerate(orders):
        for window in windows(order):
            rows[(stage, window)] = None
    # every (row, chunk) pair flat, so the sums, maxima and the matrix are numpy reductions
    chunks = sorted(rank, key=rank.get)  # row i of the arrays: the chunk of backward rank i
    base = np.array([costs[c].base for c in chunks], dtype=float)  # chunk x stage
    saved = np.array([costs[c].saved for c in chunks], dtype=float)
    transient = np.array([costs[c].transient for c in chunks], dtype=float)
    sizes = np.fromiter((len(w) for _, w in rows), dtype=np.int64, count=len(rows))
    row_of = np.repeat(np.arange(len(rows)), sizes)
    stage_of = np.repeat(np.fromiter((st for st, _ in rows), dtype=np.int64, count=len(rows)),
                         sizes)
    member = np.fromiter((rank[c] for _, w in rows for c in w), dtype=np.int64,
                         count=int(sizes.sum()))
    column = num_stages - 1 - stage_of + member  # ckpt_index, vectorized
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    need = (np.bincount(row_of, weights=base[member, stage_of], minlength=len(rows))
            - np.asarray(budgets, dtype=float)[stage_of[starts]]
            + np.maximum.reduceat(transient[member, stage_of], starts))
    keep = need > 0  # a window that fits with nothing checkpointed constrains nothing
    at = np.cumsum(keep) - 1  # a kept row's place in the matrix (only they are made)
    pair = keep[row_of]
    matrix = np.zeros((int(keep.sum()), num_vars))
    np.add.at(matrix, (at[row_of[pair]], column[pair]), saved[member[pair], stage_of[pair]])
    return Problem(num_vars, max_layers, matrix, need[keep])


def solve(problem: Problem, mode: str = "milp", *, time_limit_s: float = 5.0,
          relax: bool = False, log: SolverLog | None = None) -> Checkpointing:
    """Minimise sum C subject to the problem's rows (Eq. 20); see the module docstring.
    ``relax``: the LP relaxation (C continuous), rounded up: feasible, and its sum C is within
    n + d_p - 1 layers of the MILP's optimum (what the search over N ranks candidates with),
    solved by SCIP's LP interface alone (``_relaxed``), its entries counted in ``log``'s pass
    (``SolverLog.spend_lp``)."""
    n, top = problem.num_vars, problem.max_layers
    zero, full = (0,) * n, (top,) * n
    if mode != "full" and problem.feasible(zero):
        return Checkpointing(zero, "trivial")
    if mode == "none":
        return Checkpointing(None, "trivial")
    if not problem.feasible(full):
        return Checkpointing(None, "infeasible")
    if mode == "full":
        return Checkpointing(full, "trivial")
    if relax:
        if log is not None and mode != "uniform":  # (uniform's closed form solves no LP)
            log.spend_lp(int(np.count_nonzero(problem.matrix)))
        return _relaxed(problem, uniform=mode == "uniform")
    return _scip(problem, uniform=mode == "uniform", time_limit_s=time_limit_s)


def scip_model(problem: Problem, *, uniform: bool = False):
    """Alg. 2 as a SCIP model: one variable per anti-diagonal in [0, max_layers], a covering row
    per stage and window, minimise their sum. Returns (model, variables)."""
    from pyscipopt import Model, quicksum  # imported here: plans without the MILP never need it

    model = Model()
    model.hideOutput()
    variables = [model.addVar(f"C{j}", vtype="I", lb=0, ub=problem.max_layers)
                 for j in range(problem.num_vars)]
    scale = float(problem.need.max(initial=1.0)) or 1.0
    for row, need in zip(problem.matrix, problem.need):  # bytes scaled to O(1) for SCIP
        model.addCons(quicksum(float(row[j]) / scale * variables[j] for j in np.flatnonzero(row))
                      >= float(need) / scale)
    if uniform:
        for var in variables[1:]:
            model.addCons(var == variables[0])
    model.setObjective(quicksum(variables), "minimize")
    return model, variables


def _relaxed(problem: Problem, *, uniform: bool) -> Checkpointing:
    """The LP relaxation rounded up, solved by SCIP's LP interface (SoPlex) without the MILP
    machinery; for ``uniform`` (one C for all) the closed form max_r need_r / sum_j a_rj."""
    started = time.perf_counter()
    top = problem.max_layers
    if uniform:
        sums = problem.matrix.sum(axis=1)
        if np.any((sums <= 0) & (problem.need > 0)):
            return Checkpointing(None, "lp-infeasible", math.inf, time.perf_counter() - started)
        level = float(np.max(problem.need / np.where(sums > 0, sums, 1.0), initial=0.0))
        values = (min(top, math.ceil(level - 1e-9)),) * problem.num_vars
    else:
        from pyscipopt import LP

        n = problem.num_vars
        lp = LP("epp", sense="minimize")
        lp.addCols([[] for _ in range(n)], objs=[1.0] * n, lbs=[0.0] * n, ubs=[float(top)] * n)
        scale = float(problem.need.max(initial=1.0)) or 1.0
        matrix = problem.matrix / scale  # bytes scaled to O(1)
        rows, cols = np.nonzero(matrix)
        entries = list(zip(cols.tolist(), matrix[rows, cols].tolist()))
        bounds = np.cumsum(np.count_nonzero(matrix, axis=1)).tolist()
        lp.addRows([entries[a:b] for a, b in zip([0] + bounds, bounds)],
                   lhss=(problem.need / scale).tolist())
        lp.solve()
        if not lp.isPrimalFeasible():
            return Checkpointing(None, "lp-infeasible", math.inf, time.perf_counter() - started)
        values = tuple(min(top, math.ceil(v - 1e-6)) for v in lp.getPrimal())
    if not problem.feasible(values):
        return Checkpointing(None, "lp-infeasible", math.inf, time.perf_counter() - started)
    return Checkpointing(values, "lp-optimal", 0.0, time.perf_counter() - started)


def _scip(problem: Problem, *, uniform: bool, time_limit_s: float) -> Checkpointing:
    started = time.perf_counter()
    model, variables = scip_model(problem, uniform=uniform)
    model.setParam("limits/time", float(time_limit_s))
    model.setParam("limits/gap", GAP_LIMIT)
    start = _relaxed(problem, uniform=uniform).values  # the rounded-up LP: a first solution
    if start is not None:
        sol = model.createSol()
        for var, value in zip(variables, start):
            model.setSolVal(sol, var, value)
        model.addSol(sol, free=True)
    status = milp.optimize(model)
    values = None
    if model.getNSols() > 0:
        best = model.getBestSol()
        values = tuple(int(round(model.getSolVal(best, v))) for v in variables)
        if not problem.feasible(values):  # SCIP's tolerance let a row slip: no answer
            values = None
    gap = model.getGap() if values is not None else math.inf
    return Checkpointing(values, status, 0.0 if gap is None else float(gap),
                         time.perf_counter() - started)


# -- grouping DP ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Pipeline:
    """One 1F1B pipeline: its units (chunk ids, longest first) and their checkpointing."""

    units: tuple[tuple[int, ...], ...]
    checkpointing: Checkpointing
    cost_s: float  # delta + T_ckpt


@dataclass(slots=True)
class SolverLog:
    calls: int = 0
    scip: int = 0  # MILPs SCIP solved
    lp: int = 0  # LP relaxations (the search over N)
    max_gap: float = 0.0
    solve_s: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    # what this planning pass's problems may still hold, and its LP relaxations (the limits as
    # they are when the log is made, or the pass begins: ``new_pass``)
    pairs_left: int = field(default_factory=lambda: MAX_WINDOW_PAIRS)
    entries_left: int = field(default_factory=lambda: MAX_LP_ENTRIES)

    def spend(self, pairs: int) -> None:
        """Count a problem's (window, chunk) pairs against the pass's MAX_WINDOW_PAIRS (reset by
        ``new_pass``); raise ProblemTooLarge, before the problem is made, past it."""
        if pairs > self.pairs_left:
            raise ProblemTooLarge(MAX_WINDOW_PAIRS - self.pairs_left + pairs, MAX_WINDOW_PAIRS,
                                  "(window, chunk) pairs")
        self.pairs_left -= pairs

    def spend_lp(self, entries: int) -> None:
        """The same for an LP relaxation's nonzero entries, before SoPlex solves it."""
        if entries > self.entries_left:
            raise ProblemTooLarge(MAX_LP_ENTRIES - self.entries_left + entries, MAX_LP_ENTRIES,
                                  "LP entries")
        self.entries_left -= entries

    def new_pass(self) -> None:
        self.pairs_left, self.entries_left = MAX_WINDOW_PAIRS, MAX_LP_ENTRIES

    def add(self, answer: Checkpointing) -> None:
        self.calls += 1
        self.statuses[answer.status] = self.statuses.get(answer.status, 0) + 1
        if answer.status.startswith("lp-"):
            self.lp += 1
            self.solve_s += answer.solve_s
        elif answer.status != "trivial":
            self.scip += 1
            self.solve_s += answer.solve_s
            if answer.values is not None:
                self.max_gap = max(self.max_gap, answer.gap)


def sort_longest_first(units: list[list[int]], tokens: dict[int, int]) -> list[list[int]]:
    return sorted(units, key=lambda u: (-len(u), -sum(map(tokens.__getitem__, u)), u[0]))


def solve_pipeline(units: list[list[int]], costs: dict[int, ChunkCost], budgets: list[float],
                   tokens: dict[int, int], *, mode: str, warmup: str, time_limit_s: float,
                   log: SolverLog, max_layers: int, relax: bool = False) -> Pipeline:
    """One group as one pipeline: its order, its checkpointing and its cost (inf: it cannot fit)."""
    ordered = sort_longest_first(units, tokens)
    if not ordered:
        answer = Checkpointing((), "trivial")
        log.add(answer)
        return Pipeline((), answer, 0.0)
    if unlimited(budgets):  # every window fits, as solve would find
        num_vars = sum(map(len, ordered)) + len(budgets) - 1
        answer = Checkpointing((max_layers if mode == "full" else 0,) * num_vars, "trivial")
    else:
        problem = build_problem(ordered, costs, budgets, warmup, max_layers, log)
        answer = solve(problem, mode, time_limit_s=time_limit_s, relax=relax, log=log)
    log.add(answer)
    if answer.values is None:
        return Pipeline(tuple(map(tuple, ordered)), answer, math.inf)
    # the group DP prices n(n+1)/2 ranges of a replica's chunks: these sums run in C (the same
    # additions in the same order as a loop's)
    mine = list(map(costs.__getitem__, chain.from_iterable(ordered)))
    mean_chunk = sum(map(add, map(_FWD, mine), map(_BWD, mine))) / len(mine)
    layer_fwd = sum(map(_LAYER_FWD, mine)) / len(mine)
    delta = (len(budgets) - 1) * mean_chunk
    return Pipeline(tuple(map(tuple, ordered)), answer, delta + layer_fwd * sum(answer.values))


def solve_range(units: list[list[int]], costs: dict[int, ChunkCost], budgets: list[float],
                tokens: dict[int, int], **kwargs) -> list[Pipeline]:
    """One DP range as one pipeline or, when that cannot fit (PAPERS.md W2) and the range holds
    several units, as consecutive pipelines: longest units first, each pipeline the longest run
    of them that fits (bisection), the paper's "a number of 1F1B pipelines ... for multiple
    excessively long sequences" that a chunk-count range alone cannot split. Infinite cost when
    one unit alone cannot fit."""
    whole = solve_pipeline(units, costs, budgets, tokens, **kwargs)
    if math.isfinite(whole.cost_s) or len(units) <= 1:
        return [whole]
    ordered = sort_longest_first(units, tokens)
    out, start = [], 0
    while start < len(ordered):
        best = solve_pipeline(ordered[start:start + 1], costs, budgets, tokens, **kwargs)
        if not math.isfinite(best.cost_s):
            return [whole]
        lo, hi = start + 1, len(ordered) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            found = solve_pipeline(ordered[start:mid], costs, budgets, tokens, **kwargs)
            if math.isfinite(found.cost_s):
                lo, best = mid, found
            else:
                hi = mid - 1
        out.append(best)
        start = lo
    return out


def group(units: list[list[int]], costs: dict[int, ChunkCost], budgets: list[float],
          tokens: dict[int, int], *, mode: str, warmup: str, time_limit_s: float,
          log: SolverLog, max_layers: int, relax: bool = False) -> tuple[list[Pipeline], float]:
    """Eq. 14 over units grouped by chunk count; returns the pipelines (shortest units' group
    last) and the DP's total cost (inf when even one unit per pipeline cannot fit). A range that
    cannot fit as one pipeline runs as several (solve_range)."""
    by_count: dict[int, list[list[int]]] = {}
    for unit in units:
        by_count.setdefault(len(unit), []).append(unit)
    n = max(by_count)
    best = [0.0] + [math.inf] * n
    choice: list[tuple[int, list[Pipeline]]] = [(0, [])] * (n + 1)
    solved: dict[tuple[int, int], list[Pipeline]] = {}  # ranges of chunk counts, same units
    present = sorted(by_count)
    for i in range(1, n + 1):
        for k in range(i):
            span = [c for c in present if k < c <= i]
            key = (span[0], span[-1]) if span else (0, 0)
            pipes = solved.get(key)
            if pipes is None:
                members = [u for count in span for u in by_count[count]]
                pipes = solved[key] = solve_range(
                    members, costs, budgets, tokens, mode=mode, warmup=warmup,
                    time_limit_s=time_limit_s, log=log, max_layers=max_layers, relax=relax)
            total = best[k] + sum(p.cost_s for p in pipes)
            if total < best[i]:
                best[i], choice[i] = total, (k, pipes)
    out, i = [], n
    while i > 0 and choice[i][1]:
        k, pipes = choice[i]
        out += [p for p in pipes if p.units]
        i = k
    return out, best[n]
