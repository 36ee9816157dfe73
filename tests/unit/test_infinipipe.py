"""InfiniPipe (EPP) against the paper's golden examples (PAPERS.md 4.6): Eq. 7's windows, Alg. 2's
MILP shape and index map, the DP's solver calls, Fig. 6(a)'s toy, the mesh example and the
chunking invariants; and that a planned batch fits the memory the MILP was given."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.costs import UnitCostModel
from ltsim.plan import Keep, OpKind, Slice
from ltsim.runner import run
from ltsim.scenario import load_scenario
from ltsim.sim.engine import Engine
from ltsim.strategies import REGISTRY, epp, infinipipe
from ltsim.strategies.epp_chunking import chunk_balanced, first_reaching, mesh, split_on_mesh
from ltsim.strategies.epp_costs import ChunkCost
from ltsim.strategies.lowering import lower
from ltsim.strategies.pipeline import interleave_1f1b
from ltsim.strategies.schedule import Action, Schedule
from tests.conftest import REPO, unit_ctx

K = 1024


def _chunk_cost(base=1, saved=1.0, stages=4):
    return ChunkCost(1.0, 2.0, 0.1, (base,) * stages, (saved,) * stages, (0,) * stages)


def test_eq7_windows_in_the_prefill_schedule():
    units = [[0, 1, 2]] + [[c] for c in range(3, 12)]  # longest (3 chunks) first
    sizes = [max(map(len, epp.windows(epp.pipeline_order(units, s, 4, "prefill"))))
             for s in range(4)]
    assert sizes == [6, 5, 4, 3]  # |W_p| = d_p - p + N_prefill


@pytest.mark.parametrize("warmup", ["prefill", "1f1b"])
def test_pipeline_order_is_interleave_1f1b(warmup):
    rng = random.Random(0)
    for _ in range(50):
        units, next_id = [], 0
        for _ in range(rng.randint(1, 6)):
            n = rng.randint(1, 4)
            units.append(list(range(next_id, next_id + n)))
            next_id += n
        stages = rng.randint(1, 5)
        prefill = max(map(len, units))
        depth = stages + prefill - 1 if warmup == "prefill" else stages
        for stage in range(stages):
            fwd = [[Action(OpKind.F, c, Keep.ALL)] for u in units for c in u]
            bwd = [[Action(OpKind.B, c, Keep.ALL)] for u in units for c in reversed(u)]
            want = [(a.kind, a.chunk) for a in interleave_1f1b(fwd, bwd, stage, depth)]
            assert epp.pipeline_order(units, stage, stages, warmup) == want


def test_milp_has_one_variable_per_anti_diagonal_with_the_eq15_index_map():
    d_p, n = 4, 7
    units = [[0, 1, 2], [3, 4], [5], [6]]
    costs = {c: _chunk_cost(base=10, saved=1.0) for c in range(n)}
    problem = epp.build_problem(units, costs, [40.0] * d_p, "prefill", max_layers=5)
    assert problem.num_vars == n + d_p - 1
    model, variables = epp.scip_model(problem)
    assert len(model.getVars()) == n + d_p - 1
    assert all(v.getLbOriginal() == 0 and v.getUbOriginal() == 5 for v in variables)
    rank = epp.backward_rank(units)  # backward order: 2 1 0 4 3 5 6
    assert [rank[c] for c in range(n)] == [2, 1, 0, 4, 3, 5, 6]
    assert epp.ckpt_index(0, d_p, rank[0]) == d_p - 1 + 2  # C[d_p - p + f2b[k]], p = 1
    assert epp.ckpt_index(d_p - 1, d_p, rank[2]) == 0  # the last stage's first backward
    # stage s's rows only touch its diagonal's variables
    for stage in range(d_p):
        cols = {epp.ckpt_index(stage, d_p, rank[c]) for c in range(n)}
        assert cols == set(range(d_p - 1 - stage, d_p - 1 - stage + n))
    answer = epp.solve(problem, "milp")
    assert answer.values is not None and problem.feasible(answer.values)
    assert answer.gap == pytest.approx(0.0)
    assert all(0 <= v <= 5 for v in answer.values)


def test_solver_short_cuts_and_infeasibility():
    units = [[0, 1], [2]]
    costs = {c: _chunk_cost(base=10, saved=1.0, stages=2) for c in range(3)}
    roomy = epp.build_problem(units, costs, [100.0, 100.0], "prefill", max_layers=4)
    assert epp.solve(roomy).values == (0,) * 4 and epp.solve(roomy).status == "trivial"
    tight = epp.build_problem(units, costs, [1.0, 1.0], "prefill", max_layers=4)
    assert epp.solve(tight).values is None  # even every layer checkpointed does not fit
    assert epp.solve(tight, "full").values is None
    some = epp.build_problem(units, costs, [27.0, 27.0], "prefill", max_layers=4)
    milp, uniform = epp.solve(some), epp.solve(some, "uniform")
    assert milp.values is not None and len(set(uniform.values)) == 1
    assert sum(milp.values) <= sum(uniform.values)


def test_grouping_dp_makes_n_n_plus_1_over_2_solver_calls():
    n = 6
    units, next_id = [], 0
    for count in range(1, n + 1):  # one unit of every chunk count
        units.append(list(range(next_id, next_id + count)))
        next_id += count
    costs = {c: _chunk_cost() for c in range(next_id)}
    tokens = {c: 1 for c in range(next_id)}
    log = epp.SolverLog()
    pipes, total = epp.group(units, costs, [1e9] * 4, tokens, mode="milp", warmup="prefill",
                             time_limit_s=1.0, log=log, max_layers=4)
    assert log.calls == n * (n + 1) // 2
    assert len(pipes) == 1 and total == pytest.approx(3 * 3.0)  # delta = (d_p - 1) x 3 s


def _makespan(units, warmup):
    """Fig. 6(a)'s toy on the unit preset: chunks of 30 tokens (F 30 s, B 60 s), d_p = 4."""
    ctx = unit_ctx(pp=4)
    layout = infinipipe.ulysses_layout(ctx)
    pipe = epp.Pipeline(tuple(map(tuple, units)), epp.Checkpointing((0,) * 7, "trivial"), 0.0)
    slices = {0: (Slice(0, 0, 30),), 1: (Slice(1, 0, 30),), 2: (Slice(1, 30, 60),),
              3: (Slice(1, 60, 90),)}
    from ltsim.plan import Chunk
    chunks = tuple(Chunk(c, slices[c]) for c in range(4))
    orders = {s: infinipipe.stage_order([pipe], Keep.ALL, s, s, layout, warmup) for s in range(4)}
    plan = lower(Schedule(strategy="toy", options={}, seq_lengths=(30, 90), chunks=chunks,
                          devices=layout.devices(), orders=orders), layout)
    return Engine(UnitCostModel()).run(plan).makespan_s / 30


