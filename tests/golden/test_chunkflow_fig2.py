"""ChunkFlow section 3 / Figure 2: the hand-drawn 1F1B examples with unit costs, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

import ltsim
from ltsim.runner import run

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"
GOLDEN = Path(__file__).resolve().parent / "schedules"


def test_fig2_baseline_bubble_and_makespan():
    sim = run(ltsim.load_scenario(EXAMPLES / "chunkflow-fig2-baseline.toml"))
    result = sim.result.to_dict()
    assert sim.traces[0].makespan_s == 56
    assert result["bubble_ratio"] == pytest.approx(4 / 7)
    assert f"{100 * result['bubble_ratio']:.2f}" == "57.14"


def test_fig2_equal_sequences_textbook_bubble():
    result = ltsim.simulate(ltsim.load_scenario(EXAMPLES / "chunkflow-fig2-equal.toml")).to_dict()
    assert result["bubble_ratio"] == pytest.approx(9 / 21)
    assert result["iteration_time_s"] == 21


def test_fig2_baseline_schedule_matches_golden():
    """The per-device op order, one device stream per line, as stored in tests/golden/schedules."""
    sim = run(ltsim.load_scenario(EXAMPLES / "chunkflow-fig2-baseline.toml"))
    assert sim.plans[0].grid() == (GOLDEN / "megatron-1f1b-fig2.txt").read_text().rstrip("\n")


def test_fig2_baseline_event_times():
    """Stage 3 (the last) runs F then B back to back for every micro-batch, from t = 12."""
    trace = run(ltsim.load_scenario(EXAMPLES / "chunkflow-fig2-baseline.toml")).traces[0]
    last = [(e.token, e.start_s, e.end_s) for e in trace.events
            if e.device == 3 and e.stream == "compute" and e.kind in "FB"]
    assert last[:2] == [("s3F0", 12.0, 16.0), ("s3B0", 16.0, 24.0)]
