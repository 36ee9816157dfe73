"""Skrull: DACP, round-robin and GDS against the paper's worked examples and properties; the
strategies skrull, deepspeed-cp and sorted-batching end to end on toy and paper settings."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ltsim
from ltsim.costs import UnitCostModel
from ltsim.errors import ConfigError
from ltsim.model import get_model
from ltsim.plan import OpKind
from ltsim.parallel import ParallelConfig
from ltsim.runner import run
from ltsim.sim.engine import Engine
from ltsim.strategies import get_strategy
from ltsim.strategies.base import PlanContext
from ltsim.strategies.dacp import (DISTRIBUTED, MicroBatchCosts, balance_ranks, dacp,
                                   flops_eq13, gds_rank, objective, strided)
from ltsim.strategies.skrull_milp import solve_dacp_milp

SQUARE = [2, 3, 4, 9]


def test_golden_dacp_one_rollback_then_distribute():
    """PAPERS.md 3.2 C2: N = 2, C = 10, S = {2, 3, 4, 9}: the 2 on rank 0 is rolled back, then the 9
    is distributed; the printed RollBack (sign error, no charge on the other rank) fails."""
    found = dacp(SQUARE, 2, 10, lambda k: SQUARE[k] ** 2)
    assert found.ret == (DISTRIBUTED, 1, 0, DISTRIBUTED)
    assert found.rollbacks == 1 and found.remaining == (0.5, 1.5) and found.fits
    assert dacp(SQUARE, 2, 10, lambda k: SQUARE[k] ** 2, rollback_rule="printed") is None


def test_dacp_shares_add_up_exactly():
    # N = 3, C = 6, S = {1, 5, 12}: two rollbacks leave every bucket 4 = 12/3, but in tokens the
    # thirds summed to 3.9999999999999996 and DACP answered no placement (a review); at 1000x the
    # tokens too
    for scale in (1, 1000):
        lengths = [1 * scale, 5 * scale, 12 * scale]
        found = dacp(lengths, 3, 6 * scale, lambda k: lengths[k] ** 2)
        assert found is not None and found.ret == (DISTRIBUTED,) * 3
        assert found.remaining == (0.0, 0.0, 0.0) and found.rollbacks == 2


def test_without_rollback_the_placement_overflows_its_bucket():
    found = dacp(SQUARE, 2, 10, lambda k: SQUARE[k] ** 2, rollback=False)
    assert not found.fits and found.rollbacks == 0


def test_gds_strided_split_pairs_long_and_short():
    assert strided([1, 2, 3, 4, 5, 6], 2) == [[1, 3, 5], [2, 4, 6]]
    lengths = [10, 1, 8, 2, 6, 3]  # 30 tokens, C x N = 16: D1 starts at 2 micro-batches, but the
    # strided pair holds 12 and 18 tokens, so D3 moves on to 3: 7, 10 and 13 tokens
    assert gds_rank(range(6), lengths, 1, 16, lambda mb: True) == [[1, 4], [3, 2], [5, 0]]


def _gds_as_printed(seq_ids, lengths, num_ranks, capacity, fits):
    """Algorithm 2 as D1-D3 read it: each count from D1's start, each micro-batch in order."""
    import math

    subset = sorted(seq_ids, key=lambda k: (lengths[k], k))
    start = max(1, math.ceil(sum(lengths[k] for k in subset) / (capacity * num_ranks)))
    for count in range(start, len(subset) + 1):
        mbs = strided(subset, count)
        if all(sum(lengths[k] for k in mb) <= capacity * num_ranks and fits(mb) for mb in mbs):
            return mbs
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(1, 3),
       st.integers(50, 120), st.integers(20, 200))
