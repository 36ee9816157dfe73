"""ltsim.viz: every figure writes a PNG; labels, hatching, OOM cells and the lazy matplotlib import."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import ltsim
from ltsim import viz, viz_sweep
from ltsim.trace import Event, Trace

ROOT = Path(__file__).resolve().parents[2]
FIG2 = ROOT / "scenarios" / "examples" / "chunkflow-fig2-baseline.toml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


@pytest.fixture(scope="module")
def fig2():
    return ltsim.run(ltsim.load_scenario(FIG2))


@pytest.fixture(scope="module")
def big():
    """16 stages, 128 micro-batches of 1..8 units: thousands of ops."""
    lengths = [random.Random(i).randint(1, 8) for i in range(128)]
    overrides = ["parallel.pp=16", "hardware.gpus_per_node=16", f"workload.lengths={lengths}"]
    return ltsim.run(ltsim.load_scenario(FIG2, overrides=overrides))


def _synthetic_trace() -> Trace:
    """Two devices with F, R, B, W, OPT on the compute stream and SEND/COLL on the comm stream."""
    events = []
    for d in range(2):
        for kind, chunk, start, end, stream in (
                ("F", 0, 0, 2, "compute"), ("SEND_F", 0, 2, 2.5, "comm"), ("F", 1, 2, 4, "compute"),
                ("R", 0, 6, 8, "compute"), ("B", 0, 8, 12, "compute"), ("W", 0, 12, 14, "compute"),
                ("COLL", -1, 14, 15, "comm"), ("OPT", -1, 15, 16, "compute")):
            token = f"s{d}{kind}{chunk if chunk >= 0 else ''}"
            events.append(Event(d, stream, token, kind, d, chunk, start + 2 * d, end + 2 * d))
    memory = ((0.0, 0, 5 * 2**30), (2.0, 0, 6 * 2**30), (12.0, 0, 3 * 2**30), (2.0, 1, 4 * 2**30))
    return Trace(events=tuple(events), memory=memory, static_bytes=(3 * 2**30, 3 * 2**30))


def test_import_does_not_load_matplotlib():
    code = "import sys, ltsim.viz; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_gantt_fig2_labels_every_op(fig2, tmp_path):
    ax = viz.plot_gantt(fig2.traces[0], fig2.plans[0], title="fig2 (b)", time_unit="units")
    labels = [t.get_text() for t in ax.texts]
    assert sorted(set(labels)) == ["0", "1", "2", "3"]
    assert len(labels) == 32  # 4 chunks x (F, B) x 4 devices: even the 1-unit boxes fit a label
    assert ax.get_xlabel() == "time (units)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["dev 0", "dev 1", "dev 2", "dev 3"]
    path = tmp_path / "gantt.png"
    ax.get_figure().savefig(path)
    assert _is_png(path)


def test_gantt_recompute_is_hatched_and_primed():
    ax = viz.plot_gantt(_synthetic_trace(), show_comm=True)
    assert "0'" in [t.get_text() for t in ax.texts]
    hatches = {c.get_hatch() for c in ax.collections if c.get_hatch()}
    assert hatches == {"////", "...."}  # R and W
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["F forward", "B backward", "R recompute", "W weight grad", "OPT optimizer",
                      "COLL collective", "idle (bubble)"]


def test_a_crowded_gantt_draws_plain_fills(monkeypatch):
    """A fuzzing review: 295K boxes took 27 s to draw, most of it hatching and edges per box.
    Past _MAX_HATCHED boxes they are plain fills (the legend still shows the kinds)."""
    monkeypatch.setattr(viz, "_MAX_HATCHED", 10)  # the synthetic trace has 16 boxes
    from matplotlib.collections import PolyCollection

    ax = viz.plot_gantt(_synthetic_trace(), show_comm=True)
    boxes = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert boxes and not any(c.get_hatch() for c in boxes)
    assert all(list(c.get_linewidths()) == [0] for c in boxes)
    legend = ax.get_legend()
    assert "R recompute" in [t.get_text() for t in legend.get_texts()]
    patches = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert not any(h.get_hatch() for h in patches.values())  # the legend is drawn as the boxes
    assert patches["R recompute"].get_facecolor() != patches["F forward"].get_facecolor()


def test_gantt_draws_cp_exchanges_and_the_dp_reduction_on_their_own_rows(repo):
    """Ring CP traffic (cp stream) and the DP gradient reduction (coll stream) are events of their
    own, each drawn on a thin row under its device (shown by default when they take time)."""
    scenario = ltsim.load_scenario(repo / "scenarios" / "examples" / "qwen2.5-7b-32k-tp4-cp4.toml",
                                   ["workload.num_batches=1", "parallel.dp=2", "parallel.cp=2"])
    from ltsim.runner import run

    sim = run(scenario)
    ax = viz.plot_gantt(sim.traces[0], sim.plans[0])
    minor = [t.get_text() for t in ax.get_yticklabels(minor=True)]
    assert {"cp", "coll"} <= set(minor)
    streams = {e.stream for e in sim.traces[0].events if e.end_s > e.start_s}
    assert {"compute", "cp", "coll"} <= streams


def test_gantt_time_units():
    trace = _synthetic_trace()
    short = Trace(events=tuple(Event(e.device, e.stream, e.token, e.kind, e.stage, e.chunk,
                                     e.start_s * 1e-3, e.end_s * 1e-3) for e in trace.events),
                  memory=(), static_bytes=trace.static_bytes)
    assert viz.plot_gantt(short).get_xlabel() == "time (ms)"
    assert viz.plot_gantt(trace).get_xlabel() == "time (s)"
    with pytest.raises(ValueError, match="time_unit must be one of"):
        viz.plot_gantt(trace, time_unit="hours")


def test_gantt_many_ops_skips_labels(big):
    ax = viz.plot_gantt(big.traces[0], big.plans[0])
    assert len(ax.texts) == 0
    assert len(ax.get_yticklabels()) == 16


def test_memory_limit_line_and_units(tmp_path):
    trace = _synthetic_trace()
    ax = viz.plot_memory(trace, limit_bytes=8 * 2**30, title="memory")
    assert ax.get_ylabel() == "memory (GiB)"
    labels = [line.get_label() for line in ax.get_lines()]
    assert "limit 8 GiB" in labels and "static" in labels
    far = viz.plot_memory(trace, limit_bytes=80 * 2**30)
    assert not any(label.startswith("limit") for label in (ln.get_label() for ln in far.get_lines()))
    assert any("off scale" in t.get_text() for t in far.texts)
    path = tmp_path / "memory.png"
    ax.get_figure().savefig(path)
    assert _is_png(path)


def test_plot_simulation_fig2(fig2, tmp_path):
    out = viz.plot_simulation(fig2, tmp_path / "sub" / "fig2.png", time_unit="units")
    assert out == tmp_path / "sub" / "fig2.png" and _is_png(out)


def test_plot_simulation_sixteen_devices(big, tmp_path):
    assert _is_png(viz.plot_simulation(big, tmp_path / "big.png"))


def test_plot_simulation_accepts_a_trace(tmp_path):
    assert _is_png(viz.plot_simulation(_synthetic_trace(), tmp_path / "t.png", show_comm=True))


def test_plot_compare(fig2, tmp_path):
    assert _is_png(viz.plot_compare(fig2, fig2.traces[0], tmp_path / "cmp.png", title="fig2"))


def test_plot_heatmap(tmp_path, monkeypatch):
    rows = [dict(chunk_size=c, k=k, iteration_time_s=10 + 5000 / c + 0.3 * k, fits=c * k <= 8192)
            for c in (1024, 2048, 4096, 8192) for k in (1, 2, 4) if (c, k) != (1024, 4)]
    captured = {}

    def keep(fig, path):
        captured["fig"] = fig
        return Path(path)

    monkeypatch.setattr(viz_sweep, "_save", keep)
    viz_sweep.plot_heatmap(pd.DataFrame(rows), x="chunk_size", y="k", value="iteration_time_s",
                     feasible="fits", path=tmp_path / "h.png", title="sweep")
    ax = captured["fig"].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("OOM") == 3  # (4096, 4), (8192, 2), (8192, 4)
    assert texts.count("–") == 1  # (1024, 4) has no row
    assert "best: chunk_size=8192, k=1" in ax.get_title(loc="left")
    monkeypatch.undo()
    out = viz_sweep.plot_heatmap(pd.DataFrame(rows), x="chunk_size", y="k", value="iteration_time_s",
                           feasible="fits", path=tmp_path / "h.png")
    assert _is_png(out)


def test_sweep_figures_over_more_keys_show_each_points_best(tmp_path, monkeypatch):
    # a third grid key (hardware.preset) was averaged over: the "best" named a mean of three
    # presets' times, 1.324 s, where the best plan took 0.781 s
    rows = [dict(pp=pp, tp=tp, preset=name, iteration_time_s=t * scale / pp,
                 fits=not (name == "a" and tp == 2))
            for pp in (1, 2) for tp, t in ((2, 4.0), (4, 3.0))
            for name, scale in (("a", 0.5), ("b", 1.0), ("c", 2.0))]
    captured = {}

    def keep(fig, path):
        captured["fig"] = fig
        return Path(path)

    monkeypatch.setattr(viz_sweep, "_save", keep)
    viz_sweep.plot_heatmap(pd.DataFrame(rows), x="pp", y="tp", value="iteration_time_s",
                           feasible="fits", path=tmp_path / "h.png", others=("preset",))
    ax = captured["fig"].axes[0]
    title = ax.get_title(loc="left").replace("\n", " ")
    assert "best: pp=2, tp=4, preset=a (0.75)" in title
    assert "each point: the best over preset" in title
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["0.75", "1.5", "2", "4"]  # tp 2: "a" does not fit, so "b" is its best
    viz_sweep.plot_line(pd.DataFrame(rows), x="pp", value="iteration_time_s", feasible="fits",
                        path=tmp_path / "l.png", others=("tp", "preset"), label="time (s)")
    ax = captured["fig"].axes[0]
    assert "best that fits: pp=2, tp=4, preset=a (0.75)" in ax.get_title(loc="left")
    assert ax.get_ylabel() == "time (s)" and list(ax.get_xticks()) == [1, 2]


def test_sweep_figures_over_a_key_of_numbers_and_words(tmp_path):
    """Skrull's bucket_size takes "auto" or a number: the figures sort its values as text (they
    raised a TypeError comparing str and int)."""
    rows = [{"bucket_size": b, "k": k, "iteration_time_s": t, "fits": True}
            for b, t in (("auto", 1.0), (26624, 1.2), (13312, 1.5)) for k in (1, 2)]
    frame = pd.DataFrame(rows)
    line = viz_sweep.plot_line(frame, x="bucket_size", value="iteration_time_s", feasible="fits",
                               path=tmp_path / "line.png")
    heat = viz_sweep.plot_heatmap(frame, x="bucket_size", y="k", value="iteration_time_s",
                                  feasible="fits", path=tmp_path / "heat.png")
    assert line.stat().st_size > 10_000 and heat.stat().st_size > 10_000
    lists = pd.DataFrame([{"lengths": [4, 2], "iteration_time_s": 1.0, "fits": True},
                          {"lengths": [8], "iteration_time_s": 2.0, "fits": True}])
    assert viz_sweep.plot_line(lists, x="lengths", value="iteration_time_s", feasible="fits",
                               path=tmp_path / "lists.png").stat().st_size > 10_000


def test_text_from_names_is_drawn_verbatim(fig2, tmp_path):
    # a scenario called "$$" (mathtext that does not parse), a sweep over such names, and a
    # length file whose name holds bytes that are not UTF-8 all crashed the figure (a probe of
    # bad inputs); each is shown as written, U+FFFD for an undecodable byte
    from ltsim.cli import main

    assert viz.literal("a $x$ and $$") == r"a \$x\$ and \$\$"
    assert viz.literal("x\udcff.txt") == "x\ufffd.txt" and viz.literal("é") == "é"
    assert _is_png(viz.plot_compare(fig2, fig2.traces[0], tmp_path / "c.png", title="$$ $\\ $"))
    frame = pd.DataFrame({"name": ["$$", "b", "$x^$"], "t": [1.0, 2.0, 3.0], "ok": [True] * 3})
    assert _is_png(viz_sweep.plot_line(frame, x="name", value="t", feasible="ok",
                                       path=tmp_path / "line.png", title="$$"))
    lengths = tmp_path / "x\udcff.txt"  # as Python names a file with the byte 0xff
    lengths.write_text("100\n200\n")
    assert main(["workload", "describe", str(lengths), "--plot", str(tmp_path / "w.png")]) == 0
    assert _is_png(tmp_path / "w.png")
