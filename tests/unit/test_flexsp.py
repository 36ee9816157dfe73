"""FlexSP: the micro-batch split and the bucketing against the public solver's DPs (brute force
here), the MILP on a toy with a hand-derived optimum, and a planned batch on the A800 testbed."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ltsim.plan import OpKind
from ltsim.runner import run
from ltsim.scenario import load_scenario
from ltsim.strategies import flexsp

REPO = Path(__file__).resolve().parents[2]


def _partitions(n: int, parts: int):
    """Every way to cut range(n) into at most ``parts`` consecutive non-empty runs."""
    for k in range(1, min(parts, n) + 1):
        for cuts in itertools.combinations(range(1, n), k - 1):
            bounds = (0,) + cuts + (n,)
            yield [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("seed", range(6))
def test_sort_consec_minimises_the_largest_micro_batch(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 100, size=7)]
    count = int(rng.integers(1, 5))
    runs = flexsp.sort_consec(lengths, count)
    ordered = sorted(lengths, reverse=True)
    best = min(max(sum(ordered[i] for i in r) for r in p) for p in _partitions(len(lengths), count))
    assert len(runs) <= count and sorted(i for r in runs for i in r) == list(range(len(lengths)))
    assert max(sum(lengths[i] for i in r) for r in runs) == best
    flat = [lengths[i] for r in runs for i in r]
    assert flat == sorted(flat, reverse=True)  # consecutive runs of the longest-first order


@pytest.mark.parametrize("seed", range(6))
def test_bucketing_minimises_padding(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 50, size=7)]
    count = int(rng.integers(1, 4))
    runs = flexsp.bucketing(lengths, count)

    def padding(groups):
        return sum(max(values) * len(values) - sum(values) for values in groups)

    ordered = sorted(lengths)
    best = min(padding([[ordered[i] for i in r] for r in p])
               for p in _partitions(len(lengths), count))
    assert len(runs) <= count and sorted(i for r in runs for i in r) == list(range(len(lengths)))
    assert padding([[lengths[i] for i in r] for r in runs]) == best


@pytest.mark.parametrize("n", [31, 32, 33, 70, 130])
def test_bucketing_over_several_blocks_of_cuts_is_optimal(n):
    """Bucketing's DP takes the cuts of 32 sequences at once (a fuzzing review's 16,384-sequence
    batch spent 19 s in a Python step per sequence): against a plain DP over every cut."""
    rng = np.random.default_rng(n)
    lengths = [int(x) for x in rng.integers(1, 5000, size=n)]
    ordered = sorted(lengths)
    prefix = [0, *np.cumsum(ordered).tolist()]

    def least(count):  # the least padding of the sorted lengths in at most count runs
        row = [0] + [math.inf] * n
        for _ in range(count):
            row = [0] + [min(row[k] + ordered[i - 1] * (i - k) - (prefix[i] - prefix[k])
                             for k in range(i)) for i in range(1, n + 1)]
        return row[n]

    for count in (1, 2, 5, 16):
        runs = flexsp.bucketing(lengths, count)
        assert len(runs) <= count and sorted(i for r in runs for i in r) == list(range(n))
        padding = sum(max(lengths[i] for i in r) * len(r) - sum(lengths[i] for i in r)
                      for r in runs)
        assert padding == least(count)


def test_slots_and_minimum_degree():
    assert [flexsp.min_degree(t, 10) for t in (1, 10, 11, 30, 40, 41)] == [1, 1, 2, 4, 4, 8]
    # two sequences need SP 8 on 32 GPUs: 16 GPUs left for the smaller degrees
    assert Counter(flexsp.sp_slots(32, [2, 4, 8], 8, 2)) == {2: 8, 4: 4, 8: 4}
    assert Counter(flexsp.sp_slots(8, [2, 4, 8], 1, 5)) == {2: 4, 4: 2, 8: 1}


class ToyCosts:
    """A sequence of t tokens on sp ranks takes t / sp x (1 + log2(sp) / 4): larger groups
    are less efficient (more all-to-all); no fixed cost."""

    def marginal_s(self, tokens, sp):
        return tokens / sp * (1 + math.log2(sp) / 4)

    def fixed_s(self, sp):
        return 0.0

    def group_s(self, tokens, sp):
        return self.marginal_s(tokens, sp)


def test_milp_mixes_degrees_on_a_toy():
    """8 GPUs holding 10 tokens each; one 30-token sequence (needs SP 4) and four of 10 tokens.
    Best: SP 4 for the long one (30/4 x 1.5 = 11.25), two SP-2 groups of two short ones
    (20/2 x 1.25 = 12.5): makespan 12.5. All on SP 8 takes 70/8 x 1.75 = 15.3; SP 4 + SP 4 takes
    15 (the long one with a short one)."""
    answer = flexsp.solve_groups([30, 10, 10, 10, 10], 8, [2, 4, 8], 10, ToyCosts(),
                                 flexsp.Options(milp_time_limit_s=10.0))
    assert answer.groups is not None and answer.gap <= flexsp.GAP_LIMIT + 1e-9
    assert answer.estimate_s == pytest.approx(12.5, rel=1e-6)
    degrees = [sp for sp, _ in answer.groups]
    assert degrees == [4, 2, 2] and sum(degrees) == 8
    assert answer.groups[0][1] == (0,)
    assert sorted(m for _, members in answer.groups[1:] for m in members) == [1, 2, 3, 4]


def test_milp_infeasible_when_a_sequence_outgrows_the_largest_group():
    answer = flexsp.solve_groups([90, 10], 8, [2, 4, 8], 10, ToyCosts(), flexsp.Options())
    assert answer.groups is None and answer.status == "infeasible"


@pytest.fixture(scope="module")
def small_flexsp():
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-13b-64k-flexsp.toml")
    return run(scenario.with_overrides({"model.preset": "gpt-7b", "hardware.num_nodes": 1,
                                        "parallel.dp": 1, "workload.global_batch_size": 48}))


def test_planned_batch(small_flexsp):
    sim = small_flexsp
    plan, trace = sim.plans[0], sim.traces[0]
    assert max(trace.peak_memory_bytes()) <= sim.result.memory_limit_bytes
    options = plan.options
    assert options["all_solved"] and options["milp_calls"] >= options["micro_batches"] >= 1
    assert 0 <= options["milp_max_gap"] < 0.5
    # every rank forwards each micro-batch once, over the sequences of its group, sharded over
    # the group: the all-to-all before its attention spans exactly the group's ranks
    forwards = Counter()
    for op in plan.ops():
        if op.kind is OpKind.F and op.part == "attn":
            forwards[(op.device, op.chunk)] += 1
        if op.kind is OpKind.COLL and op.name.startswith("a2a-"):
            assert len(op.group) == op.comm.group_size
    assert set(forwards.values()) == {1}
    assert len(forwards) == 8 * len(plan.chunks)
    tokens = Counter()
    for chunk in plan.chunks:
        for piece in chunk.slices:
            tokens[piece.seq] += piece.num_tokens
    assert [tokens[i] for i in range(len(plan.seq_lengths))] == list(plan.seq_lengths)


def test_mixed_groups_shard_over_aligned_blocks(monkeypatch):
    """A micro-batch answered with SP 2 + SP 1 + SP 1 on 4 ranks: the SP-2 group's all-to-alls
    meet on ranks 0-1 only, the SP-1 ranks run alone, and the plan replays."""
    from tests.conftest import unit_ctx, unit_engine

    def answer(lengths, *args, **kwargs):
        return flexsp.Groups(((2, (0,)), (1, (1,)), (1, (2,))), "optimal", 0.0, 0.0, 1.0)

    monkeypatch.setattr(flexsp, "solve_groups", answer)
    ctx = unit_ctx(pp=1, dp=1, cp=4, recompute="none", zero_stage=2)
    plan = flexsp.plan((40, 30, 20), ctx, flexsp.Options(min_sp=1)).validate()
    a2a = {(op.device, op.group, op.comm.group_size) for op in plan.ops()
           if op.kind is OpKind.COLL and op.name.startswith("a2a-")}
    assert a2a == {(0, (0, 1), 2), (1, (0, 1), 2)}
    seqs = {op.device: {s.seq for s in op.work.slices} for op in plan.ops()
            if op.kind is OpKind.F and op.part != "attn"}
    assert seqs == {0: {0}, 1: {0}, 2: {1}, 3: {2}}
    trace = unit_engine().run(plan)
    assert trace.final_memory_bytes() == list(trace.static_bytes)


def test_more_micro_batches_solve_only_until_one_fails(monkeypatch):
    """The split grows one micro-batch at a time until every micro-batch is solved; at a count
    where one fails the others need no MILP (the longest sequences' first, the likeliest to
    fail). Solving them all at every count took 70 s on gpt-7b-64k-flexsp at cp 2 (4 s now, the
    same plan; found by a bad-input probe). Here a micro-batch solves with at most two sequences:
    the plan is the first count's whose micro-batches all solve, with fewer MILPs than solving
    every micro-batch of every count."""
    from tests.conftest import unit_ctx

    solved = []

    def answer(lengths, *args, **kwargs):
        solved.append(tuple(lengths))
        if len(lengths) > 2:
            return flexsp.Groups(None, "infeasible", math.inf, 0.0, math.inf)
        return flexsp.Groups(((4, tuple(range(len(lengths)))),), "optimal", 0.0, 0.0, 1.0)

    monkeypatch.setattr(flexsp, "solve_groups", answer)
    ctx = unit_ctx(pp=1, dp=1, cp=4, recompute="none", zero_stage=2)
    lengths = list(range(10, 22))
    plan = flexsp.plan(tuple(lengths), ctx, flexsp.Options(min_sp=1)).validate()
    counts = range(1, len(lengths) + 1)
    least = next(c for c in counts if all(len(r) <= 2 for r in flexsp.sort_consec(lengths, c)))
    assert plan.options["micro_batches"] == least and plan.options["all_solved"]
    assert sorted(len(c.slices) for c in plan.chunks) == sorted(
        len(r) for r in flexsp.sort_consec(lengths, least))
    every = {tuple(lengths[i] for i in r) for c in range(1, least + 1)
             for r in flexsp.sort_consec(lengths, c)}
    assert len(solved) == len(set(solved)) < len(every)


def test_a_sequence_no_group_holds_stops_the_split_at_once():
    # at cp 1 a 64K sequence outgrows every SP group: more micro-batches never solve the one
    # holding it, and the split grew to one micro-batch per sequence (337 MILPs, 41 s; a probe)
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-7b-64k-flexsp.toml",
                             ["parallel.cp=1", "parallel.dp=32", "workload.num_batches=1"])
    options = run(scenario).plans[0].options
    assert not options["all_solved"] and options["milp_calls"] <= 2 * options["micro_batches"]


def test_warm_start_is_accepted_and_balanced():
    """With almost no time SCIP still returns the balanced single-degree packing it was given
    (the start respects the symmetry rows: identical slots heaviest first)."""
    lengths = [10] * 61 + [7] * 13
    answer = flexsp.solve_groups(lengths, 8, [2, 4, 8], 1000, ToyCosts(),
                                 flexsp.Options(milp_time_limit_s=0.001))
    assert answer.groups is not None
    loads = [sum(lengths[i] for i in members) / sp * (1 + math.log2(sp) / 4)
             for sp, members in answer.groups]
    assert max(loads) - min(loads) <= 10 * 1.5  # within one sequence's time of each other