def test_fig6a_longest_first_gives_23_against_25():
    assert _makespan([[1, 2, 3], [0]], "1f1b") == pytest.approx(23)
    assert _makespan([[0], [1, 2, 3]], "1f1b") == pytest.approx(25)
    # Eq. 7's deeper warm-up removes the interruption in both orders
    assert _makespan([[1, 2, 3], [0]], "prefill") == pytest.approx(21)
    assert _makespan([[0], [1, 2, 3]], "prefill") == pytest.approx(21)


def test_strategy_orders_longest_first():
    strategy = REGISTRY["infinipipe"]
    plan = strategy.plan((30, 90), unit_ctx(pp=4), strategy.parse({"num_slices": 3,
                                                                     "warmup": "1f1b"}))
    assert Engine(UnitCostModel()).run(plan).makespan_s == pytest.approx(23 * 30)


def test_mesh_example_and_balance():
    assert split_on_mesh(0, 13 * K, (8 * K, 4 * K, 2 * K)) == [
        Slice(0, 0, 8 * K), Slice(0, 8 * K, 12 * K), Slice(0, 12 * K, 13 * K)]
    assert split_on_mesh(0, 10 * K, (8 * K, 4 * K, 2 * K)) == [
        Slice(0, 0, 8 * K), Slice(0, 8 * K, 10 * K)]

    def quadratic(chunk):  # Eq. 1's shape: a s + b ((C + s)^2 - C^2)
        return sum(3.0 * p.num_tokens + 1e-3 * (p.stop ** 2 - p.start ** 2) for p in chunk)

    grid = mesh(64 * K, 5, quadratic)
    assert sum(grid.slices) == 64 * K and list(grid.slices) == sorted(grid.slices, reverse=True)
    times, start = [], 0
    for size in grid.slices:
        times.append(quadratic((Slice(0, start, start + size),)))
        start += size
    assert max(times) / min(times) < 1.001


