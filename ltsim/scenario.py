"""Scenario files (DESIGN.md section 4): TOML -> validated Scenario, with ``--set`` overrides.

Unknown keys are errors; every error names the file, the key path, the rule, the value and a fix.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ltsim.datasets import dataset_names
from ltsim.errors import ConfigError, TypeShown, check_argument, check_callable, check_one_line
from ltsim.files import NotRegularFile, read_input
from ltsim.hardware import ClusterSpec, get_device
from ltsim.memory import ALLOCATOR_OVERHEAD, LOSS_KERNELS
from ltsim.model import ModelSpec, get_model
from ltsim.overrides import KEY_PATH, WORKLOAD_SOURCES, apply_overrides
from ltsim.parallel import ParallelConfig
from ltsim.units import MAX_NUMBER, GiB
from ltsim.workload import MAX_BATCH_SEQUENCES, Workload

_PACKAGE = Path(__file__).resolve().parent
# Installed from a wheel the bundled scenarios ship inside the package (pyproject.toml maps the
# repository's scenarios/ to ltsim/_scenarios); in a checkout they are the repository's scenarios/.
SCENARIOS_DIR = (_PACKAGE / "_scenarios" if (_PACKAGE / "_scenarios").is_dir()
                 else _PACKAGE.parent / "scenarios")
MAX_INPUT_BYTES = 2**20  # a scenario or regression file is a few KiB (16,384 lengths: ~120 KiB);
# a TOML file of 1 MiB takes ~3 s to parse (16 MiB took 44 s to be refused)
_INT, _STR, _BOOL, _NUM, _LIST = "an integer", "a string", "a boolean", "a number", "a list of integers"
_SHAPE = ("arch", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
          "ffn_hidden_size", "vocab_size", "dtype", "tied_embeddings", "qkv_bias")
SCHEMA: dict[str, dict[str, str]] = {
    "": {"name": _STR, "seed": _INT, "description": _STR},
    "model": {"preset": _STR, **{k: _INT for k in _SHAPE},
              "arch": _STR, "dtype": _STR, "tied_embeddings": _BOOL, "qkv_bias": _BOOL,
              "lora_rank": _INT, "max_position_embeddings": _INT},
    "hardware": {"preset": _STR, "num_nodes": _INT, "gpus_per_node": _INT, "profile": _STR,
                 "attention_kernel": _STR, "loss_kernel": _STR,
                 "memory_limit_gib": _NUM},
    "parallel": {"tp": _INT, "cp": _INT, "cp_kind": _STR, "pp": _INT, "dp": _INT,
                 "zero_stage": _INT, "recompute": _STR, "sequence_parallel": _BOOL,
                 "grad_dtype": _STR, "optimizer_dtype": _STR, "overlap_grad_reduce": _BOOL},
    "workload": {"dataset": _STR, "max_length": _INT, "global_batch_size": _INT,
                 "num_batches": _INT, "lengths": _LIST, "fixed_length": _INT, "batching": _STR,
                 "overlong": _STR},
}
SECTIONS = frozenset(SCHEMA) - {""} | {"strategy"}  # (a strategy's options: its own Options)
_CHECK = {_INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
          _STR: lambda v: isinstance(v, str), _BOOL: lambda v: isinstance(v, bool),
          _NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          _LIST: lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                                       for x in v)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A validated scenario: what to simulate, on what, with which strategy."""

    name: str
    model: ModelSpec
    cluster: ClusterSpec
    parallel: ParallelConfig
    workload: Workload
    strategy: str
    strategy_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict)  # the merged TOML, for overrides and sweeps

    def with_overrides(self, overrides: list[str] | dict[str, Any]) -> "Scenario":
        """A new Scenario with ``section.key=value`` overrides applied to the original TOML."""
        return build_scenario(apply_overrides(self.raw, overrides), source=self.source)


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None, *,
                  any_workload: bool = False) -> Scenario:
    """Read a scenario file; raises ConfigError (prefixed with the file) on bad input.

    A relative path that does not exist is also looked up among the bundled scenarios
    (``scenarios/quickstart.toml`` works from any directory, and from a wheel install).
    ``any_workload``: the caller replaces the workload (``ltsim maxlen``), so the file's is not
    checked against the layout (one sequence in the file, eight replicas after ``--set``).
    """
    check_argument("path", path, (str, os.PathLike), "the path of a scenario TOML file",
                   'e.g. ltsim.load_scenario("scenarios/quickstart.toml")')
    path = find_scenario(path)
    raw = apply_overrides(read_toml_file(path, "scenario", "TOML file"), overrides or [])
    return build_scenario(raw, source=str(path), per_replica=any_workload)