def test_gds_finds_what_algorithm_2_finds_running_dacp_only_where_tokens_fit(lengths, ranks, capacity, limit):
    # it tried each count's micro-batches in order, with DACP on every one before the first too
    # full: a 16,384-sequence Skrull batch spent 69 s there (now a fit runs only at a count whose
    # micro-batches all hold at most C x N tokens, fullest first)
    calls = []

    def fits(mb):  # a memory rule DACP might impose: few tokens of long sequences
        calls.append(mb)
        return sum(lengths[k] ** 2 for k in mb) <= limit * 40

    want = _gds_as_printed(range(len(lengths)), lengths, ranks, capacity, fits)
    calls.clear()
    assert gds_rank(range(len(lengths)), lengths, ranks, capacity, fits) == want
    assert all(sum(lengths[k] for k in mb) <= capacity * ranks for mb in calls)


def test_eq13_crossover_and_ratio_for_qwen_0_5b():
    """Appendix C.2 worked checks (PAPERS.md 3.1): the quadratic term dominates above 5h + h_kv =
    4608 tokens; FLOPs(32K) / FLOPs(4K) = 34.4."""
    model = get_model("qwen2.5-0.5b")
    h, kv = model.hidden_size, model.kv_hidden_size
    assert 5 * h + kv == 4608
    linear = flops_eq13(model, 4608) - 4 * h * 4608 ** 2
    assert linear == pytest.approx(4 * h * 4608 ** 2)
    assert round(flops_eq13(model, 32768) / flops_eq13(model, 4096), 1) == 34.4


def test_balance_ranks_is_longest_first_onto_the_least_loaded():
    assert balance_ranks([5, 4, 3, 3, 3], 2) == [[0, 3], [1, 2, 4]]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=14), n=st.integers(1, 6),
       capacity=st.integers(8, 64))
def test_every_fitting_placement_keeps_eq7_on_every_rank(lengths, n, capacity):
    for placement in ("dacp", "round-robin"):
        found = dacp(lengths, n, capacity, lambda k: lengths[k] ** 2, placement=placement)
        if found is None:
            continue
        used = [sum(s for s, r in zip(lengths, found.ret) if r == j) for j in range(n)]
        shared = sum(s for s, r in zip(lengths, found.ret) if r == DISTRIBUTED) / n
        assert found.fits == all(u + shared <= capacity + 1e-9 for u in used)
        assert all(r == DISTRIBUTED or 0 <= r < n for r in found.ret)


def _costs(lengths, n):
    return MicroBatchCosts(local_s=tuple(s * s for s in lengths),
                           dist_s=tuple(s * s / n for s in lengths),
                           comm_s=tuple(0.5 * s for s in lengths), comm_fixed_s=2.0)


def _max_load(lengths, ret, n):
    """DACP's own objective: the largest load it tracks on a rank (local loads whole, distributed
    ones 1/N on every rank; load = length squared here)."""
    loads = [0.0] * n
    for s, r in zip(lengths, ret):
        for j in (range(n) if r == DISTRIBUTED else (r,)):
            loads[j] += s * s / (n if r == DISTRIBUTED else 1)
    return max(loads)


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.sampled_from([1, 2, 3, 5, 8, 13, 21, 34]), min_size=4, max_size=16),
       n=st.sampled_from([2, 4, 8]))
def test_dacp_never_worse_than_round_robin_on_its_own_objective(lengths, n):
    a = dacp(lengths, n, 60, lambda k: lengths[k] ** 2)
    b = dacp(lengths, n, 60, lambda k: lengths[k] ** 2, placement="round-robin")
    if a is not None and b is not None and a.fits and b.fits:
        assert _max_load(lengths, a.ret, n) <= _max_load(lengths, b.ret, n) + 1e-9


def test_milp_never_worse_than_dacp_and_reports_its_gap():
    rng = random.Random(3)
    for _ in range(8):
        lengths = [rng.randint(1, 30) for _ in range(rng.randint(3, 9))]
        n = rng.choice([2, 4])
        found = dacp(lengths, n, 40, lambda k: lengths[k] ** 2)
        if found is None or not found.fits:
            continue
        costs = _costs(lengths, n)
        exact = solve_dacp_milp(lengths, n, 40, costs, time_limit_s=5.0, hint=found.ret)
        assert exact.objective_s <= objective(found.ret, costs, n) + 1e-9
        assert exact.gap is not None and exact.solve_s < 7