def _bisect(f, target, lo, hi):
    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.integers(0, 5), min_size=1, max_size=400), lo=st.integers(1, 50),
       span=st.integers(0, 400), target=st.floats(-5, 1200, allow_nan=False),
       guess=st.none() | st.integers(-10, 900))
def test_first_reaching_finds_what_bisection_finds(steps, lo, span, target, guess):
    """Any non-decreasing f (plateaus, jumps, a target nothing reaches): the same boundary as the
    bisection the mesh ran before, whatever the guesses (a first one given or not)."""
    prefix = np.concatenate([[0], np.cumsum(steps)])

    def f(m):
        return float(prefix[min(m, len(prefix) - 1)])

    hi = lo + span
    found = first_reaching(f, target, lo, hi, below=(lo - 1, f(lo - 1)), above=(hi + 7, f(hi + 7)),
                           guess=guess)
    assert found == _bisect(f, target, lo, hi)


def test_first_reaching_needs_few_probes_on_a_smooth_prefix_time():
    """Eq. 1's shape over 2M tokens (attention's square dominating): each boundary in at most half
    the probes bisection takes (21)."""
    calls = []

    def f(m):
        calls.append(m)
        return 3.0 * m + 1e-3 * m * m

    length = 2 * 1024 * K
    whole = f(length)
    for i in (1, 17, 39):
        calls.clear()
        target = whole * i / 40
        found = first_reaching(f, target, 1, length - 1, below=(0, 0.0), above=(length, whole))
        probes = len(calls)
        assert found == _bisect(f, target, 1, length - 1) and probes <= 10


@pytest.mark.parametrize("mode", ["balanced", "time-only"])
def test_chunking_invariants(mode):
    rng = np.random.default_rng(1)
    lengths = dict(enumerate(int(x) for x in rng.integers(1, 40 * K, size=200)))

    def cost(chunk):
        return 5e3 + sum(p.num_tokens + 1e-4 * (p.stop ** 2 - p.start ** 2) for p in chunk)

    units, grid = chunk_balanced(lengths, 6, cost, 64 * K, mode)
    seen = {}
    for unit in units:
        for i, chunk in enumerate(unit.chunks):
            tails = [s for s in chunk if s.stop == lengths[s.seq] and s.start > 0]
            assert len(tails) <= 1  # never two tail slices in one chunk
            if unit.split and i == len(unit.chunks) - 1:
                assert len(tails) == 1 or chunk[0].start == 0  # a hybrid holds exactly its tail
            for s in chunk:
                seen[s.seq] = seen.get(s.seq, 0) + s.num_tokens
            if mode == "balanced":
                assert sum(s.num_tokens for s in chunk) <= grid.tokens
    assert seen == lengths