def find_scenario(path: str | Path) -> Path:
    """``path`` as given when it exists, else the bundled scenario of that relative name."""
    if isinstance(path, str) and not path.strip():  # Path("") is the current folder
        raise ConfigError("scenario", "the path of a TOML file", path,
                          "give the scenario file, e.g. scenarios/quickstart.toml")
    given = Path(path)
    try:  # a path the system refuses (too long, ...) is read_text_file's to report
        if given.exists() or given.is_absolute():
            return given
        parts = given.parts[1:] if given.parts[:1] == ("scenarios",) else given.parts
        bundled = SCENARIOS_DIR.joinpath(*parts) if parts else given
        return bundled if bundled.is_file() else given
    except OSError:
        return given


def read_text_file(path: Path, key: str, what: str) -> str:
    """The UTF-8 text of an input file. Every failure (missing, a directory, unreadable, too big,
    not UTF-8) is a ConfigError naming ``key`` and the file; the message never quotes the content."""
    try:
        if not path.exists():
            if path.is_symlink():  # a link to nothing (or to a loop of links)
                raise ConfigError(key, f"an existing {what}", str(path), "point the link at the "
                                  "file, or give the file's own path",
                                  context="a symbolic link whose target does not exist")
            raise ConfigError(key, f"an existing {what}", str(path),
                              f"check the path (relative paths start at {Path.cwd()})")
        if path.is_dir():
            raise ConfigError(key, f"a {what}, not a directory", str(path), "name a file inside it")
        if not path.is_file():
            raise ConfigError(key, f"a regular {what}", str(path),
                              "give a file, not a pipe or a device")
        data = read_input(path, MAX_INPUT_BYTES)
        if len(data) > MAX_INPUT_BYTES:
            raise ConfigError(key, f"a {what} of at most {MAX_INPUT_BYTES // 2**20} MiB", str(path),
                              "check the path: this is not a scenario-sized text file")
    except PermissionError:
        raise ConfigError(key, f"a readable {what}", str(path), "check its permissions (ls -l) or "
                          "copy it somewhere you can read", context="permission denied") from None
    except OSError as exc:
        if isinstance(exc, NotRegularFile):  # a kernel file that looked regular
            raise ConfigError(key, f"a regular {what}", str(path), "give a file, not a pipe or a "
                              "device", context=exc.strerror) from None
        raise ConfigError(key, f"a readable {what}", str(path), "check the path and the file",
                          context=exc.strerror or type(exc).__name__) from None
    try:
        return data.decode("utf-8-sig")  # a leading BOM (Windows editors) is not content
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(key, f"a UTF-8 text {what}", str(path), "save it as UTF-8 (or check "
                          "that the path names the right file)",
                          context=f"line {line} holds bytes that are not UTF-8") from None


# tomllib messages that quote the file (a key or a character) and what to say instead
_TOML_QUOTING = (("Cannot declare", "a key or table declared twice"),
                 ("Cannot mutate", "a table extended after it was defined inline"),
                 ("Cannot redefine", "a table redefined"),
                 ("Duplicate inline table key", "a key repeated in an inline table"),
                 ("Found invalid character", "an invalid character"),
                 ("Illegal character", "an illegal character"))


