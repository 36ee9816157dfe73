"""FlexSP (Wang et al., ASPLOS 2025): heterogeneous Ulysses sequence-parallel groups chosen per
micro-batch by a MILP; InfiniPipe's strongest baseline (seeds/infinipipe.md 5.1, PAPERS.md
section 7). Read from the public solver (PKU-DAIR/Hetu-Galvatron, branch ``flexsp``,
``galvatron/flexsp_solver/solver.py`` and ``sequence_module_py.py``; data/SOURCES.md); the code
here is ltsim's own.

All ``dp x cp`` GPUs form one ZeRO-3 domain (``parallel.zero_stage``, 3 in the paper) and one pool
of sequence-parallel ranks; ``parallel.cp`` is the largest SP degree a group may have. Per global
batch:

1. **Micro-batches** (``sort_consec``): the sequences sorted longest first and cut into M
   consecutive runs minimising the largest run's tokens; M starts at the fewest micro-batches
   whose tokens fit the cluster (total / (C x GPUs), C the tokens one GPU holds) and grows while
   some run does not fit or its MILP is infeasible (the solver's ``solve_flexSP_globalbatch``).
2. **Buckets**: a micro-batch's lengths, sorted, cut into at most ``bucket_num`` runs by the
   DP that minimises the padding to each run's longest (``bucketing_seqs``); more buckets while
   the padded tokens exceed the mean of the real tokens and the cluster's capacity.
3. **MILP** (``solve_flexSP_bucket_seqs``), with pyscipopt under a time limit, the gap reported:
   slots p of SP degree sp_p (powers of two from ``min_sp`` to ``parallel.cp``, GPUs / sp of each,
   fewer of the smaller ones when the longest sequences need the largest; SP = 1 is left out as
   the public solver does by default); integers A_kp (sequences of bucket k in slot p), binaries
   m_p (slot used); every sequence in one slot of at least its minimum SP degree (the power of two
   of ceil(length / C)); a slot's padded tokens / sp_p <= C; a slot's time
   sum_k A_kp t(k, sp_p) + b(sp_p) m_p <= T; sum_p m_p sp_p = GPUs; minimise T. t and b come from
   ltsim's cost model (forward, backward and any recompute of the whole model over sp_p ranks,
   with Ulysses' all-to-alls at the group's bandwidth): t(k, sp) is the marginal time of a
   sequence of the bucket's longest length, b(sp) a group's fixed time.
4. **The plan**: the used slots placed on consecutive GPUs, largest first (so a group of sp ranks
   starts at a multiple of sp and, for sp <= GPUs per node, stays inside a node); every rank of
   a group runs forward then backward over its group's sequences packed, sharded the Ulysses way
   over sp ranks. ZeRO-3 gathers the parameters per op and reduce-scatters gradients every
   micro-step, so each micro-step waits for the slowest group (the lowering).

Options: ``bucket_num`` (16), ``min_sp`` (2), ``milp_time_limit_s`` per MILP (1 s; the public
solver allows 10). The heads must divide over tp x sp for every sp used. A sequence longer than
``parallel.cp`` ranks hold runs alone on ``cp`` ranks and the result reports it does not fit.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Comm, Keep, OpKind, Plan, Slice, Split, Work
from ltsim.strategies import milp
from ltsim.strategies.base import PlanContext, check_time_limit, positive
from ltsim.strategies.deepspeed_cp import bucket_tokens, check_no_pipeline
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import kept_actions
from ltsim.strategies.schedule import Action, Layout, Schedule, keep_policy

NAME = "flexsp"
CP_KIND = "ulysses"  # its sequence parallelism over parallel.cp splits heads, never ring
GAP_LIMIT = 0.01  # SCIP stops within 1 % of its bound (the gap is reported)


MAX_BUCKETS = 256  # 16 times FlexSP's own 16


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    bucket_num: int = 16
    min_sp: int = 2
    milp_time_limit_s: float = 1.0

    def validate(self) -> None:
        positive("bucket_num", self.bucket_num)
        if self.bucket_num > MAX_BUCKETS:  # (a fuzzing review: 100,000 ran for minutes)
            raise ConfigError("strategy.bucket_num", f"at most {MAX_BUCKETS} (each bucket is a "
                              "row of the padding DP and a set of the MILP's variables)",
                              self.bucket_num, "e.g. strategy.bucket_num = 16 (FlexSP's)")
        positive("min_sp", self.min_sp)
        if self.min_sp & (self.min_sp - 1):
            raise ConfigError("strategy.min_sp", "a power of two", self.min_sp,
                              "e.g. strategy.min_sp = 2 (FlexSP's) or 1")
        check_time_limit(self.milp_time_limit_s)


# -- micro-batches and buckets ----------------------------------------------------------------
def sort_consec(lengths: list[int], count: int) -> list[list[int]]:
    """Indices of ``lengths`` sorted longest first, cut into at most ``count`` consecutive runs
    minimising the largest run's tokens (bisection on that largest sum; greedy cuts are optimal for
    a given bound)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))

    def cut(bound: int) -> list[list[int]] | None:
        runs, used = [[]], 0
        for i in order:
            if runs[-1] and used + lengths[i] > bound:
                runs.append([])
                used = 0
            runs[-1].append(i)
            used += lengths[i]
        return runs if len(runs) <= count else None

    lo, hi = max(lengths), sum(lengths)
    while lo < hi:
        mid = (lo + hi) // 2
        if cut(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return cut(lo)


def bucketing(lengths: list[int], count: int) -> list[list[int]]:
    """Indices of ``lengths`` (ascending) in at most ``count`` runs minimising the total padding
    to each run's longest: the public solver's DP, vectorised over the cut point."""
    return Bucketing(lengths).runs(count)


class Bucketing:
    """``bucketing`` for one micro-batch at growing counts: the DP's rows (row b: the least
    padding of the first i sequences in b runs) do not depend on the count asked for, so each is
    computed once (solve_groups asks for one run more until the padding is small enough:
    recomputing every row each time made the planner 11.5 s instead of 6.4 s on a batch of 2,048,
    validation/perf/README.md)."""

    def __init__(self, lengths: list[int]) -> None:
        self.order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        self.s = np.array([lengths[i] for i in self.order], dtype=float)
        self.prefix = np.concatenate(([0.0], np.cumsum(self.s)))
        n = len(self.s)
        first = np.full(n + 1, math.inf)
        first[0] = 0.0
        self.dp = [first]  # row b: (n + 1,) least padding
        self.cut = [np.zeros(n + 1, dtype=int)]

    def _extend(self) -> None:
        """The next row: for each i, the cut k < i of least padding (the first of equals), the
        candidates of 32 values of i at once (a Python step per i took 19 of a 16,384-sequence
        batch's 46 s of planning; the same sums, so the same answer to the bit)."""
        s, prefix, previous = self.s, self.prefix, self.dp[-1]
        n = len(s)
        row, cut = np.full(n + 1, math.inf), np.zeros(n + 1, dtype=int)
        j = np.arange(n + 1)
        for start in range(1, n + 1, 32):
            i = np.arange(start, min(start + 32, n + 1))[:, None]
            k = j[None, :i[-1, 0]]  # the cuts below the block's last i
            cost = previous[None, :i[-1, 0]] + s[i - 1] * (i - k) - (prefix[i] - prefix[k])
            cost[k >= i] = math.inf  # only k < i
            best = np.argmin(cost, axis=1)
            row[i[:, 0]], cut[i[:, 0]] = cost[np.arange(len(best)), best], best
        self.dp.append(row)
        self.cut.append(cut)

    def runs(self, count: int) -> list[list[int]]:
        n = len(self.s)
        count = min(count, n)
        while len(self.dp) <= count:
            self._extend()
        best = int(np.argmin([self.dp[b][n] for b in range(1, count + 1)])) + 1
        runs, i = [], n
        for b in range(best, 0, -1):
            k = self.cut[b][i]
            runs.append([self.order[x] for x in range(k, i)])
            i = k
        return [r for r in reversed(runs) if r]


# -- the MILP -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Groups:
    """One micro-batch's answer: per used slot its SP degree and sequence indices (largest SP
    first), SCIP's status and gap."""

    groups: tuple[tuple[int, tuple[int, ...]], ...] | None
    status: str
    gap: float
    solve_s: float
    estimate_s: float


class GroupCosts:
    """t(length, sp) and b(sp) of step 3, from ltsim's cost model, cached."""

    def __init__(self, ctx: PlanContext, layout: Layout) -> None:
        self.ctx, self.layout = ctx, layout
        self.keep = keep_policy(ctx.parallel.recompute)
        self._cache: dict[tuple[int, int], float] = {}

    def group_s(self, tokens: int, sp: int) -> float:
        """Forward, backward and any recompute of one sequence of ``tokens`` over sp ranks."""
        key = (tokens, sp)
        value = self._cache.get(key)
        if value is None:
            par = self.ctx.parallel
            device = self.layout.rank_devices()[0]
            work = Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=device.layers,
                        split=Split(tp=par.tp, cp=sp, cp_kind="ulysses",
                                    sp=par.sequence_parallel), embed=True, head=True)
            kinds = (OpKind.F, OpKind.B) + ((OpKind.R,) if self.keep is Keep.INPUT else ())
            value = sum(self.ctx.cost.compute_s(kind, work, keep=self.keep) for kind in kinds)
            if sp > 1:
                gpus = (0, par.tp * sp - 1)
                value += 2 * self.ctx.cost.comm_s(Comm("all_to_all", "qkvo", work,
                                                       group_size=sp, gpus=gpus))
            self._cache[key] = value
        return value

    def fixed_s(self, sp: int) -> float:
        return self.group_s(1, sp)

    def marginal_s(self, tokens: int, sp: int) -> float:
        return max(0.0, self.group_s(tokens, sp) - self.fixed_s(sp))


