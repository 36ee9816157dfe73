"""Predicted vs measured: simulate a scenario, run its first batch's plan with the executor, compare.

``ltsim validate SCENARIO --profile DIR`` simulates the scenario with ``hardware.profile = DIR``,
executes the first sampled global batch's plan on this machine (gloo on CPU for the ``cpu``
hardware preset, NCCL with one GPU per simulated device otherwise), and compares iteration time,
per-op-kind busy time (F, B, R, SEND, COLL, OPT summed over devices), bubble ratio and peak memory
per device. Relative errors are (measured - predicted) / measured.

Peak memory is compared *bare*: the prediction here uses the memory model without the allocator
allowance (``memory.NO_ALLOCATOR_OVERHEAD``: no 5% fragmentation, no fixed CUDA/NCCL bytes), which
is what the executor measures (CPU: the bytes of live tensors; GPU:
``torch.cuda.max_memory_allocated``), as memory.with_allocator_overhead prescribes.

Outputs under ``--out``: ``comparison.csv`` and ``comparison.md`` (the table), ``summary.json``,
``gantt.png`` (predicted above measured, via ``ltsim.viz.plot_compare``) and both traces as Chrome
trace JSON. The command (ltsim.cli) exits 1 when the iteration-time or the peak-memory error
exceeds ``--tolerance`` (``Validation.within``).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ltsim.errors import ConfigError
from ltsim.plan import Keep, OpKind
from ltsim.profiles import SDPA_BOOL_MASK_KERNEL
from ltsim.sim.metrics import batch_metrics

if TYPE_CHECKING:
    from ltsim.plan import Plan
    from ltsim.scenario import Scenario
    from ltsim.trace import Trace

KIND_GROUPS = (("F", ("F",)), ("B", ("B", "W")), ("R", ("R",)), ("SEND", ("SEND_F", "SEND_B")),
               ("COLL", ("COLL",)), ("OPT", ("OPT",)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    metric: str
    unit: str  # "s", "ratio" or "bytes"
    predicted: float
    measured: float

    @property
    def rel_error(self) -> float | None:
        """(measured - predicted) / measured; None when nothing was measured."""
        return (self.measured - self.predicted) / self.measured if self.measured else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    """One plan predicted and measured."""

    plan: "Plan"
    predicted: "Trace"
    measured: "Trace"
    rows: tuple[Row, ...]
    iteration_time_error: float  # relative, signed
    peak_memory_error: float  # relative, signed, the device with the largest |error|
    measured_iteration_times_s: tuple[float, ...] = ()  # every measured iteration
    warnings: tuple[str, ...] = ()  # the simulation's (e.g. lookups outside the profile)

    def within(self, tolerance: float) -> bool:
        return (abs(self.iteration_time_error) <= tolerance
                and abs(self.peak_memory_error) <= tolerance)


def kind_totals_s(trace: "Trace") -> dict[str, float]:
    """Seconds of each op-kind group summed over devices."""
    totals = {group: 0.0 for group, _ in KIND_GROUPS}
    lookup = {kind: group for group, kinds in KIND_GROUPS for kind in kinds}
    for event in trace.events:
        group = lookup.get(event.kind)
        if group is not None:
            totals[group] += event.duration_s
    return totals


def compare(plan: "Plan", predicted: "Trace", measured: "Trace",
            measured_peaks: tuple[int, ...] | None = None,
            measured_host_peaks: tuple[int, ...] = ()) -> Validation:
    """The comparison table of one plan. ``measured_peaks`` defaults to the trace's samples;
    host memory (offloaded checkpoints) gets rows when the plan or the run used any."""
    pred_m, meas_m = batch_metrics(plan, predicted, 0.0), batch_metrics(plan, measured, 0.0)
    rows = [Row(metric="iteration time", unit="s", predicted=pred_m.iteration_time_s,
                measured=meas_m.iteration_time_s)]
    pred_k, meas_k = kind_totals_s(predicted), kind_totals_s(measured)
    rows += [Row(metric=f"{group} total", unit="s", predicted=pred_k[group],
                 measured=meas_k[group]) for group, _ in KIND_GROUPS]
    rows.append(Row(metric="bubble ratio", unit="ratio", predicted=pred_m.bubble_ratio,
                    measured=meas_m.bubble_ratio))
    peaks = measured_peaks or tuple(measured.peak_memory_bytes())
    mem_rows = [Row(metric=f"peak memory device {d}", unit="bytes", predicted=float(p),
                    measured=float(m)) for d, (p, m) in enumerate(zip(predicted.peak_memory_bytes(),
                                                                      peaks))]
    rows += mem_rows
    host = predicted.peak_host_memory_bytes()
    if any(host) or any(measured_host_peaks):
        measured_host = measured_host_peaks or (0,) * len(host)
        rows += [Row(metric=f"peak host memory device {d}", unit="bytes", predicted=float(p),
                     measured=float(m)) for d, (p, m) in enumerate(zip(host, measured_host))]
    worst = max(mem_rows, key=lambda r: abs(r.rel_error or 0.0))
    return Validation(plan=plan, predicted=predicted, measured=measured, rows=tuple(rows),
                      iteration_time_error=rows[0].rel_error or 0.0,
                      peak_memory_error=worst.rel_error or 0.0)


def bare_cost_model(scenario: "Scenario"):
    """The scenario's table cost model without the allocator allowance (module docstring), priced
    the way the executor measures memory on this device: on GPU the allocator's peak, transients
    included; on CPU the executor accounts only the tensors that stay alive between ops (saved for
    backward or held by the runtime, ltsim/executor/memtrack.py), so an op's transient working set
    (the loss's) is left out of the prediction it is compared with."""
    from ltsim.costs.table import TableCostModel
    from ltsim.memory import NO_ALLOCATOR_OVERHEAD

    require_real_device(scenario)
    return TableCostModel(scenario.model, scenario.cluster, overhead=NO_ALLOCATOR_OVERHEAD,
                          working_sets=scenario.cluster.device.name != "cpu",
                          grad_dtype=scenario.parallel.grad_dtype)


def require_real_device(scenario: "Scenario") -> None:
    """Raise ConfigError for the unit preset (there is nothing to measure it against) and for a
    loss kernel the executor does not run (it runs torch's cross entropy: executor/model.py)."""
    if scenario.cluster.device.is_unit:
        raise ConfigError("hardware.preset", "a real device (not 'unit') to validate against",
                          "unit", "use hardware.preset = \"cpu\" on this machine")
    if scenario.cluster.loss_kernel != "torch":
        raise ConfigError("hardware.loss_kernel", "torch to validate (the executor runs PyTorch's "
                          "cross entropy)", scenario.cluster.loss_kernel,
                          "remove hardware.loss_kernel, or --set hardware.loss_kernel=torch")


def same_kind_of_device(scenario: "Scenario", profile: Path, given: str) -> str:
    """The executor runs where the scenario's preset says (the CPU for ``cpu``); a profile measured
    on the other kind of device predicts another machine (an H100 profile against a CPU run read
    +99%): refused. A warning when it names another model of the same kind (cpu-ci, measured on an
    Intel Xeon, read +73% on an AMD EPYC), else ""."""
    from ltsim.profile_files import measured_on_cpu, read_meta

    meta = read_meta(profile)  # its device is never quoted: a file's content
    on_cpu = scenario.cluster.device.name == "cpu"
    if on_cpu != measured_on_cpu(meta):
        raise ConfigError("--profile", f"a profile measured on {'a CPU' if on_cpu else 'a GPU'} "
                          f"(hardware.preset '{scenario.cluster.device.name}' runs the executor "
                          f"there)", str(given), ("use cpu-ci or a profile `ltsim profile "
                                                  "--device cpu` wrote") if on_cpu else
                          ("use h100-sxm5-80gb or a profile `ltsim profile --device cuda` wrote on "
                           "the GPU the executor runs on; a GPU scenario validates on a GPU "
                           "machine"),
                          context=f"its meta.json names {'a GPU' if on_cpu else 'a CPU'}")
    here = _this_device(on_cpu)
    if not here or meta.device == here:
        return ""
    return (f"validate: warning: {given} was measured on another {'CPU' if on_cpu else 'GPU'} "
            f"model than this machine's ({here.removeprefix('cpu: ')}); the prediction describes "
            f"that machine. `ltsim profile --device {'cpu' if on_cpu else 'cuda'}` measures this "
            "one")  # the profile's own device is not quoted (a file's content)


def _this_device(on_cpu: bool) -> str:
    """This machine's device as `ltsim profile` names it in meta.json ("" when unknown)."""
    import torch

    from ltsim.profiler.environment import cpu_model

    if on_cpu:
        return f"cpu: {cpu_model()}"
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def executor_device(scenario: "Scenario") -> tuple[str, str]:
    """(backend, device) to run the scenario's plan on this machine; raises ConfigError."""
    if scenario.cluster.device.name == "cpu":
        return "gloo", "cpu"
    import torch

    needed = scenario.parallel.num_sim_devices
    if torch.cuda.device_count() >= needed:
        return "nccl", "cuda"
    raise ConfigError("hardware.preset", f"'cpu', or a GPU preset on a machine with {needed} CUDA "
                      "devices", scenario.cluster.device.name,
                      f"this machine has {torch.cuda.device_count()}; use --set hardware.preset=cpu")


def validate_scenario(scenario: "Scenario", *, warmup: int = 1, repeats: int = 3,
                      seed: int = 0, announce: Callable[[int, float], None] | None = None
                      ) -> Validation:
    """Simulate the scenario's first batch and execute its plan; raises ConfigError, PlanError.
    ``announce(iterations, predicted seconds each)`` before the executor starts."""
    from ltsim.executor.runtime import check_counts, check_executable, execute_plan
    from ltsim.runner import run

    check_counts(warmup, repeats, seed)  # before the prediction and the device processes
    cost = bare_cost_model(scenario)
    backend, device = executor_device(scenario)
    sim = run(scenario.with_overrides({"workload.num_batches": 1}), cost=cost)
    plan = sim.plans[0]
    predicted = sim.result.batches[0]
    if device == "cpu":
        _fits_this_host(sum(predicted.peak_memory_bytes_per_device)
                        + sum(predicted.peak_host_memory_bytes_per_device), plan.num_devices)
    iterations = warmup + repeats
    if iterations * predicted.iteration_time_s > MAX_EXECUTION_S:
        raise ConfigError("scenario", f"a plan the executor runs {iterations} times within "
                          f"{MAX_EXECUTION_S / 3600:g} hour on this {device}",
                          f"{iterations * predicted.iteration_time_s / 3600:,.1f} hours predicted",
                          "validate with shorter sequences or a smaller model (the prediction "
                          "alone: ltsim simulate)")
    attention = ("sdpa_boolmask" if scenario.cluster.attention_kernel == SDPA_BOOL_MASK_KERNEL
                 else "auto")  # run the kernel the prediction prices
    check_executable(plan, scenario.model, scenario.parallel, backend=backend, device=device,
                     warmup=warmup, repeats=repeats, attention=attention)  # before it says
    if announce is not None:  # it runs (a setup the executor refuses followed the line)
        announce(iterations, predicted.iteration_time_s)
    measured = execute_plan(plan, scenario.model, scenario.parallel, backend=backend,
                            device=device, seed=seed, warmup=warmup, repeats=repeats,
                            attention=attention)
    validation = compare(plan, sim.traces[0], measured.trace,
                         measured.peak_memory_bytes_per_device,
                         measured.peak_host_memory_bytes_per_device)
    return replace(validation, measured_iteration_times_s=tuple(measured.iteration_times_s),
                   warnings=sim.result.warnings + _convention_gaps(plan))


def _convention_gaps(plan) -> tuple[str, ...]:
    """Where the executor is known to hold other than the memory model charges: a whole stage's
    full recompute (its R rebuilds every layer's graph at once; Megatron, and the model, rebuild
    one layer at a time inside the backward: a review measured +20-23% peak on CPU)."""
    for op in plan.ops():
        if (op.kind is OpKind.R and op.keep is Keep.INPUT and op.work is not None
                and op.work.num_layers > 1):
            return (f"{op.key.token} recomputes {op.work.num_layers} layers at once: the executor "
                    "holds all their activations until the backward, where the memory model "
                    "(Megatron's full recompute) holds one layer's; expect the measured peak "
                    "above the predicted one",)
    return ()


MAX_EXECUTION_S = 3600.0  # what validate may run for; a longer plan is a mistake, not a check


# What one executor process holds before its plan: torch, torch.distributed and the worker
# imported (`/usr/bin/time -v python -c "import torch, torch.distributed,
# ltsim.executor.worker"`: 224,672 kB maximum resident, torch 2.13.0 CPU, 2026-11-29)
WORKER_BASE_BYTES = 224_672 * 1024


def _fits_this_host(needed: int, workers: int) -> None:
    """The CPU executor's processes share this machine's memory: a plan predicted to need more
    than it has (with each of its ``workers`` processes' own torch) would swap or be killed after
    minutes (an 8B model in fp32 on CPU; 1024 simulated devices, one process each)."""
    from ltsim.profiler.environment import host_memory_bytes

    have = host_memory_bytes()  # 0 where unknown: nothing to compare with
    base = workers * WORKER_BASE_BYTES
    if have and needed + base > have:
        raise ConfigError("hardware.preset", f"a plan that fits this machine's {have / 2**30:.1f} "
                          "GiB of memory (the CPU executor runs every device here, one process "
                          f"each of about {WORKER_BASE_BYTES / 2**20:.0f} MiB before its plan)",
                          f"{(needed + base) / 2**30:.1f} GiB for {workers} devices "
                          f"({needed / 2**30:.1f} GiB predicted for the plan)",
                          "use a smaller model, shorter sequences or fewer devices (parallel.pp, "
                          "parallel.dp; --set model.preset=llama-tiny)")


def format_rows(rows: tuple[Row, ...]) -> list[list[str]]:
    def fmt(value: float, unit: str) -> str:
        if unit == "s":
            return f"{value * 1e3:.2f} ms"
        if unit == "bytes":
            return f"{value / 2**20:.2f} MiB"
        return f"{100 * value:.2f}%"

    out = []
    for row in rows:
        error = row.rel_error
        out.append([row.metric, fmt(row.predicted, row.unit), fmt(row.measured, row.unit),
                    "-" if error is None else f"{100 * error:+.1f}%"])
    return out


def markdown_table(header: list[str], cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def summary_text(validation: Validation, tolerance: float) -> str:
    verdict = "within" if validation.within(tolerance) else "OUTSIDE"
    table = markdown_table(["metric", "predicted", "measured", "error"],
                           format_rows(validation.rows))
    times = ", ".join(f"{t * 1e3:.1f}" for t in validation.measured_iteration_times_s)
    lines = [table, ""]
    if times:
        lines.append(f"measured iterations (ms): {times}; the median one is compared")
    lines += [f"warning: {w}" for w in validation.warnings[:10]]
    lines.append(f"iteration time error {100 * validation.iteration_time_error:+.1f}%, "
                 f"peak memory error {100 * validation.peak_memory_error:+.1f}% (worst device): "
                 f"{verdict} the tolerance of {100 * tolerance:.1f}%")
    return "\n".join(lines)


#: What ``write_outputs`` writes under its folder (the command line checks them against the inputs)
OUTPUT_FILES = ("comparison.csv", "comparison.md", "summary.json", "predicted_trace.json",
                "measured_trace.json", "gantt.png")


def write_outputs(validation: Validation, out: Path, title: str, tolerance: float) -> list[Path]:
    """The table (CSV, markdown), summary JSON, Gantt figure and Chrome traces under ``out``."""
    from ltsim.viz import plot_compare

    out.mkdir(parents=True, exist_ok=True)
    with (out / "comparison.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["metric", "unit", "predicted", "measured", "rel_error"])
        for row in validation.rows:
            writer.writerow([row.metric, row.unit, row.predicted, row.measured, row.rel_error])
    text = summary_text(validation, tolerance)
    (out / "comparison.md").write_text(f"# {title}\n\n{text}\n")
    summary: dict[str, Any] = {
        "title": title, "tolerance": tolerance, "within": validation.within(tolerance),
        "iteration_time_error": validation.iteration_time_error,
        "peak_memory_error": validation.peak_memory_error,
        "rows": [{"metric": r.metric, "unit": r.unit, "predicted": r.predicted,
                  "measured": r.measured, "rel_error": r.rel_error} for r in validation.rows]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    validation.predicted.write_chrome_trace(out / "predicted_trace.json")
    validation.measured.write_chrome_trace(out / "measured_trace.json")
    figure = plot_compare(validation.predicted, validation.measured, out / "gantt.png",
                          plan=validation.plan, title=title)
    return [out / n for n in OUTPUT_FILES[:-1]] + [figure]