# -- strategies ----------------------------------------------------------------------------------
def _ctx(cp=4, dp=2, zero_stage=2):
    return PlanContext(model=get_model("qwen2.5-0.5b"),
                       parallel=ParallelConfig(cp=cp, dp=dp, zero_stage=zero_stage),
                       cost=UnitCostModel())


@pytest.mark.parametrize("name", ["skrull", "deepspeed-cp", "sorted-batching"])
def test_strategies_validate_and_simulate_on_unit_costs(name):
    strategy = get_strategy(name)
    batch = (3, 40, 5, 7, 64, 2, 9, 11, 30, 1)
    plan = strategy.plan(batch, _ctx(), strategy.parse({"bucket_size": 24})).validate()
    trace = Engine(UnitCostModel()).run(plan)
    assert trace.final_memory_bytes() == list(trace.static_bytes)
    if name == "skrull":
        assert plan.num_devices == 2 * 4 and {d.cp_rank for d in plan.devices} == {0, 1, 2, 3}


def test_skrull_full_recompute_reruns_each_part_before_its_backward():
    # under full recompute the forward keeps layer inputs only; the time of rebuilding the rest
    # was missing (the memory was counted as recomputed, the time as kept)
    import dataclasses

    strategy = get_strategy("skrull")
    batch = (3, 40, 5, 7, 64, 2, 9, 11, 30, 1)
    options = strategy.parse({"bucket_size": 24})
    runs = {}
    for recompute in ("selective", "full"):
        ctx = _ctx()
        ctx = dataclasses.replace(ctx, parallel=dataclasses.replace(ctx.parallel,
                                                                    recompute=recompute))
        plan = strategy.plan(batch, ctx, options).validate()
        runs[recompute] = plan, Engine(UnitCostModel()).run(plan)
    plan, trace = runs["full"]
    for program in plan.programs:
        if program.stream != "compute":
            continue
        for op in program.ops:
            if op.kind is OpKind.B:  # its part's recompute ran first, on this device
                redo = op.key._replace(kind=OpKind.R)
                assert redo in {o.key for o in program.ops[:program.ops.index(op)]}
    assert not any(op.kind is OpKind.R for p in runs["selective"][0].programs for op in p.ops)
    assert trace.makespan_s > runs["selective"][1].makespan_s
    assert max(trace.peak_memory_bytes()) <= max(runs["selective"][1].peak_memory_bytes())


def test_skrull_needs_no_pipeline():
    ctx = PlanContext(model=get_model("qwen2.5-0.5b"), parallel=ParallelConfig(cp=2, pp=2),
                      cost=UnitCostModel())
    with pytest.raises(ConfigError, match="'parallel.pp' must be 1 for skrull"):
        get_strategy("skrull").plan((4, 4), ctx, get_strategy("skrull").parse({}))


def test_bad_skrull_options_name_the_key():
    with pytest.raises(ConfigError, match="'strategy.placement' must be one of dacp, round-robin"):
        get_strategy("skrull").parse({"placement": "greedy"})
    with pytest.raises(ConfigError, match="'strategy.bucket_size' must be a positive number"):
        get_strategy("skrull").parse({"bucket_size": 0})


