"""The figure of ``ltsim maxlen``: peak memory per GPU by term against sequence length, one panel
per strategy, with the device limit and the longest length that fits. Built like viz.py's figures
(Agg canvas, no pyplot state); matplotlib is imported inside the function only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ltsim.errors import ConfigError, check_argument
from ltsim.files import literal
from ltsim.viz import _new_figure, _plain_frame, _save, short

if TYPE_CHECKING:
    from ltsim.maxlen import MaxLength

_LABELS = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
           "activations": "activations", "kv_state": "K/V state (+ grads)", "logits": "logits / loss",
           "working": "working sets"}


def plot_maxlen(answers: list["MaxLength"], path: str | Path, *, title: str = "") -> Path:
    """Stacked peak-memory terms (GiB) over the simulated lengths (log axis) of each strategy.
    Lengths whose plan could not be made (no terms) are left out. Returns the written path."""
    import numpy as np
    from matplotlib import colormaps

    from ltsim.maxlen import DEVICE_TERMS, MaxLength
    from ltsim.units import NO_LIMIT_BYTES

    check_argument("answers", answers, (list, tuple), "a list of find_max_length's answers",
                   "e.g. plot_maxlen([find_max_length(scenario)], path)")
    if not answers:  # (matplotlib's "Number of columns must be a positive integer")
        raise ConfigError("answers", "at least one answer", "none", "search a strategy first")
    for answer in answers:
        check_argument("answers", answer, MaxLength, "find_max_length's answers")
    check_argument("title", title, str, "text")
    unit = "tokens" if answers and answers[0].unit_costs else "GiB"  # (the unit preset's memory)
    scale = 1 if unit == "tokens" else 2**30
    colors = colormaps["tab10"].colors
    fig = _new_figure(4.4 * len(answers) + 0.6, 4.4)
    axes = fig.subplots(1, len(answers), squeeze=False, sharey=True)[0]
    for ax, answer in zip(axes, answers):
        points = [p for p in answer.points if p.terms]
        lengths = np.array([p.length for p in points], dtype=float)
        stack = np.array([[p.terms.get(t, 0) / scale for p in points] for t in DEVICE_TERMS])
        used = [i for i, row in enumerate(stack) if row.any()]
        if len(points):
            ax.stackplot(lengths, stack[used], labels=[_LABELS[DEVICE_TERMS[i]] for i in used],
                         colors=[colors[i] for i in used], alpha=0.85)
        if answer.memory_limit_bytes < NO_LIMIT_BYTES:  # (none: no line at the sentinel)
            ax.axhline(answer.memory_limit_bytes / scale, color="black", linestyle="--",
                       linewidth=1, label="device limit (less allocator allowance)")
        if answer.max_length:
            ax.axvline(answer.max_length, color="black", linewidth=1.5,
                       label=f"longest that fits: {answer.max_length:,}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workload cut at (tokens)" if answer.mode == "workload"
                      else "sequence length (tokens)")
        binds = answer.binds  # ("none ..." when nothing failed)
        why = f"{binds} binds" if answer.failing is not None else "nothing binds" + binds[4:]
        ends = "; solid line" if answer.max_length else ""
        ax.set_title(f"{answer.strategy}: max {answer.max_length:,} tokens\n({why}{ends})",
                     fontsize=9)
        _plain_frame(ax)
        ax.grid(True, color="0.9")
    handles: dict = {}  # one legend for all panels, below them, so it hides no data
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("longest"):
                handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", fontsize=8,
               ncol=min(2 * len(answers), 4, len(handles)), frameon=False)  # fits one panel
    axes[0].set_ylabel(f"peak memory per GPU ({unit})")
    if title:
        fig.suptitle(literal(short(title, 100)), fontsize=10)
    return _save(fig, path)
