"""Sweep figures: the heatmap of a metric over two grid keys (ChunkSize x K, BucketSize x batch),
and the line chart over one key (BucketSize), with the points that do not fit marked.

Built like ltsim/viz.py's figures (Agg canvas, no pyplot state); matplotlib is imported inside the
functions only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ltsim.files import literal
from ltsim.viz import _is_dark, _new_figure, _save, short

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


def plot_heatmap(frame: "pd.DataFrame", *, x: str, y: str, value: str, feasible: str,
                 path: str | Path, title: str = "", minimize: bool = True) -> Path:
    """Heatmap of column ``value`` over the (x, y) grid, e.g. iteration_time_s over chunk_size x k.

    Duplicate (x, y) rows are averaged; a cell is feasible only if all its rows are (column
    ``feasible``). Infeasible cells are hatched grey and labelled OOM, grid points without rows show
    a dash, and the best feasible cell (min, or max when not ``minimize``) is outlined in red.
    Returns the written path; raises KeyError on a missing column.
    """
    import numpy as np
    from matplotlib.patches import Rectangle

    frame = _comparable(frame, (x, y))
    grid = frame.pivot_table(index=y, columns=x, values=value, aggfunc="mean", dropna=False)
    grid = grid.sort_index().reindex(sorted(grid.columns), axis=1)
    ok = frame.groupby([y, x])[feasible].all().unstack().reindex_like(grid)
    values = grid.to_numpy(dtype=float)
    infeasible = ok.eq(False).to_numpy()  # NaN (no rows) is neither feasible nor OOM
    shown = np.where(infeasible, np.nan, values)
    fig = _new_figure(max(5.0, 1.0 + 0.9 * values.shape[1]), max(3.2, 1.3 + 0.6 * values.shape[0]))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(shown), cmap="viridis_r", origin="lower", aspect="auto")
    fig.colorbar(image, ax=ax, label=value, fraction=0.05, pad=0.02)
    best = None
    if not np.isnan(shown).all():
        best = np.unravel_index(np.nanargmin(shown) if minimize else np.nanargmax(shown), shown.shape)
        ax.add_patch(Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, ec="#d62728", lw=3))
    _annotate_cells(ax, values, infeasible, image)
    ax.set_xticks(range(values.shape[1]), [literal(str(c)) for c in grid.columns])
    ax.set_yticks(range(values.shape[0]), [literal(str(i)) for i in grid.index])
    ax.set(xlabel=x, ylabel=y)
    subtitle = "" if best is None else (f"best: {x}={grid.columns[best[1]]}, {y}={grid.index[best[0]]}"
                                        f" ({values[best]:.4g})")
    ax.set_title(literal("\n".join(t for t in (short(title, 80), subtitle) if t)), loc="left",
                 fontsize=10)
    return _save(fig, path)


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
              title: str = "", minimize: bool = True) -> Path:
    """Column ``value`` against one swept key ``x`` (rows averaged per x). Points that fit are
    joined by a line, points that do not are red crosses labelled OOM, and the best that fits is
    ringed. Returns the written path; raises KeyError on a missing column."""
    frame = _comparable(frame, (x,))
    grouped = frame.groupby(x).agg(value=(value, "mean"), ok=(feasible, "all")).sort_index()
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
        subtitle = f"best that fits: {x}={best} ({fits.loc[best, 'value']:.4g})"
    ax.set(xlabel=x, ylabel=value)
    ax.grid(color="0.9", lw=0.6)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(literal("\n".join(t for t in (short(title, 80), subtitle) if t)), loc="left",
                 fontsize=10)
    return _save(fig, path)