def read_toml_file(path: Path, key: str, what: str) -> dict[str, Any]:
    """``read_text_file`` parsed as TOML; a syntax error names the line and column, not the text."""
    text = read_text_file(path, key, what)
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer past Python's 4300-digit limit
        if not isinstance(exc, tomllib.TOMLDecodeError):
            raise ConfigError(key, "TOML with numbers of at most 4300 digits", str(path),
                              "give realistic values") from None
        message = str(exc)
        where = re.search(r"\(at (line \d+, column \d+|end of document)\)", message)
        reason = message[:where.start()].strip() if where else message
        reason = next((say for start, say in _TOML_QUOTING if reason.startswith(start)), reason)
        at = where.group(1) if where else "somewhere"
        raise ConfigError(key, "valid TOML", str(path), "correct the syntax there (key = value, "
                          'strings in "double quotes", [section] headers)',
                          context=f"{at}: {reason[:1].lower() + reason[1:]}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(key, "valid TOML nested at most a few hundred levels deep", str(path),
                          "flatten the nested arrays or tables") from None


def check_override_key(key: str, flag: str = "--set") -> None:
    """Raise ConfigError unless ``key`` names a scenario key (``seed``, ``parallel.pp``, a strategy
    option of some registered strategy), so a sweep over a misspelt key fails before it starts."""
    section, _, name = key.rpartition(".")
    if section == "strategy":
        from ltsim.strategies import option_names, takes_option  # (strategies sit below
        # scenario: imported on use; a known option is found without importing them all)
        known = {name} if name == "name" or takes_option(name) else {"name"} | option_names()
    else:
        known = set(SCHEMA.get(section, ()))
    sections = sorted(SECTIONS)
    if not KEY_PATH.fullmatch(key) or section not in SECTIONS | {""}:
        raise ConfigError(flag, f"a top-level key (name, seed) or section.key with a section of "
                          f"{', '.join(sections)}", key, "e.g. parallel.pp or strategy.k")
    if name not in known:
        raise ConfigError(flag, f"a known key ({', '.join(sorted(known))})", key,
                          "check the spelling")


def build_scenario(raw: dict[str, Any], *, source: str = "", per_replica: bool = False) -> Scenario:
    """The Scenario of a TOML table. ``per_replica``: one 1-token sequence per DP replica stands
    in for the file's workload (``ltsim maxlen`` replaces it), which is then not checked."""
    check_argument("raw", raw, dict, "a scenario's TOML table (a dict)",
                   "pass the dict tomllib.load gives, or use ltsim.load_scenario(path)")
    check_argument("source", source, str, "text (the file the table came from)")
    try:
        return _build(raw, source, per_replica)
    except ConfigError as exc:
        raise exc.with_source(source) if source and not exc.source else exc


def _check_keys(raw: dict[str, Any]) -> None:
    if raw and not any(key in SECTIONS or key in SCHEMA[""] for key in raw):
        # another TOML file: its keys are its content, so none is quoted
        raise ConfigError("scenario", "a scenario file (name, then [model], [hardware], "
                          "[parallel], [workload] and [strategy] tables)",
                          f"{len(raw)} top-level keys or tables, none of a scenario's",
                          "point at a scenario file, e.g. scenarios/quickstart.toml")
    for key, value in raw.items():
        if key in SECTIONS and not isinstance(value, dict):
            raise ConfigError(key, f"a [{key}] table", type(value).__name__,
                              f"write [{key}] on its own line, then its keys")
        if isinstance(value, dict):
            if key not in SECTIONS:  # [""] is not the top level
                raise ConfigError(key or '[""]', f"a known section ({', '.join(sorted(SECTIONS))})",
                                  f"[{key}]" if key else '[""]', "remove or rename the section")
            if key == "strategy":
                continue
            for sub, val in value.items():
                _check_value(f"{key}.{sub}", SCHEMA[key].get(sub), val, SCHEMA[key])
        else:
            _check_value(key, SCHEMA[""].get(key), value, SCHEMA[""])


def _check_value(path: object, rule: str | None, value: Any, known: dict[str, str]) -> None:
    if rule is None:  # the key, not its value: a file pointed at by mistake is not echoed
        name = path.rpartition(".")[2] if isinstance(path, str) else TypeShown(path)
        raise ConfigError(str(path), f"a known key ({', '.join(sorted(known))})", name,
                          "remove it or check the spelling")
    if not _CHECK[rule](value):
        raise ConfigError(path, rule, value)
    for number in value if isinstance(value, list) else (value,):
        if isinstance(number, (int, float)) and not isinstance(number, bool) and not (
                abs(number) <= MAX_NUMBER):  # also NaN and infinity
            raise ConfigError(path, f"{rule} of at most {MAX_NUMBER:,} in size (and finite)", number,
                              f"give {path} a realistic value")


