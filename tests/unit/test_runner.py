"""ltsim.runner: the batches of a run, each simulated once per distinct batch."""

from __future__ import annotations

import pytest

from ltsim.runner import run
from ltsim.scenario import load_scenario
from ltsim.sim.engine import Engine
from ltsim.strategies import get_strategy
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



@pytest.mark.parametrize("name, batch, options, dp", [
    ("megatron-1f1b", (1,) * 16384, {}, 1),
    ("megatron-1f1b", (1,) * 16384, {}, 4),
    ("chunkflow", (32768,), {"chunk_size": 2}, 1),
    ("seco", (32768,), {"chunk_size": 2}, 1),
    ("seq1f1b", (32768,), {"chunk_size": 2}, 1),
])
def test_a_batch_of_too_many_chunks_times_stages_is_refused_before_planning(name, batch, options,
                                                                            dp):
    """A fuzzing review: 16,384 one-token micro-batches on 256 stages took 95 s and 15 GB. At
    most MAX_CHUNK_STAGES chunks (over all replicas) times stages: 16,384 pass on 32 stages,
    not on 64."""
    from ltsim.errors import ConfigError

    strategy = get_strategy(name)
    parsed = strategy.parse(options)
    strategy.check(batch, _ctx(32, dp), parsed)
    with pytest.raises(ConfigError, match=r"'parallel\.pp' must be such that .* at most 524,288 "
                       r"\(got 64\); 16,384 .* in all \(over the replicas\), each on 64 stages"):
        strategy.check(batch, _ctx(64, dp), parsed)


def test_chunkflow_counts_the_chunks_its_packing_certainly_makes():
    """A commit review: ChunkFlow counted a chunk per short sequence, which its packing puts
    several to a chunk, and refused 16,384 sequences of 16 tokens (32 chunks of 8,192) on 64
    stages, with a fix that did not help."""
    strategy = get_strategy("chunkflow")
    plan = strategy.plan((16,) * 16384, _ctx(64, 1), strategy.parse({"chunk_size": 8192, "k": 1}))
    assert len(plan.chunks) == 32


def _ctx(pp, dp):
    from ltsim.costs import UnitCostModel
    from ltsim.model import get_model
    from ltsim.parallel import ParallelConfig
    from ltsim.strategies.base import PlanContext

    return PlanContext(model=get_model("qwen2.5-7b", num_layers=64),
                       parallel=ParallelConfig(pp=pp, dp=dp), cost=UnitCostModel())
