"""Shared fixtures: paths and small builders used across the suite."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Parsed profiles go to a cache of the suite's own (ltsim/profile_cache.py), set before anything
# loads a profile; CLI subprocesses inherit it. Never the user's ~/.cache.
os.environ["LTSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="ltsim-test-cache-")
atexit.register(shutil.rmtree, os.environ["LTSIM_CACHE_DIR"], True)

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