def sp_slots(num_gpus: int, degrees: list[int], need_max: int, count_max: int) -> list[int]:
    """The slots' SP degrees: GPUs / sp of each degree, and of the degrees below the largest
    minimum (``need_max``, needed by ``count_max`` sequences) only what those leave (the public
    solver's ``get_sp_options`` with its pruning)."""
    slots = []
    for sp in degrees:
        if sp < need_max:
            slots += [sp] * max(0, (num_gpus - need_max * count_max) // sp)
        else:
            slots += [sp] * (num_gpus // sp)
    return slots


def group_holds(tokens: int, degrees: list[int], capacity: int) -> bool:
    """Whether the largest SP group's ranks hold a sequence of ``tokens``."""
    return min_degree(tokens, capacity) <= degrees[-1]


def fits_at_all(lengths, num_gpus: int, degrees: list[int], capacity: int) -> bool:
    """Whether a micro-batch of ``lengths`` can fit: its longest sequence in the largest SP
    group's ranks and its tokens in all of them (what ``solve_groups`` checks before its MILP)."""
    return group_holds(max(lengths), degrees, capacity) and sum(lengths) <= capacity * num_gpus


def solve_groups(lengths: list[int], num_gpus: int, degrees: list[int], capacity: int,
                 costs: GroupCosts, options: Options) -> Groups:
    """Step 3 for one micro-batch (``lengths``)."""
    from pyscipopt import Model, quicksum

    started = time.perf_counter()
    if not fits_at_all(lengths, num_gpus, degrees, capacity):
        return Groups(None, "infeasible", math.inf, 0.0, math.inf)
    buckets = Bucketing(lengths)
    runs = buckets.runs(options.bucket_num)
    limit = (sum(lengths) + capacity * num_gpus) / 2
    distinct = len(set(lengths))
    while sum(max(lengths[i] for i in r) * len(r) for r in runs) > limit and len(runs) < distinct:
        runs = buckets.runs(len(runs) + 1)
    bound = [max(lengths[i] for i in r) for r in runs]
    need_k = [min_degree(b, capacity) for b in bound]
    top = max(need_k)
    slots = sp_slots(num_gpus, degrees, top, sum(len(r) for r, k in zip(runs, need_k) if k == top))
    scale = max(costs.group_s(b, sp) for b in bound for sp in set(slots)) or 1.0
    model = Model("flexsp")
    model.hideOutput()
    model.setParam("limits/time", float(options.milp_time_limit_s))
    model.setParam("limits/gap", GAP_LIMIT)
    model.setParam("randomization/randomseedshift", 0)
    t = model.addVar("T", vtype="C", lb=0.0)
    used = [model.addVar(f"m{p}", vtype="B") for p in range(len(slots))]
    take = {(k, p): model.addVar(f"a{k}_{p}", vtype="I", lb=0, ub=len(runs[k]))
            for k in range(len(runs)) for p in range(len(slots)) if slots[p] >= need_k[k]}
    of_run: list[list] = [[] for _ in runs]  # each run's variables, and each slot's (k, var):
    of_slot: list[list] = [[] for _ in slots]  # built once (a scan per row grows as K x P^2)
    for (k, p), v in take.items():
        of_run[k].append(v)
        of_slot[p].append((k, v))
    for k, run in enumerate(runs):
        model.addCons(quicksum(of_run[k]) == len(run))
    loads = []
    for p, sp in enumerate(slots):
        mine = of_slot[p]
        load = (quicksum(costs.marginal_s(bound[k], sp) / scale * v for k, v in mine)
                + costs.fixed_s(sp) / scale * used[p])
        loads.append(load)
        model.addCons(quicksum(bound[k] * v for k, v in mine) <= capacity * sp)
        model.addCons(load <= t)
        model.addCons(quicksum(v for _, v in mine) <= len(lengths) * used[p])
        model.addCons(quicksum(v for _, v in mine) >= used[p])
        if p and slots[p - 1] == sp:  # identical slots: used ones first, heavier first (symmetry)
            model.addCons(used[p - 1] >= used[p])
            model.addCons(loads[p - 1] >= load)
    model.addCons(quicksum(sp * used[p] for p, sp in enumerate(slots)) == num_gpus)
    # valid: the GPUs' busy time is at most GPUs x T (tightens the LP bound, so the gap)
    model.addCons(quicksum(sp * load for sp, load in zip(slots, loads)) <= num_gpus * t)
    _warm_start(model, runs, bound, slots, take, used, t, capacity, need_k, costs, scale)
    model.setObjective(t, "minimize")
    status = milp.optimize(model)
    if model.getNSols() == 0:
        return Groups(None, status, math.inf, time.perf_counter() - started, math.inf)
    pool = [list(r) for r in runs]
    groups = []
    for p, sp in enumerate(slots):
        if round(model.getVal(used[p])) != 1:
            continue
        members = []
        for k in range(len(runs)):
            v = take.get((k, p))
            count = round(model.getVal(v)) if v is not None else 0
            members += pool[k][:count]
            del pool[k][:count]
        groups.append((sp, tuple(members)))
    groups.sort(key=lambda g: -g[0])
    gap = model.getGap()
    return Groups(tuple(groups), status, 0.0 if gap is None else float(gap),
                  time.perf_counter() - started, model.getVal(t) * scale)


def _warm_start(model, runs, bound, slots, take, used, t, capacity, need_k, costs, scale) -> None:
    """A first solution for SCIP: for each SP degree that every bucket may use, GPUs / sp groups of
    it filled longest first into the least loaded group that holds the tokens; the best of those."""
    best = None
    for sp in sorted(set(slots)):
        if sp < max(need_k):
            continue
        ids = [p for p, d in enumerate(slots) if d == sp]
        load, tokens = [0.0] * len(ids), [0] * len(ids)
        count: dict[tuple[int, int], int] = {}
        ok = True
        for k in sorted(range(len(runs)), key=lambda k: -bound[k]):
            for _ in runs[k]:
                fits = [g for g in range(len(ids)) if tokens[g] + bound[k] <= capacity * sp]
                if not fits:
                    ok = False
                    break
                g = min(fits, key=lambda g: load[g])
                load[g] += costs.marginal_s(bound[k], sp)
                tokens[g] += bound[k]
                count[(k, g)] = count.get((k, g), 0) + 1
        if not ok or min(tokens) == 0:
            continue
        span = max(load) + costs.fixed_s(sp)
        if best is None or span < best[0]:  # groups heaviest first onto the slots, as the
            rank = sorted(range(len(ids)), key=lambda g: -load[g])  # symmetry rows require
            slot = {g: ids[i] for i, g in enumerate(rank)}
            best = (span, ids, {(k, slot[g]): n for (k, g), n in count.items()})
    if best is None:
        return
    span, ids, count = best
    sol = model.createSol()
    for (k, p), v in take.items():
        model.setSolVal(sol, v, count.get((k, p), 0))
    for p, var in enumerate(used):
        model.setSolVal(sol, var, 1 if p in ids else 0)
    model.setSolVal(sol, t, span / scale)
    model.addSol(sol, free=True)


def min_degree(tokens: int, capacity: int) -> int:
    """The least power-of-two SP degree whose ranks hold ``tokens``."""
    need = max(1, -(-tokens // max(1, capacity)))
    return 1 << (need - 1).bit_length()


# -- planning -----------------------------------------------------------------------------------
def degrees_of(ctx: PlanContext, options: Options) -> list[int]:
    """The SP degrees allowed: powers of two from min_sp (at most parallel.cp) to parallel.cp that
    divide the heads per TP rank (Ulysses splits heads)."""
    par = ctx.parallel
    if options.min_sp > max(par.cp, 2):  # the default, 2, stands for 1 when cp is 1
        raise ConfigError("strategy.min_sp", f"at most parallel.cp = {par.cp} (the largest SP "
                          "degree)", options.min_sp, f"set strategy.min_sp to {par.cp} or less")
    heads = ctx.model.num_attention_heads // par.tp
    out, sp = [], 1
    while sp <= par.cp:
        if sp >= min(options.min_sp, par.cp) and heads % sp == 0:
            out.append(sp)
        sp *= 2
    if not out:
        raise ConfigError("parallel.cp", "a power of two dividing the heads per TP rank for flexsp",
                          par.cp, "choose parallel.cp from the powers of two that divide "
                          f"{heads} heads")
    return out


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    check_no_pipeline(ctx, NAME)
    started = time.perf_counter()
    par = ctx.parallel
    layout = Layout.of(par, ctx.model.num_layers)
    num_gpus = par.dp * par.cp
    capacity = bucket_tokens(ctx, layout, "auto")
    degrees = degrees_of(ctx, options)
    costs = GroupCosts(ctx, layout)
    lengths = list(batch)
    count = max(1, -(-sum(lengths) // (capacity * num_gpus)))
    solved: dict[tuple[int, ...], Groups] = {}
    calls = 0

    def hopeless(key: tuple[int, ...]) -> bool:  # a sequence no SP group holds: no count
        return not group_holds(max(key), degrees, capacity)  # of micro-batches solves it

    while True:  # more micro-batches until each that a group can hold is solved
        runs = sort_consec(lengths, count)
        keys = [tuple(batch[i] for i in run) for run in runs]
        last = count >= len(lengths)
        if not last and any(not fits_at_all(key, num_gpus, degrees, capacity)
                            and not hopeless(key) for key in keys):
            count += 1  # too many tokens in a micro-batch: no need to solve the others
            continue
        answers = []
        for key in keys:  # the longest sequences' first: the likeliest to fail
            if key not in solved:
                solved[key] = solve_groups(list(key), num_gpus, degrees, capacity, costs, options)
                calls += 1
            answers.append(solved[key])
            if answers[-1].groups is None and not hopeless(key) and not last:
                break  # this count fails: the other micro-batches need no MILP
        if last or (len(answers) == len(keys)
                    and all(a.groups is not None or hopeless(k) for k, a in zip(keys, answers))):
            break
        count += 1
    keep = keep_policy(par.recompute)
    chunks: list[Chunk] = []
    orders: dict[int, list[Action]] = {layout.rank_device(r, 0, j): [] for r in range(par.dp)
                                       for j in range(par.cp)}
    sizes: dict[int, int] = {}
    for run, answer in zip(runs, answers):
        groups = (answer.groups if answer.groups is not None
                  else _fallback(run, batch, degrees[-1], num_gpus))
        placed = _place(groups, run, num_gpus)
        for replica in range(par.dp):
            mine = [(first, sp, seqs) for first, sp, seqs in placed
                    if first // par.cp == replica]
            chunk = Chunk(len(chunks), tuple(Slice(s, 0, batch[s]) for _, _, seqs in mine
                                             for s in seqs), replica)
            chunks.append(chunk)
            for first, sp, seqs in mine:
                sizes[sp] = sizes.get(sp, 0) + 1
                slices = tuple(Slice(s, 0, batch[s]) for s in seqs)
                split = Split(tp=par.tp, cp=sp, cp_kind="ulysses", sp=par.sequence_parallel)
                forward, backward = kept_actions(chunk.index, keep)
                for rank in range(first, first + sp):
                    orders[layout.rank_device(replica, 0, rank % par.cp)] += [
                        a._replace(slices=slices, split=split) for a in forward + backward]
    gaps = [a.gap for a in solved.values() if a.groups is not None]  # inf: SCIP had no bound
    resolved = dict(asdict(options), micro_batches=len(runs), milp_calls=calls,
                    milp_max_gap=(round(max(gaps), 6) if gaps and math.isfinite(max(gaps))
                                  else None),
                    groups=",".join(f"sp{sp}x{n}" for sp, n in sorted(sizes.items())),
                    all_solved=all(a.groups is not None for a in answers),
                    planner_s=round(time.perf_counter() - started, 3))
    return lower(Schedule(strategy=NAME, options=resolved, seq_lengths=tuple(batch),
                          chunks=tuple(chunks), devices=layout.rank_devices(), orders=orders),
                 layout)


def _fallback(run: list[int], batch, top: int, num_gpus: int):
    """No MILP answer (a sequence longer than ``top`` ranks hold): the run's sequences dealt
    longest first to the least loaded of GPUs / top groups of ``top`` ranks."""
    groups = [[] for _ in range(max(1, num_gpus // top))]
    load = [0] * len(groups)
    for pos in sorted(range(len(run)), key=lambda p: -batch[run[p]]):
        g = load.index(min(load))
        groups[g].append(pos)
        load[g] += batch[run[pos]]
    return tuple((top, tuple(g)) for g in groups if g)


def _place(groups, run: list[int], num_gpus: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """Groups (largest SP first) on consecutive GPUs: (first GPU, sp, sequence ids)."""
    placed, first = [], 0
    for sp, members in groups:
        placed.append((first, sp, tuple(run[m] for m in members)))
        first += sp
    assert first <= num_gpus, (first, num_gpus)
    return placed
