"""Scenario -> Result: sample batches, plan each with the strategy, replay it in the engine."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ltsim.costs import CostModel, UnitCostModel
from ltsim.errors import ConfigError, ProfileError, TypeShown, check_argument
from ltsim.gcpause import paused
from ltsim.mirrors import expand_trace
from ltsim.plan import Plan
from ltsim.scenario import Scenario, check_call
from ltsim.sim.engine import Engine
from ltsim.sim.metrics import Result, batch_metrics
from ltsim.trace import Trace
from ltsim.strategies import get_strategy
from ltsim.strategies.base import PlanContext


@dataclass(frozen=True, slots=True)
class Simulation:
    """A Result with the plans and traces behind it (one per simulated global batch)."""

    result: Result
    plans: tuple[Plan, ...]
    traces: tuple[Trace, ...]


def make_cost_model(scenario: Scenario) -> CostModel:
    """The unit model for the ``unit`` preset, else the profile-backed model."""
    if scenario.cluster.device.is_unit:
        return UnitCostModel(scenario.cluster.memory_limit_bytes)
    from ltsim.costs.table import TableCostModel

    try:
        return TableCostModel(scenario.model, scenario.cluster,
                              grad_dtype=scenario.parallel.grad_dtype)
    except ProfileError as exc:  # the tables hardware.profile (or the preset) names
        problem, fix = exc.problem_and_fix()
        raise ConfigError("hardware.profile", "a profile ltsim can read",
                          str(scenario.cluster.profile_dir), fix, context=problem,
                          source=scenario.source) from None


def run(scenario: Scenario, *, keep: bool = True, cost: CostModel | None = None,
        progress: Callable[[int, int], None] | None = None,
        first: Plan | None = None) -> Simulation:
    """Simulate every sampled global batch; keep plans and traces when ``keep``, with every
    mirrored DP replica written out (ltsim/mirrors.py: the simulation replays each once).
    ``progress(done, total)`` is called after each batch; ``first``: the first batch's plan,
    already made (``first_plan``)."""
    check_call(scenario, progress)
    if cost is not None and not all(callable(getattr(cost, name, None)) for name in (
            "compute_s", "comm_s", "comm_key")):  # (a number was an AttributeError in the engine)
        raise ConfigError("cost", "a CostModel, or None (the scenario's)", TypeShown(cost),
                          "pass make_cost_model(scenario), or leave it out")
    if first is not None:
        check_argument("first", first, Plan, "the first batch's Plan (first_plan), or None")
    cost = cost or make_cost_model(scenario)
    strategy, options, ctx, workload, notes = _planning(scenario, cost)
    engine = Engine(cost)
    plans, traces, metrics = [], [], []
    chosen = dict(scenario.strategy_options)  # the options as the first plan states them
    batches = _checked_batches(strategy, workload, scenario.seed, ctx, options)
    notes += _position_table_note(scenario.model, batches)
    seen: dict[tuple[int, ...], int] = {}  # a batch -> the index of its first simulation
    for index, batch in enumerate(batches):
        again = seen.setdefault(tuple(batch), index)
        if again != index:  # the same batch again (fixed lengths sample it every time): the
            metrics.append(metrics[again])  # same plan and trace, simulated once
            if keep:
                plans.append(plans[again])
                traces.append(traces[again])
            if progress is not None:
                progress(len(metrics), workload.num_batches)
            continue
        with paused():  # one pause per batch, not one per phase (ltsim/gcpause.py)
            plan = first if index == 0 and first is not None else strategy.plan(batch, ctx, options)
            trace = engine.run(plan)
            flops = sum(cost.model_flops(chunk, backward=plan.gets_grad(chunk.index))
                        for chunk in plan.chunks)
            metrics.append(batch_metrics(plan, trace, flops))
        notes += [n for n in plan.options.get("notes", ()) if n not in notes]
        if len(metrics) == 1:
            chosen = {k: v for k, v in plan.options.items() if k != "notes"}
        if keep:
            plans.append(plan.expand())
            traces.append(expand_trace(trace, plan))
        if progress is not None:
            progress(len(metrics), workload.num_batches)
    result = Result(scenario=scenario.name, strategy=strategy.name,
                    strategy_options=chosen,
                    batches=tuple(metrics), memory_limit_bytes=cost.memory_limit_bytes,
                    host_memory_limit_bytes=cost.host_memory_limit_bytes,
                    num_gpus=scenario.parallel.world_size, peak_flops_per_s=cost.peak_flops_per_s,
                    warnings=(*notes, *cost.warnings()),
                    unit_costs=scenario.cluster.device.is_unit)
    if (result.mfu or 0.0) > 1.0:  # a profile faster than the preset's peak: units, or a preset
        result = replace(result, warnings=(*result.warnings, _above_peak(result)))
    return Simulation(result, tuple(plans), tuple(traces))


def _above_peak(result: Result) -> str:
    """The warning for an MFU above 1: the model's FLOPs ran faster than the peak allows."""
    return (f"MFU {result.mfu:.0%} is above 100%: the ops ran faster than the peak of "
            f"{result.peak_flops_per_s / 1e12:.3g} TFLOP/s per GPU (the preset's; on a CPU, the "
            "profile's fastest GEMM); check that the profile's time_s columns are in seconds "
            "and that hardware.preset is the device the profile measured")


