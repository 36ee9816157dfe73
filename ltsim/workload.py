"""Workloads: sequence-length distributions (built-in and user files) and seeded global-batch sampling.

A ``Workload`` names where lengths come from (a dataset, one explicit batch, or a fixed length) and how many
global batches to draw. Datasets live in ``ltsim.datasets``: the packaged real lengths (``wikipedia``,
``azure-conv``) are drawn uniformly with replacement; the seed papers' CDF tables and the ``docs-long``
histogram pick a bin by its mass and a length log-uniformly inside it (the rule is spelled out in
``ltsim.datasets``). Sequences longer than ``max_length`` are dropped before sampling, as the papers do.

``batching`` says how a dataset's sequences are grouped into global batches: ``iid`` draws every sequence
independently; ``sorted-groups`` is LongAlign's sorted batching (sort a large pool by length, cut consecutive
groups of global-batch size, take groups in random order), so each batch holds sequences of similar length.

``describe`` gives the papers' table (share of sequences under 1K/4K/8K/32K/128K tokens, the longest, and a
summary) for any dataset; ``plot_histogram`` draws a log-x histogram (matplotlib, imported lazily).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ltsim.datasets import KIB_TOKENS, LengthArray, LengthBins, dataset_names, load_dataset
from ltsim.errors import ConfigError
from ltsim.length_files import MAX_SEQUENCE_TOKENS
from ltsim.files import figure_path, save_figure

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Workload", "dataset_names", "describe", "format_describe", "plot_histogram"]

THRESHOLDS_KIB = (1, 4, 8, 32, 128)  # the rows of ChunkFlow Table 1 / Skrull Table 1
BATCHINGS = ("iid", "sorted-groups")
OVERLONG = ("drop", "truncate")
# sorted-groups draws a pool of POOL_BATCHES global batches, a stand-in for "the whole dataset" that
# LongAlign sorts: large enough that each cut group is length-homogeneous, small enough to sample fast.
POOL_BATCHES = 32
# Size guards: inputs past these are unit slips (bytes for tokens, an extra 000), not workloads; they
# are refused at once instead of planning for hours. 2^31 tokens per sequence is hundreds of times the
# longest contexts trained today (a few million tokens); 10^9 tokens per global batch is 60x the 16M
# of Llama 3 405B's final batch; 16,384 sequences per global batch is 4x the largest bundled one
# (a plan holds ops per sequence: strategies/schedule.py MAX_CHUNKS gives the same bound on chunks);
# 2^18 sampled sequences is 1,024 batches of 256, minutes to simulate.
MAX_BATCH_TOKENS = 10**9
MAX_BATCH_SEQUENCES = 16_384
MAX_SAMPLED_SEQUENCES = 2**18


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Where global batches come from. Exactly one of ``dataset``, ``lengths``, ``fixed_length``.

    ``lengths`` is one explicit global batch (in tokens), used for every simulated batch.
    """

    dataset: str = ""
    """A built-in name (case-insensitive, see ``dataset_names()``) or a path to a .txt/.csv/.parquet/.jsonl
    length file (one integer per line, or a ``num_tokens`` / ``length`` column or field)."""
    lengths: tuple[int, ...] = ()
    fixed_length: int = 0
    max_length: int = 0  # 0: no limit; longer sequences are dropped, as most papers do
    overlong: str = "drop"
    """What a dataset's sequences above ``max_length`` become: ``"drop"`` (left out before sampling) or
    ``"truncate"`` (cut to ``max_length`` tokens, as InfiniPipe's evaluation does)."""
    global_batch_size: int = 0  # 0: len(lengths)
    num_batches: int = 1
    batching: str = "iid"
    """How a dataset's sequences form global batches: ``"iid"`` (independent draws) or ``"sorted-groups"``
    (LongAlign's sorted batching: sort a pool of ``POOL_BATCHES`` global batches by length, cut consecutive
    groups of ``global_batch_size``, take ``num_batches`` groups in random order, each kept in ascending
    order). With ``lengths`` or ``fixed_length``, ``"sorted-groups"`` sorts each batch ascending."""

    def validate(self) -> "Workload":
        """Check the fields and that the dataset resolves (reads a user file once). Raises ConfigError."""
        given = [k for k in ("dataset", "lengths", "fixed_length") if getattr(self, k)]
        if len(given) != 1:
            raise ConfigError("workload", "given exactly one of dataset, lengths, fixed_length",
                              given or "none", "set one of them in [workload]")
        if not isinstance(self.batching, str) or self.batching not in BATCHINGS:
            raise ConfigError("workload.batching", f"one of {', '.join(BATCHINGS)}", self.batching,
                              'set workload.batching = "iid" (independent draws) or "sorted-groups"')
        if not isinstance(self.overlong, str) or self.overlong not in OVERLONG:
            raise ConfigError("workload.overlong", f"one of {', '.join(OVERLONG)}", self.overlong,
                              'set workload.overlong = "drop" or "truncate"')
        if self.lengths and any(not _is_int(n) or n < 1 for n in self.lengths):
            raise ConfigError("workload.lengths", "a list of positive integers", list(self.lengths))
        for key in ("fixed_length", "max_length"):
            if not _is_int(getattr(self, key)) or getattr(self, key) < 0:
                raise ConfigError(f"workload.{key}", "a non-negative integer (0: unset)", getattr(self, key))
        if not _is_int(self.num_batches) or self.num_batches < 1:
            raise ConfigError("workload.num_batches", "a positive integer", self.num_batches)
        if not self.lengths and (not _is_int(self.global_batch_size) or self.global_batch_size < 1):
            raise ConfigError("workload.global_batch_size", "a positive integer",
                              self.global_batch_size)
        if self.lengths and self.global_batch_size not in (0, len(self.lengths)):
            raise ConfigError("workload.global_batch_size", f"left out, or {len(self.lengths)} (the "
                              "number of workload.lengths, which are the batch)",
                              self.global_batch_size, "remove global_batch_size, or list that many "
                              "lengths")
        self._check_size()
        longest = max(self.lengths or (self.fixed_length,))
        if self.max_length and not self.dataset and longest > self.max_length:
            key = "workload.lengths" if self.lengths else "workload.fixed_length"
            raise ConfigError(key, f"at most max_length = {self.max_length} tokens", longest,
                              "raise workload.max_length or shorten the sequences")
        if self.dataset:
            self.source()
        return self

    def _check_size(self) -> None:
        """The size guards (MAX_SEQUENCE_TOKENS, MAX_BATCH_TOKENS, MAX_BATCH_SEQUENCES,
        MAX_SAMPLED_SEQUENCES)."""
        fix = "lengths are in tokens; check for a unit slip or an extra digit"
        for key, value in (("lengths", max(self.lengths, default=0)),
                           ("fixed_length", self.fixed_length), ("max_length", self.max_length)):
            if value > MAX_SEQUENCE_TOKENS:
                raise ConfigError(f"workload.{key}", f"at most {MAX_SEQUENCE_TOKENS:,} tokens per "
                                  "sequence (2^31, past any trained context)", value, fix)
        tokens = sum(self.lengths) or self.fixed_length * self.global_batch_size
        if tokens > MAX_BATCH_TOKENS:
            key = "workload.lengths" if self.lengths else "workload.global_batch_size"
            raise ConfigError(key, f"a global batch of at most {MAX_BATCH_TOKENS:,} tokens", tokens,
                              "use fewer or shorter sequences per global batch")
        if self.batch_size > MAX_BATCH_SEQUENCES:
            key = "workload.lengths" if self.lengths else "workload.global_batch_size"
            raise ConfigError(key, f"a global batch of at most {MAX_BATCH_SEQUENCES:,} sequences",
                              self.batch_size, "global batches are sequences, not tokens")
        if self.num_batches * self.batch_size > MAX_SAMPLED_SEQUENCES:
            raise ConfigError("workload.num_batches", f"such that num_batches x global_batch_size is at "
                              f"most {MAX_SAMPLED_SEQUENCES:,} sequences", self.num_batches,
                              "simulate fewer batches; a few are enough for stable means",
                              context=f"global_batch_size = {self.batch_size}")

    @property
    def batch_size(self) -> int:
        return self.global_batch_size or len(self.lengths)

    def with_batching(self, batching: str) -> "Workload":
        """A copy with ``batching`` replaced (checked by ``validate``, as every field is)."""
        return replace(self, batching=batching)

    def source(self) -> LengthBins | LengthArray:
        """The dataset's length source, sequences above ``max_length`` dropped (``overlong =
        "drop"``; with "truncate" the whole source: ``_draw`` cuts what it draws, so a cap below
        every length is allowed). Raises ConfigError."""
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise ConfigError("workload.dataset", "a dataset name or a length-file path", self.dataset)
        if self.overlong == "truncate":
            return load_dataset(self.dataset)
        return _truncated(load_dataset(self.dataset), self.max_length, "workload.max_length")

    def sample(self, seed: int) -> tuple[tuple[int, ...], ...]:
        """``num_batches`` global batches, each a tuple of ``batch_size`` sequence lengths in tokens.

        Deterministic: the same seed gives the same batches (``numpy.random.default_rng(seed)``).
        With ``batching = "sorted-groups"`` each batch is in ascending length order (see ``batching``).
        Raises ConfigError for an invalid workload.
        """
        self.validate()
        sort = self.batching == "sorted-groups"
        if self.lengths or self.fixed_length:
            batch = tuple(self.lengths) or (self.fixed_length,) * self.global_batch_size
            return (tuple(sorted(batch)) if sort else batch,) * self.num_batches
        rng = np.random.default_rng(seed)
        if sort:
            rows = self._sorted_groups(rng)
        else:
            draws = self._draw(rng, self.num_batches * self.global_batch_size)
            rows = draws.reshape(self.num_batches, self.global_batch_size)
        biggest = int(rows.sum(axis=1).max())
        if biggest > MAX_BATCH_TOKENS:
            raise ConfigError("workload.global_batch_size", f"small enough that a sampled global batch "
                              f"holds at most {MAX_BATCH_TOKENS:,} tokens", self.global_batch_size,
                              "use fewer sequences per global batch, or a lower max_length",
                              context=f"seed {seed} drew a batch of {biggest:,} tokens")
        return tuple(tuple(row) for row in rows.tolist())

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths from the dataset, the overlong ones dropped or cut to ``max_length``."""
        draws = self.source().draw(rng, n)
        return (np.minimum(draws, self.max_length) if self.overlong == "truncate"
                and self.max_length else draws)

    def _sorted_groups(self, rng: np.random.Generator) -> np.ndarray:
        """LongAlign's sort_and_group: sort a pool by length, cut consecutive groups, pick groups at random.

        The pool holds ``max(POOL_BATCHES, num_batches)`` global batches, so no group is used twice.
        Returns a ``(num_batches, global_batch_size)`` array whose rows are ascending.
        """
        num_groups = max(POOL_BATCHES, self.num_batches)
        pool = self._draw(rng, num_groups * self.global_batch_size)
        groups = np.sort(pool, kind="stable").reshape(num_groups, self.global_batch_size)
        return groups[rng.choice(num_groups, size=self.num_batches, replace=False)]


def _truncated(source: LengthBins | LengthArray, max_length: int, key: str) -> LengthBins | LengthArray:
    kept = source.truncate(max_length)
    if isinstance(kept, LengthArray) and kept.num_tokens.size == 0:
        shortest = int(source.num_tokens.min())
        raise ConfigError(key, f"at least the shortest length in {source.name} ({shortest} tokens)",
                          max_length, f"raise {key}; every sequence would be dropped")
    return kept


def _lengths_for_stats(source: LengthBins | LengthArray, num_samples: int,
                       seed: int) -> tuple[np.ndarray, str]:
    """The raw lengths of an array-backed source (exact), or ``num_samples`` draws from a table."""
    if isinstance(source, LengthArray):
        return source.num_tokens, "exact, from the raw lengths"
    if not _is_int(num_samples) or num_samples < 1:
        raise ConfigError("num_samples", "a positive integer", num_samples)
    draws = source.draw(np.random.default_rng(seed), num_samples)
    return draws, f"from {num_samples:,} samples (seed {seed}), log-uniform inside the table's bins"


def describe(dataset: str, *, max_length: int = 0, num_samples: int = 1_000_000,
             seed: int = 0, key: str = "max_length") -> "pd.DataFrame":
    """The papers' length table for a dataset (name or file), after dropping sequences above max_length.

    Rows ``< 1K`` .. ``< 128K`` (percent of sequences shorter than 1024 .. 131072 tokens), ``Longest``,
    ``count``, ``mean``, ``median``, ``p99`` (tokens). Columns ``value``, ``unit`` and ``published`` (the
    paper's number where the dataset is a paper table and max_length cuts nothing, else NaN). Array-backed
    datasets are described exactly from their raw lengths; tables from ``num_samples`` seeded draws.
    ``frame.attrs`` holds ``dataset``, ``source``, ``basis`` and ``max_length``. Raises ConfigError
    (naming ``key`` for a bad max_length: the command line's flag).
    """
    import pandas as pd  # slow to import; only describe needs it

    if not _is_int(max_length) or max_length < 0:
        raise ConfigError(key, "a non-negative integer (0: no limit)", max_length)
    full = load_dataset(dataset)
    source = _truncated(full, max_length, key)
    lengths, basis = _lengths_for_stats(source, num_samples, seed)
    published = dict(source.published) if isinstance(source, LengthBins) else {}
    rows = [(f"< {k}K", 100.0 * np.count_nonzero(lengths < k * KIB_TOKENS) / lengths.size, "%")
            for k in THRESHOLDS_KIB]
    rows += [("Longest", float(lengths.max()), "tokens"), ("count", float(lengths.size), "sequences"),
             ("mean", float(lengths.mean()), "tokens"), ("median", float(np.median(lengths)), "tokens"),
             ("p99", float(np.percentile(lengths, 99)), "tokens")]
    frame = pd.DataFrame(
        {"value": [r[1] for r in rows], "unit": [r[2] for r in rows],
         "published": [published.get(r[0], float("nan")) for r in rows]},
        index=pd.Index([r[0] for r in rows], name="statistic"))
    frame.attrs.update(dataset=source.name, source=source.source, basis=basis, max_length=max_length)
    return frame


def format_describe(frame: "pd.DataFrame") -> str:
    """``describe``'s frame as aligned text for a terminal."""
    attrs = frame.attrs
    head = [f"{attrs.get('dataset', 'dataset')}: {attrs.get('source', '')}",
            f"statistics {attrs.get('basis', '')}"]
    if attrs.get("max_length"):
        head.append(f"sequences longer than {attrs['max_length']:,} tokens dropped")
    has_published = bool(frame["published"].notna().any())
    table = [("statistic", "value", "published" if has_published else "")]
    for label, row in frame.iterrows():
        table.append((str(label), _format_value(row["value"], row["unit"]),
                      _format_value(row["published"], row["unit"]) if has_published else ""))
    widths = [max(len(cells[i]) for cells in table) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}".rstrip() for a, b, c in table]
    return "\n".join(head + lines)


def _format_value(value: float, unit: str) -> str:
    if value != value:  # NaN: no published number
        return "-"
    if unit == "%":
        return f"{value:.3f} %"
    if float(value).is_integer():  # (one token, one sequence)
        return f"{int(value):,} {unit[:-1] if value == 1 and unit.endswith('s') else unit}"
    return f"{value:,.1f} {unit}"


def plot_histogram(dataset: str, path: str | Path, *, max_length: int = 0, num_samples: int = 1_000_000,
                   seed: int = 0, key: str = "max_length") -> Path:
    """Write a log-x histogram PNG of a dataset's lengths (share of sequences per bin, with the CDF).

    Uses matplotlib's Agg canvas directly, so the caller's pyplot backend is left alone. Returns the path.
    Raises ConfigError for an unknown dataset or a max_length that drops everything.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ltsim.files import literal

    source = _truncated(load_dataset(dataset), max_length, key)
    lengths, basis = _lengths_for_stats(source, num_samples, seed)
    edges = np.unique(np.geomspace(1, lengths.max() + 1, 60).round())
    counts, _ = np.histogram(lengths, bins=edges)
    # Percent per decade of length: integer edges make the small bins unequal in log width, and dividing
    # by each bin's log10 width keeps equal densities at equal heights.
    share_pct = 100.0 * counts / lengths.size / np.diff(np.log10(edges))
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.bar(edges[:-1], share_pct, width=np.diff(edges), align="edge", color="#4878a8", edgecolor="white",
           linewidth=0.3, label="sequences per decade of length")
    ax.set_xscale("log")
    ax.set_xlabel("sequence length (tokens, log scale)")
    ax.set_ylabel("share of sequences per decade (%)")
    cdf = ax.twinx()
    cdf.step(edges, 100.0 * np.concatenate(([0], np.cumsum(counts))) / lengths.size, where="post", color="#c44e52",
             linewidth=1.2, label="cumulative share")
    cdf.set_ylabel("cumulative share (%)", color="#c44e52")
    cdf.set_ylim(0, 101)
    for k in THRESHOLDS_KIB:
        if k * KIB_TOKENS <= lengths.max():
            ax.axvline(k * KIB_TOKENS, color="grey", linestyle=":", linewidth=0.8)
            ax.text(k * KIB_TOKENS, 0.98, f" {k}K", transform=ax.get_xaxis_transform(), ha="left",
                    va="top", fontsize=8, color="grey")
    ax.set_title(literal(f"{source.name}: {lengths.size:,} sequences, longest "
                         f"{int(lengths.max()):,} tokens\n({basis})"), fontsize=9)
    handles = ax.get_legend_handles_labels()
    more = cdf.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="center right", fontsize=8)
    out = figure_path(path)
    save_figure(fig, out, dpi=120)
    return out
