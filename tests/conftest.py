"""Shared fixtures: paths and small builders used across the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from ltsim.costs import UnitCostModel
from ltsim.model import get_model
from ltsim.parallel import ParallelConfig
from ltsim.sim.engine import Engine
from ltsim.strategies.base import PlanContext

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "scenarios"


def unit_ctx(pp: int = 1, dp: int = 1, recompute: str = "selective", cp: int = 1,
             zero_stage: int = 1) -> PlanContext:
    """A planning context on the unit preset (costs = tokens, free comm)."""
    return PlanContext(model=get_model("qwen2.5-7b"),
                       parallel=ParallelConfig(pp=pp, dp=dp, cp=cp, recompute=recompute,
                                               zero_stage=zero_stage),
                       cost=UnitCostModel())


def unit_engine() -> Engine:
    """The engine on the unit preset's cost model."""
    return Engine(UnitCostModel())


@pytest.fixture
def repo() -> Path:
    return REPO
