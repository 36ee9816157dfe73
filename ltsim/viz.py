"""Figures: pipeline Gantt charts, memory timelines, sweep heatmaps, predicted-vs-measured comparisons.

Drawn in the style of the ChunkFlow / 1F1B papers' schedule figures: one row per device (device 0 at
the top), one box per op coloured by its chunk (by the chunk's first sequence when a Plan is given, so
the pieces of one long sequence share a hue), forward light, backward dark, recompute hatched, idle
time (the bubbles) left white. matplotlib is imported inside the functions only, and figures are built
on ``matplotlib.figure.Figure`` with the Agg canvas, never through pyplot's global state, so this works
headless and in parallel workers. Times are converted from seconds and bytes to display units here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ltsim.plan import Plan
    from ltsim.sim.trace import Trace

_FILL = {"F": 0.55, "R": 0.55, "W": 0.3, "B": 0.0}  # share of white mixed into the chunk's hue
_HATCH = {"R": "////", "W": "...."}
_OPT_GREY = (0.62, 0.62, 0.62)
_COMM_GREY = (0.35, 0.35, 0.4)
_MAX_LABELS = 1500  # text objects are slow to draw; a busier chart gets no labels
_DPI = 120


@dataclass(frozen=True, slots=True)
class _TimeScale:
    factor: float  # display units per second
    label: str


def _time_scale(time_unit: str, span_s: float) -> _TimeScale:
    """``time_unit``: "auto" (s, ms or µs by the span), "s", "ms", "us" or "units" (the unit preset)."""
    if time_unit == "auto":
        time_unit = "s" if span_s >= 1.0 else "ms" if span_s >= 1e-3 else "us"
    table = {"s": (1.0, "time (s)"), "ms": (1e3, "time (ms)"), "us": (1e6, "time (µs)"),
             "units": (1.0, "time (units)")}
    if time_unit not in table:
        raise ValueError(f"time_unit must be one of auto, {', '.join(table)} (got {time_unit!r})")
    return _TimeScale(*table[time_unit])


def _new_figure(width_in: float, height_in: float) -> "Figure":
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: "Figure", path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=_DPI, facecolor="white")
    return out


def _palette(num_colors: int) -> list[tuple[float, float, float]]:
    from matplotlib import colormaps

    name = "tab10" if num_colors <= 10 else "tab20"
    return [tuple(c[:3]) for c in colormaps[name].colors]


def _mix(rgb, other: float, share: float) -> tuple[float, float, float]:
    return tuple(c * (1.0 - share) + other * share for c in rgb)


def _is_dark(rgb) -> bool:
    r, g, b = rgb[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.5


def _hue_keys(trace: "Trace", plan: "Plan | None") -> dict[int, int]:
    """chunk index -> colour key: the chunk's first sequence when a plan is given, else the chunk."""
    if plan is not None:
        keys = {c.index: min(s.seq for s in c.slices) if c.slices else c.index for c in plan.chunks}
    else:
        keys = {}
    for e in trace.events:
        keys.setdefault(e.chunk, e.chunk)
    order = {key: rank for rank, key in enumerate(sorted(set(keys.values())))}
    return {chunk: order[key] for chunk, key in keys.items()}


def _style(kind: str, hue) -> tuple[tuple, tuple, str]:
    """(face colour, edge colour, hatch) of one op box."""
    if kind == "OPT":
        return _OPT_GREY, (0.3, 0.3, 0.3), ""
    if kind not in _FILL:  # SEND_F / SEND_B / COLL on the comm rows
        return (_COMM_GREY if kind == "COLL" else _mix(hue, 0.0, 0.2)), (0.2, 0.2, 0.2), ""
    edge = _mix(hue, 0.0, 0.45)
    return _mix(hue, 1.0, _FILL[kind]), edge, _HATCH.get(kind, "")


def _rows(trace: "Trace", show_comm: bool) -> dict[tuple[int, str], tuple[float, float]]:
    """(device, stream) -> (y bottom, height); device d occupies [d - 0.5, d + 0.5], drawn top-down."""
    rows = {}
    for device in range(trace.num_devices):
        if show_comm:
            rows[(device, "compute")] = (device - 0.42, 0.58)
            rows[(device, "comm")] = (device + 0.2, 0.22)
        else:
            rows[(device, "compute")] = (device - 0.4, 0.8)
    return rows


