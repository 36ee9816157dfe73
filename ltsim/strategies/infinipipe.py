"""InfiniPipe: elastic pipeline parallelism (Wang et al. 2025, seeds/infinipipe.md; PAPERS.md 4).

Ulysses sequence parallelism inside a stage (``parallel.cp`` = d_s ranks, all-to-alls around
attention), pipeline parallelism across stages (``parallel.pp`` = d_p), ZeRO (``parallel.zero_stage``,
3 in the paper) over the stage's ranks. Per DP replica and global batch:

1. **Chunking** (epp_chunking, Alg. 1): long sequences split into slices of equal backward time on
   the mesh of the longest one cut into N slices, short ones packed with each other or with a tail
   slice (token-level PP for the long, batch-level PP for the short). ``num_slices`` N is given or,
   "auto", searched (PAPERS.md F3): N from the fewest slices whose chunks fit a chunk's token
   capacity (F4) upwards, keeping the N of least estimated time, until two N in a row do no
   better than one that fits (or slices would average under 128 tokens, or N reaches 64; while
   no N fits, the search goes on). The estimate is Eq. 12 with Eq. 13's terms: the chunks' busy
   time on one stage plus, per pipeline, delta and the recomputation; under ZeRO-3 a chunk's
   pass takes at least the parameter all-gather it waits for (and its backward the gradient
   reduce-scatter after it), which short chunks expose (epp_costs.StageCosts.chunk).
2. **Scheduling** (epp): the grouping DP of Eq. 14 cuts the units into consecutive 1F1B pipelines
   (gradient accumulation across them; a pipeline starts once the previous one has drained). The
   DP prices each range on the LP relaxation of the checkpointing MILP of Eq. 15-20, rounded up
   (a feasible answer within n + d_p - 1 layers of the optimum); the pipelines it picks are then
   solved exactly by SCIP. So a batch costs one SCIP MILP per pipeline, not per DP transition
   (the paper solves a MILP per transition and hides the time by solving ahead).
3. **The plan** runs exactly that: on stage p, chunk k forwards its stage's layers keeping the
   activations of all but the first c = C[d_p - p + f2b[k]] layers, and for those c layers only
   each layer's input and, when later slices of its sequence attend to it, its K/V; before its
   backward it recomputes the c layers (an R op over them; one layer's working set at a time).
   The last chunk of a split sequence (its tail) allocates the dK/dV of the earlier ones (Eq. 5),
   each freed by its chunk's backward. c = all of the stage's layers is Megatron's full recompute.

Options: ``num_slices`` ("auto" or N), ``chunking`` ("balanced" Alg. 1, "time-only" Table 2's
"Balance Time", "fixed" slices of the mesh's first slice), ``checkpointing`` ("milp", "none",
"full", "uniform"), ``grouping`` (true: the DP; false: one pipeline, or as few as fit),
``warmup`` ("prefill": Eq. 7's d_p - p + N_prefill - 1 forwards before the first backward, so the
steady phase has no bubble; "1f1b": Megatron's, the schedule of Fig. 6(a)),
``milp_time_limit_s`` per MILP. A DP range that cannot fit as one pipeline runs as several
(epp.solve_range), which is how "none" fits long sequences.
``parallel.recompute`` sets what uncheckpointed layers keep ("none" or "selective"); "full" is
``checkpointing = "full"``. The resolved options of a plan record N, the pipelines, whether every
pipeline had a checkpointing answer that fits (``all_solved``; false: by the planner's memory
terms even one unit alone does not fit, so it runs with every layer checkpointed, or none under
"none", and the simulation says whether that fits: it may, narrowly) and the solver
(calls, SCIP solves, the largest gap, seconds).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Keep, OpKind, Plan, Slice, op_key
from ltsim.strategies import epp, schedule
from ltsim.strategies.base import PlanContext, check_time_limit, deal_replicas, positive
from ltsim.strategies.epp_chunking import CHUNKINGS, Unit, chunk_balanced, chunk_fixed, mesh
from ltsim.strategies.epp_costs import StageCosts
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import interleave_1f1b
from ltsim.strategies.schedule import Action, Layout, Mem, Schedule, mems

NAME = "infinipipe"
CP_KIND = "ulysses"  # its sequence parallelism over parallel.cp splits heads, never ring
MAX_SLICES = 64  # the auto search's ceiling on N
MIN_SLICE_TOKENS = 128  # nor does it cut slices shorter (kernels there are launch-bound)
_PATIENCE = 2  # N values in a row without improvement that end the search
# While no N fits, the search goes on (to MAX_SLICES): how close an N comes (the bytes every
# layer checkpointed still lacks) does not say whether a larger one fits. A rule that stopped
# after eight N in a row coming no closer planned GPT-30B at a 118,784-token cap with N = 8,
# 38.70 GiB of 37.14, where N = 24 fits (36.83 GiB; `--set workload.max_length=118784` on its
# InfiniPipe scenario, 2026-11-29), so the search is not cut short
_TOO_LARGE = 3  # and N values in a row past a pass's budget (epp.ProblemTooLarge)
_PROBE_TOKENS = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    num_slices: int | str = "auto"
    chunking: str = "balanced"
    checkpointing: str = "milp"
    grouping: bool = True
    warmup: str = "prefill"
    milp_time_limit_s: float = 0.25

    def validate(self) -> None:
        if self.num_slices != "auto":
            if not isinstance(self.num_slices, int) or isinstance(self.num_slices, bool):
                raise ConfigError("strategy.num_slices", 'a positive integer or "auto"',
                                  self.num_slices)
            positive("num_slices", self.num_slices)
            if self.num_slices > MAX_SLICES:  # each slice is a MILP over the batch: bounded work
                raise ConfigError("strategy.num_slices", f'at most {MAX_SLICES} (or "auto")',
                                  self.num_slices, 'use "auto", which searches 1 to '
                                  f"{MAX_SLICES}")
        for key, allowed in (("chunking", CHUNKINGS), ("checkpointing", epp.CHECKPOINTINGS),
                             ("warmup", epp.WARMUPS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"strategy.{key}", f"one of {', '.join(allowed)}",
                                  getattr(self, key))
        check_time_limit(self.milp_time_limit_s)


def ulysses_layout(ctx: PlanContext) -> Layout:
    """Ulysses SP over the cp ranks of a stage, PP across stages (schedule.ulysses_layout)."""
    return schedule.ulysses_layout(ctx.parallel, ctx.model.num_layers,
                                   ctx.model.num_attention_heads)


def uncheckpointed_keep(ctx: PlanContext, name: str, checkpointing: str) -> Keep:
    recompute = ctx.parallel.recompute
    if recompute == "full" and checkpointing != "full":
        raise ConfigError("parallel.recompute", f'"none" or "selective" for {name} (it chooses '
                          "which layers to recompute itself)", recompute,
                          'set strategy.checkpointing = "full" and parallel.recompute = "selective"')
    return Keep.ALL if recompute == "none" else Keep.SELECTIVE


# -- planning -------------------------------------------------------------------------------------
#: How a strategy cuts one replica's sequences (id -> tokens) into units for a slice count N,
#: given the costs and the chunk token capacity.
MakeUnits = Callable[["StageCosts", int, dict[int, int], int], list[Unit]]


@dataclass(frozen=True, slots=True)
class Planned:
    """One replica's chunks (slices each), units (chunk ids), pipelines and the N it used."""

    chunks: tuple[tuple[Slice, ...], ...]
    units: tuple[tuple[int, ...], ...]
    pipelines: tuple[epp.Pipeline, ...]
    num_slices: int
    estimate_s: float
    shortfall: float = 0.0  # bytes every layer checkpointed still lacks (when nothing fits)


