"""Run a Plan on real devices: one process per simulated device, a measured Trace back.

``execute_plan`` spawns one process per simulated device (one pipeline stage of one DP replica;
gloo on CPU, NCCL on GPU with one GPU per device), each running worker.py's loop over its
programs, and assembles what they measured into the simulator's ``Trace`` schema
(``source="measured"``), so that predicted and measured timelines compare op by op.

Why the P2P order cannot deadlock. A process blocks in exactly three places: (1) an F or B waiting
for the receive of its input (a SEND of the previous / next stage), (2) an OPT waiting for its
COLL, (3) the collectives themselves (the barrier before an iteration, COLL[dp-grad]). Sends never
block: they are posted with ``isend`` the moment their producer finishes (the comm program's ops
start in program order as soon as their dependencies are done) and are waited for only at the end
of the iteration, after the process has posted every receive of its own program. Receives are
posted at latest when the op that needs them starts, and each P2P channel carries one direction
(comm.py), matched by (peer, tag) on gloo and, on NCCL, by posting order, which ``check_p2p_order``
verifies. So every wait of kind (1) or (2) waits for an op that precedes the waiting op in the
plan's dependency graph (program order + deps), which ``Plan.validate`` has checked to be acyclic:
ordering all ops topologically, the first op that could wait forever would wait for an earlier op
that finishes, a contradiction. Kind (3) needs every member to arrive; a member arrives once its
earlier ops finished, by the same induction. A process group timeout (``timeout_s``) turns a bug
into an error rather than a hang.

The GPU path (NCCL, CUDA events, ``torch.cuda.max_memory_allocated``) is present but untested on
this project's CI machine, which has no GPU.
"""

from __future__ import annotations

import numbers
import os
import socket
import statistics
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing as mp

from ltsim.errors import ConfigError, PlanError, check_argument
from ltsim.executor.comm import check_p2p_order, recv_sources
from ltsim.executor.model import ATTENTION_BACKENDS, check_tied_embeddings
from ltsim.executor.worker import OPTIMIZERS, WorkerConfig, device_main, make_tokens
from ltsim.model import ModelSpec
from ltsim.parallel import ParallelConfig
from ltsim.plan import KINDS, Op, OpKind, Plan

if TYPE_CHECKING:
    from ltsim.trace import Trace

__all__ = ["MeasuredRun", "check_trace", "execute_plan", "make_tokens"]
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**40),
              "MALLOC_TOP_PAD_": str(256 * 2**20)}
