"""ltsim.runner: the batches of a run, each simulated once per distinct batch."""

from __future__ import annotations

import pytest

from ltsim.runner import run
from ltsim.scenario import load_scenario
from ltsim.sim.engine import Engine
from tests.conftest import REPO

FIG6 = REPO / "scenarios" / "examples" / "chunkflow-fig6-cs2-k1.toml"


def _replays(monkeypatch) -> list:
    calls = []
    real = Engine.run

    def counted(self, plan):
        calls.append(plan)
        return real(self, plan)

    monkeypatch.setattr(Engine, "run", counted)
    return calls


def test_a_batch_sampled_again_is_simulated_once(monkeypatch):
    """A fuzzing review: fixed lengths with num_batches = 262,144 simulated the same batch
    262,144 times. Every batch is still reported (and kept), the same as the first."""
    calls = _replays(monkeypatch)
    progress = []
    simulation = run(load_scenario(FIG6, ["workload.num_batches=3"]),
                     progress=lambda done, total: progress.append((done, total)))
    assert len(calls) == 1 and progress == [(1, 3), (2, 3), (3, 3)]
    batches = simulation.result.batches
    assert len(batches) == 3 and batches[0] == batches[1] == batches[2]
    assert len(simulation.plans) == len(simulation.traces) == 3
    assert simulation.plans[2] == simulation.plans[0]


def test_distinct_batches_are_each_simulated(monkeypatch):
    calls = _replays(monkeypatch)
    scenario = load_scenario(REPO / "scenarios" / "quickstart.toml",
                             ["workload.global_batch_size=8"])
    result = run(scenario, keep=False).result
    assert len(set(scenario.workload.sample(scenario.seed))) == 4
    assert len(calls) == 4 and len(result.batches) == 4



@pytest.mark.parametrize("name, batch, options", [
    ("megatron-1f1b", (1,) * 4096, {}),
    ("chunkflow", (8192,), {"chunk_size": 2}),
    ("seco", (8192,), {"chunk_size": 2}),
    ("seq1f1b", (8192,), {"chunk_size": 2}),
])
def test_a_batch_of_too_many_chunks_times_stages_is_refused_before_planning(name, batch, options):
    """A fuzzing review: 16,384 one-token micro-batches on 256 stages took 95 s and 15 GB. At
    most MAX_CHUNK_STAGES chunks times stages: 4,096 chunks pass on 32 stages, not on 64."""
    from ltsim.errors import ConfigError
    from ltsim.model import get_model
    from ltsim.parallel import ParallelConfig
    from ltsim.costs import UnitCostModel
    from ltsim.strategies import get_strategy
    from ltsim.strategies.base import PlanContext
    from ltsim.strategies.schedule import MAX_CHUNK_STAGES

    assert MAX_CHUNK_STAGES == 32 * 4096
    strategy = get_strategy(name)
    parsed = strategy.parse(options)
    model = get_model("qwen2.5-7b", num_layers=64)

    def ctx(pp):
        return PlanContext(model=model, parallel=ParallelConfig(pp=pp), cost=UnitCostModel())

    strategy.check(batch, ctx(32), parsed)
    with pytest.raises(ConfigError, match=r"'parallel\.pp' must be such that .* at most 131,072"):
        strategy.check(batch, ctx(64), parsed)