class Planner:
    """Chunking + DP + MILPs for one replica's sequences, against ltsim's costs."""

    def __init__(self, costs: StageCosts, make_units: MakeUnits, *, mode: str, warmup: str,
                 grouping: bool, time_limit_s: float) -> None:
        self.costs, self.make_units = costs, make_units
        self.mode, self.warmup, self.grouping, self.time_limit_s = mode, warmup, grouping, time_limit_s
        self.log = epp.SolverLog()
        self.budgets = [costs.budget(s) for s in range(costs.num_stages)]
        self.capacity = self._capacity()

    def _capacity(self) -> int:
        """F4: the most tokens one chunk may hold: its memory under full checkpointing, with the
        K/V it keeps for later slices and their gradients, alone on the fullest stage."""
        probe = self.costs.chunk((Slice(0, 0, _PROBE_TOKENS),), nontail=True, timed=False)
        layers = self.costs.max_ckpt_layers
        tokens = []
        for stage, budget in enumerate(self.budgets):
            per_token = (probe.base[stage] - layers * probe.saved[stage]
                         + probe.transient[stage]) / _PROBE_TOKENS
            tokens.append(budget / per_token if per_token > 0 else math.inf)
        return int(min(min(tokens), 1 << 40))

    def plan(self, lengths: dict[int, int], num_slices: int | str) -> Planned:
        """The chunks and pipelines of one replica; "auto" searches N (module docstring)."""
        if num_slices != "auto":
            return self._evaluate(lengths, num_slices)
        best: Planned | None = None
        worse = too_large = 0
        longest = max(lengths.values())
        for n in range(1, MAX_SLICES + 1):
            if n > 1 and longest < n * MIN_SLICE_TOKENS:
                break
            try:  # (while nothing fits, each N first tries its longest unit alone)
                found = self._evaluate(lengths, n, force=False, relax=True,
                                       probe=best is not None and not math.isfinite(best.estimate_s))
            except epp.ProblemTooLarge:  # past a pass's budget: a larger N may make less (the
                too_large += 1  # pairs dip where the chunking changes, and an N that needs no
                if too_large >= _TOO_LARGE:  # checkpointing solves no LP), so search on, but
                    break  # each such pass costs up to its whole budget: a few in a row end it
                continue
            too_large = 0
            if found is None:
                continue
            if best is None or found.estimate_s < best.estimate_s:
                best, worse = found, 0
            elif math.isfinite(best.estimate_s):  # no better than a plan that fits
                worse += 1
                if worse >= _PATIENCE:
                    break
            elif not math.isfinite(found.estimate_s) and found.shortfall < best.shortfall:
                best = found  # nothing fits yet: the N that comes closest, and search on
        return self._evaluate(lengths, best.num_slices if best is not None else MAX_SLICES,
                              probe=best is None or not math.isfinite(best.estimate_s))

    def _evaluate(self, lengths: dict[int, int], num_slices: int, force: bool = True,
                  relax: bool = False, probe: bool = False) -> Planned | None:
        """The chunks and pipelines of ``num_slices`` N (None: a chunk past the capacity, unless
        ``force``); ``relax``: the pipelines priced on LP relaxations only. ``probe``: first ask
        whether the longest unit fits as a pipeline of its own (``_alone_fits``), and when it
        does not, skip the grouping, which then cannot fit either."""
        raw = self.make_units(self.costs, self.capacity, lengths, num_slices)
        chunks: list[tuple[Slice, ...]] = []
        units: list[list[int]] = []
        split: set[int] = set()
        for unit in raw:
            ids = list(range(len(chunks), len(chunks) + len(unit.chunks)))
            chunks += unit.chunks
            units.append(ids)
            if unit.split:
                split.update(ids[:-1])
        tokens = {c: sum(s.num_tokens for s in piece) for c, piece in enumerate(chunks)}
        if not force and max(tokens.values()) > self.capacity:
            return None
        costs = {c: self.costs.chunk(chunks[c], nontail=c in split) for c in range(len(chunks))}
        self.log.new_pass()  # the DP's problems together at most epp.MAX_WINDOW_PAIRS
        kwargs = dict(mode=self.mode, warmup=self.warmup, time_limit_s=self.time_limit_s,
                      log=self.log, max_layers=self.costs.max_ckpt_layers)
        if probe and not self._alone_fits(units, costs, tokens, kwargs):
            pipes, total = [], math.inf
        elif self.grouping:  # the DP's ranges priced on LP relaxations (every range, one call)
            pipes, total = epp.group(units, costs, self.budgets, tokens, relax=True, **kwargs)
        else:
            pipes = epp.solve_range(units, costs, self.budgets, tokens, relax=True, **kwargs)
            total = sum(p.cost_s for p in pipes)
        if not relax and math.isfinite(total):  # the pipelines chosen, solved exactly (a pass
            self.log.new_pass()  # of its own: they are some of the DP's, so it fits)
            pipes = [epp.solve_pipeline([list(u) for u in p.units], costs, self.budgets, tokens,
                                        **kwargs) for p in pipes]
            total = sum(p.cost_s for p in pipes)
        if not math.isfinite(total):  # one unit alone does not fit: one pipeline with every
            # layer checkpointed ("none": none); the simulation reports what does not fit
            layers = 0 if self.mode == "none" else self.costs.max_ckpt_layers
            values = (layers,) * (len(chunks) + self.costs.num_stages - 1)
            ordered = epp.sort_longest_first(units, tokens)
            pipes = [epp.Pipeline(tuple(map(tuple, ordered)),
                                  epp.Checkpointing(values, "infeasible"), math.inf)]
            problem = epp.build_problem(ordered, costs, self.budgets, self.warmup,
                                        self.costs.max_ckpt_layers)
            return Planned(tuple(chunks), tuple(map(tuple, units)), tuple(pipes), num_slices,
                           math.inf, problem.shortfall(values))
        busy = sum(c.fwd_s + c.bwd_s for c in costs.values())
        return Planned(tuple(chunks), tuple(map(tuple, units)), tuple(pipes), num_slices,
                       busy + total)

    def _alone_fits(self, units: list[list[int]], costs: dict, tokens: dict[int, int],
                    kwargs: dict) -> bool:
        """Whether the longest unit (``epp.sort_longest_first``'s first) fits as a pipeline of
        its own, by the LP relaxation the grouping prices ranges on. When it does not, no
        grouping fits (the DP's cost and solve_range's are infinite): a pipeline that also holds
        other units starts with it (longest first), so its windows hold its chunks and more,
        against the same budgets. One LP instead of the DP's n(n+1)/2 ranges, which took GPT-30B
        at a 131,072-token cap, where no N fits, 272 s over N = 1 to 64 (9 s since)."""
        longest = epp.sort_longest_first(units, tokens)[:1]
        return math.isfinite(epp.solve_pipeline(longest, costs, self.budgets, tokens, relax=True,
                                                **kwargs).cost_s)