@pytest.fixture(scope="module")
def small_epp():
    """GPT-7B on one node of 8 A800-40GB (SP 4 x PP 2) at 64K, 32 sequences: small enough to
    plan and simulate in seconds, big enough that the MILP must checkpoint."""
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-13b-64k-infinipipe.toml")
    return scenario.with_overrides({"model.preset": "gpt-7b", "hardware.num_nodes": 1,
                                    "parallel.pp": 2, "parallel.cp": 4,
                                    "workload.global_batch_size": 32})


def test_planned_batch_fits_the_memory_the_milp_used(small_epp):
    sim = run(small_epp)
    plan, trace = sim.plans[0], sim.traces[0]
    limit = sim.result.memory_limit_bytes
    assert max(trace.peak_memory_bytes()) <= limit
    assert plan.options["pipelines"] >= 1 and plan.options["milp_calls"] >= 1
    recomputed = [op for op in plan.ops() if op.kind is OpKind.R]
    assert recomputed  # at this size the MILP has to checkpoint something
    # a partial recompute covers fewer layers than its stage holds
    stage_layers = dict(enumerate(plan.stage_layers))
    assert any(op.work.num_layers < stage_layers[op.stage][1] - stage_layers[op.stage][0]
               for op in recomputed)
    full = run(small_epp.with_overrides({"strategy.checkpointing": "full"}))
    assert sim.result.batches[0].iteration_time_s < full.result.batches[0].iteration_time_s


def test_a_range_that_cannot_fit_runs_as_several_pipelines():
    """Three 2-chunk units, each chunk 1 byte with nothing to save, a budget of 4 per stage: as
    one pipeline stage 0 holds d_p - 1 + 2 = 5 chunks, over the budget; a unit alone fits, so the
    range runs as consecutive pipelines that each fit."""
    units = [[0, 1], [2, 3], [4, 5]]
    costs = {c: _chunk_cost(base=1, saved=0.0) for c in range(6)}
    tokens = {c: 1 for c in range(6)}
    log = epp.SolverLog()
    kwargs = dict(mode="milp", warmup="prefill", time_limit_s=1.0, log=log, max_layers=4)
    whole = epp.solve_pipeline(units, costs, [4.0] * 4, tokens, **kwargs)
    assert whole.cost_s == float("inf")
    pipes = epp.solve_range(units, costs, [4.0] * 4, tokens, **kwargs)
    assert all(p.cost_s < float("inf") for p in pipes) and len(pipes) >= 2
    assert sorted(c for p in pipes for u in p.units for c in u) == list(range(6))
    for p in pipes:  # each pipeline's windows fit the budget with nothing checkpointed
        problem = epp.build_problem([list(u) for u in p.units], costs, [4.0] * 4, "prefill", 4)
        assert problem.feasible((0,) * problem.num_vars)


@pytest.mark.parametrize("budget", [2.0, 3.0, 4.0, 5.0])
def test_the_grouping_fits_exactly_when_its_longest_unit_fits_alone(budget):
    """What InfiniPipe's search relies on to skip the grouping DP (Planner._alone_fits): a
    4-chunk unit and two 1-chunk units, nothing to save. Below a budget of 4 the long unit alone
    overflows stage 0 (4 + d_p - 1 - ... chunks in flight), and then so does every grouping:
    the DP's cost is infinite exactly when the longest unit alone is."""
    units = [[0, 1, 2, 3], [4], [5]]
    costs = {c: _chunk_cost(base=1, saved=0.0) for c in range(6)}
    tokens = {c: 1 for c in range(6)}
    kwargs = dict(mode="milp", warmup="prefill", time_limit_s=1.0, log=epp.SolverLog(),
                  max_layers=4, relax=True)
    longest = epp.sort_longest_first(units, tokens)[:1]
    alone = epp.solve_pipeline(longest, costs, [budget] * 4, tokens, **kwargs).cost_s
    _, total = epp.group(units, costs, [budget] * 4, tokens, **kwargs)
    assert (alone == float("inf")) == (total == float("inf")) == (budget < 4)


