"""The Python entry points the notebooks call, given arguments of the wrong type: one ConfigError
naming the argument (a fuzzing review found AttributeErrors and TypeErrors from deep inside,
and bad validate counts failing inside the device processes after the prediction ran)."""

from __future__ import annotations

import math

import pytest

from ltsim.errors import ConfigError
from ltsim.grid import expand_grid
from ltsim.planner import rank, run_sweep
from ltsim.runner import run, simulate
from ltsim.scenario import build_scenario, load_scenario
from tests.conftest import REPO

CPU = REPO / "scenarios" / "examples" / "cpu-llama-tiny-chunkflow.toml"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(CPU)


@pytest.mark.parametrize("call,key", [
    (lambda s: simulate(str(CPU)), "scenario"),
    (lambda s: run(None), "scenario"),
    (lambda s: simulate(s, progress=5), "progress"),
    (lambda s: load_scenario(None), "path"),
    (lambda s: load_scenario(123), "path"),
    (lambda s: load_scenario(CPU, overrides=[None]), "overrides"),
    (lambda s: s.with_overrides(None), "overrides"),
    (lambda s: build_scenario(None), "raw"),
    (lambda s: build_scenario(dict(s.raw), source=5), "source"),
    (lambda s: expand_grid([None]), "--grid"),
    (lambda s: run_sweep(s, ["strategy.k=1"]), "points"),
    (lambda s: run_sweep(s, [{"strategy.k": 1}], executor=None), "--executor"),
    (lambda s: rank([None]), "rows"),
    # a second fuzzing review (2026-11-29)
    (lambda s: load_scenario(CPU, {1: 2}), "overrides"),
    (lambda s: build_scenario({**s.raw, 1: 2}), "1"),
    (lambda s: run_sweep(s, [{1: 1}]), "points"),
    (lambda s: run_sweep(str(CPU), [{"strategy.k": 1}]), "scenario"),
    (lambda s: run_sweep(s, (p for p in [{"strategy.k": 1}])), "points"),
    (lambda s: run_sweep(s, [{"strategy.k": 1}], store="x.sqlite"), "store"),
    (lambda s: run_sweep(s, [{"strategy.k": 1}], progress=5), "progress"),
    (lambda s: expand_grid(5), "--grid"),
    (lambda s: _describe(None), "dataset"),
    (lambda s: _find_max_length(str(CPU)), "scenario"),
    (lambda s: _find_max_length(s, max_length=4096, progress=3), "progress"),
    (lambda s: _find_max_length(s, mode="x"), "mode"),
    (lambda s: _find_max_length(s, max_length=4096, points=[]), "points"),
    (lambda s: run(s, cost=5), "cost"),
    (lambda s: run(s, first=5), "first"),
    (lambda s: _export("get_format", None), "--format"),
    (lambda s: _export("torch_pipelining", None), "plan"),
])
def test_a_wrong_argument_is_named(scenario, call, key):
    with pytest.raises(ConfigError) as caught:
        call(scenario)
    assert caught.value.key == key and "Fix:" in str(caught.value)


def test_one_grid_spec_as_text_is_one_key():
    assert expand_grid("strategy.k=1,2") == [{"strategy.k": 1}, {"strategy.k": 2}]


def test_rank_puts_a_time_that_is_not_a_number_last():
    import numpy as np

    rows = [{"fits": True, "iteration_time_s": math.nan}, {"fits": True, "iteration_time_s": 2.0}]
    assert [r["iteration_time_s"] for r in rank(rows)][0] == 2.0
    rows = [{"fits": True, "iteration_time_s": 5.0},  # a numpy number is a number (a review)
            {"fits": True, "iteration_time_s": np.float32(3.0)}]
    assert [float(r["iteration_time_s"]) for r in rank(rows)] == [3.0, 5.0]


def test_validate_counts_take_numpy_integers():
    pytest.importorskip("torch")
    import numpy as np

    from ltsim.executor.runtime import check_counts

    check_counts(np.int64(1), np.int64(3), np.int32(0))  # (the old check took them)


@pytest.mark.parametrize("path", ["noext", "folder/", "/dev/null"])
def test_a_plot_path_without_a_figure_format_is_named(tmp_path, scenario, path):
    from ltsim.viz import plot_simulation

    (tmp_path / "folder").mkdir()
    target = path if path.startswith("/") else tmp_path / path
    with pytest.raises(ConfigError, match=r"'path' must be a file name ending in a format"):
        plot_simulation(run(scenario), target)


@pytest.mark.parametrize("counts", [{"repeats": 1.5}, {"repeats": math.nan}, {"seed": "x"},
                                    {"repeats": "3"}, {"warmup": None}, {"repeats": 0},
                                    {"warmup": -1}])
def test_validate_counts_are_checked_before_any_work(scenario, counts, monkeypatch):
    pytest.importorskip("torch")
    import ltsim.validate as validate

    def never(*args, **kwargs):
        raise AssertionError("the prediction ran")

    monkeypatch.setattr(validate, "bare_cost_model", never)
    with pytest.raises(ConfigError, match=rf"'{next(iter(counts))}' must be a whole number"):
        validate.validate_scenario(scenario, **counts)