SUPPORTED_KINDS = frozenset(k for k, info in KINDS.items() if info.executor)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredRun:
    """What the executor measured for one plan.

    ``traces``: one measured Trace per measured iteration (times from the common start of that
    iteration); ``peak_memory_bytes_per_device``: max over the measured iterations (CPU: the
    accounted live bytes, GPU: ``torch.cuda.max_memory_allocated``); ``loss``: the token-summed
    loss of the last measured iteration over all replicas; ``grads``: per device, the parameter
    gradients of the last measured iteration after COLL (whole-model names), when asked for.
    """

    traces: tuple["Trace", ...]
    peak_memory_bytes_per_device: tuple[int, ...]
    static_memory_bytes_per_device: tuple[int, ...]
    peak_host_memory_bytes_per_device: tuple[int, ...] = ()  # layer checkpoints copied to host
    losses: tuple[float, ...]
    grads: tuple[dict[str, torch.Tensor], ...] | None
    backend: str
    device: str
    wall_s: float

    @property
    def iteration_times_s(self) -> list[float]:
        return [t.makespan_s for t in self.traces]

    @property
    def iteration_time_s(self) -> float:
        """Median over the measured iterations."""
        return statistics.median(self.iteration_times_s)

    @property
    def trace(self) -> "Trace":
        """The measured iteration whose makespan is the median (the lower one for an even count)."""
        order = sorted(range(len(self.traces)), key=lambda i: self.traces[i].makespan_s)
        return self.traces[order[(len(order) - 1) // 2]]

    @property
    def loss(self) -> float:
        return self.losses[-1]


def execute_plan(plan: Plan, spec: ModelSpec, parallel: ParallelConfig, *, backend: str = "gloo",
                 device: str = "cpu", seed: int = 0, dtype: str | torch.dtype | None = None,
                 warmup: int = 1, repeats: int = 1, optimizer: str = "adam", lr: float = 1e-4,
                 num_threads: int = 1, timeout_s: float = 600.0, return_grads: bool = False,
                 attention: str = "auto") -> MeasuredRun:
    """Run ``plan`` with one process per simulated device and measure every op.

    ``warmup`` iterations run first and are not measured, then ``repeats`` measured ones (the
    optimizer steps after each, ``optimizer`` "adam" or "sgd" at a fixed ``lr``). ``dtype``
    overrides the model's ("fp64", "fp32", "bf16", "fp16" or a torch dtype). ``num_threads`` is
    torch's intra-op thread count per process (the CPU profile is measured with 1).
    ``attention``: one of model.ATTENTION_BACKENDS ("sdpa_boolmask": SDPA with a boolean mask for
    slices with context, the kernel profiles.SDPA_BOOL_MASK_KERNEL prices).
    Raises ConfigError for bad arguments, PlanError for a plan the executor cannot run, and
    RuntimeError when a device process fails (its traceback in the message). The processes are
    spawned, so a script that calls this needs the ``if __name__ == "__main__":`` guard.
    Mirrored DP replicas (ltsim/mirrors.py) run as their own processes, written out.
    """
    plan = check_executable(plan, spec, parallel, backend=backend, device=device, warmup=warmup,
                            repeats=repeats, optimizer=optimizer, attention=attention)
    dtype_name = _dtype_name(dtype)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ltsim-exec-") as tmp:
        config = WorkerConfig(backend=backend, device_type=device, seed=seed, dtype=dtype_name,
                              init_method=f"tcp://127.0.0.1:{_free_port()}", out_dir=tmp,
                              warmup=warmup, repeats=repeats, optimizer=optimizer, lr=lr,
                              num_threads=num_threads, timeout_s=timeout_s,
                              return_grads=return_grads, attention=attention)
        _spawn(plan, spec, config)
        reports = [torch.load(Path(tmp) / f"device{d}.pt", weights_only=False)
                   for d in range(plan.num_devices)]
    return _assemble(plan, reports, backend, device, time.perf_counter() - started)


def check_executable(plan: Plan, spec: ModelSpec, parallel: ParallelConfig, *,
                     backend: str = "gloo", device: str = "cpu", warmup: int = 1,
                     repeats: int = 1, optimizer: str = "adam", attention: str = "auto") -> Plan:
    """What ``execute_plan`` checks before it starts any process (ConfigError for arguments and a
    setup it does not run, PlanError for ops it cannot run), for a caller that says what it is
    about to run first (ltsim validate). Returns the plan with mirrored replicas written out."""
    plan = plan.expand()
    _check_arguments(plan, spec, parallel, backend, device, warmup, repeats, optimizer)
    if attention not in ATTENTION_BACKENDS:
        raise ConfigError("executor.attention", f"one of {', '.join(ATTENTION_BACKENDS)}",
                          attention)
    check_supported(plan)
    if backend == "nccl":
        check_p2p_order(plan)
    return plan


def _dtype_name(dtype: str | torch.dtype | None) -> str | None:
    from ltsim.executor.model import TORCH_DTYPES

    if dtype is None or isinstance(dtype, str) and dtype in TORCH_DTYPES:
        return dtype
    names = {v: k for k, v in TORCH_DTYPES.items()}
    if dtype in names:
        return names[dtype]
    raise ConfigError("executor.dtype", f"one of {', '.join(TORCH_DTYPES)} or its torch dtype",
                      dtype)


def _check_arguments(plan: Plan, spec: ModelSpec, parallel: ParallelConfig, backend: str,
                     device: str, warmup: int, repeats: int, optimizer: str) -> None:
    if backend not in ("gloo", "nccl"):
        raise ConfigError("executor.backend", "'gloo' or 'nccl'", backend)
    longest = max(plan.seq_lengths, default=0)
    if spec.arch == "gpt" and spec.max_position_embeddings < longest:  # (a worker's traceback)
        raise ConfigError("model.max_position_embeddings", "at least the plan's longest sequence "
                          f"({longest:,} tokens) for arch 'gpt' (a learned position table)",
                          spec.max_position_embeddings, f"set model.max_position_embeddings = "
                          f"{longest} or more, or use arch = \"llama\" (rotary positions need "
                          "no table)")
    for d in plan.devices:  # the model's check, before any process (from a worker it was a
        check_tied_embeddings(spec, d.layers)  # torch multiprocessing traceback; a fuzzing review)
    if device not in ("cpu", "cuda"):
        raise ConfigError("executor.device", "'cpu' or 'cuda'", device)
    if backend == "nccl" and device != "cuda":
        raise ConfigError("executor.backend", "'gloo' on CPU (NCCL needs CUDA)", backend)
    if device == "cuda" and torch.cuda.device_count() < plan.num_devices:
        raise ConfigError("executor.device", f"a machine with {plan.num_devices} CUDA devices "
                          "(one per simulated device)", f"{torch.cuda.device_count()} found",
                          "run on CPU with backend 'gloo' or use fewer stages / replicas")
    narrow = spec.dtype in ("bf16", "fp16")
    for key in ("grad_dtype", "optimizer_dtype"):  # the executor keeps one memory convention
        if narrow and getattr(parallel, key) != "model":
            raise ConfigError(f"parallel.{key}", '"model" for the executor with a 16-bit model '
                              "(it keeps gradients and Adam state in the model dtype, no fp32 "
                              "master copy)", getattr(parallel, key),
                              f'set parallel.{key} = "model" so the prediction describes the run')
    if parallel.dp > 1 and parallel.zero_stage:  # (found as its collectives, it had no fix)
        raise ConfigError("parallel.zero_stage", "0 for the executor with dp > 1 (each replica "
                          "keeps its whole gradients and Adam state: nothing sharded)",
                          parallel.zero_stage, "set parallel.zero_stage = 0 so the prediction "
                          "describes the run (ZeRO is simulated only)")
    if parallel.dp > 1 and parallel.overlap_grad_reduce:
        raise ConfigError("parallel.overlap_grad_reduce", "false for the executor with dp > 1 (it "
                          "reduces its flat gradient buffer after the last backward, not bucket "
                          "by bucket during it)", True, "set parallel.overlap_grad_reduce = false "
                          "so the prediction describes the run")
    if spec.lora_rank:
        raise ConfigError("model.lora_rank", "0 for the executor (it trains every weight; LoRA "
                          "is a simulator option)", spec.lora_rank, "remove model.lora_rank")
    for key in ("tp", "cp"):
        if getattr(parallel, key) != 1:
            raise ConfigError(f"parallel.{key}", "1 for the executor (it runs pipeline and data "
                              "parallelism only)", getattr(parallel, key),
                              f"validate with parallel.{key} = 1 (the simulator takes any)")
    if plan.num_devices != parallel.num_sim_devices:
        raise ConfigError("parallel", f"pp x dp = {plan.num_devices} (the plan's devices)",
                          f"pp={parallel.pp}, dp={parallel.dp}")
    if plan.stage_layers[-1][1] != spec.num_layers:
        raise ConfigError("model.num_layers", f"{plan.stage_layers[-1][1]} (the plan's layers)",
                          spec.num_layers, "plan with the same model")
    check_counts(warmup, repeats)
    if optimizer not in OPTIMIZERS:
        raise ConfigError("executor.optimizer", f"one of {', '.join(OPTIMIZERS)}", optimizer)


def check_counts(warmup: object, repeats: object, seed: object = 0) -> None:
    """The iteration counts (and the seed) of an execution: whole numbers, checked before any
    work (a float or a string failed inside the device processes after the prediction ran)."""
    for name, value, least in (("warmup", warmup, 0), ("repeats", repeats, 1), ("seed", seed, 0)):
        check_argument(name, value, numbers.Integral, f"a whole number of at least {least}")
        if value < least:
            raise ConfigError(name, f"a whole number of at least {least}", value)


def check_supported(plan: Plan) -> None:
    """Raise PlanError for ops the executor cannot run (kinds not marked in plan.KINDS, op parts
    split for CP, per-layer ops over parts of sequences or tiled, copies of anything but layer
    checkpoints, collectives other than the DP gradient reduction, an optimizer offloaded to host
    memory, cross-device dependencies other than SEND -> F/B)."""
    for op in plan.ops():
        if op.kind not in SUPPORTED_KINDS or op.part:
            what = f"{op.kind.value} ops" if op.kind not in SUPPORTED_KINDS else "CP-split ops"
            raise PlanError(f"the executor cannot run {what} (first: {op.key})\n"
                            f"{plan.grid(mark=op.key)}")
        _check_layers(plan, op)
        if op.kind is OpKind.COLL and op.name != "dp-grad":
            fix = (" Fix: plan with parallel.zero_stage = 0 (the executor's optimizer is not "
                   "sharded)" if op.name == "dp-params" else "")
            raise PlanError(f"the executor runs only the COLL[dp-grad] gradient reduction (got "
                            f"{op.key}).{fix}" + ("" if fix else f"\n{plan.grid(mark=op.key)}"))
    for device in plan.devices:
        if device.offload_optimizer:
            raise PlanError(f"device {device.index} keeps its optimizer in host memory (ZeRO-Offload)"
                            ", which the executor does not; simulated only. Fix: "
                            "strategy.offload_optimizer = false to validate")
    for device in range(plan.num_devices):
        recv_sources(plan, device)


def _check_layers(plan: Plan, op: Op) -> None:
    """An op over part of its stage (ALST's per-layer ops) runs over whole sequences, untiled;
    a COPY moves one per-layer op's checkpoint (layerwise.py)."""
    stage = plan.devices[op.device].layers
    work = op.comm.work if op.kind is OpKind.COPY else op.work
    if op.kind is OpKind.COPY and (op.comm.collective not in ("d2h", "h2d")
                                   or op.comm.tensor != "ckpt"):
        raise PlanError(f"the executor copies only layer checkpoints to and from host memory (got "
                        f"{op.key}: {op.comm.collective} of {op.comm.tensor})\n"
                        f"{plan.grid(mark=op.key)}")
    if op.kind is OpKind.COPY and op.comm.pinned:
        raise PlanError(f"the executor copies checkpoints synchronously through pageable host "
                        f"memory, as ALST's reference code does ({op.key} is an asynchronous copy "
                        "through pinned memory); simulated only. Fix: strategy.offload_async = "
                        "false to validate")
    if work is None or (op.kind is not OpKind.COPY and work.layers == stage):
        return
    if not stage[0] <= work.layers[0] <= work.layers[1] <= stage[1]:
        raise PlanError(f"{op.key} covers layers {work.layers}, outside its stage's {stage}\n"
                        f"{plan.grid(mark=op.key)}")
    if work.tiling.mlp or work.tiling.loss:
        raise PlanError(f"the executor does not tile the MLP or the loss ({op.key}); tiled works "
                        "are simulated only. Fix: strategy.tiled_mlp = false and "
                        "strategy.tiled_loss = false to validate")  # (a choice: one line)
    lengths = plan.seq_lengths
    if any(s.start > 0 or s.stop < lengths[s.seq] for s in work.slices):
        raise PlanError(f"{op.key}: per-layer ops over parts of sequences (K/V state across "
                        f"chunks) are simulated only\n{plan.grid(mark=op.key)}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _malloc_env(device: str):
    """glibc malloc tuned like a caching allocator for the CPU processes they spawn.

    By default glibc returns freed blocks of >= 128 KiB to the OS and maps them again on the next
    allocation, so every op pays first-touch page faults on its activations (measured: +15% on a
    1024-token forward of llama-tiny). A GPU caching allocator, and the profile's repeated
    microbenchmarks, do not. Keeping blocks below 32 MiB in the heap and never trimming it removes
    that. Variables the user set are left alone.
    """
    saved = {key: os.environ.get(key) for key in MALLOC_ENV}
    if device == "cpu":
        for key, value in MALLOC_ENV.items():
            os.environ.setdefault(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _spawn(plan: Plan, spec: ModelSpec, config: WorkerConfig) -> None:
    """Start the device processes and wait; a failure or the timeout stops all of them."""
    with _malloc_env(config.device_type):
        context = mp.start_processes(device_main, args=(plan, spec, config),
                                     nprocs=plan.num_devices, join=False, start_method="spawn")
    deadline = time.monotonic() + config.timeout_s + 60.0
    try:
        while not context.join(timeout=0.5):
            if time.monotonic() > deadline:
                raise RuntimeError(f"executor: the device processes did not finish within "
                                   f"{config.timeout_s + 60:.0f} s")
    except mp.ProcessRaisedException as exc:
        raise RuntimeError(f"executor: a device process failed:\n{exc}") from None
    except mp.ProcessExitedException as exc:
        raise RuntimeError(f"executor: a device process exited: {exc}") from None
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
                process.join(5)


def _assemble(plan: Plan, reports: list[dict], backend: str, device: str,
              wall_s: float) -> MeasuredRun:
    from ltsim.trace import Event, Trace

    num_iterations = len(reports[0]["iterations"])
    traces, losses = [], []
    for i in range(num_iterations):
        per_device = [r["iterations"][i] for r in reports]
        t0 = min(it["release_s"] for it in per_device)
        events = [Event(d, stream, token, kind, stage, chunk, a - t0, b - t0)
                  for d, it in enumerate(per_device)
                  for stream, token, kind, stage, chunk, a, b in it["events"]]
        events.sort(key=lambda e: (e.start_s, e.device, e.stream))
        memory = sorted(((t - t0, d, level) for d, it in enumerate(per_device)
                         for t, level in it["samples"]), key=lambda s: (s[0], s[1]))
        traces.append(Trace(events=tuple(events), memory=tuple(memory),
                            static_bytes=tuple(it["static"] for it in per_device),
                            source="measured"))
        losses.append(float(sum(it["loss"] for it in per_device if it["loss"] is not None)))
    peaks = tuple(max(r["iterations"][i]["peak"] for i in range(num_iterations)) for r in reports)
    grads = tuple(r["iterations"][-1]["grads"] for r in reports)
    host = tuple(max(it["host_peak"] for it in r["iterations"]) for r in reports)
    return MeasuredRun(traces=tuple(traces), peak_memory_bytes_per_device=peaks,
                       peak_host_memory_bytes_per_device=host,
                       static_memory_bytes_per_device=traces[-1].static_bytes,
                       losses=tuple(losses), grads=None if grads[0] is None else grads,
                       backend=backend, device=device, wall_s=wall_s)


def check_trace(plan: Plan, trace: "Trace", *, slack_s: float = 0.05) -> list[str]:
    """Problems of a measured trace against its plan (empty when consistent).

    One event per plan op; times finite with start <= end; each device's compute ops in program
    order without overlap; every op starts after its dependencies end (``slack_s`` allowed for
    cross-device ones: sender and receiver observe a transfer's end separately).
    """
    problems: list[str] = []
    ops = {str(op.key): op for op in plan.ops()}
    by_key = {f"{e.device}:{e.token}": e for e in trace.events}
    if len(trace.events) != len(ops) or set(by_key) != set(ops):
        missing = sorted(set(ops) - set(by_key))[:5]
        problems.append(f"{len(trace.events)} events for {len(ops)} ops (missing {missing})")
    for event in trace.events:
        if not (0.0 <= event.start_s <= event.end_s < float("inf")):
            problems.append(f"bad times for {event.device}:{event.token}")
    for program in plan.programs:
        if program.stream != "compute":
            continue
        events = [by_key[str(op.key)] for op in program.ops if str(op.key) in by_key]
        for a, b in zip(events, events[1:]):
            if b.start_s < a.end_s:
                problems.append(f"device {program.device}: {b.token} starts before {a.token} ends")
    for key, op in ops.items():
        for dep in map(str, op.deps):
            if key in by_key and dep in by_key:
                slack = 1e-9 if dep.split(":")[0] == key.split(":")[0] else slack_s
                if by_key[key].start_s + slack < by_key[dep].end_s:
                    problems.append(f"{key} starts before its dependency {dep} ends")
    return problems