def test_no_checkpointing_checkpoints_nothing_and_fits(small_epp):
    """At a 16K context the batch fits without checkpointing (at 64K one sequence alone does not
    on 4-way SP: the result then says it does not fit)."""
    sim = run(small_epp.with_overrides({"strategy.checkpointing": "none",
                                        "workload.max_length": 16384}))
    assert not [op for op in sim.plans[0].ops() if op.kind is OpKind.R]
    assert max(sim.traces[0].peak_memory_bytes()) <= sim.result.memory_limit_bytes


def test_two_node_13b_plan_fits_the_memory_the_milp_used():
    """The case whose last stage once peaked 1.5% over the limit: the MILP's rows now hold the
    largest working set of each window's chunks."""
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-13b-64k-infinipipe.toml")
    sim = run(scenario.with_overrides({"hardware.num_nodes": 2, "parallel.pp": 2,
                                       "workload.global_batch_size": 64}))
    assert max(sim.traces[0].peak_memory_bytes()) <= sim.result.memory_limit_bytes


@pytest.mark.parametrize("seed,context", [(1, 65536), (2, 98304), (3, 32768)])
def test_plans_fit_the_memory_the_milp_used_across_batches(small_epp, seed, context):
    """Other batches and contexts of the 7B one-node case: the simulated peak never exceeds the
    limit the MILP was given (when the MILP found a plan; "infeasible" would say so)."""
    sim = run(small_epp.with_overrides({"seed": seed, "workload.max_length": context}))
    assert sim.plans[0].options["all_solved"]
    assert max(sim.traces[0].peak_memory_bytes()) <= sim.result.memory_limit_bytes


def test_a_batch_that_cannot_fit_says_so():
    """GPT-13B on one node as PP 4 x SP 2: ZeRO-3 over two ranks leaves 8 GiB for activations,
    too little for one 32K sequence even fully checkpointed: the plan says no pipeline was
    solved, and the result that it does not fit."""
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-13b-64k-infinipipe.toml")
    sim = run(scenario.with_overrides({"hardware.num_nodes": 1, "parallel.cp": 2,
                                       "workload.global_batch_size": 32,
                                       "workload.max_length": 32768}))
    assert not sim.plans[0].options["all_solved"] and not sim.result.fits


def test_a_checkpointing_problem_past_its_size_is_refused_by_the_option_that_made_it():
    # the windows pair every chunk in flight at a backward: a sequence of n chunks makes about
    # n^2 / 2 a stage; 8,192 chunks took 70 s, then past 8 GB (ltsim maxlen with a petabyte limit
    # searched that far). Past MAX_WINDOW_PAIRS the plan is refused naming the option, before
    # the pairs are held; a batch of many short chunks (few pairs) still plans
    from dataclasses import replace

    from ltsim.errors import ConfigError

    n = 6000  # one sequence: 18M pairs a stage, counted without being made
    order = [(OpKind.F, c) for c in range(n)] + [(OpKind.B, c) for c in reversed(range(n))]
    assert epp.in_flight_pairs(order) == n * (n + 1) // 2 > epp.MAX_WINDOW_PAIRS
    short = order[:200] + order[-200:]
    assert epp.in_flight_pairs(short) == sum(map(len, epp.windows(short))) == 200 * 201 // 2
    # a memory limit (the unit preset has none, and without one no problem is made: below)
    ctx = replace(unit_ctx(pp=2, recompute="selective"),
                  cost=UnitCostModel(memory_limit_bytes=10**15))
    strategy = REGISTRY["seq1f1b"]
    options = strategy.parse({"chunk_size": 1, "checkpointing": "full", "variant": "enhanced"})
    with pytest.raises(ConfigError, match=r"'strategy\.chunk_size' must be such that the "
                       r"checkpointing problems that price one replica's pipelines hold at most "
                       r"16,777,216 \(window, chunk\) pairs together .*\(got 1\).*"
                       r"Fix: use larger chunks"):
        strategy.plan((6000,), ctx, options)
    plan = strategy.plan((1,) * 6000, ctx, options)  # 6,000 chunks, one in flight at a time
    assert len(plan.chunks) == 6000
    # no memory limit: every window fits, so no problem is made and the sequence plans
    assert len(strategy.plan((6000,), unit_ctx(pp=2), options).chunks) == 6000


