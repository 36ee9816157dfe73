"""Sequence-length sources: the built-in dataset registry, the seed papers' tables, and user length
files (read and checked by ltsim/length_files.py).

Two kinds of source, both with ``truncate(max_length)`` and ``draw(rng, n)``:

- ``LengthArray``: real per-sequence lengths (packaged ``wikipedia`` and ``azure-conv``, or a user file).
  Drawing picks lengths uniformly with replacement.
- ``LengthBins``: a distribution given as bins with probability masses (a CDF table printed in a paper, or a
  histogram). Drawing picks a bin by its mass, then a length log-uniformly inside the bin.

Interpolation rule for a CDF table (points "< L_i: P_i %", then "Longest: L_max"): bin i covers the integer
lengths [L_{i-1}, L_i) with mass P_i - P_{i-1}; the first bin starts at 1 token (no paper states a minimum);
the last bin is [L_last, L_max] inclusive, so no draw exceeds the published longest length. A length inside a
bin is floor(exp(U(ln lo, ln hi))) with hi exclusive, which keeps each bin's mass exact. Papers write "1K" for
1024 tokens (FlexSP's Wikipedia file gives the 4.39 % above 4096 that SOURCES.md states); table points at or
beyond L_max must say 100 % and add no bin. Truncating at max_length keeps the bins below it and cuts the
straddling bin at max_length, scaling its mass by the log-uniform share below the cut: exactly the table's
distribution conditioned on length <= max_length, as when the papers drop longer sequences.

Approximate: inside a bin the shape is a guess. Log-uniform from 1 token puts ln 2 / ln 1024 = 10 % of the first
bin at length 1 and gives it a mean of about 147 tokens, so tables with a big "< 1K" bin (LMSysChat1M: median 46
sampled) are shorter than the real data; only the published points are reproduced.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ltsim.errors import ConfigError, check_argument, unusable_path
from ltsim.files import expand_user
from ltsim.length_files import FILE_SUFFIXES, KEY, read_length_file

KIB_TOKENS = 1024  # "1K" in the seed papers' tables


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthBins:
    """A length distribution as bins: integer lengths [lo, hi) with probability ``mass`` (sums to 1)."""

    name: str
    lo_tokens: tuple[int, ...]
    hi_tokens: tuple[int, ...]  # exclusive
    mass: tuple[float, ...]
    source: str
    published: tuple[tuple[str, float], ...] = ()  # the paper's own rows, for describe()

    @property
    def max_tokens(self) -> int:
        return self.hi_tokens[-1] - 1

    def truncate(self, max_length: int) -> "LengthBins":
        """The distribution conditioned on length <= max_length (0: unchanged)."""
        if max_length <= 0 or max_length >= self.max_tokens:
            return self
        lo, hi, mass = [], [], []
        for b_lo, b_hi, b_mass in zip(self.lo_tokens, self.hi_tokens, self.mass):
            if b_lo > max_length or b_mass <= 0:
                continue
            cut = min(b_hi, max_length + 1)
            lo.append(b_lo)
            hi.append(cut)
            mass.append(b_mass * math.log(cut / b_lo) / math.log(b_hi / b_lo))
        total = sum(mass)
        return replace(self, lo_tokens=tuple(lo), hi_tokens=tuple(hi),
                       mass=tuple(m / total for m in mass), published=())

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths in tokens (int64): a bin by mass, then log-uniform inside it."""
        p = np.asarray(self.mass, dtype=np.float64)
        ln_lo = np.log(np.asarray(self.lo_tokens, dtype=np.float64))
        ln_hi = np.log(np.asarray(self.hi_tokens, dtype=np.float64))
        idx = rng.choice(p.size, size=n, p=p / p.sum())
        u = rng.random(n)
        x = np.floor(np.exp(ln_lo[idx] + u * (ln_hi[idx] - ln_lo[idx]))).astype(np.int64)
        # exp/log rounding can land one token outside [lo, hi); clamp keeps bins exact.
        lo = np.asarray(self.lo_tokens, dtype=np.int64)[idx]
        hi = np.asarray(self.hi_tokens, dtype=np.int64)[idx]
        return np.clip(x, lo, hi - 1)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LengthArray:
    """Real per-sequence lengths in tokens (read-only int64 array); drawn uniformly with replacement."""

    name: str
    num_tokens: np.ndarray
    source: str

    @property
    def max_tokens(self) -> int:
        return int(self.num_tokens.max())

    def truncate(self, max_length: int) -> "LengthArray":
        """Drop lengths above max_length (0: unchanged). May leave an empty array; the caller checks."""
        if max_length <= 0 or max_length >= self.max_tokens:
            return self
        kept = self.num_tokens[self.num_tokens <= max_length]
        kept.setflags(write=False)
        return replace(self, num_tokens=kept)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.num_tokens[rng.integers(0, self.num_tokens.size, size=n)]


