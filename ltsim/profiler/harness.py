"""`run_profile`: measure every profile table for some models and TP degrees into a profile directory.

Tables, in the order they are measured (each written the moment it is finished; see tables.py for
checkpointing and `--resume`): gemm, gemm_bwd, elementwise, attention, attention_varlen, memory,
eager, optimizer, host_copy (on CUDA only: copies between GPU and host memory), collectives.
meta.json is rewritten after every table, so an interrupted run leaves a readable profile of what
it finished; its `notes` say which tables are still pending. Each table's provenance records the
1-minute load average before and after it, since on a shared machine other processes skew CPU times.

What a machine or model cannot give is skipped, not fatal: a TP degree a model cannot take
(qwen2.5-7b's 28 heads at tp 8) is left out for that model, and with fewer than 2 devices (one
GPU) there is no collectives table. Both are logged and noted in meta.json (`notes`;
`tables.<name>.skipped_tp`; `tables.collectives.skipped`), and the profile still loads
(ltsim.profiles: collectives.csv is optional until a collective over 2 or more ranks is looked up).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ltsim.errors import ConfigError, ProfileError
from ltsim.model import get_model
from ltsim.profiler import (activations, attention, collectives, eager, elementwise, gemm,
                            host_copy)
from ltsim.profiler.environment import describe
from ltsim.profiler.shapes import ShardShape, shard
from ltsim.profiler.sizes import ProfileSizes, sizes_for
from ltsim.profiler.tables import (Progress, TableJob, interleaved, partial_made_with, run_table,
                                   sequential, table_done)
from ltsim.profiler.timing import TORCH_DTYPES, Bench, timer_name
from ltsim.profiles import ProfileMeta, read_meta, write_meta

log = logging.getLogger(__name__)

DEVICES = ("cpu", "cuda")
DEFAULT_MODELS = {"cpu": ("llama-tiny", "llama-small"), "cuda": ("qwen2.5-7b",)}
DEFAULT_TP = {"cpu": (1,), "cuda": (1, 2, 4, 8)}  # degrees a model cannot take are skipped
DEFAULT_THREADS = {"cpu": 1}  # the executor runs one thread per process; None: torch's own choice
COLLECTIVE_DTYPE = {"cpu": "fp32", "cuda": "bf16"}
HOST_COPY_REPEATS = 5


def run_profile(*, device: str, out: Path, models: list[str], tp_degrees: list[int], quick: bool,
                resume: bool, progress: bool, threads: int | None = None) -> Path:
    """Measure all tables into `out` and return it.

    device: "cpu" or "cuda"; models: catalog names (empty: the device's defaults); tp_degrees: TP
    degrees (empty: defaults); quick: fewer sizes and repeats; resume: keep finished tables and
    partial checkpoints in `out`; progress: show progress on the stream set by
    `tables.progress_stream` (a bar on a terminal, else a line per table); threads: torch intra-op
    threads while measuring (None: 1 on cpu, as the executor runs and profiles/cpu-ci was measured;
    torch's own choice on cuda).
    A TP degree a model cannot take (e.g. 8 for 28 heads) is skipped for that model, with a note in
    meta.json; collectives are skipped, with a note, when fewer than 2 devices can form a group.
    Raises ConfigError for a bad device, model or thread count, or a model no TP degree fits;
    ProfileError when a table fails.
    """
    torch_device = _torch_device(device)
    models = list(models) or list(DEFAULT_MODELS[device])
    tp_degrees = list(tp_degrees) or list(DEFAULT_TP[device])
    shards, skipped_tp = usable_shards(models, tp_degrees)
    threads = DEFAULT_THREADS.get(device) if threads is None else threads
    cores = os.cpu_count() or 1
    if threads is not None and (not isinstance(threads, int) or not 1 <= threads <= cores):
        # torch's thread pool crashes the process (a segfault) asked for 10^8 threads
        raise ConfigError("--threads", f"a positive integer of at most this machine's {cores} "
                          "cores", threads, "e.g. --threads 1 (as the executor runs), or omit it")
    for note in skipped_tp:
        log.warning("skipped %s", note)
    group_devices = collective_devices(device)
    sizes = sizes_for(device, quick=quick, max_group_size=group_devices)
    skipped_tables: dict[str, dict[str, Any]] = {}
    if not sizes.collective_group_sizes:
        skipped_tables["collectives"] = {"skipped": _no_group(device, group_devices),
                                         "devices": group_devices}
        log.warning("collectives: skipped (%s)", skipped_tables["collectives"]["skipped"])
    if not sizes.host_copy_bytes:  # on a CPU: noted in meta.json, not logged (nothing is lost)
        skipped_tables["host_copy"] = {"skipped": "the device is the host: no host link to measure"}
    jobs = [job for job in build_jobs(shards, sizes, Bench(device=torch_device, plan=sizes.timing),
                                      device, skipped_tp=skipped_tp)
            if job.name not in skipped_tables]
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run_jobs(jobs, device=device, torch_device=torch_device, out=Path(out),
                         models=models, tp_degrees=tp_degrees, quick=quick, resume=resume,
                         progress=progress, skipped_tables=skipped_tables, skipped_tp=skipped_tp)
    finally:
        torch.set_num_threads(previous_threads)


def _run_jobs(jobs: list[TableJob], *, device: str, torch_device: torch.device, out: Path,
              models: list[str], tp_degrees: list[int], quick: bool, resume: bool, progress: bool,
              skipped_tables: dict[str, dict[str, Any]], skipped_tp: list[str]) -> Path:
    """Measure `jobs` into `out`, rewriting meta.json after each (see the module docstring)."""
    args = {"device": device, "models": models, "tp": tp_degrees, "quick": quick,
            "threads": torch.get_num_threads()}
    out.mkdir(parents=True, exist_ok=True)
    previous = _previous_tables(out) if resume else {}
    name, memory_bytes, software = describe(torch_device)
    tables: dict[str, dict[str, Any]] = {}
    bar = Progress(enabled=progress)
    command = canonical_command(args, out)
    skipped = [f"{table} ({entry['skipped']})" for table, entry in skipped_tables.items()]
    skipped += skipped_tp

    def meta(pending: list[str]) -> ProfileMeta:
        return ProfileMeta(device=name, memory_bytes=memory_bytes, method="measured", date=_now(),
                           software=software, tables={**tables, **skipped_tables},
                           command=command, notes=_notes(pending, skipped))

    kept = {job.name: _kept(previous.get(job.name), args, job.name) for job in jobs
            if resume and table_done(out, job.name)}  # all checked before anything is written
    for job in jobs:  # and the partial checkpoints whose rows --resume would reuse
        if resume and job.name not in kept and (out / f"{job.name}.partial.csv").is_file():
            _kept(partial_made_with(out, job.name), args, f"{job.name}.partial")
    for position, job in enumerate(jobs):
        if job.name in kept:
            tables[job.name] = kept[job.name]
            log.info("%s: kept from the earlier run", job.name)
            bar.line(f"{job.name}: kept from the earlier run")
            continue
        start_s, load_start = time.perf_counter(), _load()
        rows = run_table(job, out, resume=resume, progress=bar, args=args)
        tables[job.name] = {**job.provenance, "rows": rows, "date": _now(),
                            "duration_s": round(time.perf_counter() - start_s, 1), "args": args,
                            "num_threads": torch.get_num_threads(),
                            "load_average_1min": [load_start, _load()]}
        log.info("%s: %d rows in %.1f s", job.name, rows, tables[job.name]["duration_s"])
        bar.finished(job.name, rows, tables[job.name]["duration_s"])
        write_meta(out, meta([j.name for j in jobs[position + 1:]]))
    write_meta(out, meta([]))
    return out


def collective_devices(device: str) -> int:
    """How many devices a collectives group can span here: the visible GPUs for NCCL; on CPU, gloo
    runs its ranks as processes, 2 of them."""
    return torch.cuda.device_count() if device == "cuda" else 2


def _no_group(device: str, count: int) -> str:
    unit = "GPU" if device == "cuda" else "device"
    what = "one " + unit if count == 1 else f"{count} {unit}s"
    return (f"{what}: no group of 2 to measure (collectives.csv not written; collective lookups "
            "need one: profile on a machine with >= 2 GPUs or copy a published one)")


def usable_shards(models: Sequence[str], tp_degrees: Sequence[int]
                  ) -> tuple[tuple[ShardShape, ...], list[str]]:
    """The shards of every (model, TP degree) a model can take, and a note per skipped pair.

    A degree a model cannot take (its heads, K/V heads or ffn width do not split that way) is
    skipped for that model; raises ConfigError when a model can take none of the degrees.
    """
    shards: list[ShardShape] = []
    skipped: list[str] = []
    for model in models:
        spec = get_model(model)
        errors: dict[int, ConfigError] = {}
        for tp in tp_degrees:
            try:
                shards.append(shard(spec, tp))
            except ConfigError as exc:
                errors[tp] = exc
        if errors and len(errors) == len(tp_degrees):
            if len(errors) == 1:
                raise next(iter(errors.values()))
            reasons = "; ".join(f"tp {tp}: {exc.rule}" for tp, exc in errors.items())
            raise ConfigError("--tp", f"degrees that {spec.name} can take", list(tp_degrees),
                              "give at least one such degree", context=reasons)
        skipped += [f"{spec.name} at tp {tp}: tp must be {exc.rule}" for tp, exc in errors.items()]
    return tuple(shards), skipped


def build_jobs(shards: Sequence[ShardShape], sizes: ProfileSizes, bench: Bench, device: str, *,
               skipped_tp: Sequence[str] = ()) -> list[TableJob]:
    """The table jobs of a profile, in measuring order. `skipped_tp` (notes on the TP degrees a
    model could not take) goes into the provenance of every table measured per model and degree."""
    timing = {"timer": timer_name(bench.device), "timing": bench.plan.description}
    # kernel tables hold the GPU's time alone; eager.csv and optimizer.csv, whole executor ops
    # timed as they run, hold the host's share (ltsim/costs/eager.py adds the two as a max)
    kernels = replace(bench, kernels_only=True)
    kernel_timing = {**timing, "timer": timer_name(bench.device, kernels_only=True)}
    flash = any(attention.uses_flash(bench.device, TORCH_DTYPES[s.dtype]) for s in shards)
    kernel = attention.FLASH_KERNEL if flash else attention.SDPA_KERNEL
    attn_notes = ("flash_attn_varlen_func(causal=True)" if flash else
                  "torch SDPA on (1, heads, tokens, head_dim), is_causal when q == kv, the "
                  "executor's kernels.context_attention when q < kv (mask column), as the executor "
                  "calls them (enable_gqa on the diagonal)")
    gemm_notes = "C[m,n] = A[m,k] @ B[k,n]; op lists every use as model/tpN/layer.pass"
    jobs = [
        TableJob(name="gemm", points=gemm.gemm_points(shards, sizes.gemm_tokens, ("fwd",)),
                 measure=interleaved(lambda p: gemm.prepare_gemm(p, kernels), kernels),
                 provenance={"method": "measured", "kernel": "torch.mm", **kernel_timing,
                             "notes": gemm_notes + "; forward GEMMs (Y = X W^T, layout nt)"}),
        TableJob(name="gemm_bwd",
                 points=gemm.gemm_points(shards, sizes.gemm_tokens, ("dgrad", "wgrad")),
                 measure=interleaved(lambda p: gemm.prepare_gemm(p, kernels), kernels),
                 provenance={"method": "measured", "kernel": "torch.mm", **kernel_timing,
                             "notes": gemm_notes + "; dgrad dX = dY W (nn), wgrad dW = dY^T X (tn)"}),
        TableJob(name="elementwise",
                 points=elementwise.elementwise_points(shards, sizes.elementwise_tokens),
                 measure=interleaved(lambda p: elementwise.prepare_elementwise(p, kernels), kernels),
                 provenance={"method": "measured", "kernel": "aten elementwise", **kernel_timing}),
        TableJob(name="attention", points=attention.attention_points(shards, sizes.attention_pairs()),
                 measure=interleaved(lambda p: attention.prepare_attention(p, kernels), kernels),
                 provenance={"method": "measured", "kernel": kernel, "default_kernel": kernel,
                             "notes": attn_notes, **kernel_timing}),
        TableJob(name="attention_varlen",
                 points=attention.varlen_points(shards, sizes.varlen_total_tokens,
                                                sizes.varlen_num_seqs),
                 measure=interleaved(lambda p: attention.prepare_varlen(p, kernels), kernels),
                 provenance={"method": "measured", "kernel": kernel, "notes": "one varlen call"
                             if flash else "one is_causal SDPA call per sequence", **kernel_timing}),
        TableJob(name="memory", points=activations.memory_points(shards, sizes.memory_tokens),
                 measure=sequential(lambda p: activations.measure_memory(p, bench.device)),
                 provenance={"method": "measured", "kernel": "one-layer forward",
                             "counter": "cuda_allocator" if device == "cuda"
                             else "saved_tensors_hooks"}),
        TableJob(name="eager", points=eager.eager_points(shards, sizes.eager_tokens,
                                                         sizes.eager_stages, sizes.eager_context),
                 measure=interleaved(lambda p: eager.prepare_eager(p, bench), bench),
                 provenance={"method": "measured", "kernel": "executor ops", **timing,
                             "notes": "whole executor ops (F, F_discard, F+B, F_discard+R+B) "
                             "of a stage of 1 and 2 layers over one sequence (column stage: "
                             "middle, first with the embedding, last with the head and loss; "
                             "column context_tokens: F and F+B of a chunk after that many tokens "
                             "of its sequence)"}),
        TableJob(name="optimizer", points=eager.optimizer_points(shards),
                 measure=interleaved(lambda p: eager.prepare_optimizer(p, bench), bench),
                 provenance={"method": "measured", "kernel": eager.IMPLEMENTATION, **timing,
                             "notes": "the executor's optimizer step over 1 and 2 layers"}),
        TableJob(name="host_copy", points=host_copy.host_copy_points(sizes.host_copy_bytes),
                 measure=sequential(lambda p: host_copy.measure_host_copy(
                     p, bench.device, HOST_COPY_REPEATS)),
                 provenance={"method": "measured", "kernel": "torch copies",
                             "timer": "perf_counter between torch.cuda.synchronize calls",
                             "timing": f"median of {HOST_COPY_REPEATS} copies after one untimed",
                             "notes": "pageable: tensor.to('cpu') / .to(device); pinned: "
                             "copy_(non_blocking=True) with a page-locked host buffer"}),
        TableJob(name="collectives",
                 points=collectives.collective_points(sizes.collective_group_sizes,
                                                      sizes.collective_bytes,
                                                      COLLECTIVE_DTYPE[device]),
                 measure=lambda points, emit, advance: collectives.measure_collectives(
                     points, emit, advance, device_type=device, plan=sizes.collective_timing),
                 provenance={"method": "measured", "backend": "nccl" if device == "cuda" else "gloo",
                             "timer": timer_name(bench.device),
                             "timing": sizes.collective_timing.description +
                             "; per repeat the slowest rank, after a barrier"}),
    ]
    for job in jobs:  # every table but collectives is measured per model and TP degree
        if skipped_tp and job.name != "collectives":
            job.provenance["skipped_tp"] = list(skipped_tp)
    return jobs


def canonical_command(args: dict[str, Any], out: Path) -> str:
    """The `ltsim profile` command line that measures these tables (without --resume, which only
    changes how a run continues; the process argv goes to meta.json's notes)."""
    words = ["ltsim", "profile", "--device", args["device"], "--out", str(out)]
    for model in args["models"]:
        words += ["--model", model]
    words += ["--tp", ",".join(map(str, args["tp"])), "--threads", str(args["threads"])]
    words += ["--quick"] * args["quick"]
    return shlex.join(words)


def _torch_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise ConfigError("--device", f"one of {', '.join(DEVICES)}", device)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device", "cpu on a machine without a usable CUDA device", device,
                          f"torch {torch.__version__} sees no GPU; profile with --device cpu")
    return torch.device(device)


def _previous_tables(out: Path) -> dict[str, dict[str, Any]]:
    """The provenance of the tables in ``out`` (none when it has no meta.json yet); raises
    ConfigError when its meta.json does not read back (a table could not be checked)."""
    if not (out / "meta.json").exists():
        return {}
    try:
        return read_meta(out).tables
    except ProfileError:
        raise ConfigError("--resume", "a folder whose meta.json reads back (it records how each "
                          "kept table was measured)", str(out / "meta.json"),
                          "re-run without --resume into a new directory, or delete the folder's "
                          "meta.json and tables") from None


def _kept(previous: dict[str, Any] | None, args: dict[str, Any], name: str) -> dict[str, Any]:
    """The provenance of a table kept by --resume; raises ConfigError when it was made differently."""
    if not isinstance(previous, dict):
        return {"method": "measured", "notes": "kept by --resume; meta.json had no provenance"}
    earlier = previous.get("args")
    earlier = earlier if isinstance(earlier, dict) else {}
    differ = [key for key, value in args.items() if earlier.get(key, value) != value]
    if differ:  # named, not quoted: meta.json is a file the command was pointed at
        raise ConfigError("--resume", f"used with the arguments that wrote {name}.csv (these "
                          f"differ: {', '.join(differ)})", args,
                          "re-run with the arguments its meta.json records, or without --resume "
                          "into a new directory")
    return previous


def _notes(pending: list[str], skipped: Sequence[str] = ()) -> str:
    argv = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""
    state = f"incomplete: tables not yet measured: {', '.join(pending)}" if pending else "complete"
    if skipped:
        state += f". Skipped: {'; '.join(skipped)}"
    return f"{state}. Process argv: {argv}"


def _load() -> float:
    """The 1-minute load average (other processes sharing the CPUs show up here)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