def test_a_planning_pass_counts_every_problem_against_its_limits():
    """The grouping DP builds a problem per range and the N search an LP per problem: their
    pairs and LP entries add up over a pass (GPT-30B at num_slices = 64 built 442 problems and
    solved 375 LPs for over 50 s), so each pass has one budget of each, reset per pass."""
    log = epp.SolverLog()
    log.spend(epp.MAX_WINDOW_PAIRS - 10)
    with pytest.raises(epp.ProblemTooLarge) as caught:
        log.spend(11)
    assert (caught.value.amount, caught.value.limit) == (epp.MAX_WINDOW_PAIRS + 1,
                                                          epp.MAX_WINDOW_PAIRS)
    log.spend_lp(epp.MAX_LP_ENTRIES)
    with pytest.raises(epp.ProblemTooLarge, match="LP entries"):
        log.spend_lp(1)
    log.new_pass()
    log.spend(10)
    log.spend_lp(10)
    # the DP's problems count together: six ranges of units of 1..3 chunks on 4 stages
    units, next_id = [], 0
    for count in (1, 2, 3):
        units.append(list(range(next_id, next_id + count)))
        next_id += count
    costs = {c: _chunk_cost(base=10, saved=5.0) for c in range(next_id)}  # 4 chunks overflow
    tokens = {c: 1 for c in range(next_id)}
    counted = epp.SolverLog()
    epp.group(units, costs, [30.0] * 4, tokens, mode="milp", warmup="prefill", time_limit_s=1.0,
              log=counted, max_layers=4, relax=True)
    pairs = epp.MAX_WINDOW_PAIRS - counted.pairs_left
    entries = epp.MAX_LP_ENTRIES - counted.entries_left
    assert counted.calls == 6 and counted.lp > 0 and pairs > 0 and 0 < entries <= pairs
    tight = epp.SolverLog(pairs_left=pairs - 1)  # one pair short of what the DP needs
    with pytest.raises(epp.ProblemTooLarge):
        epp.group(units, costs, [30.0] * 4, tokens, mode="milp", warmup="prefill",
                  time_limit_s=1.0, log=tight, max_layers=4, relax=True)


