"""ChunkFlow section 4.3 / Figure 6 with unit costs: state-aware 1F1B on the Figure 2 batch."""

from __future__ import annotations

from pathlib import Path

import pytest

import ltsim
from ltsim.runner import run

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"
GOLDEN = Path(__file__).resolve().parent / "schedules"


def _result(name: str, **overrides):
    sets = [f"strategy.{k}={v!r}" if isinstance(v, str) else f"strategy.{k}={v}"
            for k, v in overrides.items()]
    sets = [s.replace("'", '"') for s in sets]
    return run(ltsim.load_scenario(EXAMPLES / f"chunkflow-{name}.toml", sets))


def test_chunksize2_k2_matches_paper_47_8():
    sim = _result("fig6-cs2-k2")
    assert sim.traces[0].makespan_s == 46
    assert f"{100 * sim.result.to_dict()['bubble_ratio']:.1f}" == "47.8"


def test_chunksize4_k1_matches_paper_60():
    assert _result("cs4-k1").result.to_dict()["bubble_ratio"] == pytest.approx(0.6)


def test_chunksize2_k1_our_schedule():
    """The paper prints 54.1%; our Algorithm 2 reading gives makespan 48 and 45.83% with recompute
    counted busy (validation/papers/chunkflow.md explains the difference)."""
    sim = _result("fig6-cs2-k1")
    d = sim.result.to_dict()
    assert sim.traces[0].makespan_s == 48
    assert d["bubble_ratio"] == pytest.approx(1 - 104 / (4 * 48))
    assert d["recompute_ratio"] == pytest.approx(8 / 104)


def test_k1_recomputes_first_chunk_before_its_backward_in_descending_order():
    plan = _result("fig6-cs2-k1").plans[0]
    assert plan.grid() == (GOLDEN / "chunkflow-cs2-k1.txt").read_text().rstrip("\n")
    tokens = plan.program(3).tokens.split()
    assert tokens.index("s3B3") < tokens.index("s3R2") < tokens.index("s3B2")


def test_dependent_first_order_on_fig2():
    """The paper numbers dependent chunks after the standalone ones (Figure 4), which gives its
    47.8%; putting the dependent group first happens to be faster on this batch."""
    assert _result("fig6-cs2-k2", order="dependent-first").traces[0].makespan_s == 44


def test_baseline_speedups_in_paper_direction():
    base = run(ltsim.load_scenario(EXAMPLES / "chunkflow-fig2-baseline.toml")).traces[0].makespan_s
    assert base / _result("fig6-cs2-k2").traces[0].makespan_s > 1.2
    assert base / _result("fig6-cs2-k1").traces[0].makespan_s > 1.1
