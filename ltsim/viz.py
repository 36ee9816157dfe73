"""Figures: pipeline Gantt charts, memory timelines, sweep heatmaps, predicted-vs-measured comparisons.

Drawn in the style of the ChunkFlow / 1F1B papers' schedule figures: one row per device (device 0 at
the top), one box per op coloured by its chunk (by the chunk's first sequence when a Plan is given, so
the pieces of one long sequence share a hue), forward light, backward dark, recompute hatched, idle
time (the bubbles) left white. matplotlib is imported inside the functions only, and figures are built
on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot's global state, so this works
headless and in parallel workers. Times are converted from seconds and bytes to display units here only.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ltsim.errors import ConfigError, check_argument
from ltsim.files import figure_path, literal, save_figure
from ltsim.plan import STREAMS
from ltsim.units import NO_LIMIT_BYTES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ltsim.plan import Plan
    from ltsim.trace import Trace

_FILL = {"F": 0.55, "R": 0.55, "W": 0.3, "B": 0.0}  # share of white mixed into the chunk's hue
_HATCH = {"R": "////", "W": "...."}
_MAX_LABELS = 1500  # text objects are slow to draw; a busier chart gets no labels
_MAX_HATCHED = 20_000  # hatches and edges drawn per box: past this many, plain fills (_style)
_PLAIN_FILL = {"R": 0.8}  # a plain recompute: paler than a forward (F and R share a fill)
_DPI = 120
_TIME_UNITS = {"s": (1.0, "s"), "ms": (1e3, "ms"), "us": (1e6, "µs"), "units": (1.0, "units")}


def _time_scale(time_unit: str, span_s: float) -> tuple[float, str]:
    """(display units per second, unit name) for "auto" (s, ms or µs by the span), "s", "ms", "us"
    or "units" (the unit preset's abstract time). Raises ValueError on another name."""
    if time_unit == "auto":
        time_unit = "s" if span_s >= 1.0 else "ms" if span_s >= 1e-3 else "us"
    if time_unit not in _TIME_UNITS:
        raise ValueError(f"time_unit must be one of auto, {', '.join(_TIME_UNITS)} (got {time_unit!r})")
    return _TIME_UNITS[time_unit]


def _new_figure(width_in: float, height_in: float) -> "Figure":
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: "Figure", path: str | Path) -> Path:
    out = figure_path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=_DPI, facecolor="white")
    return out



def _palette() -> list[tuple[float, float, float]]:
    """tab10: ten distinct hues (tab20 would pair light and dark shades, which mean F and B here)."""
    from matplotlib import colormaps

    return [tuple(c[:3]) for c in colormaps["tab10"].colors]


def _mix(rgb, other: float, share: float) -> tuple[float, float, float]:
    return tuple(c * (1.0 - share) + other * share for c in rgb)


def _is_dark(rgb) -> bool:
    return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.5  # ITU-R BT.601 luma


def _hue_keys(trace: "Trace", plan: "Plan | None") -> dict[int, int]:
    """chunk index -> colour key: the chunk's first sequence when a plan is given, else the chunk."""
    keys = {e.chunk: e.chunk for e in trace.events if e.chunk >= 0}
    if plan is not None:
        keys.update({c.index: min(s.seq for s in c.slices) for c in plan.chunks if c.slices})
    order = {key: rank for rank, key in enumerate(sorted(set(keys.values())))}
    return {chunk: order[key] for chunk, key in keys.items()}


def _style(kind: str, hue, plain: bool = False) -> tuple[tuple, tuple, str]:
    """(face colour, edge colour, hatch) of one op box; ``plain`` (a crowded chart): no hatch,
    a recompute paler than a forward instead."""
    if kind == "OPT":
        return (0.62, 0.62, 0.62), (0.3, 0.3, 0.3), ""
    if kind not in _FILL:  # SEND_F / SEND_B, CP exchanges (the chunk's hue, darker), COPY (hatched)
        return _mix(hue, 0.0, 0.2), (0.2, 0.2, 0.2), "xxxx" if kind == "COPY" and not plain else ""
    if plain:
        return _mix(hue, 1.0, _PLAIN_FILL.get(kind, _FILL[kind])), _mix(hue, 0.0, 0.45), ""
    return _mix(hue, 1.0, _FILL[kind]), _mix(hue, 0.0, 0.45), _HATCH.get(kind, "")