MAX_NAME_CHARS = 200


def _build(raw: dict[str, Any], source: str, per_replica: bool = False) -> Scenario:
    _check_keys(raw)
    if "name" not in raw:
        raise ConfigError("name", "given (a string naming the scenario)", None, 'add name = "..."')
    if not raw["name"].strip():
        raise ConfigError("name", "a non-empty string naming the scenario", raw["name"],
                          'e.g. name = "llama-8b-64k"')
    for key in ("name", "description"):  # printed in tables and reports
        if key in raw:
            check_one_line(key, raw[key])
    if len(raw["name"]) > MAX_NAME_CHARS:  # a title of thousands of characters hung the plots
        raise ConfigError("name", f"at most {MAX_NAME_CHARS} characters (it titles tables and "
                          "plots)", f"{len(raw['name']):,} characters",
                          "shorten it; a longer text can go in description")
    strategy = dict(raw.get("strategy", {}))
    if "name" not in strategy:
        raise ConfigError("strategy.name", "given", None, 'add [strategy] name = "megatron-1f1b"')
    if raw.get("seed", 0) < 0:
        raise ConfigError("seed", "a non-negative integer", raw["seed"], "use 0 or a positive integer")
    cluster = _cluster(raw.get("hardware", {}))
    model = _model(raw.get("model", {}))
    par_raw = dict(raw.get("parallel", {}))
    # degrees first (dp stands in as 1): a zero degree must not reach the divisibility arithmetic
    parallel = ParallelConfig(**{k: v for k, v in par_raw.items() if k != "dp"}, dp=1).validate()
    _check_heads(model, parallel)
    mp = parallel.model_parallel_size(cluster.num_devices)
    parallel = replace(parallel, dp=par_raw.get("dp", cluster.num_devices // mp))
    parallel.validate(cluster.num_devices)
    name = strategy.pop("name")
    from ltsim.strategies import get_strategy  # strategies sit below scenario; import on use

    chosen = get_strategy(name)
    chosen.parse(strategy)  # validate options now, at load time
    given_kind = par_raw.get("cp_kind")
    if chosen.cp_kind and given_kind is not None and given_kind != chosen.cp_kind:
        raise ConfigError("parallel.cp_kind", f"{chosen.cp_kind!r} or left out ({name} always runs "
                          f"{chosen.cp_kind} sequence parallelism over parallel.cp)", given_kind,
                          "remove parallel.cp_kind, or compare with a ring-CP strategy such as "
                          "megatron-1f1b or deepspeed-cp")
    if per_replica:
        if parallel.dp > MAX_BATCH_SEQUENCES:
            raise ConfigError("hardware.num_nodes", f"a cluster of at most {MAX_BATCH_SEQUENCES:,} "
                              "DP replicas (ltsim maxlen simulates one sequence on each)",
                              cluster.num_nodes, "use fewer nodes, or more GPUs per replica "
                              "(parallel.tp, pp or cp)", context=f"{parallel.dp:,} replicas")
        raw = {**raw, "workload": {"fixed_length": 1, "global_batch_size": parallel.dp,
                                   "num_batches": 1}}
    work = dict(raw.get("workload", {}))
    for key, empty in (("lengths", []), ("dataset", "")):  # given, but it reads as none given
        if key in work and work[key] == empty:
            other = next((k for k in WORKLOAD_SOURCES if k != key and work.get(k)), None)
            raise ConfigError(f"workload.{key}", "a non-empty list of sequence lengths"
                              if key == "lengths" else "a dataset name or a length-file path",
                              work[key], f"remove it (workload.{other} is the source)" if other
                              else "give at least one length" if key == "lengths"
                              else "name a built-in dataset (e.g. wikipedia) or a length file")
    work["lengths"] = tuple(work.get("lengths", ()))
    if work.get("dataset"):
        work["dataset"] = resolve_dataset(work["dataset"], source)
        if "global_batch_size" not in work and not work["lengths"]:
            raise ConfigError("workload.global_batch_size", "given with workload.dataset (how many "
                              "sequences a global batch draws)", None,
                              "add global_batch_size = 256 (or your batch) to [workload]")
    elif work.get("fixed_length") and "global_batch_size" not in work and not work["lengths"]:
        raise ConfigError("workload.global_batch_size", "given with workload.fixed_length (how "
                          "many sequences of that length a global batch holds)", None,
                          "add global_batch_size = 8 (or your batch) to [workload]")
    workload = Workload(**work).validate()
    if parallel.dp > workload.batch_size:
        raise ConfigError("workload.global_batch_size", f"at least parallel.dp = {parallel.dp}",
                          workload.batch_size, fix="use a larger batch, or fewer DP replicas "
                          f"(dp = {cluster.num_devices:,} GPUs = hardware.num_nodes x gpus_per_node, "
                          "over tp x pp x cp)")
    return Scenario(name=raw["name"], model=model, cluster=cluster,
                    parallel=parallel, workload=workload, strategy=name,
                    strategy_options=strategy, seed=raw.get("seed", 0), source=source, raw=raw)


def resolve_dataset(dataset: str, source: str) -> str:
    """A relative length-file path is found beside the scenario file first, then from the working
    directory; names of built-in datasets and other paths are returned unchanged (a built-in name
    is the built-in even with a file of that name beside the scenario, as in the working
    directory: a length file has a suffix, which no built-in name has)."""
    if dataset.strip().lower() in dataset_names():
        return dataset
    if source and not Path(dataset).is_absolute():
        beside = Path(source).parent / dataset
        if beside.is_file():
            return str(beside)
    return dataset


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _check_heads(model: ModelSpec, parallel: ParallelConfig) -> None:
    """Layouts Megatron-LM rejects: TP splits whole attention heads (query heads, and KV heads unless
    TP exceeds them, when each KV head is replicated over tp / num_kv_heads ranks); Ulysses CP then
    splits the heads left on each TP rank (DeepSpeed-Ulysses needs heads divisible by its degree)."""
    heads, kv, tp, cp = model.num_attention_heads, model.num_kv_heads, parallel.tp, parallel.cp
    # the degrees both rules take (a fix listing another would be refused in turn)
    takes = ", ".join(str(t) for t in range(1, heads + 1)
                      if heads % t == 0 and (kv % t == 0 if t <= kv else t % kv == 0))
    fix = f"choose parallel.tp from {takes}"
    if heads % tp:
        raise ConfigError("parallel.tp", f"a divisor of model.num_attention_heads = {heads}", tp,
                          fix, context=f"{model.name} has {heads} query heads")
    if tp <= kv and kv % tp:
        raise ConfigError("parallel.tp", f"a divisor of model.num_kv_heads = {kv} (tp <= KV heads)",
                          tp, fix, context=f"{model.name} has {kv} KV heads")
    if tp > kv and tp % kv:
        raise ConfigError("parallel.tp", f"a multiple of model.num_kv_heads = {kv} when larger "
                          "(each KV head is replicated)", tp, fix,
                          context=f"{model.name} has {kv} KV heads")
    if parallel.cp_kind == "ulysses" and (heads // tp) % cp:
        raise ConfigError("parallel.cp", f"a divisor of the {heads // tp} heads per TP rank "
                          "(Ulysses splits heads)", cp, f"choose parallel.cp from "
                          f"{_divisors(heads // tp)}, or cp_kind = \"ring\"",
                          context=f"{heads} heads / tp={tp}")


def _model(section: dict[str, Any]) -> ModelSpec:
    shape = {k: v for k, v in section.items() if k != "preset"}
    if "preset" in section:
        return get_model(section["preset"], **shape)
    missing = [f.name for f in fields(ModelSpec) if f.name in _SHAPE[:7] and f.name not in shape]
    if missing:
        raise ConfigError(f"model.{missing[0]}", "given when model.preset is not", None,
                          "name a preset or give the whole shape")
    return ModelSpec(name="custom", **shape).validate()


def _cluster(section: dict[str, Any]) -> ClusterSpec:
    device = get_device(section.get("preset", "h100-sxm5-80gb"))
    limit = section.get("memory_limit_gib")
    for key in ("num_nodes", "gpus_per_node"):
        if section.get(key, 1) < 1:
            raise ConfigError(f"hardware.{key}", "a positive integer", section[key])
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise ConfigError("hardware.memory_limit_gib", "a positive, finite number of GiB", limit,
                          "omit it to use the device's memory")
    if limit is not None and device.is_unit and int(limit * GiB) < 1:
        raise ConfigError("hardware.memory_limit_gib", "at least one token of activation (the "
                          f"unit preset counts memory in tokens: 1 GiB is {GiB:,} tokens)", limit,
                          f"give at least {1 / GiB:.3g}")
    if limit is not None and not device.is_unit and limit * GiB > device.memory_bytes:
        raise ConfigError("hardware.memory_limit_gib", f"at most the device's memory "
                          f"({device.memory_bytes / GiB:.4g} GiB on {device.name})", limit,
                          "omit it for the whole device, or choose a preset with more memory")
    if limit is not None and not device.is_unit and limit * GiB <= ALLOCATOR_OVERHEAD.fixed_bytes:
        raise ConfigError("hardware.memory_limit_gib", "more than the allocator's fixed allowance "
                          f"({ALLOCATOR_OVERHEAD.fixed_bytes / GiB:g} GiB: CUDA context and NCCL "
                          "buffers)", limit, "give the device's whole memory in GiB")
    for key, what, default in (("profile", "a profile's name or path", "the preset's default"),
                               ("attention_kernel", "an attention kernel's name",
                                "the preset's default"),
                               ("loss_kernel", f"one of {', '.join(LOSS_KERNELS)}", "torch")):
        if section.get(key) == "":
            raise ConfigError(f"hardware.{key}", what, "", f"omit hardware.{key} for {default}")
        if key in section and device.is_unit:
            raise ConfigError(f"hardware.{key}", "absent with the unit preset (it prices in units "
                              "of work, from no profile)", section[key],
                              f"remove hardware.{key}, or choose a device preset")
    if section.get("profile"):
        _check_profile(section["profile"])
    if section.get("loss_kernel", "torch") not in LOSS_KERNELS:
        raise ConfigError("hardware.loss_kernel", f"one of {', '.join(LOSS_KERNELS)} (PyTorch's "
                          "cross entropy on fp32 logits, or flash-attn's fused one)",
                          section["loss_kernel"], "omit it for torch, or write \"fused\"")
    return ClusterSpec(device=device, num_nodes=section.get("num_nodes", 1),
                       gpus_per_node=section.get("gpus_per_node", 8),
                       memory_limit_bytes=int(limit * GiB) if limit is not None else None,
                       profile=section.get("profile", ""),
                       attention_kernel=section.get("attention_kernel", ""),
                       loss_kernel=section.get("loss_kernel", "torch"))


def _check_profile(name: str) -> None:
    """hardware.profile names a directory now, before anything runs (its tables load on first use)."""
    from ltsim.errors import ProfileError
    from ltsim.profiles import PROFILES_DIR, available_profiles, resolve_profile  # (on use)

    fix = (f"use one of {', '.join(available_profiles()) or 'none'}, or the path of a directory "
           "written by `ltsim profile` (a bare name is looked up among the bundled profiles, "
           f"then in the working directory; a path from the working directory, then from "
           f"{PROFILES_DIR.parent}; neither from the scenario's folder)")
    try:
        found = resolve_profile(name)
    except ProfileError:
        raise ConfigError("hardware.profile", "a profile directory (a bundled name or a path)", name,
                          fix) from None
    try:
        has_meta = (found / "meta.json").is_file()
    except OSError:
        has_meta = False
    if not has_meta:  # named as given, not as resolved ("." is the folder of every profile)
        raise ConfigError("hardware.profile", "a profile directory (one with a meta.json)", name,
                          fix, context="the folder it names has no meta.json")


def check_call(scenario: Any, progress: Any, rule: str = "a function of (done, total)") -> None:
    """A Python caller's scenario and progress callback (a path where the Scenario goes was an
    AttributeError inside run, run_sweep and find_max_length)."""
    check_argument("scenario", scenario, Scenario, "a Scenario",
                   "load the file first: ltsim.load_scenario(path)")
    check_callable("progress", progress, rule)