def _draw_boxes(ax: "Axes", events: list, rows: dict, hues: dict, scale: _TimeScale,
                thin_edges: bool) -> None:
    """One PolyCollection per hatch pattern (hatches are per collection) with per-box colours."""
    from matplotlib.collections import PolyCollection

    groups: dict[str, tuple[list, list, list]] = {}
    palette = _palette(len(set(hues.values())))
    for e in events:
        y0, height = rows[(e.device, e.stream)]
        hue = palette[hues.get(e.chunk, 0) % len(palette)]
        face, edge, hatch = _style(e.kind, hue)
        x0, x1 = e.start_s * scale.factor, e.end_s * scale.factor
        verts, faces, edges = groups.setdefault(hatch, ([], [], []))
        verts.append([(x0, y0), (x1, y0), (x1, y0 + height), (x0, y0 + height)])
        faces.append(face)
        edges.append(edge)
    width = 0.25 if thin_edges else 0.7
    for hatch, (verts, faces, edges) in groups.items():
        ax.add_collection(PolyCollection(verts, facecolors=faces, edgecolors=edges, linewidths=width,
                                         hatch=hatch or None, zorder=2))


def _draw_labels(ax: "Axes", events: list, rows: dict, scale: _TimeScale, span: float) -> None:
    """The chunk number ("3", "3'" for a recompute) inside every box wide and tall enough for it."""
    fig = ax.get_figure()
    box = ax.get_position()
    width_px = box.width * fig.get_figwidth() * fig.dpi
    height_px = box.height * fig.get_figheight() * fig.dpi
    px_per_unit = width_px / span
    row_px = height_px / max(1, len({d for d, _ in rows})) * 0.8
    fontsize = min(10.0, row_px * 0.5 * 72 / fig.dpi)
    if fontsize < 5.0:
        return
    char_px = fontsize * 0.65 * fig.dpi / 72
    for e in events:
        if e.stream != "compute" or e.chunk < 0:
            continue
        text = f"{e.chunk}'" if e.kind == "R" else str(e.chunk)
        if (e.end_s - e.start_s) * scale.factor * px_per_unit < char_px * (len(text) + 1):
            continue
        y0, height = rows[(e.device, e.stream)]
        dark = e.kind == "B"
        ax.text((e.start_s + e.end_s) / 2 * scale.factor, y0 + height / 2, text, ha="center",
                va="center", fontsize=fontsize, color="white" if dark else "black", zorder=3,
                bbox=None if e.kind not in _HATCH else dict(boxstyle="square,pad=0.05", lw=0,
                                                                 fc=(1, 1, 1, 0.75)))


def _legend(ax: "Axes", kinds: set[str], by_sequence: bool) -> None:
    from matplotlib.patches import Patch

    hue = _palette(10)[0]
    names = {"F": "forward", "B": "backward", "R": "recompute", "W": "weight grad", "OPT": "optimizer"}
    handles = []
    for kind in ("F", "B", "R", "W", "OPT"):
        if kind in kinds:
            face, edge, hatch = _style(kind, hue)
            handles.append(Patch(facecolor=face, edgecolor=edge, hatch=hatch or None,
                                 label=f"{kind} {names[kind]}"))
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="idle (bubble)"))
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
              frameon=False, fontsize=8, handlelength=1.6, borderaxespad=0.2,
              title="hue = sequence" if by_sequence else "hue = chunk", title_fontsize=7,
              alignment="right")