def chunk_actions(ids: tuple[int, ...], i: int, c: int, keep: Keep, device: int, stage: int,
                  layers: tuple[int, int]) -> tuple[list[Action], list[Action]]:
    """Forward and backward items of chunk ``ids[i]`` of a unit on one stage, with its first ``c``
    layers checkpointed (module docstring, step 3)."""
    n, chunk = len(ids), ids[i]
    first, stop = layers
    nontail = i < n - 1
    grads = tuple(Mem("kv_grad", ids[j]) for j in range(n - 1)) if i == n - 1 and n > 1 else ()
    grad_frees = mems("kv_grad") if nontail else ()
    deps = (op_key(device, stage, OpKind.B, ids[i + 1]),) if nontail else ()
    if c <= 0:
        return ([Action(OpKind.F, chunk, keep, allocs=mems("act"))],
                [Action(OpKind.B, chunk, keep, allocs=grads, frees=mems("act") + grad_frees,
                        deps=deps)])
    if c >= stop - first:  # every layer: Megatron's full recompute
        work = Mem("act", keep=Keep.ALL, one_layer=True)
        state = mems("ckpt", "kv") if nontail else mems("ckpt")
        return ([Action(OpKind.F, chunk, Keep.INPUT, allocs=state)],
                [Action(OpKind.R, chunk, Keep.INPUT, allocs=(work,), head=False),
                 Action(OpKind.B, chunk, Keep.INPUT, allocs=grads,
                        frees=(work,) + state + grad_frees, deps=deps)])
    part = (first, first + c)
    state = (Mem("act", layers=(first + c, stop)), Mem("ckpt", layers=part))
    if nontail:
        state += (Mem("kv", layers=part),)
    work = Mem("act", keep=Keep.ALL, layers=(first, first + 1))
    return ([Action(OpKind.F, chunk, keep, allocs=state)],
            [Action(OpKind.R, chunk, Keep.INPUT, allocs=(work,), layers=part, head=False),
             Action(OpKind.B, chunk, keep, allocs=grads, frees=(work,) + state + grad_frees,
                    deps=deps)])