def _comm_streams(trace: "Trace") -> list[str]:
    """The non-compute streams with events of some duration, in STREAMS order."""
    used = {e.stream for e in trace.events if e.end_s > e.start_s}
    return [s for s in STREAMS[1:] if s in used]


def _rows(trace: "Trace", streams: list[str]) -> dict[tuple[int, str], tuple[float, float]]:
    """(device, stream) -> (y bottom, height); device d occupies [d - 0.5, d + 0.5], drawn top-down:
    the compute row, then one thin row per communication stream in ``streams``."""
    if not streams:
        return {(d, "compute"): (d - 0.4, 0.8) for d in range(trace.num_devices)}
    rows = {(d, "compute"): (d - 0.44, 0.5) for d in range(trace.num_devices)}
    height = 0.36 / len(streams)
    for i, stream in enumerate(streams):
        rows |= {(d, stream): (d + 0.09 + i * height, 0.85 * height) for d in range(trace.num_devices)}
    return rows


def _draw_boxes(ax: "Axes", events: list, rows: dict, hues: dict, factor: float, thin_edges: bool,
                plain: bool = False) -> None:
    """One PolyCollection per hatch pattern (hatches are per collection) with per-box colours."""
    from matplotlib.collections import PolyCollection

    groups: dict[str, tuple[list, list, list]] = {}
    palette = _palette()
    for e in events:
        y0, height = rows[(e.device, e.stream)]
        hue = palette[hues.get(e.chunk, 0) % len(palette)]
        face, edge, hatch = _style(e.kind, hue, plain)
        x0, x1 = e.start_s * factor, e.end_s * factor
        verts, faces, edges = groups.setdefault(hatch, ([], [], []))
        verts.append([(x0, y0), (x1, y0), (x1, y0 + height), (x0, y0 + height)])
        faces.append(face)
        edges.append(edge)
    width = 0 if plain else 0.25 if thin_edges else 0.7
    for hatch, (verts, faces, edges) in groups.items():
        ax.add_collection(PolyCollection(verts, facecolors=faces, edgecolors=edges, linewidths=width,
                                         hatch=hatch or None, zorder=2))


def _draw_labels(ax: "Axes", events: list, rows: dict, factor: float, span: float) -> None:
    """The chunk number ("3", "3'" for a recompute) inside every box wide and tall enough for it."""
    fig = ax.get_figure()
    box = ax.get_position()  # before layout, so an estimate; the +6 px slack absorbs it
    px_per_unit = box.width * fig.get_figwidth() * fig.dpi / span
    row_px = box.height * fig.get_figheight() * fig.dpi / max(1, len({d for d, _ in rows})) * 0.8
    fontsize = min(10.0, row_px * 0.5 * 72 / fig.dpi)
    if fontsize < 5.0:
        return
    char_px = fontsize * 0.65 * fig.dpi / 72
    for e in events:
        if e.stream != "compute" or e.chunk < 0:
            continue
        text = f"{e.chunk}'" if e.kind == "R" else str(e.chunk)
        if (e.end_s - e.start_s) * factor * px_per_unit < char_px * len(text) + 6:
            continue
        y0, height = rows[(e.device, e.stream)]
        backing = dict(boxstyle="square,pad=0.05", lw=0, fc=(1, 1, 1, 0.75))  # readable on hatching
        ax.text((e.start_s + e.end_s) / 2 * factor, y0 + height / 2, text, ha="center", va="center",
                fontsize=fontsize, color="white" if e.kind == "B" else "black", zorder=3,
                bbox=backing if e.kind in _HATCH else None)


def _legend(ax: "Axes", kinds: set[str], by_sequence: bool, plain: bool = False) -> None:
    """Above the chart, right-aligned: the shading of each op kind present, and what white means."""
    from matplotlib.patches import Patch

    hue = _palette()[0]
    names = {"F": "forward", "B": "backward", "R": "recompute", "W": "weight grad", "OPT": "optimizer",
             "COLL": "collective", "COPY": "host copy"}
    styles = {kind: _style(kind, hue, plain) for kind in names if kind in kinds}
    handles = [Patch(facecolor=face, edgecolor=edge, hatch=hatch or None, label=f"{kind} {names[kind]}")
               for kind, (face, edge, hatch) in styles.items()]
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="idle (bubble)"))
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
              frameon=False, fontsize=8, handlelength=1.6, borderaxespad=0.2,
              title="hue = sequence" if by_sequence else "hue = chunk", title_fontsize=7,
              alignment="right")