def _style_axes(ax: "Axes", trace: "Trace", plan: "Plan | None", scale: _TimeScale,
                span: float, show_comm: bool) -> None:
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    n = trace.num_devices
    ax.set_xlim(0, span)
    ax.set_ylim(n - 0.5, -0.5)
    step = max(1, -(-n // 16))
    ticks = list(range(0, n, step))
    stages = plan.device_stage if plan is not None and plan.num_stages != n else None
    ax.set_yticks(ticks, [f"dev {d}" + (f" (s{stages[d]})" if stages else "") for d in ticks],
                  fontsize=9 if n <= 16 else 7)
    if show_comm and n <= 16:
        ax.set_yticks([d + 0.31 for d in range(n)], ["comm"] * n, minor=True, fontsize=6)
    ax.tick_params(axis="y", length=0, which="both")
    ax.set_xlabel(scale.label)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=16, integer=scale.label.endswith("(units)")))
    if scale.label.endswith("(units)") and span <= 120:
        ax.xaxis.set_minor_locator(MultipleLocator(1))
        ax.grid(axis="x", which="minor", color="0.95", lw=0.5)
    ax.grid(axis="x", which="major", color="0.85", lw=0.6)
    for d in range(n + 1):
        ax.axhline(d - 0.5, color="0.88", lw=0.6, zorder=1)
    ax.set_axisbelow(True)
    ax.set_facecolor("white")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_gantt(trace: "Trace", plan: "Plan | None" = None, *, ax: "Axes | None" = None, title: str = "",
               time_unit: str = "auto", show_comm: bool = False, labels: bool | None = None,
               xlim_s: float | None = None) -> "Axes":
    """Pipeline Gantt chart of ``trace``: one row per device, one box per op over [start, end].

    ``time_unit``: "auto", "s", "ms", "us" or "units". ``labels=None`` writes the chunk number
    into boxes wide enough when there are at most 1500 ops; ``xlim_s`` fixes the time axis (seconds).
    Returns the Axes (on a new Agg-backed figure when ``ax`` is None). Raises ValueError on a bad unit.
    """
    n = max(1, trace.num_devices)
    if ax is None:
        ax = _new_figure(12, 1.4 + n * _row_height_in(n)).add_subplot()
    span_s = xlim_s or trace.makespan_s or 1.0
    scale = _time_scale(time_unit, span_s)
    span = span_s * scale.factor * 1.005
    streams = {"compute", "comm"} if show_comm else {"compute"}
    events = [e for e in trace.events if e.stream in streams and e.end_s > e.start_s]
    rows = _rows(trace, show_comm)
    _style_axes(ax, trace, plan, scale, span, show_comm)
    _draw_boxes(ax, events, rows, _hue_keys(trace, plan), scale, thin_edges=len(events) > 2000)
    if labels or (labels is None and len(events) <= _MAX_LABELS):
        _draw_labels(ax, events, rows, scale, span)
    _legend(ax, {e.kind for e in events}, by_sequence=plan is not None)
    if title:
        ax.set_title(title, loc="left", fontsize=11, pad=22)
    return ax


def _row_height_in(num_devices: int) -> float:
    return 0.5 if num_devices <= 8 else 0.3 if num_devices <= 16 else 0.16


def _byte_unit(peak_bytes: float) -> tuple[float, str]:
    for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if peak_bytes >= size:
            return float(size), name
    return 1.0, "bytes"


def _device_colors(n: int):
    from matplotlib import colormaps

    if n <= 10:
        return _palette(10)[:n]
    return [colormaps["viridis"](d / max(1, n - 1)) for d in range(n)]


def plot_memory(trace: "Trace", *, ax: "Axes | None" = None, limit_bytes: int | None = None,
                title: str = "", time_unit: str = "auto", xlim_s: float | None = None) -> "Axes":
    """Memory over time, one step line per device, with the static level and the device limit.

    The limit is drawn (dashed red) when given and at most 3x the peak, else noted in the corner.
    Bytes are shown in GiB, MiB, KiB or bytes depending on the peak. Returns the Axes.
    """
    n = max(1, trace.num_devices)
    if ax is None:
        ax = _new_figure(12, 3.2).add_subplot()
    span_s = xlim_s or trace.makespan_s or 1.0
    scale = _time_scale(time_unit, span_s)
    peak = max(trace.peak_memory_bytes(), default=0) or 1
    size, unit = _byte_unit(peak)
    times: list[list[float]] = [[0.0] for _ in range(n)]
    levels: list[list[float]] = [[b] for b in trace.static_bytes]
    for time_s, device, level in trace.memory:
        times[device].append(time_s)
        levels[device].append(level)
    colors = _device_colors(n)
    for d in range(n):
        xs = [t * scale.factor for t in times[d] + [span_s]]
        ys = [b / size for b in levels[d] + levels[d][-1:]]
        ax.step(xs, ys, where="post", color=colors[d], lw=1.3 if n <= 16 else 0.8,
                label=f"dev {d}" if n <= 10 else None)
    for i, static in enumerate(sorted(set(trace.static_bytes))):
        ax.axhline(static / size, color="0.45", ls=":", lw=1, label="static" if i == 0 else None)
    _draw_limit(ax, limit_bytes, peak, size, unit)
    _finish_memory_axes(ax, n, colors, scale, span_s, unit)
    if title:
        ax.set_title(title, loc="left", fontsize=11)
    return ax