def stage_order(pipes: list[epp.Pipeline], keep: Keep, device: int, stage: int,
                layout: Layout, warmup: str) -> list[Action]:
    """One stage's actions: the pipelines one after another, each 1F1B with its warm-up."""
    num_stages = len(layout.stage_layers)
    layers = layout.stage_layers[stage]
    order: list[Action] = []
    for pipe in pipes:
        rank = epp.backward_rank([list(u) for u in pipe.units])
        fwd, bwd = [], []
        for unit in pipe.units:
            items = [chunk_actions(unit, i, pipe.checkpointing.layers(stage, num_stages, rank[c]),
                                   keep, device, stage, layers) for i, c in enumerate(unit)]
            fwd += [f for f, _ in items]
            bwd += [b for _, b in reversed(items)]
        prefill = max(len(u) for u in pipe.units)
        depth = num_stages + prefill - 1 if warmup == "prefill" else num_stages
        order += interleave_1f1b(fwd, bwd, stage, depth)
    return order


def build(batch: tuple[int, ...], ctx: PlanContext, *, name: str, options: dict, keep: Keep,
          make_units: MakeUnits, num_slices: int | str, mode: str, warmup: str, grouping: bool,
          time_limit_s: float, knob: tuple[str, str]) -> Plan:
    """Plan every replica with the Planner and lower the stages' orders (shared with Seq1F1B).
    ``knob``: the option that sets how many chunks a sequence makes, and how to make fewer, for
    a batch whose checkpointing problems are too large to plan (epp.ProblemTooLarge)."""
    started = time.perf_counter()
    layout = ulysses_layout(ctx)
    planner = Planner(StageCosts(ctx.cost, layout, keep), make_units, mode=mode,
                      warmup=warmup, grouping=grouping, time_limit_s=time_limit_s)
    chunks: list[Chunk] = []
    orders: dict[int, list[Action]] = {}
    chosen, num_pipes, solved = [], 0, True
    for replica, seq_ids in enumerate(deal_replicas(batch, ctx.parallel.dp)):
        if not seq_ids:
            continue
        try:
            planned = planner.plan({s: batch[s] for s in seq_ids}, num_slices)
        except epp.ProblemTooLarge as exc:
            key, fix = knob
            why = ("a sequence of n chunks makes about n^2 / 2 pairs a stage"
                   if exc.unit.startswith("(window") else "SoPlex solves each without a limit")
            raise ConfigError(key, f"such that the checkpointing problems that price one "
                              f"replica's pipelines hold at most {exc.limit:,} {exc.unit} "
                              f"together ({why})", options.get(key.split(".")[-1]), fix,
                              context=f"this batch makes more than {exc.amount:,}") from None
        offset = len(chunks)
        chunks += [Chunk(offset + i, slices, replica) for i, slices in enumerate(planned.chunks)]
        pipes = [replace(p, units=tuple(tuple(offset + c for c in u) for u in p.units))
                 for p in planned.pipelines]
        chosen.append(planned.num_slices)
        num_pipes += len(pipes)
        solved = solved and all(p.checkpointing.status != "infeasible" for p in pipes)
        for stage in range(ctx.parallel.pp):
            device = layout.device(replica, stage)
            orders[device] = stage_order(pipes, keep, device, stage, layout, warmup)
    log = planner.log
    if "num_slices" in options:
        options = {**options, "num_slices": max(chosen, default=0)}
    resolved = {**options, "pipelines": num_pipes, "all_solved": solved,
                "milp_calls": log.calls, "milp_scip": log.scip,
                "milp_max_gap": round(log.max_gap, 6),
                "planner_s": round(time.perf_counter() - started, 3)}
    return lower(Schedule(strategy=name, options=resolved, seq_lengths=tuple(batch),
                          chunks=tuple(chunks), devices=layout.devices(), orders=orders), layout)


def _units(options: Options) -> MakeUnits:
    def make_units(costs: StageCosts, capacity: int, lengths: dict[int, int], n: int
                   ) -> list[Unit]:
        if options.chunking == "fixed":
            return chunk_fixed(lengths, mesh(max(lengths.values()), n, costs.chunk_time).tokens)
        return chunk_balanced(lengths, n, costs.chunk_time, capacity, options.chunking)[0]
    return make_units


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    keep = uncheckpointed_keep(ctx, NAME, options.checkpointing)
    return build(batch, ctx, name=NAME, options=asdict(options), keep=keep,
                 make_units=_units(options), num_slices=options.num_slices,
                 mode=options.checkpointing, warmup=options.warmup, grouping=options.grouping,
                 time_limit_s=options.milp_time_limit_s,
                 knob=("strategy.num_slices", "use fewer slices per sequence (or \"auto\"), or "
                       "fewer sequences per DP replica"))