def test_without_a_memory_limit_no_checkpointing_problem_is_made(monkeypatch):
    """The unit preset: every window fits, so each DP range is priced without building its
    problem (GPT-7B's bundled InfiniPipe batch on the unit preset ran past 120 s building them,
    and its N search to N = 64, every N faster than the last)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a problem was built")

    monkeypatch.setattr(epp, "build_problem", refuse)
    costs = {c: _chunk_cost() for c in range(3)}
    for mode, layers in (("milp", 0), ("none", 0), ("full", 4)):
        pipe = epp.solve_pipeline([[0, 1], [2]], costs, [2**62] * 4, {c: 1 for c in range(3)},
                                  mode=mode, warmup="prefill", time_limit_s=1.0,
                                  log=epp.SolverLog(), max_layers=4)
        assert pipe.checkpointing.values == (layers,) * (3 + 4 - 1)
        assert pipe.cost_s == pytest.approx(3 * 3.0 + 0.1 * layers * 6)


GPT7B = REPO / "scenarios" / "infinipipe" / "gpt-7b-64k-infinipipe.toml"


def _simulated(*sets):
    from ltsim.runner import simulate

    return simulate(load_scenario(GPT7B, list(sets)))


def test_auto_slices_search_on_while_no_count_fits():
    # at 786,432 tokens no N fits the planner's memory model: the search stopped two N past the
    # first and ran N = 12, for which no checkpointing fits; every layer checkpointed at N = 64
    # does. (The simulated N = 12 plan, every layer checkpointed, fits by 0.7 GiB since the head
    # stage's loss no longer meets a rebuilt layer: the planner still counts each chunk's logits
    # at full checkpointing, which no chunk then keeps, docs/design-notes.md)
    one = ("workload.lengths=[786432]", "workload.num_batches=1", "workload.max_length=0")
    auto = _simulated(*one)
    assert auto.fits and auto.strategy_options["num_slices"] > 14
    fixed = _simulated(*one, "strategy.num_slices=12")
    assert fixed.strategy_options["all_solved"] is False


def test_auto_slices_price_the_zero3_gathers_short_chunks_wait_for():
    # at 7,168 tokens the estimate without ZeRO-3's per-op parameter gathers chose N = 3 (1.08 s)
    # over N = 1 (0.53 s), and 8,192 tokens then ran faster than 7,168
    times = []
    for length in (6144, 7168, 8192, 10240):
        result = _simulated(f"workload.fixed_length={length}", "workload.global_batch_size=4")
        times.append(result.batches[0].iteration_time_s)
        assert result.strategy_options["num_slices"] == 1
    assert times == sorted(times)


def test_each_planning_pass_starts_a_budget_of_its_own(monkeypatch):
    """The bundled GPT-7B batch: its search's passes hold at most 17,472 pairs each and more in
    all; with a budget of 17,472 a pass, each of them still plans (a budget spent over the
    whole search would refuse the batch) and the plan is the bundled one."""
    bundled = _simulated("workload.num_batches=1")
    monkeypatch.setattr(epp, "MAX_WINDOW_PAIRS", 17_472)
    tight = _simulated("workload.num_batches=1")
    assert tight.strategy_options["num_slices"] == bundled.strategy_options["num_slices"] == 3
    assert tight.to_dict()["iteration_time_s"] == bundled.to_dict()["iteration_time_s"]


def test_the_slice_search_goes_on_past_an_n_too_large_to_plan(monkeypatch):
    """A pass's size is not monotone in N: on GPT-7B, N = 2 solves LPs of 240 entries and
    N = 3 needs none (no window overflows). With a budget of 200 entries the search skips
    N = 2 and still finds N = 3 (it stopped there and chose N = 1, 31.15 s against 28.51 s);
    only _TOO_LARGE such N in a row end it."""
    bundled = _simulated("workload.num_batches=1")
    monkeypatch.setattr(epp, "MAX_LP_ENTRIES", 200)
    skipped = _simulated("workload.num_batches=1")
    assert skipped.strategy_options["num_slices"] == 3
    assert skipped.to_dict()["iteration_time_s"] == bundled.to_dict()["iteration_time_s"]


def test_the_slice_search_skips_the_grouping_while_the_longest_unit_cannot_fit(monkeypatch):
    """The 786,432-token sequence: no N up to 14 fits. Once an N has not, each next N first
    solves its longest unit alone, and where that does not fit skips the grouping DP (its cost
    would be infinite): the same plan as the full search, with fewer solver calls. GPT-30B at a
    131,072-token cap, where no N fits, took 272 s to search and takes 9 s (2026-11-29)."""
    one = ("workload.lengths=[786432]", "workload.num_batches=1", "workload.max_length=0")
    probed = _simulated(*one)
    monkeypatch.setattr(infinipipe.Planner, "_alone_fits", lambda *args: True)
    full = _simulated(*one)
    mine, theirs = probed.strategy_options, full.strategy_options
    assert mine["num_slices"] == theirs["num_slices"] and mine["pipelines"] == theirs["pipelines"]
    assert probed.to_dict()["iteration_time_s"] == full.to_dict()["iteration_time_s"]
    assert mine["milp_calls"] < theirs["milp_calls"]
