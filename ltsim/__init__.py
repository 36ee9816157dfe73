"""ltsim: a discrete-event simulator and planner for long-context LLM training schedules."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["load_scenario", "simulate", "run", "Scenario", "Result", "Plan", "LtsimError"]

_LAZY = {"load_scenario": "ltsim.scenario", "Scenario": "ltsim.scenario", "simulate": "ltsim.runner",
         "run": "ltsim.runner", "Result": "ltsim.sim.metrics", "Plan": "ltsim.plan",
         "LtsimError": "ltsim.errors"}


def __getattr__(name: str):
    """Import on first use so that ``import ltsim`` stays fast (no numpy/pandas/simpy yet)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ltsim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
