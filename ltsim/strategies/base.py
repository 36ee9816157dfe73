"""What every strategy shares: the planning context, option parsing and the layer split."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import chain
from typing import Any

from ltsim.costs import CostModel
from ltsim.errors import ConfigError
from ltsim.model import ModelSpec
from ltsim.parallel import ParallelConfig
from ltsim.units import MAX_NUMBER

_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool}
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanContext:
    """Everything a strategy may consult besides the batch. Strategies never call the engine."""

    model: ModelSpec
    parallel: ParallelConfig
    cost: CostModel  # for strategies that size or balance with ltsim's own costs (Skrull)


def parse_options(options_type: type, raw: dict[str, Any], *, strategy: str) -> Any:
    """Build a strategy's frozen options dataclass from a dict; unknown keys and wrong types fail,
    and so does a key the options type's ``ONLY_WITH`` (option -> (other option, value)) says is
    read only when another option has some value, given without it."""
    fields = {f.name: f for f in dataclasses.fields(options_type)}
    for key, value in raw.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            # the key, not its value (as for the other sections: a file pointed at by mistake
            # is not echoed)
            raise ConfigError(f"strategy.{key}", f"an option of '{strategy}' ({known})", key,
                              "remove it or check the spelling")
        names = [part.strip() for part in str(fields[key].type).split("|")]  # "int | str" unions
        expected = [_TYPES[n] for n in names if n in _TYPES]
        bad_bool = isinstance(value, bool) and "bool" not in names
        if expected and (bad_bool or not any(isinstance(value, t) for t in expected)):
            raise ConfigError(f"strategy.{key}", " or ".join(_TYPE_WORDS.get(n, n) for n in names),
                              value)
        if isinstance(value, float) and value != value:  # NaN (infinity may mean "no cap")
            raise ConfigError(f"strategy.{key}", "a number", value,
                              f"give strategy.{key} a number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise ConfigError(f"strategy.{key}", f"an integer of at most {MAX_NUMBER:,} in "
                              "size", value, f"give strategy.{key} a realistic value")
    options = options_type(**raw)
    check = getattr(options, "validate", None)
    if check is not None:
        check()
    for key, other, needed in _unused(options_type, "ONLY_WITH", raw, options):
        setting = f"strategy.{other} = {toml_text(needed)}"  # read nowhere: silently ignored
        raise ConfigError(f"strategy.{key}", f"given only with {setting} (unused otherwise)",
                          raw[key], f"drop strategy.{key}, or set {setting}")
    return options


def _unused(options_type: type, table: str, raw: dict[str, Any], options: Any):
    """(key, other option, value) for each key of ``raw`` that the options type's ``table``
    (option -> (other option, value)) says is read only when the other option has that value,
    and ``options`` has another."""
    for key, (other, needed) in getattr(options_type, table, {}).items():
        if key in raw and getattr(options, other) != needed:
            yield key, other, needed


def ignored_options(options_type: type, raw: dict[str, Any], options: Any) -> list[str]:
    """Warnings for keys the options type's ``IGNORED_UNLESS`` (option -> (other option, value))
    says are read only when another option has some value, given without it: unused, but kept
    legal (a bundled file sets them for its own choice, and a ``--set`` of the other option should
    not make it fail)."""
    return [f"strategy.{key} = {toml_text(raw[key])} is not used: it is read only with "
            f"strategy.{other} = {toml_text(needed)}"
            for key, other, needed in _unused(options_type, "IGNORED_UNLESS", raw, options)]


def unused_options(options: Any, raw: dict[str, Any]) -> list[str]:
    """The keys of ``raw`` that parsed ``options`` do not read (``IGNORED_UNLESS``): two runs that
    differ only in them run alike."""
    return [key for key, _, _ in _unused(type(options), "IGNORED_UNLESS", raw, options)]


def toml_text(value: Any) -> str:
    """A value as a scenario file writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def positive(key: str, value: int, *, allow_zero: bool = False) -> None:
    """Raise ConfigError unless ``value`` is a positive (or, with allow_zero, non-negative) int."""
    if value < 0 or (value == 0 and not allow_zero):
        rule = "a non-negative integer" if allow_zero else "a positive integer"
        raise ConfigError(f"strategy.{key}", rule, value)


MAX_MILP_TIME_LIMIT_S = 3600.0  # one hour per MILP; a batch plans many of them


def check_time_limit(value: float) -> None:
    """A strategy's ``milp_time_limit_s``: SCIP's wall limit per MILP, positive and at most an
    hour (infinity, or SCIP's own ceiling of 1e20, would let one MILP run unbounded)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
            or not value <= MAX_MILP_TIME_LIMIT_S):
        raise ConfigError("strategy.milp_time_limit_s",
                          f"a positive number of seconds, at most {MAX_MILP_TIME_LIMIT_S:.0f}",
                          value, "e.g. strategy.milp_time_limit_s = 1.0")


def deal_replicas(batch: tuple[int, ...], dp: int, block: int = 1) -> list[list[int]]:
    """Sequence ids of each DP replica, dealt as the training frameworks' samplers deal a global
    batch: blocks of ``block`` consecutive sequences go round the ranks, rank r getting blocks r,
    r + dp, r + 2 dp, ... Megatron-LM's default sampler (MegatronPretrainingSampler) hands each
    rank ``micro_batch_size`` consecutive samples a micro-step (``block`` = the micro-batch size),
    PyTorch's DistributedSampler (DeepSpeed's loader) one sample at a time (``block`` = 1),
    accelerate (HF Trainer, LongAlign) a whole per-device batch. So the ranks' i-th micro-steps
    hold neighbours of the batch, which is what sorted batching relies on: ZeRO-2/3 synchronise
    the ranks every micro-step (PAPERS.md section 7). A last round of fewer than dp blocks' worth
    is dealt one sequence at a time (Megatron refuses such a batch, DistributedSampler and
    accelerate pad it with repeated samples; ltsim neither refuses nor repeats)."""
    block = min(block, max(len(batch), 1))  # (a block past the batch deals as the batch: the
    step = dp * block  # same sequences each, without a range per sequence of a huge block)
    whole = len(batch) // step * step  # the sequences of the full rounds
    # a rank's t-th sequence of each block comes every dp x block: ``block`` ranges, merged
    return [sorted(chain(*(range(rank * block + t, whole, step) for t in range(block)),
                         range(whole + rank, len(batch), dp)))
            for rank in range(dp)]