def from_cdf_table(name: str, points: tuple[tuple[int, float], ...], longest_tokens: int,
                   source: str) -> LengthBins:
    """Bins from a paper's table: ``points`` are (L_i tokens, percent of sequences shorter than L_i)."""
    lo, hi, mass = [], [], []
    prev_tokens, prev_pct = 1, 0.0
    for tokens, pct in points:
        if tokens >= longest_tokens:
            assert pct >= 100.0, f"{name}: {pct}% below {tokens} tokens but the longest is {longest_tokens}"
            break
        lo.append(prev_tokens), hi.append(tokens), mass.append((pct - prev_pct) / 100.0)
        prev_tokens, prev_pct = tokens, pct
    lo.append(prev_tokens), hi.append(longest_tokens + 1), mass.append((100.0 - prev_pct) / 100.0)
    published = tuple((f"< {t // KIB_TOKENS}K", p) for t, p in points)
    return LengthBins(name=name, lo_tokens=tuple(lo), hi_tokens=tuple(hi), mass=tuple(mass),
                      source=source, published=published + (("Longest", float(longest_tokens)),))


def _k(kib: int) -> int:
    return kib * KIB_TOKENS


# Tables printed in the seed papers (percent of sequences shorter than each length; then the longest).
# ChunkFlow Table 1 (LMSysChat1M). Skrull Table 1 lists the same dataset with a different tokenizer or filter:
# <1K 87.12, <4K 99.35, <8K 99.87, <32K 99.98, <128K 99.99, longest 1643K. The two disagree by up to 3.4 pp
# and on the longest length (303K vs 1643K); we follow ChunkFlow and ship Skrull's as lmsys-chat-1m-skrull.
_LMSYS_CHUNKFLOW = ((_k(1), 90.499), (_k(4), 99.539), (_k(8), 99.908), (_k(32), 99.987), (_k(128), 99.996))
_LMSYS_SKRULL = ((_k(1), 87.12), (_k(4), 99.35), (_k(8), 99.87), (_k(32), 99.98), (_k(128), 99.99))
# ChunkFlow Table 2: the evaluation set built after Fu et al. 2024 / ChatGLM 2025.
_CHUNKFLOW_EVAL = ((_k(1), 98.17), (_k(4), 99.72), (_k(8), 99.83), (_k(32), 99.92), (_k(128), 99.98))
# Skrull Table 1: Wikipedia (longest 78K, so the < 128K point is 100 % and adds no bin) and ChatQA2-Long-SFT.
_WIKI_SKRULL = ((_k(1), 87.88), (_k(4), 99.34), (_k(8), 99.92), (_k(32), 99.99), (_k(128), 100.0))
_CHATQA2 = ((_k(1), 21.92), (_k(4), 31.48), (_k(8), 40.43), (_k(32), 99.86), (_k(128), 100.0))


def _log_uniform_mean(lo: float, hi: float) -> float:
    return (hi - lo) / math.log(hi / lo)


def github_infinipipe() -> LengthBins:
    """InfiniPipe's GitHub lengths (seeds/infinipipe.md section 1 and Fig. 2), fitted to the three
    statistics the paper prints: 91.5 % of sequences have at most 8K tokens, 0.6 % have 64K or more,
    and those 0.6 % hold 21.6 % of all tokens. Three log-uniform bins, [1, 8K], (8K, 64K) and
    [64K, L]: the masses are the first two statistics; the longest length L is the one at which the
    top bin's share of the expected tokens is 21.6 % (bisection on the bins' log-uniform means;
    L = 251,371 tokens). The shape inside each bin is the module's log-uniform guess."""
    masses = (0.915, 0.079, 0.006)
    edges = (1, _k(8) + 1, _k(64))
    below = sum(m * _log_uniform_mean(a, b) for m, a, b in zip(masses, edges, edges[1:]))
    want = 0.216 / (1 - 0.216) * below / masses[2]  # the top bin's mean that gives 21.6 %
    lo, hi = float(_k(64) + 1), float(1 << 40)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _log_uniform_mean(_k(64), mid) < want else (lo, mid)
    longest = int(round(lo))
    return LengthBins(name="github-infinipipe", lo_tokens=edges, hi_tokens=edges[1:] + (longest + 1,),
                      mass=masses, source="InfiniPipe (arXiv 2509.21275) section 1, GitHub: 91.5 % "
                      "<= 8K, 0.6 % >= 64K holding 21.6 % of tokens (three log-uniform bins fitted)",
                      published=(("<= 8K", 91.5), (">= 64K", 0.6), ("tokens in >= 64K", 21.6)))


