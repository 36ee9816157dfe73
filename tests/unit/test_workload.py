"""Tests for ltsim.workload and ltsim.datasets: built-in datasets, errors, sampling, describe (user
length files: test_length_files.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ltsim.datasets import LengthArray, LengthBins, dataset_names, load_dataset
from ltsim.errors import ConfigError
from ltsim.workload import POOL_BATCHES, Workload, describe, format_describe, plot_histogram

SHARED_DATA = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data").resolve()  # beside the repo
K = 1024

# (name, published percent below 1K/4K/8K/32K/128K, longest in tokens), as printed in the seed papers.
PAPER_TABLES = [
    ("lmsys-chat-1m", (90.499, 99.539, 99.908, 99.987, 99.996), 303 * K),  # ChunkFlow Table 1
    ("chunkflow-eval", (98.17, 99.72, 99.83, 99.92, 99.98), 256 * K),  # ChunkFlow Table 2
    ("chatqa2-long-sft", (21.92, 31.48, 40.43, 99.86, 100.0), 99 * K),  # Skrull Table 1
    ("wikipedia-skrull", (87.88, 99.34, 99.92, 99.99, 100.0), 78 * K),  # Skrull Table 1
    ("lmsys-chat-1m-skrull", (87.12, 99.35, 99.87, 99.98, 99.99), 1643 * K),  # Skrull Table 1
]


def _draw(name: str, n: int, seed: int = 0, max_length: int = 0) -> np.ndarray:
    source = Workload(dataset=name, max_length=max_length, global_batch_size=1).source()
    return source.draw(np.random.default_rng(seed), n)


# ---- built-in datasets -------------------------------------------------------------------------

@pytest.mark.parametrize("name", dataset_names())
@pytest.mark.parametrize("max_length", [0, 32 * K])
def test_every_builtin_samples_positive_ints_within_max(name: str, max_length: int) -> None:
    batches = Workload(dataset=name, max_length=max_length, global_batch_size=64,
                       num_batches=3).sample(seed=1)
    assert len(batches) == 3 and all(len(b) == 64 for b in batches)
    flat = [n for b in batches for n in b]
    assert all(type(n) is int and n >= 1 for n in flat)
    limit = max_length or load_dataset(name).max_tokens
    assert max(flat) <= limit


def test_names_are_case_insensitive() -> None:
    a = Workload(dataset="LMSYS-Chat-1M", global_batch_size=8).sample(seed=3)
    b = Workload(dataset="lmsys-chat-1m", global_batch_size=8).sample(seed=3)
    assert a == b


@pytest.mark.parametrize("name, published, longest", PAPER_TABLES)
def test_cdf_table_reproduced_within_half_a_point(name: str, published: tuple, longest: int) -> None:
    draws = _draw(name, 1_000_000)
    for kib, pct in zip((1, 4, 8, 32, 128), published):
        assert abs(100.0 * np.mean(draws < kib * K) - pct) < 0.5, (name, kib)
    assert draws.min() >= 1
    assert draws.max() <= longest  # never above the published longest length


def test_cdf_table_bins_follow_the_interpolation_rule() -> None:
    bins = load_dataset("lmsys-chat-1m")
    assert isinstance(bins, LengthBins)
    assert bins.lo_tokens == (1, K, 4 * K, 8 * K, 32 * K, 128 * K)
    assert bins.hi_tokens[-1] == 303 * K + 1  # the last bin includes the longest length
    assert sum(bins.mass) == pytest.approx(1.0)
    # Skrull's Wikipedia says 100 % below 128K and longest 78K: the last bin stops at 78K.
    wiki = load_dataset("wikipedia-skrull")
    assert wiki.lo_tokens[-1] == 32 * K and wiki.max_tokens == 78 * K


def test_docs_long_reproduces_the_histogram() -> None:
    draws = _draw("docs-long", 1_000_000)
    # magiattention_doc_length_histogram.csv cumulative percentages at the bin tops 1024, 4096, 196608
    for top, cum_pct in ((1024, 71.38), (4096, 94.37), (32768, 99.56)):
        assert abs(100.0 * np.mean(draws <= top) - cum_pct) < 0.5
    assert 1 <= draws.min() and draws.max() <= 196_608


def test_wikipedia_describe_matches_the_published_file_statistics() -> None:
    frame = describe("wikipedia")
    value = frame["value"]
    # shared/data/SOURCES.md: median 347, mean 1013.6, p99 10919, max 1,823,777,
    # longer than 4K / 32K / 128K: 4.39 % / 0.130 % / 0.0049 %
    assert value["count"] == 1_000_000
    assert value["median"] == 347
    assert value["mean"] == pytest.approx(1013.6, abs=0.05)
    assert value["p99"] == pytest.approx(10919, abs=0.5)
    assert value["Longest"] == 1_823_777
    assert value["< 4K"] == pytest.approx(100 - 4.39, abs=0.01)
    assert value["< 32K"] == pytest.approx(100 - 0.130, abs=0.001)
    assert value["< 128K"] == pytest.approx(100 - 0.0049, abs=0.0001)
    source = load_dataset("wikipedia")
    assert isinstance(source, LengthArray) and source.num_tokens.min() == 1
    assert frame.attrs["basis"].startswith("exact")


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared/data not present")
def test_packaged_copies_equal_the_raw_data() -> None:
    text = (SHARED_DATA / "flexsp_wikipedia_seqlens.txt").read_text()
    raw = np.array(text.split(), dtype=np.int64)
    assert np.array_equal(load_dataset("wikipedia").num_tokens, raw)  # same values, same order
    conv = pd.read_csv(SHARED_DATA / "vidur_splitwise_conv_trace_lengths.csv")
    summed = (conv["num_prefill_tokens"] + conv["num_decode_tokens"]).to_numpy()
    assert np.array_equal(load_dataset("azure-conv").num_tokens, summed)


def test_describe_table_dataset_shows_published_column() -> None:
    frame = describe("lmsys-chat-1m", num_samples=200_000)
    assert list(frame.index) == ["< 1K", "< 4K", "< 8K", "< 32K", "< 128K", "Longest", "count", "mean",
                                 "median", "p99"]
    assert frame.loc["< 1K", "published"] == 90.499
    assert frame.loc["Longest", "published"] == 303 * K
    assert frame.loc["count", "value"] == 200_000
    text = format_describe(frame)
    assert "lmsys-chat-1m" in text and "90.499 %" in text and "< 128K" in text


def test_describe_with_max_length_drops_long_sequences() -> None:
    frame = describe("wikipedia", max_length=4 * K)
    assert frame.loc["Longest", "value"] <= 4 * K
    assert frame.loc["< 4K", "value"] > 99.9
    assert frame["published"].isna().all()
    assert "dropped" in format_describe(frame)


def test_plot_histogram_writes_a_png(tmp_path: Path) -> None:
    out = plot_histogram("lmsys-chat-1m", tmp_path / "h.png", num_samples=20_000)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_stays_free_of_pandas_and_matplotlib() -> None:
    code = "import sys, ltsim.workload; print('pandas' in sys.modules, 'matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


# ---- max_length and determinism ----------------------------------------------------------------

def test_max_length_drops_array_lengths_before_sampling() -> None:
    draws = _draw("wikipedia", 200_000, max_length=2048)
    assert draws.max() <= 2048
    raw = load_dataset("wikipedia").num_tokens
    kept = raw[raw <= 2048]
    assert abs(np.mean(draws < 1024) - np.mean(kept < 1024)) < 0.005  # the filtered distribution


def test_max_length_conditions_a_table() -> None:
    draws = _draw("lmsys-chat-1m", 1_000_000, max_length=4 * K)
    assert draws.max() <= 4 * K
    # Conditioned on <= 4K: P(< 1K) = 90.499 / P(<= 4K), and P(<= 4K) is 99.539 % plus a sliver.
    assert abs(100.0 * np.mean(draws < K) - 100 * 90.499 / 99.539) < 0.5


def test_max_length_that_drops_everything_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_text("100\n200\n")
    with pytest.raises(ConfigError, match=r"'workload.max_length' must be at least the shortest length"):
        Workload(dataset=str(path), max_length=50, global_batch_size=4).sample(seed=0)
    # truncating drops nothing: every sequence is cut to the cap, however short the cap
    cut = Workload(dataset=str(path), max_length=50, global_batch_size=4, overlong="truncate")
    assert cut.sample(seed=0) == ((50, 50, 50, 50),)
    assert Workload(dataset=str(path), max_length=150, global_batch_size=64,
                    overlong="truncate").sample(seed=0)[0].count(150) > 0


def test_same_seed_same_batches_and_other_seed_differs() -> None:
    w = Workload(dataset="wikipedia", global_batch_size=256, num_batches=4)
    assert w.sample(seed=7) == w.sample(seed=7)
    assert w.sample(seed=7) != w.sample(seed=8)
    assert len(set(w.sample(seed=7))) == 4  # batches differ from each other


def test_lengths_and_fixed_length_keep_their_behaviour() -> None:
    assert Workload(lengths=(4, 2, 1, 1), num_batches=2).sample(seed=0) == ((4, 2, 1, 1),) * 2
    assert Workload(fixed_length=8, global_batch_size=3).sample(seed=0) == ((8, 8, 8),)
    with pytest.raises(ConfigError, match=r"'workload.fixed_length' must be at most max_length = 4"):
        Workload(fixed_length=8, max_length=4, global_batch_size=3).validate()
    with pytest.raises(ConfigError, match=r"'workload' must be given exactly one"):
        Workload(dataset="wikipedia", fixed_length=8, global_batch_size=3).validate()


# ---- batching: iid and LongAlign's sorted groups ----------------------------------------------------

def _spread(batch: tuple[int, ...]) -> float:
    return max(batch) / min(batch)


def test_iid_is_the_default_and_unchanged() -> None:
    default = Workload(dataset="wikipedia", global_batch_size=64, num_batches=3)
    assert default.batching == "iid"
    iid = Workload(dataset="wikipedia", global_batch_size=64, num_batches=3, batching="iid")
    assert iid.sample(seed=5) == default.sample(seed=5)
    # the iid path is a plain reshape of one seeded draw, as before sorted-groups existed
    flat = default.source().draw(np.random.default_rng(5), 3 * 64).tolist()
    assert [n for b in default.sample(seed=5) for n in b] == flat


def test_sorted_groups_are_consecutive_sorted_slices_of_a_pool() -> None:
    w = Workload(dataset="wikipedia", global_batch_size=64, num_batches=8, batching="sorted-groups")
    batches = w.sample(seed=11)
    assert len(batches) == 8 and all(len(b) == 64 for b in batches)
    assert all(list(b) == sorted(b) for b in batches)
    ordered = sorted(batches, key=lambda b: (b[0], b[-1]))
    assert all(a[-1] <= b[0] for a, b in zip(ordered, ordered[1:]))  # the groups do not interleave
    # the groups are cut from one sorted pool of POOL_BATCHES global batches drawn with the seed
    pool = np.sort(w.source().draw(np.random.default_rng(11), POOL_BATCHES * 64), kind="stable")
    groups = [tuple(g) for g in pool.reshape(POOL_BATCHES, 64).tolist()]
    assert all(b in groups for b in batches)
    assert len(set(batches)) == 8  # groups are drawn without replacement


def test_sorted_groups_deterministic_and_differ_from_iid() -> None:
    w = Workload(dataset="lmsys-chat-1m", global_batch_size=32, num_batches=4, batching="sorted-groups")
    assert w.sample(seed=3) == w.sample(seed=3)
    assert w.sample(seed=3) != w.sample(seed=4)
    assert w.sample(seed=3) != w.with_batching("iid").sample(seed=3)


def test_sorted_groups_take_random_groups_not_the_first_ones() -> None:
    w = Workload(dataset="wikipedia", global_batch_size=16, num_batches=4, batching="sorted-groups")
    firsts = {tuple(sorted(b[0] for b in w.sample(seed=s))) for s in range(5)}
    assert len(firsts) > 1
    # and in random order: over a few seeds, some draw is not in ascending group order
    assert any([b[0] for b in w.sample(seed=s)] != sorted(b[0] for b in w.sample(seed=s)) for s in range(5))


def test_more_batches_than_the_pool_grows_the_pool() -> None:
    n = POOL_BATCHES + 8
    w = Workload(dataset="wikipedia", global_batch_size=8, num_batches=n, batching="sorted-groups")
    batches = w.sample(seed=2)
    assert len(batches) == n and all(list(b) == sorted(b) for b in batches)
    flat = sorted(x for b in batches for x in b)  # every group used once: together they are the pool
    pool = np.sort(w.source().draw(np.random.default_rng(2), n * 8)).tolist()
    assert flat == pool


def test_sorted_groups_shrink_the_length_spread_on_lmsys() -> None:
    base = Workload(dataset="lmsys-chat-1m", global_batch_size=64, num_batches=16)
    iid = base.sample(seed=0)
    grouped = base.with_batching("sorted-groups").sample(seed=0)
    iid_spread = float(np.median([_spread(b) for b in iid]))
    grouped_spread = float(np.median([_spread(b) for b in grouped]))
    assert iid_spread > 100  # an lmsys batch mixes a few-token turn with a multi-K conversation
    assert grouped_spread < 3 and grouped_spread * 50 < iid_spread


def test_sorted_groups_with_lengths_and_fixed_length_sort_each_batch() -> None:
    lengths = Workload(lengths=(4, 2, 9, 1), num_batches=2)
    assert lengths.with_batching("sorted-groups").sample(seed=0) == ((1, 2, 4, 9),) * 2
    assert lengths.sample(seed=0) == ((4, 2, 9, 1),) * 2
    fixed = Workload(fixed_length=8, global_batch_size=3, batching="sorted-groups")
    assert fixed.sample(seed=0) == ((8, 8, 8),)


def test_with_batching_returns_a_copy() -> None:
    w = Workload(dataset="wikipedia", global_batch_size=4)
    grouped = w.with_batching("sorted-groups")
    assert grouped.batching == "sorted-groups" and w.batching == "iid"
    assert grouped.dataset == "wikipedia" and grouped.global_batch_size == 4


@pytest.mark.parametrize("value", ["sorted", "", "SORTED-GROUPS", 1, None])
def test_bad_batching_names_the_key(value: object) -> None:
    w = Workload(dataset="wikipedia", global_batch_size=4, batching=value)  # type: ignore[arg-type]
    message = (rf"^'workload\.batching' must be one of iid, sorted-groups \(got {re.escape(repr(value))}\)\. "
               r"Fix: set workload\.batching = \"iid\"")
    with pytest.raises(ConfigError, match=message):
        w.validate()
    with pytest.raises(ConfigError, match=message):
        w.sample(seed=0)


def test_workload_describe_names_its_own_argument(tmp_path, capsys) -> None:
    """`ltsim workload describe` takes the dataset as an argument: a bad one is named 'dataset',
    not the scenario key 'workload.dataset' the command has none of."""
    from ltsim.cli import main

    assert main(["workload", "describe", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "'dataset' must be a built-in dataset" in err and "workload.dataset" not in err
    bad = tmp_path / "lengths.txt"
    bad.write_text("12\nabc\n")
    assert main(["workload", "describe", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "workload.dataset" not in err and str(bad) in err