def _planning(scenario: Scenario, cost: CostModel) -> tuple[Any, Any, PlanContext, Any, list[str]]:
    """What planning a scenario's batches takes: its strategy, parsed options, context, the
    workload the strategy samples (its own batching, if it has one), and the note saying that a
    batching the scenario wrote is not used."""
    strategy = get_strategy(scenario.strategy)
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
    workload, notes = scenario.workload, []
    if strategy.batching is not None:
        written = scenario.raw.get("workload", {}).get("batching")
        if written is not None and written != strategy.batching:
            notes.append(f'workload.batching = "{written}" is not used: {strategy.name} samples '
                         f'its batches "{strategy.batching}"')
        workload = workload.with_batching(strategy.batching)
    options = strategy.parse(scenario.strategy_options)
    notes += strategy.ignored(scenario.strategy_options, options)
    notes += _unread_keys(scenario)
    return strategy, options, ctx, workload, notes


def _unread_keys(scenario: Scenario) -> list[str]:
    """Notes for scenario keys given where nothing reads them (two runs that differ only in them
    run alike): ``seed`` when nothing is sampled, ``parallel.cp_kind`` without CP."""
    notes = []
    if scenario.seed != 0 and not scenario.workload.dataset:  # (0: the default)
        given = "lengths" if scenario.workload.lengths else "fixed_length"
        notes.append(f"seed = {scenario.seed} is not used: workload.{given} is the batch, so "
                     "nothing is sampled")
    kind = scenario.raw.get("parallel", {}).get("cp_kind")
    if kind is not None and scenario.parallel.cp == 1:
        notes.append(f'parallel.cp_kind = "{kind}" is not used: parallel.cp = 1 (no context '
                     "parallelism)")
    return notes


def _position_table_note(model, batches) -> list[str]:
    """A learned position table (arch gpt) shorter than the longest sequence: a run needs one of
    that many rows (FlexSP sizes it to its sequence limit), whose parameters are not counted."""
    longest = max((max(batch, default=0) for batch in batches), default=0)
    if not model.positions_short_of(longest):
        return []
    rows = model.max_position_embeddings
    return [f"model.max_position_embeddings = {rows} is below the longest sequence ({longest:,} "
            "tokens): training it needs a learned position table of that many rows, whose "
            f"parameters ({(longest - rows) * model.hidden_size:,} more) are not counted; set "
            f"model.max_position_embeddings to at least {longest} (the longest a run may "
            "sample) to count them"]


def _checked_batches(strategy, workload, seed: int, ctx: PlanContext, options: Any) -> list:
    """The sampled global batches, each past the strategy's size check (Strategy.check) before
    the first is planned: a batch too large to plan fails now, not after progress lines (the
    first is checked by its plan)."""
    batches = list(workload.sample(seed))
    for batch in batches[1:]:
        strategy.check(batch, ctx, options)
    return batches


def first_plan(scenario: Scenario, cost: CostModel | None = None) -> Plan:
    """The plan of the scenario's first global batch (raises what planning raises): run it
    before simulating several scenarios, so that one that cannot be planned fails first."""
    strategy, options, ctx, workload, _ = _planning(scenario, cost or make_cost_model(scenario))
    batch = _checked_batches(strategy, workload, scenario.seed, ctx, options)[0]
    with paused():
        return strategy.plan(batch, ctx, options)


def simulate(scenario: Scenario, *, progress: Callable[[int, int], None] | None = None) -> Result:
    """Predict iteration time, bubble ratio, peak memory and throughput for a scenario."""
    return run(scenario, keep=False, progress=progress).result