def _histogram_bins(name: str, filename: str, source: str) -> LengthBins:
    """Bins from MagiAttention's doc_length_distribution.csv: ``"[lo, hi]",count,...`` (inclusive)."""
    text = (importlib.resources.files("ltsim") / "data" / filename).read_text(encoding="utf-8")
    lo, hi, count = [], [], []
    for row in csv.DictReader(text.splitlines()):
        b_lo, b_hi = (int(v) for v in row["range"].strip("[] ").split(","))
        lo.append(max(b_lo, 1))  # a document has at least one token; the first bin starts at 0
        hi.append(b_hi + 1)
        count.append(int(row["number"]))
    total = sum(count)
    return LengthBins(name=name, lo_tokens=tuple(lo), hi_tokens=tuple(hi),
                      mass=tuple(c / total for c in count), source=source)


@functools.lru_cache(maxsize=None)
def _packaged_array(name: str, filename: str, source: str) -> LengthArray:
    with (importlib.resources.files("ltsim") / "data" / filename).open("rb") as handle:
        num_tokens = np.load(handle)["num_tokens"].astype(np.int64)
    num_tokens.setflags(write=False)
    return LengthArray(name=name, num_tokens=num_tokens, source=source)


_BUILTINS = {
    "wikipedia": lambda: _packaged_array(
        "wikipedia", "wikipedia_seqlens.npz",
        "FlexSP Wikipedia lengths (PKU-DAIR/Hetu-Galvatron flexsp galvatron/datasets/wikipedia.txt)"),
    "azure-conv": lambda: _packaged_array(
        "azure-conv", "azure_conv_lengths.npz",
        "Azure LLM inference trace 2023 conversation, prompt+output (microsoft/vidur splitwise_conv.csv)"),
    "docs-long": lambda: _histogram_bins(
        "docs-long", "magiattention_doc_length_histogram.csv",
        "MagiAttention doc_length_distribution.csv (13,463,214 documents)"),
    "lmsys-chat-1m": lambda: from_cdf_table(
        "lmsys-chat-1m", _LMSYS_CHUNKFLOW, _k(303), "ChunkFlow (arXiv 2503.02356) Table 1"),
    "lmsys-chat-1m-skrull": lambda: from_cdf_table(
        "lmsys-chat-1m-skrull", _LMSYS_SKRULL, _k(1643), "Skrull Table 1 (LMsysChat1M)"),
    "chunkflow-eval": lambda: from_cdf_table(
        "chunkflow-eval", _CHUNKFLOW_EVAL, _k(256), "ChunkFlow (arXiv 2503.02356) Table 2"),
    "chatqa2-long-sft": lambda: from_cdf_table(
        "chatqa2-long-sft", _CHATQA2, _k(99), "Skrull Table 1 (ChatQA2-Long-SFT)"),
    "github-infinipipe": github_infinipipe,
    "wikipedia-skrull": lambda: from_cdf_table(
        "wikipedia-skrull", _WIKI_SKRULL, _k(78), "Skrull Table 1 (Wikipedia)"),
}


def packaged_files(dataset: str) -> tuple[Path, ...]:
    """The files of ltsim's own data a built-in ``dataset`` name is read from (outputs must not
    overwrite them); none for a path."""
    if dataset.strip().lower() not in _BUILTINS:
        return ()
    folder = importlib.resources.files("ltsim") / "data"
    return tuple(Path(str(entry)) for entry in folder.iterdir() if entry.is_file())


def dataset_names() -> tuple[str, ...]:
    """The built-in dataset names, sorted."""
    return tuple(sorted(_BUILTINS))


def load_dataset(dataset: str | os.PathLike) -> LengthBins | LengthArray:
    """A built-in name (case-insensitive) or a path to a length file (text or a Path). Raises
    ConfigError."""
    if isinstance(dataset, os.PathLike) and isinstance(os.fspath(dataset), str):
        dataset = os.fspath(dataset)  # (a Path was an AttributeError; a fuzzing review)
    check_argument("dataset", dataset, str, "a dataset name or a length file's path",
                   'e.g. "chunkflow-eval" or "lengths.txt"')
    builtin = _BUILTINS.get(dataset.strip().lower())
    if builtin is not None:
        return builtin()
    path = expand_user(dataset)
    try:
        return _load_file(dataset, path)
    except OSError as exc:  # a path the system refuses to look at (too long, no permission)
        raise unusable_path(KEY, dataset, exc) from None


def _load_file(dataset: str, path: Path) -> LengthArray:
    """A path's length file (a bare word that names no file and ends in no length-file suffix
    was meant as a built-in name)."""
    if path.suffix.lower() not in FILE_SUFFIXES and not path.exists() and "/" not in dataset:
        raise ConfigError(KEY, f"a built-in dataset ({', '.join(dataset_names())}) or a path to a "
                          f"{'/'.join(FILE_SUFFIXES)} length file", dataset,
                          "pick one of the names, or give a file path")
    return LengthArray(name=path.name, num_tokens=read_length_file(dataset, path), source=str(path))