def _draw_limit(ax: "Axes", limit_bytes: int | None, peak: int, size: float, unit: str) -> None:
    if limit_bytes is None:
        return
    if limit_bytes <= 3 * peak:
        ax.axhline(limit_bytes / size, color="#d62728", ls="--", lw=1.4,
                   label=f"limit {limit_bytes / size:.3g} {unit}")
    elif limit_bytes < 2**60:  # the unit preset's "no limit" sentinel is not worth a note
        ax.text(0.995, 0.97, f"limit {limit_bytes / size:.3g} {unit} (off scale)", ha="right",
                va="top", transform=ax.transAxes, fontsize=8, color="#d62728")


def _finish_memory_axes(ax: "Axes", n: int, colors, scale: _TimeScale, span_s: float,
                        unit: str) -> None:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    ax.set_xlim(0, span_s * scale.factor * 1.005)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(scale.label)
    ax.set_ylabel(f"memory ({unit})")
    ax.grid(color="0.9", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if n > 10:
        mappable = ScalarMappable(Normalize(0, n - 1), colormaps["viridis"])
        ax.get_figure().colorbar(mappable, ax=ax, label="device", pad=0.01, fraction=0.03)


def _unpack(sim_or_trace: Any) -> tuple["Trace", "Plan | None", Any]:
    """(first trace, its plan, the Result) from a Simulation, or (trace, None, None) from a Trace."""
    if hasattr(sim_or_trace, "traces"):
        plans = sim_or_trace.plans
        return sim_or_trace.traces[0], plans[0] if plans else None, sim_or_trace.result
    return sim_or_trace, None, None


def _default_title(result: Any) -> str:
    if result is None or not result.batches:
        return ""
    batch = result.batches[0]
    return (f"{result.scenario}  ·  {result.strategy}  ·  iteration {batch.iteration_time_s:.4g} s"
            f"  ·  bubble ratio {batch.bubble_ratio:.2%}")


def plot_simulation(sim_or_trace: Any, path: str | Path, *, plan: "Plan | None" = None, title: str = "",
                    limit_bytes: int | None = None, time_unit: str = "auto",
                    show_comm: bool = False) -> Path:
    """One PNG: the Gantt chart of the first simulated batch above its memory timeline.

    Takes a ``Simulation`` (its first trace and plan, the Result's limit and a default title with the
    bubble ratio) or a ``Trace``. Sized for 1..64 devices. Returns the written path.
    """
    trace, sim_plan, result = _unpack(sim_or_trace)
    plan = plan or sim_plan
    if limit_bytes is None and result is not None:
        limit_bytes = result.memory_limit_bytes
    n = max(1, trace.num_devices)
    gantt_in = 1.2 + n * _row_height_in(n) * (1.4 if show_comm else 1.0)
    fig = _new_figure(12, gantt_in + 3.0)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[gantt_in, 2.6])
    plot_gantt(trace, plan, ax=top, title=title or _default_title(result), time_unit=time_unit,
               show_comm=show_comm)
    top.tick_params(axis="x", labelbottom=True)
    plot_memory(trace, ax=bottom, limit_bytes=limit_bytes, time_unit=time_unit)
    return _save(fig, path)


