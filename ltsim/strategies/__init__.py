"""Strategy registry: a mapping that imports a strategy's module when first asked for it, and a
case-insensitive lookup that lists the valid names.

A strategy is a module with ``NAME``, a frozen ``Options`` dataclass and
``plan(batch, ctx, options) -> Plan``, and optionally ``BATCHING``: the workload batching its
global batches are sampled with (LongAlign's sorted groups), and ``check_batch(batch, ctx,
options)``: the size check its ``plan`` makes first, which a run makes for every batch before it
plans any (a batch too large to plan fails before the progress lines of earlier ones), and
``CP_KIND``: the context-parallel kind it always runs (a scenario naming the other is refused), and
``maxlen_options(options)``: options ``ltsim maxlen`` searches with, and what they are in words
(SpaCO's draw of the largest peak), and ``maxlen_period(options)``: the tokens it cuts a sequence
into chunks of (its peak grows with the last chunk and falls past each chunk's end). It never
talks to the engine or to torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, Callable

from ltsim.errors import ConfigError
from ltsim.gcpause import paused
from ltsim.plan import Plan
from ltsim.strategies.base import PlanContext, ignored_options, parse_options


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    options_type: type
    plan_fn: Callable[[tuple[int, ...], PlanContext, Any], Plan]
    batching: str | None = None  # the workload batching this strategy needs, if any
    check_fn: Callable[[tuple[int, ...], PlanContext, Any], None] | None = None
    cp_kind: str | None = None  # the CP kind it always runs, whatever parallel.cp_kind says
    # options -> what ltsim maxlen searches with instead (SpaCO's draw of the largest peak), and
    # those options in words
    maxlen_fn: Callable[[Any], tuple[dict[str, Any], str]] | None = None
    period_fn: Callable[[Any], int] | None = None  # options -> tokens per chunk of a sequence

    def maxlen_options(self, options: Any) -> tuple[dict[str, Any], str]:
        """Options ``ltsim maxlen`` searches with in place of ``options``' (none for most), and
        what they are in words ("" when the search runs as ``options`` would)."""
        return self.maxlen_fn(options) if self.maxlen_fn is not None else ({}, "")

    def maxlen_period(self, options: Any) -> int | None:
        """The tokens this strategy cuts a sequence into chunks of, or None: one sequence's peak
        then rises with its last chunk and falls past each chunk's end (``ltsim maxlen`` checks
        a length with the last chunk end below it)."""
        return self.period_fn(options) if self.period_fn is not None else None

    def parse(self, raw: dict[str, Any]) -> Any:
        return parse_options(self.options_type, raw, strategy=self.name)

    def ignored(self, raw: dict[str, Any], options: Any) -> list[str]:
        """Warnings for options given in ``raw`` that ``options`` leaves unused."""
        return ignored_options(self.options_type, raw, options)

    def check(self, batch: tuple[int, ...], ctx: PlanContext, options: Any) -> None:
        """Raise ConfigError for a batch too large to plan (what ``plan`` checks first)."""
        if self.check_fn is not None:
            self.check_fn(tuple(batch), ctx, options)

    def plan(self, batch: tuple[int, ...], ctx: PlanContext, options: Any) -> Plan:
        with paused():  # plans are many small acyclic objects (ltsim/gcpause.py)
            return self.plan_fn(tuple(batch), ctx, options)


def _entry(module: ModuleType) -> Strategy:
    return Strategy(module.NAME, module.Options, module.plan, getattr(module, "BATCHING", None),
                    getattr(module, "check_batch", None), getattr(module, "CP_KIND", None),
                    getattr(module, "maxlen_options", None), getattr(module, "maxlen_period", None))


# name -> its module under ltsim/strategies/, in the order commands list them
MODULES = {"megatron-1f1b": "megatron_1f1b", "chunkflow": "chunkflow", "skrull": "skrull",
           "deepspeed-cp": "deepspeed_cp", "sorted-batching": "sorted_batching", "seco": "seco",
           "spaco": "spaco", "alst": "alst", "infinipipe": "infinipipe", "seq1f1b": "seq1f1b",
           "deepspeed-ulysses": "deepspeed_ulysses", "flexsp": "flexsp"}


class _Registry(MutableMapping):
    """The registered strategies by name, each module imported when first asked for: a command
    that plans with one strategy imports that one (20 ms of start-up for all twelve). A plain
    mapping otherwise (tests set entries)."""

    def __init__(self) -> None:
        self._loaded: dict[str, Strategy] = {}
        self._names = list(MODULES)

    def __getitem__(self, name: str) -> Strategy:
        found = self._loaded.get(name)
        if found is None:
            if name not in self._names or name not in MODULES:
                raise KeyError(name)
            found = _entry(importlib.import_module(f"{__name__}.{MODULES[name]}"))
            if found.name != name:  # (a module renamed without its entry)
                raise RuntimeError(f"strategy module {MODULES[name]} is named {found.name!r}")
            self._loaded[name] = found
        return found

    def __setitem__(self, name: str, strategy: Strategy) -> None:
        if name not in self._names:
            self._names.append(name)
        self._loaded[name] = strategy

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._names.remove(name)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def loaded(self) -> list[Strategy]:
        """The strategies imported so far."""
        return [self._loaded[n] for n in self._names if n in self._loaded]


REGISTRY = _Registry()


def takes_option(name: str) -> bool:
    """Whether some registered strategy takes option ``name``; the strategies imported so far
    are asked first (a sweep's grid keys are the scenario's own strategy's), the rest only
    when none of them does."""
    return (any(name in _option_names(s) for s in REGISTRY.loaded())
            or any(name in _option_names(s) for s in REGISTRY.values()))


def option_names() -> set[str]:
    """Every option name of every registered strategy."""
    return {n for s in REGISTRY.values() for n in _option_names(s)}


def _option_names(strategy: Strategy) -> set[str]:
    return {f.name for f in fields(strategy.options_type)}


def get_strategy(name: str) -> Strategy:
    """The registered strategy called ``name`` (case-insensitive)."""
    if not isinstance(name, str) or name.lower() not in REGISTRY:
        raise ConfigError("strategy.name", f"one of {', '.join(sorted(REGISTRY))}", name,
                          "use one of these names")
    return REGISTRY[name.lower()]  # (an error importing its module is not an unknown name)
