"""Sweep figures: the heatmap of a metric over two grid keys (ChunkSize x K, BucketSize x batch),
and the line chart over one key (BucketSize), with the points that do not fit marked.

Built like ltsim/viz.py's figures (Agg canvas, no pyplot state); matplotlib is imported inside the
functions only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ltsim.errors import ConfigError, check_argument
from ltsim.files import literal
from ltsim.viz import _is_dark, _new_figure, _save, short

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


def plot_heatmap(frame: "pd.DataFrame", *, x: str, y: str, value: str, feasible: str,
                 path: str | Path, title: str = "", minimize: bool = True,
                 others: tuple[str, ...] = (), label: str = "") -> Path:
    """Heatmap of column ``value`` over the (x, y) grid, e.g. iteration_time_s over chunk_size x k.

    Rows of one (x, y) cell that differ in the ``others`` keys (a sweep over more keys) are not
    averaged: the cell shows its best row that fits (column ``feasible``), or is infeasible when
    none does, and the caption says so. Infeasible cells are hatched grey and labelled OOM, grid
    points without rows show a dash, and the best feasible cell (min, or max when not
    ``minimize``) is outlined in red, named with its other keys' values.
    Returns the written path; raises ConfigError naming a missing column.
    """
    import numpy as np
    from matplotlib.patches import Rectangle

    others = _checked(frame, title, others, {"x": x, "y": y, "value": value, "feasible": feasible})
    if x == y:
        raise ConfigError("y", f"another column than x ({x!r})", y, "pick two swept keys")
    frame = _best_rows(_comparable(frame, (x, y)), (x, y), value, feasible, minimize)
    grid = frame.pivot_table(index=y, columns=x, values=value, aggfunc="first", dropna=False)
    grid = grid.sort_index().reindex(sorted(grid.columns), axis=1)
    ok = frame.groupby([y, x])[feasible].all().unstack().reindex_like(grid)
    values = grid.to_numpy(dtype=float)
    infeasible = ok.eq(False).to_numpy()  # NaN (no rows) is neither feasible nor OOM
    shown = np.where(infeasible, np.nan, values)
    fig = _new_figure(max(5.0, 1.0 + 0.9 * values.shape[1]), max(3.2, 1.3 + 0.6 * values.shape[0]))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="viridis_r", origin="lower", aspect="auto")
    fig.colorbar(image, ax=ax, label=label or value, fraction=0.05, pad=0.02)
    best = None
    if not np.isnan(shown).all():
        best = np.unravel_index(np.nanargmin(shown) if minimize else np.nanargmax(shown), shown.shape)
        ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, ec="#d62728", lw=3))
    _annotate_cells(ax, values, infeasible, image)
    ax.set_xticks(range(values.shape[1]), [literal(str(c)) for c in grid.columns])
    ax.set_yticks(range(values.shape[0]), [literal(str(i)) for i in grid.index])
    ax.set(xlabel=x, ylabel=y)
    subtitle = ""
    if best is not None:
        at = {x: grid.columns[best[1]], y: grid.index[best[0]]}
        row = frame[(frame[x] == at[x]) & (frame[y] == at[y])].iloc[0]
        subtitle = "best: " + ", ".join(f"{k}={row[k]}" for k in (x, y, *others)) + (
            f" ({values[best]:.4g})")
    _title(ax, fig, (short(title, 80), subtitle, _over(others)))
    return _save(fig, path)


def _title(ax: "Axes", fig, lines) -> None:
    """The figure's title lines, each wrapped to the figure's width (about 10 characters an inch
    at this size: a sweep over more keys names each in its best point)."""
    import textwrap

    width = max(30, int(fig.get_figwidth() * 10))
    text = "\n".join(textwrap.fill(t, width, break_on_hyphens=False) for t in lines if t)
    ax.set_title(literal(text), loc="left", fontsize=10)


def _best_rows(frame: "pd.DataFrame", keys: tuple[str, ...], value: str, feasible: str,
               minimize: bool) -> "pd.DataFrame":
    """One row per combination of ``keys``: its best row that fits (least ``value``, or most
    when not ``minimize``), else its best row."""
    ranked = frame.sort_values(value, ascending=minimize, kind="stable")
    ranked = ranked.sort_values(feasible, ascending=False, kind="stable")  # fitting rows first
    return ranked.drop_duplicates(list(keys), keep="first")


def _over(others: tuple[str, ...]) -> str:
    """The caption of a figure whose points are each the best over ``others``."""
    return f"each point: the best over {', '.join(others)}" if others else ""


def _checked(frame: Any, title: Any, others: Any, columns: dict[str, Any]) -> tuple[str, ...]:
    """A plot's arguments of the wrong type, named (they were pandas' or matplotlib's errors):
    the frame, the title, ``columns`` (argument name -> column) that the frame must hold, the
    "value" column of numbers; ``others`` as a tuple (one key as text is that key, not its
    characters)."""
    import pandas as pd

    check_argument("frame", frame, pd.DataFrame, "a DataFrame of a sweep's rows",
                   "pass pandas.DataFrame(run_sweep(...))")
    check_argument("title", title, str, "text")
    others = (others,) if isinstance(others, str) else others
    check_argument("others", others, (tuple, list), "a tuple of column names")
    for name, column in (*columns.items(), *(("others", c) for c in others)):
        if column not in frame.columns:  # (a KeyError from pandas)
            raise ConfigError(name, "a column of the frame", column,
                              f"pick one of {', '.join(map(str, frame.columns))}")
    if not pd.api.types.is_numeric_dtype(frame[columns["value"]]):
        raise ConfigError("value", "a column of numbers", columns["value"],
                          "plot a metric such as iteration_time_s")
    return tuple(others)


def _comparable(frame: "pd.DataFrame", keys: tuple[str, ...]) -> "pd.DataFrame":
    """``frame`` with each key column of mixed kinds (Skrull's bucket_size: "auto" and numbers)
    as text, so that its values sort (numbers and text do not compare)."""
    mixed = {k: frame[k].map(str) for k in keys if not _one_kind(frame[k])}
    return frame.assign(**mixed) if mixed else frame


def _one_kind(values) -> bool:
    numbers = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in values]
    return all(numbers) or not any(numbers) and all(isinstance(v, str) for v in values)


def _annotate_cells(ax: "Axes", values, infeasible, image) -> None:
    """The value in every feasible cell; infeasible cells hatched grey with an OOM label."""
    import numpy as np
    from matplotlib.patches import Rectangle

    for (row, col), v in np.ndenumerate(values):
        if infeasible[row, col]:
            ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fc="0.85", ec="0.55", hatch="xx", lw=0))
            ax.text(col, row, "OOM", ha="center", va="center", fontsize=9, color="0.15",
                    fontweight="bold", bbox=dict(boxstyle="round,pad=0.15", fc="0.85", lw=0))
        elif np.isnan(v):
            ax.text(col, row, "–", ha="center", va="center", color="0.5")
        else:
            ax.text(col, row, f"{v:.3g}", ha="center", va="center", fontsize=9,
                    color="white" if _is_dark(image.cmap(image.norm(v))) else "black")


def plot_line(frame: "pd.DataFrame", *, x: str, value: str, feasible: str, path: str | Path,
              title: str = "", minimize: bool = True, others: tuple[str, ...] = (),
              label: str = "") -> Path:
    """Column ``value`` against one swept key ``x`` (per x its best row that fits, else its best
    row, over the ``others`` keys). Points that fit are joined by a line, points that do not are
    red crosses labelled OOM, and the best that fits is ringed, named with its other keys'
    values; ``label`` names the value axis (default: ``value``). Integer keys get a tick at each
    value swept. Returns the written path; raises ConfigError naming a missing column."""
    others = _checked(frame, title, others, {"x": x, "value": value, "feasible": feasible})
    frame = _best_rows(_comparable(frame, (x,)), (x,), value, feasible, minimize)
    grouped = frame.set_index(x)[[value, feasible]].rename(
        columns={value: "value", feasible: "ok"}).sort_index()
    grouped["ok"] = grouped["ok"].astype(bool)
    fig = _new_figure(7.0, 3.6)
    ax = fig.add_subplot()
    fits, oom = grouped[grouped["ok"]], grouped[~grouped["ok"]]

    def at(values):  # text values (the categories of a string key) as the axis shows them
        return [literal(v) if isinstance(v, str) else v for v in values]

    ax.plot(at(fits.index), fits["value"], marker="o", color="#1f77b4", lw=1.6, label="fits")
    if len(oom):
        ax.plot(at(oom.index), oom["value"], ls="none", marker="x", ms=9, mew=2, color="#d62728",
                label="does not fit (OOM)")
    subtitle = ""
    if len(fits):
        best = fits["value"].idxmin() if minimize else fits["value"].idxmax()
        ax.plot(at([best]), [fits.loc[best, "value"]], marker="o", ms=14, mfc="none",
                mec="#d62728", mew=2, ls="none")
        row = frame[frame[x] == best].iloc[0]
        subtitle = ("best that fits: " + ", ".join(f"{k}={row[k]}" for k in (x, *others))
                    + f" ({fits.loc[best, 'value']:.4g})")
    ax.set(xlabel=x, ylabel=label or value)
    swept = list(grouped.index)
    if swept and all(isinstance(v, int) and not isinstance(v, bool) for v in swept):
        from matplotlib.ticker import MaxNLocator

        if len(swept) <= 12:
            ax.set_xticks(swept)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(color="0.9", lw=0.6)
    ax.legend(frameon=False, fontsize=8)
    _title(ax, fig, (short(title, 80), subtitle, _over(others)))
    return _save(fig, path)