def plot_compare(predicted: Any, measured: Any, path: str | Path, *, plan: "Plan | None" = None,
                 title: str = "", time_unit: str = "auto") -> Path:
    """Predicted (top) and measured (bottom) Gantt charts on one shared time axis. Returns the path.

    Either argument may be a Trace or a Simulation; the makespans and their difference are in the
    panel titles.
    """
    (pred, pred_plan, _), (meas, _, _) = _unpack(predicted), _unpack(measured)
    plan = plan or pred_plan
    span_s = max(pred.makespan_s, meas.makespan_s) or 1.0
    n = max(1, pred.num_devices, meas.num_devices)
    panel_in = 1.2 + n * _row_height_in(n)
    fig = _new_figure(12, 2 * panel_in + 0.8)
    top, bottom = fig.subplots(2, 1, sharex=True)
    scale = _time_scale(time_unit, span_s)
    unit = scale.label.removeprefix("time (").removesuffix(")")
    diff = (meas.makespan_s - pred.makespan_s) / pred.makespan_s if pred.makespan_s else 0.0
    plot_gantt(pred, plan, ax=top, time_unit=time_unit, xlim_s=span_s,
               title=f"predicted: makespan {pred.makespan_s * scale.factor:.4g} {unit}")
    plot_gantt(meas, plan, ax=bottom, time_unit=time_unit, xlim_s=span_s,
               title=f"measured: makespan {meas.makespan_s * scale.factor:.4g} {unit} "
                     f"({diff:+.1%} vs predicted)")
    top.tick_params(axis="x", labelbottom=True)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=12)
    return _save(fig, path)


def plot_heatmap(frame: "pd.DataFrame", *, x: str, y: str, value: str, feasible: str,
                 path: str | Path, title: str = "", minimize: bool = True) -> Path:
    """Heatmap of column ``value`` over the (x, y) grid, e.g. iteration_time_s over chunk_size x k.

    Duplicate (x, y) rows are averaged; a cell is feasible only if all its rows are. Infeasible
    cells are hatched grey and labelled OOM, the best feasible cell (min, or max when not
    ``minimize``) is outlined. Returns the written path; raises KeyError on a missing column.
    """
    import numpy as np

    grid = frame.pivot_table(index=y, columns=x, values=value, aggfunc="mean").sort_index()
    grid = grid.reindex(sorted(grid.columns), axis=1)
    ok = frame.groupby([y, x])[feasible].all().unstack().reindex_like(grid).fillna(False).astype(bool)
    values = grid.to_numpy(dtype=float)
    shown = np.where(ok.to_numpy(), values, np.nan)
    fig = _new_figure(max(5.0, 1.0 + 0.9 * values.shape[1]), max(3.2, 1.3 + 0.6 * values.shape[0]))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="viridis_r", origin="lower", aspect="auto")
    fig.colorbar(image, ax=ax, label=value, fraction=0.05, pad=0.02)
    best = _best_cell(shown, minimize)
    _annotate_cells(ax, values, ok.to_numpy(), image, best)
    ax.set_xticks(range(values.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(values.shape[0]), [str(i) for i in grid.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    subtitle = "" if best is None else (f"best: {x}={grid.columns[best[1]]}, {y}={grid.index[best[0]]}"
                                        f" ({values[best]:.4g})")
    ax.set_title("\n".join(t for t in (title, subtitle) if t), loc="left", fontsize=10)
    return _save(fig, path)


def _best_cell(shown, minimize: bool) -> tuple[int, int] | None:
    import numpy as np

    if np.isnan(shown).all():
        return None
    flat = np.nanargmin(shown) if minimize else np.nanargmax(shown)
    return tuple(int(i) for i in np.unravel_index(flat, shown.shape))


def _annotate_cells(ax: "Axes", values, ok, image, best: tuple[int, int] | None) -> None:
    """Values in feasible cells, hatched grey OOM cells, and an outline around ``best``."""
    import numpy as np
    from matplotlib.patches import Rectangle

    for (row, col), v in np.ndenumerate(values):
        if not ok[row, col]:
            ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, facecolor="0.85", edgecolor="0.55",
                                   hatch="xx", lw=0))
            ax.text(col, row, "OOM", ha="center", va="center", fontsize=9, color="0.15",
                    fontweight="bold", bbox=dict(boxstyle="round,pad=0.15", fc="0.85", lw=0))
        elif np.isnan(v):
            ax.text(col, row, "–", ha="center", va="center", color="0.5")
        else:
            dark = _is_dark(image.cmap(image.norm(v)))
            ax.text(col, row, f"{v:.3g}", ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    if best is not None:
        ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, edgecolor="#d62728",
                               lw=3, zorder=4))