def test_zero2_reduces_gradients_every_micro_step():
    strategy = get_strategy("deepspeed-cp")
    plan = strategy.plan((8, 8, 8, 8), _ctx(cp=2, dp=2), strategy.parse({"micro_batch_size": 1}))
    names = [op.name for op in plan.program(0, "coll").ops]
    assert names == ["dp-grad-0", "dp-grad-0-last", "dp-grad-1", "dp-grad-1-last", "dp-params"]
    second_forward = next(op for op in plan.program(0).ops if op.chunk == 1)
    assert any(dep.name == "dp-grad-0-last" for dep in second_forward.deps)


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_zero2_every_micro_step_waits_for_the_slowest_ranks_backward_to_end(zero_stage):
    # with overlap_comm the reduce-scatter started with the backward and the next micro-step
    # waited only for it: the rank of a short micro-step ran ahead while the other's long backward
    # ran (a review: 341 ms against 516 ms for all-long micro-steps). Its last part, the first
    # layer's and embedding's gradients, comes after every rank's backward has ended. ZeRO-3
    # reduces as ZeRO-2 does (a later review: it kept the one overlapped reduction, and so was
    # predicted faster than ZeRO-2, 64 units against 96 here)
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy("deepspeed-cp")
    options = strategy.parse({"micro_batch_size": 1})

    def makespan(lengths):
        plan = strategy.plan(lengths, unit_ctx(dp=2, zero_stage=zero_stage), options)
        return unit_engine().run(plan).makespan_s

    assert makespan((16, 1, 1, 16)) == makespan((16, 16, 16, 16)) == 2 * 3 * 16


@pytest.mark.parametrize("name", ["deepspeed-cp", "sorted-batching"])
def test_the_deepspeed_family_deals_the_batch_over_the_ranks(name):
    """DistributedSampler's dealing (rank r gets sequences r, r + dp, ...): the two ranks' i-th
    micro-steps hold neighbours of the batch, so a sorted batch pairs the short sequences in one
    micro-step and the long ones in the next, 3 x (1 + 16) units under ZeRO-2's per-step sync.
    Contiguous shares (rank 0 the two short ones, rank 1 the long ones) took 2 x 3 x 16, and
    sorted batching then gained nothing by sorting (validation/papers/skrull.md)."""
    from tests.conftest import unit_ctx, unit_engine

    strategy = get_strategy(name)
    options = strategy.parse({"micro_batch_size": 1})
    plan = strategy.plan((1, 1, 16, 16), unit_ctx(dp=2, zero_stage=2), options)
    assert [[s.seq for c in plan.chunks if c.replica == r for s in c.slices] for r in (0, 1)] == [
        [0, 2], [1, 3]]
    assert unit_engine().run(plan).makespan_s == 3 * (1 + 16)


@pytest.mark.parametrize("size,dealt", [(1, [[0, 2, 4, 6], [1, 3, 5, 7]]),
                                        (2, [[0, 1, 4, 5], [2, 3, 6, 7]])])
def test_megatron_deals_a_micro_batch_of_consecutive_sequences_to_each_rank(size, dealt):
    """Megatron-LM's default sampler (MegatronPretrainingSampler) hands rank r the samples
    [r m, (r + 1) m) of every m x dp it takes, m the micro-batch size."""
    from tests.conftest import unit_ctx

    megatron = get_strategy("megatron-1f1b")
    plan = megatron.plan((4,) * 8, unit_ctx(dp=2), megatron.parse({"micro_batch_size": size}))
    assert [[s.seq for c in plan.chunks if c.replica == r for s in c.slices]
            for r in (0, 1)] == dealt
    assert all(len(c.slices) == size for c in plan.chunks)


@pytest.mark.parametrize("dp", [1, 2, 3])
def test_a_micro_batch_past_the_batch_deals_as_the_batch(dp):
    """A fuzzing review: micro_batch_size = 2^31 dealt one range per sequence of the block
    (gigabytes, then a MemoryError). A block longer than the batch deals as one of the batch's
    length: the same sequences to each rank, and at once."""
    from ltsim.strategies.base import deal_replicas

    batch = (5, 6, 7, 8, 9)
    assert deal_replicas(batch, dp, 2**31) == deal_replicas(batch, dp, len(batch))
    assert deal_replicas(batch, dp, 2**31) == [list(range(r, 5, dp)) for r in range(dp)]


@pytest.mark.parametrize("size,lengths,warned", [(2, (4,) * 8, False), (2, (4,) * 6, True),
                                                 (4, (4,) * 3, True)])
