"""CLI in-process on the shipped scenarios; sweeps (local, Dask, resume); the regression check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltsim.cli import main
from ltsim.planner import expand_grid, run_sweep
from ltsim.scenario import load_scenario
from ltsim.sweepstore import SweepStore

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(REPO / "scenarios")))
def test_every_scenario_simulates(path, capsys):
    assert main(["simulate", str(path), "--set", "workload.num_batches=1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["iteration_time_s"] > 0 and 0 <= result["bubble_ratio"] < 1
    assert result["peak_memory_bytes"] > 0


def test_simulate_writes_trace_and_plot(tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "g.png"
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["simulate", str(example), "--trace", str(trace), "--plot", str(plot)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"X", "C", "M"}
    assert plot.stat().st_size > 10_000
    assert "bubble ratio    45.83%" in capsys.readouterr().out


def test_compare_prints_speedups(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig2-baseline.toml"
    assert main(["compare", str(example), "--strategies",
                 "megatron-1f1b,chunkflow:chunk_size=2:k=2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["speedup"], 4) for r in rows] == [1.0, round(56 / 46, 4)]


def test_sweep_ranks_fitting_plans_and_resumes(tmp_path, capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    args = ["sweep", str(example), "--grid", "strategy.chunk_size=1,2,4", "--grid", "strategy.k=1,2",
            "--db", str(db), "--json", "--set", "hardware.memory_limit_gib=7e-9"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 6
    fitting = [r for r in rows if r["fits"]]
    assert fitting and all(r["peak_memory_bytes"] <= 7 for r in fitting)
    assert rows[: len(fitting)] == fitting  # fitting plans first, fastest first
    times = [r["iteration_time_s"] for r in fitting]
    assert times == sorted(times)
    # resume: a second run with one more value evaluates only the new points
    scenario = load_scenario(example, ["hardware.memory_limit_gib=7e-9"])
    store = SweepStore(db)
    seen = []
    points = expand_grid(["strategy.chunk_size=1,2,4,8", "strategy.k=1,2"])
    run_sweep(scenario, points, store=store, progress=lambda d, t: seen.append(d))
    assert seen == [7, 8]


def test_sweep_bad_point_is_a_row_not_a_crash(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.chunk_size=0,2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert "must be a positive integer" in rows[-1]["error"]


def test_sweep_on_dask():
    distributed = pytest.importorskip("distributed")
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "")
        rows = run_sweep(load_scenario(example), expand_grid(["strategy.k=1,2"]),
                         executor=f"dask://{address}")
    assert [r["iteration_time_s"] for r in rows] == [48.0, 46.0]


def test_check_passes_and_detects_drift(tmp_path, capsys):
    assert main(["check", str(REPO / "validation/regression.toml")]) == 0
    bad = tmp_path / "validation" / "r.toml"
    bad.parent.mkdir()
    bad.write_text(f'''[[case]]
name = "drift"
baseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"
candidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"
expected_speedup = 1.5
tolerance = 0.01
''')
    assert main(["check", str(bad)]) == 1
    assert "drifts" in capsys.readouterr().out
    assert main(["check", str(bad), "--update"]) == 0
    assert "expected_speedup = 1.2174" in bad.read_text()


def test_grid_syntax_errors(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.k"]) == 2
    assert "section.key=v1,v2" in capsys.readouterr().err