def _style_axes(ax: "Axes", trace: "Trace", plan: "Plan | None", unit: str, span: float,
                rows: dict) -> None:
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    n = trace.num_devices
    ax.set_xlim(0, span)
    ax.set_ylim(n - 0.5, -0.5)
    ticks = list(range(0, n, max(1, -(-n // 16))))  # at most 16 labelled rows
    stages = plan.device_stage if plan is not None and plan.num_stages != n else None
    ax.set_yticks(ticks, [f"dev {d}" + (f" (s{stages[d]})" if stages else "") for d in ticks],
                  fontsize=9 if n <= 16 else 7)
    thin = sorted((y0 + h / 2, s) for (d, s), (y0, h) in rows.items() if s != "compute" and n <= 8)
    if thin:
        ax.set_yticks([y for y, _ in thin], [s for _, s in thin], minor=True, fontsize=6)
    ax.tick_params(axis="y", length=0, which="both")
    ax.set_xlabel(f"time ({unit})")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=16, integer=unit == "units"))
    if unit == "units" and span <= 120:  # the papers' hand-drawn figures show every unit
        ax.xaxis.set_minor_locator(MultipleLocator(1))
        ax.grid(axis="x", which="minor", color="0.95", lw=0.5)
    ax.grid(axis="x", which="major", color="0.85", lw=0.6)
    ax.hlines([d - 0.5 for d in range(n + 1)], 0, span, color="0.88", lw=0.6, zorder=1)
    _plain_frame(ax)


def _plain_frame(ax: "Axes") -> None:
    ax.set_axisbelow(True)
    ax.set_facecolor("white")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_gantt(trace: "Trace", plan: "Plan | None" = None, *, ax: "Axes | None" = None, title: str = "",
               time_unit: str = "auto", show_comm: bool | None = None, labels: bool | None = None,
               xlim_s: float | None = None) -> "Axes":
    """Pipeline Gantt chart of ``trace``: one row per device, one box per op over [start, end].

    ``show_comm``: a thin row per communication stream (P2P, CP, collectives, host copies) under
    each device; None shows them when any communication takes time (the unit preset's is free).
    ``time_unit``: "auto", "s", "ms", "us" or "units". ``labels=None`` writes the chunk number
    into boxes wide enough when there are at most 1500 ops; ``xlim_s`` fixes the time axis (seconds).
    Returns the Axes (on a new Agg-backed figure when ``ax`` is None). Raises ValueError on a bad unit.
    """
    _check_drawn(trace, plan)
    n = max(1, trace.num_devices)
    if ax is None:
        ax = _new_figure(12, 1.4 + n * _row_height_in(n)).add_subplot()
    span_s = xlim_s or trace.makespan_s or 1.0
    factor, unit = _time_scale(time_unit, span_s)
    span = span_s * factor * 1.005
    comm = _comm_streams(trace) if show_comm is not False else []
    if show_comm is True and not comm:
        comm = ["comm"]
    rows = _rows(trace, comm)
    events = [e for e in trace.events if (e.device, e.stream) in rows and e.end_s > e.start_s]
    _style_axes(ax, trace, plan, unit, span, rows)
    plain = len(events) > _MAX_HATCHED  # (hatching and edges per box: 295K boxes took 27 s)
    _draw_boxes(ax, events, rows, _hue_keys(trace, plan), factor, thin_edges=len(events) > 2000,
                plain=plain)
    if labels or (labels is None and len(events) <= _MAX_LABELS):
        _draw_labels(ax, events, rows, factor, span)
    _legend(ax, {e.kind for e in events}, by_sequence=plan is not None, plain=plain)
    ax.set_title(literal(title), loc="left", fontsize=11, pad=22)
    return ax


def _row_height_in(num_devices: int) -> float:
    return 0.5 if num_devices <= 8 else 0.3 if num_devices <= 16 else 0.16


def _byte_unit(peak_bytes: float) -> tuple[float, str]:
    units = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
    return next(((float(s), name) for s, name in units if peak_bytes >= s), (1.0, "bytes"))


def plot_memory(trace: "Trace", *, ax: "Axes | None" = None, limit_bytes: int | None = None,
                title: str = "", time_unit: str = "auto", xlim_s: float | None = None) -> "Axes":
    """Memory over time, one step line per device, with the static level and the device limit.

    The limit is drawn (dashed red) when given and at most 3x the peak, else noted in the corner.
    Bytes are shown in GiB, MiB, KiB or bytes depending on the peak (tokens with ``time_unit``
    "units", the unit preset's). Returns the Axes.
    """
    _check_drawn(trace, None, limit_bytes)
    n = max(1, trace.num_devices)
    if ax is None:
        ax = _new_figure(12, 3.2).add_subplot()
    span_s = xlim_s or trace.makespan_s or 1.0
    factor, unit_s = _time_scale(time_unit, span_s)
    peak = max(trace.peak_memory_bytes(), default=0) or 1
    # the unit preset (time in units of work) holds one byte per token of activation
    size, unit = (1.0, "tokens") if time_unit == "units" else _byte_unit(peak)
    from matplotlib import colormaps

    colors = _palette()[:n] if n <= 10 else [colormaps["viridis"](d / (n - 1)) for d in range(n)]
    # one column per device, one row per change time (the last sample wins), held until the end
    wide = trace.memory_frame().groupby(["time_s", "device"])["bytes"].last().unstack().ffill() / size
    wide.loc[max(span_s, wide.index[-1])] = wide.iloc[-1]
    for d in wide.columns:
        ax.step(wide.index * factor, wide[d], where="post", color=colors[d], lw=1.3 if n <= 8 else 0.6,
                alpha=1.0 if n <= 8 else 0.6, label=f"dev {d}" if n <= 10 else None)
    if n > 8:
        ax.step(wide.index * factor, wide.max(axis=1), where="post", color="black", lw=1.2,
                label="max over devices")
    for i, static in enumerate(sorted(set(trace.static_bytes))):
        ax.axhline(static / size, color="0.45", ls=":", lw=1, label="static" if i == 0 else None)
    _draw_limit(ax, limit_bytes, peak, size, unit)
    _finish_memory_axes(ax, n, span_s * factor * 1.005, unit_s, unit)
    ax.set_title(literal(title), loc="left", fontsize=11)
    return ax


def _draw_limit(ax: "Axes", limit_bytes: int | None, peak: int, size: float, unit: str) -> None:
    if limit_bytes is None:
        return
    if limit_bytes <= 3 * peak:
        ax.axhline(limit_bytes / size, color="#d62728", ls="--", lw=1.4,
                   label=f"limit {limit_bytes / size:.3g} {unit}")
    elif limit_bytes < NO_LIMIT_BYTES:  # the unit preset's "no limit" is not worth a note
        ax.text(0.995, 0.97, f"limit {limit_bytes / size:.3g} {unit} (off scale)", ha="right",
                va="top", transform=ax.transAxes, fontsize=8, color="#d62728")


def _finish_memory_axes(ax: "Axes", n: int, span: float, time_unit: str, byte_unit: str) -> None:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    ax.set(xlim=(0, span), ylim=(0, None), xlabel=f"time ({time_unit})", ylabel=f"memory ({byte_unit})")
    ax.grid(color="0.9", lw=0.6)
    _plain_frame(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if n > 10:
        mappable = ScalarMappable(Normalize(0, n - 1), colormaps["viridis"])
        ax.get_figure().colorbar(mappable, ax=ax, label="device", pad=0.01, fraction=0.03)


def _check_drawn(trace: Any, plan: Any, limit_bytes: Any = None) -> None:
    """A plot's trace, plan and limit of the right types (None was an AttributeError inside)."""
    from ltsim.plan import Plan
    from ltsim.trace import Trace

    check_argument("trace", trace, Trace, "a Trace (ltsim.run(scenario).traces[0])")
    if plan is not None:
        check_argument("plan", plan, Plan, "a Plan or None", "pass the trace's plan, or none")
    if limit_bytes is not None:
        check_argument("limit_bytes", limit_bytes, numbers.Real, "a number of bytes or None")


def _unpack(sim_or_trace: Any) -> tuple["Trace", "Plan | None", Any]:
    """(first trace, its plan, the Result) from a Simulation, or (trace, None, None) from a Trace."""
    from ltsim.runner import Simulation
    from ltsim.trace import Trace

    check_argument("sim_or_trace", sim_or_trace, (Simulation, Trace),
                   "a Simulation (ltsim.run) or a Trace",
                   "pass ltsim.run(scenario), not ltsim.simulate's Result: a Result holds no trace")
    if isinstance(sim_or_trace, Simulation):
        if not sim_or_trace.traces:
            raise ConfigError("sim_or_trace", "a Simulation that kept its traces",
                              "one without traces", "run it with keep=True (the default)")
        return sim_or_trace.traces[0], next(iter(sim_or_trace.plans), None), sim_or_trace.result
    return sim_or_trace, None, None


def short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis: a scenario name in a title (up to
    200 characters) ran past the figure and over its legend."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _default_title(result: Any, time_unit: str) -> str:
    """Scenario, strategy, iteration time and bubble ratio of the first batch (the one drawn)."""
    if result is None or not result.batches:
        return ""
    batch = result.batches[0]
    factor, unit = _time_scale(time_unit, batch.iteration_time_s)
    return (f"{short(result.scenario)}  ·  {result.strategy}  ·  iteration "
            f"{batch.iteration_time_s * factor:.4g} {unit}  ·  bubble ratio {batch.bubble_ratio:.2%}")


def plot_simulation(sim_or_trace: Any, path: str | Path, *, plan: "Plan | None" = None, title: str = "",
                    limit_bytes: int | None = None, time_unit: str = "auto",
                    show_comm: bool | None = None) -> Path:
    """One PNG: the Gantt chart of the first simulated batch above its memory timeline.

    Takes a ``Simulation`` (its first trace and plan, the Result's limit and a default title with the
    bubble ratio) or a ``Trace``. Sized for 1..64 devices. Returns the written path.
    """
    trace, sim_plan, result = _unpack(sim_or_trace)
    _check_drawn(trace, plan, limit_bytes)
    figure_path(path)  # (before drawing)
    plan = plan or sim_plan
    if time_unit == "auto" and result is not None and result.unit_costs:
        time_unit = "units"  # the unit preset's times are units of work, not seconds
    if limit_bytes is None and result is not None:
        limit_bytes = result.memory_limit_bytes
    n = max(1, trace.num_devices)
    extra = len(_comm_streams(trace)) if show_comm is not False else 0
    gantt_in = 1.2 + n * _row_height_in(n) * (1.0 + 0.25 * extra)
    fig = _new_figure(12, gantt_in + 3.0)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[gantt_in, 2.6])
    plot_gantt(trace, plan, ax=top, title=title or _default_title(result, time_unit),
               time_unit=time_unit, show_comm=show_comm)
    top.tick_params(axis="x", labelbottom=True)
    plot_memory(trace, ax=bottom, limit_bytes=limit_bytes, time_unit=time_unit)
    return _save(fig, path)


def plot_compare(predicted: Any, measured: Any, path: str | Path, *, plan: "Plan | None" = None,
                 title: str = "", time_unit: str = "auto") -> Path:
    """Predicted (top) and measured (bottom) Gantt charts on one shared time axis, makespans and their
    difference in the panel titles. Either may be a Trace or a Simulation. Returns the path."""
    (pred, pred_plan, _), (meas, _, _) = _unpack(predicted), _unpack(measured)
    plan = plan or pred_plan
    span_s = max(pred.makespan_s, meas.makespan_s) or 1.0
    n = max(1, pred.num_devices, meas.num_devices)
    panel_in = 1.2 + n * _row_height_in(n)
    fig = _new_figure(12, 2 * panel_in + 0.8)
    top, bottom = fig.subplots(2, 1, sharex=True)
    factor, unit = _time_scale(time_unit, span_s)
    # the error as ltsim validate's table states it: (measured - predicted) / measured
    diff = (meas.makespan_s - pred.makespan_s) / meas.makespan_s if meas.makespan_s else 0.0
    plot_gantt(pred, plan, ax=top, time_unit=time_unit, xlim_s=span_s,
               title=f"predicted: makespan {pred.makespan_s * factor:.4g} {unit}")
    plot_gantt(meas, plan, ax=bottom, time_unit=time_unit, xlim_s=span_s,
               title=f"measured: makespan {meas.makespan_s * factor:.4g} {unit} "
                     f"(error {diff:+.1%}: (measured - predicted) / measured)")
    top.tick_params(axis="x", labelbottom=True)
    if title:
        fig.suptitle(literal(short(title, 100)), x=0.01, ha="left", fontsize=12)
    return _save(fig, path)