def test_megatron_warns_of_a_batch_megatron_lm_would_refuse(size, lengths, warned):
    """Megatron-LM asserts global batch % (micro_batch_size x dp) == 0; ltsim deals the rest in
    a short last round (below) and says so in the run's warnings."""
    from tests.conftest import unit_ctx

    megatron = get_strategy("megatron-1f1b")
    plan = megatron.plan(lengths, unit_ctx(dp=2), megatron.parse({"micro_batch_size": size}))
    notes = plan.options.get("notes", ())
    assert bool(notes) is warned
    if warned:
        assert f"not a multiple of micro_batch_size x dp = {2 * size}" in notes[0]


@pytest.mark.parametrize("name,options,lengths,dealt", [
    ("sorted-batching", {"micro_batch_size": 2}, (4,) * 8, [[0, 1, 4, 5], [2, 3, 6, 7]]),
    # a last round short of dp blocks goes one sequence at a time: no rank is left empty while
    # another holds two micro-batches' worth (maxlen's batch is one sequence per replica)
    ("megatron-1f1b", {"micro_batch_size": 4}, (4,) * 3, [[0, 2], [1]]),
    ("megatron-1f1b", {"micro_batch_size": 2}, (4,) * 2, [[0], [1]])])
def test_a_rank_gets_blocks_of_a_micro_batch_and_a_short_last_round_one_by_one(name, options,
                                                                              lengths, dealt):
    from tests.conftest import unit_ctx

    strategy = get_strategy(name)
    plan = strategy.plan(lengths, unit_ctx(dp=2), strategy.parse(options))
    assert [[s.seq for c in plan.chunks if c.replica == r for s in c.slices]
            for r in (0, 1)] == dealt


def test_zero3_keeps_its_parameters_sharded_after_the_step():
    # ZeRO-3 gathers parameters per op; a step-end all-gather (Megatron's distributed optimizer's,
    # ZeRO-1/2) was added too, an exposed 2 B/param that DeepSpeed and FSDP do not move
    import dataclasses

    strategy = get_strategy("deepspeed-cp")
    ctx = _ctx(cp=2, dp=2)
    ctx = dataclasses.replace(ctx, parallel=dataclasses.replace(ctx.parallel, zero_stage=3))
    plan = strategy.plan((8, 8, 8, 8), ctx, strategy.parse({"micro_batch_size": 1}))
    names = [op.name for op in plan.program(0, "coll").ops if op.name.startswith("dp")]
    assert names == ["dp-grad-0", "dp-grad-0-last", "dp-grad-1", "dp-grad-1-last"]


def test_skrull_beats_deepspeed_on_a_paper_setting(repo):
    """Qwen2.5-0.5B on Wikipedia (Table 1), <DP 4, CP 8, 64>, BucketSize 26K, four sampled
    batches: Skrull is faster than DeepSpeed ZeRO-2 + CP with packed micro-batches on average
    (validation/papers/skrull.md; on a batch whose longest sequence DACP keeps whole on one rank
    it is not)."""
    path = repo / "scenarios" / "skrull" / "qwen2.5-0.5b-wikipedia.toml"
    times = {}
    for name in ("deepspeed-cp", "skrull"):
        scenario = ltsim.load_scenario(path, [f'strategy.name="{name}"'])
        times[name] = run(scenario, keep=False).result.to_dict()["iteration_time_s"]
    assert times["skrull"] < times["deepspeed-cp"]


@pytest.mark.parametrize("name", ["gpt-7b-64k-deepspeed-ulysses", "gpt-30b-64k-deepspeed-ulysses"])
def test_an_auto_bucket_of_sharded_sequences_fits(repo, name):
    # bucket_size = "auto" sized a whole sequence on one rank, without what Ulysses keeps beyond
    # its share (the gathered attention output): the bundled scenarios did not fit their memory
    from ltsim.runner import simulate

    result = simulate(ltsim.load_scenario(repo / "scenarios" / "infinipipe" / f"{name}.toml"))
    assert result.fits, result.fit_reason
    assert max(result.peak_memory_bytes_per_device) > 0.9 * result.memory_limit_bytes  # sized to it
