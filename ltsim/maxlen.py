"""The longest single sequence a setup can train, per strategy, by bisection over the memory model;
or, with ``mode = "workload"``, the longest context its own length distribution can be trained at.

``find_max_length(scenario)`` simulates a global batch of one sequence of L tokens per DP replica
(the scenario's model, hardware, parallel layout and strategy options; its workload is replaced)
and asks whether the simulated peak fits: device memory under the device's limit (less the
allocator allowance, as everywhere in ltsim) and host memory under the host limit. L grows by
doubling from ``step`` until a plan does not fit (or planning refuses the length, e.g. a chunk
count past the plan limit), then bisects in multiples of ``step``: the answer fits and the answer
plus ``step`` does not. Memory need not be monotone in L. A strategy that cuts a sequence into
chunks (``Strategy.maxlen_period``: ChunkFlow, SeCO, SpaCO) peaks higher as the last chunk fills
and lower past each chunk's end, so a longer length can fit where a shorter one does not: there a
length counts as fitting when it and the last chunk end below it fit, so that every length up to
the answer fits (the failing length reported can then lie within the step above the answer).
Elsewhere bisection reports a length that fits with the next step failing, not necessarily the
global maximum.

At each length the peak of the busiest device is split into terms (``peak_terms``): weights,
gradients, optimizer state (static), activations (activations, checkpoints, stage inputs), K/V
state (K/V kept for later chunks and their gradients), logits (the LM head's share of buffers and
of the loss's working set), working (other transient working sets) and host (host memory). The
term that "binds" is host memory when the host limit is what the first failing length exceeds,
else the largest device term at that length; the term that "grows" is the one that grew most from
half the answer to the first failing length (what to shrink to go further).

``mode = "workload"`` keeps the scenario's workload (its dataset, global batch, batches and seed)
and searches its cap, ``workload.max_length``, with the sequences over the cap truncated to it
(``overlong = "truncate"``: every cap sees the same draws, so a longer cap never holds less): the
answer is the longest cap at which every sampled global batch fits, at most the distribution's
own longest sequence (rounded up to the step), past which every cap draws the same batches. The
time per token is then the iteration time over the batch's tokens, as it is over the replicas'
sequences in the default mode. The sampled batches may hold
no sequence near the cap (a long-tailed distribution draws few): when one sequence of the
answer's length per replica does not fit alone, the answer's note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ltsim.costs import CostModel
from ltsim.datasets import load_dataset
from ltsim.errors import ConfigError, PlanError, check_argument
from ltsim.plan import Buffer, Plan
from ltsim.runner import make_cost_model, run
from ltsim.scenario import Scenario, build_scenario, check_call
from ltsim.sim.layerwise import layerwise_deferrals
from ltsim.trace import Trace
from ltsim.units import NO_LIMIT_BYTES
from ltsim.workload import MAX_BATCH_TOKENS

DEVICE_TERMS = ("weights", "gradients", "optimizer", "activations", "kv_state", "logits", "working")
TERMS = DEVICE_TERMS + ("host",)
_KIND_TERM = {"act": "activations", "ckpt": "activations", "input": "activations",
              "kv": "kv_state", "kv_grad": "kv_state"}
MAX_LENGTH = 1 << 30  # no search goes past a billion tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One simulated length: whether it fits, its time and its peak memory by term."""

    length: int
    fits: bool
    iteration_time_s: float = 0.0
    peak_bytes: int = 0
    limit: str = ""  # "device" or "host" when it does not fit; "plan" when planning refused it
    reason: str = ""
    terms: dict[str, int] = field(default_factory=dict)
    tokens: int = 0  # tokens of a global batch: a sequence per replica (or the workload's batch)
    warnings: tuple[str, ...] = ()  # the run's (a lookup past a profile's range, a GPT position
    # table shorter than the length: what simulate would print)

    @property
    def time_per_token_s(self) -> float:
        tokens = self.tokens or self.length
        return self.iteration_time_s / tokens if tokens else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MaxLength:
    """The answer for one strategy: the longest fitting length (0: not even ``step`` fits), the
    points simulated, and the first failing one."""

    strategy: str
    options: dict[str, Any]
    step: int
    max_length: int
    at: Point | None
    failing: Point | None
    points: tuple[Point, ...]
    memory_limit_bytes: int
    host_memory_limit_bytes: int
    mode: str = "sequence"
    cap: int = MAX_LENGTH  # the longest length searched
    cap_is_longest: bool = False  # workload mode: the cap is the distribution's longest sequence
    unit_costs: bool = False  # the unit preset: times in units of work, memory in tokens
    note: str = ""  # options the search used in place of the scenario's (``worst_draw``)

    @property
    def binds(self) -> str:
        """The term that stops the next step: host memory, the planner, or the largest term."""
        if self.failing is None:
            if self.cap_is_longest:
                return "none: every sampled batch fits uncut"
            return f"none up to {self.cap:,} tokens"
        if self.failing.limit == "host":
            return "host"
        if self.failing.limit == "plan":
            return "plan"
        terms = self.failing.terms
        return max(DEVICE_TERMS, key=lambda t: terms.get(t, 0)) if terms else "device"

    @property
    def grows(self) -> str:
        """The device term that grew most from the longest simulated length at most half the
        answer to the first failing one: what to shrink to go further (weights never grow)."""
        end = self.failing if self.failing is not None and self.failing.terms else self.at
        starts = [p for p in self.points if p.terms and p.length <= self.max_length // 2]
        if end is None or not starts:
            return "-"
        start = starts[-1].terms
        growth = {t: end.terms.get(t, 0) - start.get(t, 0) for t in DEVICE_TERMS}
        most = max(DEVICE_TERMS, key=growth.__getitem__)
        return most if growth[most] > 0 else "-"

    def to_dict(self) -> dict[str, Any]:
        at = self.at
        return {"strategy": self.strategy, "strategy_options": self.options, "mode": self.mode,
                "max_length": self.max_length, "step": self.step, "binds": self.binds,
                "grows": self.grows,
                "time_per_token_s": at.time_per_token_s if at else None,
                "iteration_time_s": at.iteration_time_s if at else None,
                "peak_memory_bytes": at.peak_bytes if at else None,
                "terms_bytes": dict(at.terms) if at else {},
                "next_length": self.failing.length if self.failing else None,
                "next_reason": self.failing.reason if self.failing else "",
                "memory_limit_bytes": self.memory_limit_bytes,
                "host_memory_limit_bytes": self.host_memory_limit_bytes,
                "unit_costs": self.unit_costs, "note": self.note,
                "warnings": list(at.warnings) if at else []}


def length_scenario(scenario: Scenario, length: int) -> Scenario:
    """The scenario with its workload replaced by one sequence of ``length`` per DP replica."""
    raw = {**{k: v for k, v in scenario.raw.items() if k != "seed"},  # (nothing is drawn)
           "workload": {"lengths": [length] * scenario.parallel.dp, "num_batches": 1}}
    return build_scenario(_positions_for(scenario, raw, length), source=scenario.source)


def workload_scenario(scenario: Scenario, length: int) -> Scenario:
    """The scenario with its workload cut at ``length`` tokens: ``workload.max_length`` with
    ``overlong = "truncate"``, so every cap sees the same draws, each cut to the cap."""
    raw = {**scenario.raw, "workload": {**scenario.raw.get("workload", {}), "max_length": length,
                                        "overlong": "truncate"}}
    return build_scenario(_positions_for(scenario, raw, length), source=scenario.source)


def _positions_for(scenario: Scenario, raw: dict[str, Any], length: int) -> dict[str, Any]:
    """``raw`` with a learned position table (arch gpt) of at least ``length`` rows: training a
    sequence that long needs one, and its weights count (``positions_note``)."""
    if not scenario.model.positions_short_of(length):
        return raw
    return {**raw, "model": {**raw.get("model", {}), "max_position_embeddings": length}}


def positions_note(scenario: Scenario, longest: int) -> str:
    """What ``_positions_for`` did, said once per answer: empty when no length searched
    (``longest``) outgrew the table, and on the unit preset (which counts no weights)."""
    if not scenario.model.positions_short_of(longest) or scenario.cluster.device.is_unit:
        return ""
    rows = scenario.model.max_position_embeddings
    return (f"the learned position table (model.max_position_embeddings = {rows:,}) is grown "
            "to each length searched, with its weights: training a sequence needs a row per "
            "token")


MODES = {"sequence": length_scenario, "workload": workload_scenario}


def evaluate(scenario: Scenario, length: int, cost: CostModel, mode: str = "sequence", *,
             config_errors: bool = False, fresh: bool = False) -> Point:
    """Simulate one sequence of ``length`` tokens per replica (or the workload capped at
    ``length``); a PlanError or a ConfigError from planning (a length the strategy cannot plan)
    counts as not fitting, with its reason. ``config_errors``: raise a ConfigError instead (at the
    shortest length one is the scenario's fault, not the length's). ``fresh``: price with a cost
    model of the probe's own (made as ``make_cost_model`` does), so that its warnings are its
    own; a GPT whose position table grows always gets one."""
    try:
        probe = MODES[mode](scenario, length)
        if fresh or probe.model != scenario.model:  # a cost model of its own: the warnings of
            cost = make_cost_model(probe)  # this run alone (prices are shared by scope), and a
            # GPT's position table grown to the length, whose weights it counts
        sim = run(probe, cost=cost)
    except (PlanError, ConfigError) as exc:
        if config_errors and isinstance(exc, ConfigError):
            raise
        return Point(length=length, fits=False, limit="plan", reason=str(exc).splitlines()[0])
    result = sim.result
    peaks = result.peak_memory_bytes_per_device
    device = max(range(len(peaks)), key=peaks.__getitem__)
    batch = max(range(len(result.batches)),  # the batch whose peak it is (workload mode)
                key=lambda b: result.batches[b].peak_memory_bytes_per_device[device])
    terms = peak_terms(sim.plans[batch], sim.traces[batch], cost, device)
    terms["host"] = max(result.peak_host_memory_bytes_per_device)
    limit = ""
    if max(peaks) > result.memory_limit_bytes:
        limit = "device"
    elif terms["host"] > result.host_memory_limit_bytes:
        limit = "host"
    tokens = sum(b.num_tokens for b in result.batches) // len(result.batches)  # every replica's
    return Point(length=length, fits=result.fits,
                 iteration_time_s=float(result.iteration_times_s.mean()), peak_bytes=max(peaks),
                 limit=limit, reason=result.fit_reason, terms=terms, tokens=tokens,
                 warnings=tuple(result.warnings))


def find_max_length(scenario: Scenario, *, step: int = 1024, max_length: int = MAX_LENGTH,
                    cost: CostModel | None = None,
                    progress: Callable[[Point], None] | None = None,
                    mode: str = "sequence", points: dict[int, Point] | None = None) -> MaxLength:
    """Bisection (module docstring). ``progress`` is called with every simulated point;
    ``points``: lengths already simulated for this scenario (filled in as a side effect), so
    that a search with ``max_length = step`` checks a strategy's first length for a later one."""
    check_call(scenario, progress, "a function of each simulated point")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ConfigError("--step", "a positive number of tokens", step)
    if step > MAX_LENGTH:
        raise ConfigError("--step", f"a number of tokens <= the longest length searched "
                          f"({MAX_LENGTH:,})", step, "give a smaller --step")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < step:
        raise ConfigError("--max-length", f"a number of tokens >= the step ({step})", max_length,
                          "give a --max-length at least the step, or a smaller --step")
    if max_length > MAX_LENGTH:
        raise ConfigError("--max-length", f"a number of tokens <= {MAX_LENGTH:,}", max_length,
                          f"give at most --max-length {MAX_LENGTH}")
    max_length -= max_length % step  # the search lands on multiples of the step
    cap_is_longest = False
    if not isinstance(mode, str) or mode not in MODES:
        raise ConfigError("mode", f"one of {', '.join(MODES)}", mode,
                          'e.g. mode="workload" (--workload)')
    if mode == "workload":
        if not scenario.workload.dataset:
            raise ConfigError("workload.dataset", "a length distribution (a dataset) for "
                              "--workload", None, "give the scenario a workload.dataset, or "
                              "search one sequence without --workload")
        # past the distribution's longest sequence every cap draws the same batches
        longest = -(-load_dataset(scenario.workload.dataset).max_tokens // step) * step
        cap_is_longest = max_length >= longest
        max_length = min(max_length, longest)
    fresh = cost is None  # each probe its own cost model (its own warnings); a caller's is kept
    cost = cost or make_cost_model(scenario)
    if cost.memory_limit_bytes >= NO_LIMIT_BYTES and max_length > MAX_LENGTH - step:
        # the unit preset without a limit: every length fits, and a search to a billion tokens
        # would plan ever larger batches for hours
        raise ConfigError("hardware.memory_limit_gib", "given for maxlen (the unit preset has no "
                          "memory limit, so no length is the longest)", None,
                          "set hardware.memory_limit_gib, or bound the search with --max-length",
                          source=scenario.source)
    if mode == "sequence":  # a sequence per DP replica: at most a batch's tokens in all (the
        # search would else reach lengths refused as workload.lengths, a key nobody gave)
        max_length = max(step, min(max_length, MAX_BATCH_TOKENS // scenario.parallel.dp))
        max_length -= max_length % step
    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import unused_options

    options = dict(scenario.strategy_options)  # as given: the note names what the search used
    for key in unused_options(get_strategy(scenario.strategy).parse(options), options):
        del options[key]  # (Seq1F1B's chunk_size under variant "original": not what ran)
    scenario, note = worst_draw(scenario)
    if points is not None:  # (a list was an IndexError)
        check_argument("points", points, dict, "a dict of length -> Point, or None",
                       "pass the dict an earlier search filled in, or leave it out")
    points = {} if points is None else points

    def probe(length: int) -> Point:
        if length not in points:
            try:
                points[length] = evaluate(scenario, length, cost, mode,
                                          config_errors=length == step, fresh=fresh)
            except ConfigError as exc:  # at the first length: the scenario's fault, or the step's?
                if step > 1 and _plans(scenario, 1, cost, mode):
                    raise ConfigError("--step", "a length the strategy can plan", step,
                                      "give a smaller --step", context=f"at {step:,} tokens "
                                      f"{exc.key} must be {exc.rule} (got {exc.value!r})") from None
                raise
            if progress is not None:
                progress(points[length])
        return points[length]

    period = None
    if mode == "sequence":
        strategy = get_strategy(scenario.strategy)
        period = strategy.maxlen_period(strategy.parse(scenario.strategy_options))

    def holds(length: int) -> Point:
        """The point that decides whether every length up to ``length`` fits: ``length``'s, or,
        for a strategy that cuts a sequence into chunks of ``period`` tokens (whose peak rises
        with the last chunk and falls past each chunk's end), that of the last chunk end below
        it when that one does not fit."""
        point = probe(length)
        if point.fits and period and length > period:
            end = probe((length - 1) // period * period)
            if not end.fits:
                return end
        return point

    lo, hi = 0, step
    while hi <= max_length and holds(hi).fits:
        lo, hi = hi, 2 * hi
    if hi > max_length:  # everything up to the cap fits
        hi = max_length + step
    while hi - lo > step:
        mid = lo + (hi - lo) // (2 * step) * step
        if holds(mid).fits:
            lo = mid
        else:
            hi = mid
    failing = holds(hi) if hi in points else None
    note = "; ".join(filter(None, (note, positions_note(scenario, max(points, default=0)))))
    if mode == "workload" and lo:  # the draws sampled hold few long sequences, if any
        alone = evaluate(scenario, lo, cost, "sequence", fresh=fresh)
        if not alone.fits:
            note = "; ".join(filter(None, (note, (
                f"every sampled batch fits at this cut, but one sequence of {lo:,} tokens per "
                f"replica does not ({alone.reason}): a batch that draws a sequence that long "
                "fails (`ltsim maxlen` without --workload finds the longest one that fits)"))))
    return MaxLength(strategy=scenario.strategy, options=options, step=step,
                     max_length=lo, at=points.get(lo), failing=failing,
                     points=tuple(points[k] for k in sorted(points)),
                     memory_limit_bytes=cost.memory_limit_bytes,
                     host_memory_limit_bytes=cost.host_memory_limit_bytes, mode=mode,
                     cap=max_length, cap_is_longest=cap_is_longest,
                     unit_costs=scenario.cluster.device.is_unit, note=note)


def worst_draw(scenario: Scenario) -> tuple[Scenario, str]:
    """The scenario with the options its strategy's ``maxlen_options`` give, and a note saying
    so ("" when the search runs as the scenario's own options would). SpaCO draws at random
    which chunks back-propagate, and its peak depends on the draw (the latest chunk drawn holds
    every earlier chunk's K/V gradients); a run draws anew every step, so the longest length it
    can train is one that every draw fits: the search uses the draw of the largest peak."""
    from ltsim.strategies import get_strategy

    strategy = get_strategy(scenario.strategy)
    options = strategy.parse(scenario.strategy_options)
    override, said = strategy.maxlen_options(options)
    changed = {k: v for k, v in override.items() if getattr(options, k) != v}
    if not changed:
        return scenario, ""
    raw = {**scenario.raw, "strategy": {**scenario.raw["strategy"], **changed}}
    note = (f"searched with {said}: its peak depends on which chunks a step draws, and a run "
            "draws anew every step, so the answer is the longest length the worst draw fits (and "
            "the time shown is that draw's)") if said else ""
    return build_scenario(raw, source=scenario.source), note


def _plans(scenario: Scenario, length: int, cost: CostModel, mode: str) -> bool:
    """Whether the scenario plans at ``length`` without a ConfigError."""
    try:
        evaluate(scenario, length, cost, mode, config_errors=True)
    except ConfigError:
        return False
    return True


def peak_terms(plan: Plan, trace: Trace, cost: CostModel, device: int) -> dict[str, int]:
    """The device's memory at its peak, by term (module docstring); sums to the trace's peak."""
    static = _static_terms(plan, cost, device)
    ops = {op.token: op for op in plan.ops() if op.device == device}
    # context K/V gradients charged at a backward's end (sim/compile.py), by op key
    table = plan.table
    sizes = np.array([cost.buffer_bytes(buf) for buf in table.buffers], dtype=np.int64)
    deferrals = {table.key(row): less for row, less in layerwise_deferrals(table, sizes).items()
                 if table.device[row] == device}
    changes: list[tuple[float, int, dict[str, int]]] = []  # (time, 0 release / 1 charge, terms)
    for event in trace.events:
        op = ops.get(event.token) if event.device == device else None
        if op is None:
            continue
        held = _working_terms(op, cost)
        charge = _buffer_terms(op.allocs, cost)
        release = _buffer_terms(op.frees, cost)
        less_charge, less_release = deferrals.get(op.key, (0, 0))
        if less_charge or less_release:  # context K/V gradients accrue through a backward
            charge["kv_state"] = charge.get("kv_state", 0) - less_charge
            release["kv_state"] = release.get("kv_state", 0) - less_release
        for term, size in held.items():
            charge[term] = charge.get(term, 0) + size
            release[term] = release.get(term, 0) + size
        changes += [(event.start_s, 1, charge), (event.end_s, 0, release)]
    changes.sort(key=lambda c: (c[0], c[1]))  # releases first at equal times, as the engine
    level = dict.fromkeys(DEVICE_TERMS, 0)
    level.update(static)
    best, best_total = dict(level), sum(level.values())
    for _, charging, terms in changes:
        sign = 1 if charging else -1
        for term, size in terms.items():
            level[term] += sign * size
        total = sum(level.values())
        if total > best_total:
            best, best_total = dict(level), total
    return best


def _static_terms(plan: Plan, cost: CostModel, device: int) -> dict[str, int]:
    spec = plan.devices[device]
    breakdown = getattr(cost, "static_memory", None)
    if breakdown is None:  # a cost model without the split (the unit model): all as weights
        return {"weights": int(cost.static_memory_bytes(spec))}
    parts = breakdown(spec)
    gathered = parts.gathered_bytes - parts.gathered_grads_bytes  # ZeRO-3's gathered module
    return {"weights": int(parts.weights_bytes + gathered),  # and its gradients
            "gradients": int(parts.grads_bytes + parts.gathered_grads_bytes),
            "optimizer": int(parts.optimizer_bytes)}


def _buffer_terms(buffers: tuple[Buffer, ...], cost: CostModel) -> dict[str, int]:
    out: dict[str, int] = {}
    for buf in buffers:
        if buf.host:
            continue  # host memory is its own term, from the trace
        size = cost.buffer_bytes(buf)
        term = _KIND_TERM.get(buf.kind, "activations")
        if buf.work.head and buf.kind == "act":
            rest = cost.buffer_bytes(buf._replace(work=replace(buf.work, head=False)))
            out["logits"] = out.get("logits", 0) + size - rest
            size = rest
        out[term] = out.get(term, 0) + size
    return out


def _working_terms(op, cost: CostModel) -> dict[str, int]:
    if op.work is None:
        return {}
    size = cost.working_bytes(op.kind, op.work, part=op.part, keep=op.keep)
    if not size:
        return {}
    if not op.work.head:
        return {"working": size}
    rest = cost.working_bytes(op.kind, replace(op.work, head=False), part=op.part, keep=op.keep)
    return {"logits": size - rest, "working": rest}
