"""Scenario files (DESIGN.md section 4): TOML -> validated Scenario, with ``--set`` overrides.

Unknown keys are errors; every error names the file, the key path, the rule, the value and a fix.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ltsim.errors import ConfigError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import ModelSpec, get_model
from ltsim.parallel import ParallelConfig
from ltsim.units import GiB
from ltsim.workload import Workload

_INT, _STR, _BOOL, _NUM, _LIST = "an integer", "a string", "a boolean", "a number", "a list of integers"
_SHAPE = ("arch", "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
          "ffn_hidden_size", "vocab_size", "dtype", "tied_embeddings", "qkv_bias")
SCHEMA: dict[str, dict[str, str]] = {
    "": {"name": _STR, "seed": _INT, "description": _STR},
    "model": {"preset": _STR, **{k: _INT for k in _SHAPE},
              "arch": _STR, "dtype": _STR, "tied_embeddings": _BOOL, "qkv_bias": _BOOL},
    "hardware": {"preset": _STR, "num_nodes": _INT, "gpus_per_node": _INT, "profile": _STR,
                 "memory_limit_gib": _NUM},
    "parallel": {"tp": _INT, "cp": _INT, "cp_kind": _STR, "pp": _INT, "dp": _INT,
                 "zero_stage": _INT, "recompute": _STR, "sequence_parallel": _BOOL},
    "workload": {"dataset": _STR, "max_length": _INT, "global_batch_size": _INT,
                 "num_batches": _INT, "lengths": _LIST, "fixed_length": _INT, "batching": _STR},
}
_CHECK = {_INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
          _STR: lambda v: isinstance(v, str), _BOOL: lambda v: isinstance(v, bool),
          _NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          _LIST: lambda v: isinstance(v, list) and all(isinstance(x, int) for x in v)}


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


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read a scenario file; raises ConfigError (prefixed with the file) on bad input."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("scenario", "an existing TOML file", str(path), "check the path")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("scenario", "valid TOML", str(path), str(exc)) from exc
    return build_scenario(apply_overrides(raw, overrides or []), source=str(path))


def parse_override(text: str) -> tuple[str, Any]:
    """``"strategy.k=2"`` -> ("strategy.k", 2). Values use TOML syntax; a bare word is a string."""
    if "=" not in text:
        raise ConfigError("--set", "of the form section.key=value", text)
    key, value = (part.strip() for part in text.split("=", 1))
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value


def apply_overrides(raw: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides)
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for key, value in items:
        section, _, name = key.rpartition(".")
        target = merged.setdefault(section, {}) if section else merged
        if not isinstance(target, dict):
            raise ConfigError(key, "a key inside a [section]", value)
        target[name] = value
        if section == "workload" and name in ("dataset", "lengths", "fixed_length"):
            for other in {"dataset", "lengths", "fixed_length"} - {name}:
                target.pop(other, None)  # choosing one workload source replaces the others
    return merged


def build_scenario(raw: dict[str, Any], *, source: str = "") -> Scenario:
    try:
        return _build(raw, source)
    except ConfigError as exc:
        raise exc.with_source(source) if source and not exc.source else exc


def _check_keys(raw: dict[str, Any]) -> None:
    sections = set(SCHEMA) | {"strategy"}
    for key, value in raw.items():
        if isinstance(value, dict):
            if key not in sections:
                raise ConfigError(key, f"a known section ({', '.join(sorted(sections - {''}))})",
                                  f"[{key}]", "remove or rename the section")
            if key == "strategy":
                continue
            for sub, val in value.items():
                _check_value(f"{key}.{sub}", SCHEMA[key].get(sub), val, SCHEMA[key])
        else:
            _check_value(key, SCHEMA[""].get(key), value, SCHEMA[""])


def _check_value(path: str, rule: str | None, value: Any, known: dict[str, str]) -> None:
    if rule is None:
        raise ConfigError(path, f"a known key ({', '.join(sorted(known))})", value,
                          "remove it or check the spelling")
    if not _CHECK[rule](value):
        raise ConfigError(path, rule, value)


def _build(raw: dict[str, Any], source: str) -> Scenario:
    _check_keys(raw)
    if "name" not in raw:
        raise ConfigError("name", "given (a string naming the scenario)", None, 'add name = "..."')
    strategy = dict(raw.get("strategy", {}))
    if "name" not in strategy:
        raise ConfigError("strategy.name", "given", None, 'add [strategy] name = "megatron-1f1b"')
    cluster = _cluster(raw.get("hardware", {}))
    par_raw = dict(raw.get("parallel", {}))
    parallel = ParallelConfig(**{k: v for k, v in par_raw.items() if k != "dp"}, dp=1)
    mp = parallel.tp * parallel.cp * parallel.pp
    if cluster.num_devices % mp:
        raise ConfigError("parallel.pp", f"such that tp*cp*pp divides the {cluster.num_devices} "
                          "devices", parallel.pp, "change parallel.pp/tp/cp or the cluster size",
                          context=f"tp={parallel.tp}, cp={parallel.cp}, pp={parallel.pp} gives {mp}")
    parallel = replace(parallel, dp=par_raw.get("dp", cluster.num_devices // mp))
    parallel.validate(cluster.num_devices)
    name = strategy.pop("name")
    from ltsim.strategies import get_strategy  # strategies sit below scenario; import on use

    get_strategy(name).parse(strategy)  # validate options now, at load time
    work = dict(raw.get("workload", {}))
    work["lengths"] = tuple(work.get("lengths", ()))
    if work.get("dataset") and source:  # a length file is found beside the scenario file first
        beside = Path(source).parent / work["dataset"]
        if not Path(work["dataset"]).is_absolute() and beside.is_file():
            work["dataset"] = str(beside)
    workload = Workload(**work).validate()
    if parallel.dp > workload.batch_size:
        raise ConfigError("workload.global_batch_size", f"at least parallel.dp = {parallel.dp}",
                          workload.batch_size, fix="use a larger batch or fewer DP replicas")
    return Scenario(name=raw["name"], model=_model(raw.get("model", {})), cluster=cluster,
                    parallel=parallel, workload=workload, strategy=name,
                    strategy_options=strategy, seed=raw.get("seed", 0), source=source, raw=raw)


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
    return ClusterSpec(device=device, num_nodes=section.get("num_nodes", 1),
                       gpus_per_node=section.get("gpus_per_node", 8),
                       memory_limit_bytes=int(limit * GiB) if limit is not None else None,
                       profile=section.get("profile", ""))