def test_plot_arguments_of_the_wrong_kind_are_named(tmp_path, scenario):
    import pandas as pd

    from ltsim.viz import plot_simulation
    from ltsim.viz_sweep import plot_heatmap, plot_line

    frame = pd.DataFrame({"strategy.k": [1, 2], "strategy.chunk_size": [256, 256],
                          "iteration_time_s": [1.0, 2.0], "fits": [True, True]})
    common = dict(value="iteration_time_s", feasible="fits", path=tmp_path / "p.png")
    for call, key in (
            (lambda: plot_heatmap(frame, x="strategy.k", y="strategy.k", **common), "y"),
            (lambda: plot_line(frame, x="strategy.k", title=None, **common), "title"),
            (lambda: plot_line([1, 2], x="strategy.k", **common), "frame"),
            (lambda: plot_simulation(simulate(scenario), tmp_path / "s.png"), "sim_or_trace"),
            (lambda: plot_simulation(run(scenario, keep=False), tmp_path / "s.png"),
             "sim_or_trace")):
        with pytest.raises(ConfigError) as caught:
            call()
        assert caught.value.key == key
    # one other key as text is that key (it was iterated as characters: KeyError 's')
    assert plot_line(frame, x="strategy.k", others="strategy.chunk_size", **common).is_file()


def _describe(dataset):
    from ltsim.workload import describe

    return describe(dataset)


def _find_max_length(scenario, **kwargs):
    from ltsim.maxlen import find_max_length

    return find_max_length(scenario, **kwargs)


def test_a_length_file_given_as_a_path_is_described(tmp_path):
    """A second fuzzing review: describe(Path(...)), the natural argument, was an
    AttributeError (.strip of a Path)."""
    from ltsim.workload import describe

    lengths = tmp_path / "l.txt"
    lengths.write_text("100\n200\n")
    assert describe(lengths).attrs["dataset"] == "l.txt"


def test_plots_name_a_wrong_trace_plan_limit_or_path(tmp_path):
    """A second fuzzing review: None as the trace or path, a number as the plan and text as the
    limit were AttributeErrors and TypeErrors from inside (pathlib, matplotlib)."""
    from ltsim import viz

    sim = run(load_scenario(REPO / "scenarios" / "examples" / "chunkflow-fig6-cs2-k1.toml"))
    for call, key in ((lambda: viz.plot_simulation(sim, None), "path"),
                      (lambda: viz.plot_simulation(sim, b"x.png"), "path"),
                      (lambda: viz.plot_simulation(sim, tmp_path / "a.png", plan=5), "plan"),
                      (lambda: viz.plot_gantt(None), "trace"),
                      (lambda: viz.plot_memory(None), "trace"),
                      (lambda: viz.plot_memory(sim.traces[0], limit_bytes="x"), "limit_bytes")):
        with pytest.raises(ConfigError, match=f"'{key}' must be"):
            call()
    assert not (tmp_path / "a.png").exists()


def _export(name, argument):
    import ltsim.export

    return getattr(ltsim.export, name)(argument)


def test_maxlen_and_sweep_plots_name_their_wrong_arguments(tmp_path):
    """A second fuzzing review: plot_maxlen of no answers, None or text, and a title that is
    not text, and sweep plots of a column the frame lacks or holds text in, were matplotlib's,
    pandas' (KeyError) or Python's errors."""
    import pandas as pd

    from ltsim.maxlen import find_max_length
    from ltsim.viz_maxlen import plot_maxlen
    from ltsim.viz_sweep import plot_heatmap, plot_line

    answer = find_max_length(load_scenario(REPO / "scenarios" / "examples"
                                           / "chunkflow-fig6-cs2-k1.toml"), max_length=4096)
    frame = pd.DataFrame({"k": [1, 2], "c": [1, 1], "t": [1.0, 2.0], "fits": [True, False],
                          "text": ["a", "b"]})
    path = tmp_path / "p.png"
    for call, key in ((lambda: plot_maxlen([], path), "answers"),
                      (lambda: plot_maxlen(None, path), "answers"),
                      (lambda: plot_maxlen("x", path), "answers"),
                      (lambda: plot_maxlen([answer], path, title=5), "title"),
                      (lambda: plot_heatmap(frame, x="nope", y="c", value="t", feasible="fits",
                                            path=path), "x"),
                      (lambda: plot_heatmap(frame, x="k", y="c", value="t", feasible="nope",
                                            path=path), "feasible"),
                      (lambda: plot_heatmap(frame, x="k", y="c", value="text", feasible="fits",
                                            path=path), "value"),
                      (lambda: plot_line(frame, x="k", value="t", feasible="fits",
                                         others=["nope"], path=path), "others")):
        with pytest.raises(ConfigError, match=f"'{key}' must be"):
            call()
    assert plot_heatmap(frame, x="k", y="c", value="t", feasible="fits", path=path) == path
