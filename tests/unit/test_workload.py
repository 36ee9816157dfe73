"""Tests for ltsim.workload and ltsim.datasets: built-in datasets, user files, errors, sampling, describe."""

from __future__ import annotations

import json
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


# ---- user files ------------------------------------------------------------------------------------

def _write_lengths(tmp_path: Path, fmt: str, values: list) -> Path:
    path = tmp_path / f"lengths.{fmt}"
    if fmt == "txt":
        path.write_text("\n".join(map(str, values)) + "\n")
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"num_tokens": v, "id": i}) + "\n" for i, v in enumerate(values)))
    elif fmt == "csv":
        pd.DataFrame({"id": range(len(values)), "num_tokens": values}).to_csv(path, index=False)
    else:
        pd.DataFrame({"length": values}).to_parquet(path)
    return path


@pytest.mark.parametrize("fmt", ["txt", "csv", "parquet", "jsonl"])
def test_user_file_formats(tmp_path: Path, fmt: str) -> None:
    values = [5, 100, 3000, 70000]
    path = _write_lengths(tmp_path, fmt, values)
    source = load_dataset(str(path))
    assert sorted(source.num_tokens.tolist()) == values
    batches = Workload(dataset=str(path), global_batch_size=50, num_batches=2).sample(seed=0)
    assert {n for b in batches for n in b} <= set(values)
    limited = Workload(dataset=str(path), max_length=3000, global_batch_size=50).sample(seed=0)
    assert max(limited[0]) <= 3000


@pytest.mark.parametrize("values, dtype", [(["2020-01-01", "2021-01-01"], "datetime64"),
                                           ([True, False], "bool")])
def test_a_parquet_length_column_of_dates_or_booleans(tmp_path: Path, values, dtype) -> None:
    import pandas as pd

    pytest.importorskip("pyarrow")
    column = pd.to_datetime(values) if dtype == "datetime64" else values
    path = tmp_path / "l.parquet"
    pd.DataFrame({"num_tokens": column}).to_parquet(path)
    with pytest.raises(ConfigError, match=rf"integer lengths.*column num_tokens holds {dtype}"):
        load_dataset(str(path))


def test_a_parquet_of_more_rows_than_a_length_file_may_hold(tmp_path: Path) -> None:
    """A compressed parquet of a few kB can hold 10^8 rows; reading it was an ArrowMemoryError
    traceback under a memory limit. The row count is read from its metadata first."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from ltsim.datasets import MAX_TABLE_ROWS

    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"num_tokens": pa.repeat(pa.scalar(100, pa.int32()), MAX_TABLE_ROWS + 1)}),
                   path)
    assert path.stat().st_size < 2**20
    with pytest.raises(ConfigError, match=r"at most 8,388,608 rows .*it holds 8,388,609"):
        load_dataset(str(path))


@pytest.mark.parametrize("meta", [b'{"index_columns": ["SECRET"], "columns": []}',
                                  b'{"index_columns": [], "columns": [{"name": "num_tokens", '
                                  b'"field_name": "num_tokens", "pandas_type": "int64", '
                                  b'"numpy_type": "weird", "metadata": null}]}'])
def test_a_parquet_files_pandas_metadata_is_not_read(tmp_path: Path, meta) -> None:
    # pandas rebuilt an index and dtypes from it: a KeyError quoting the file, a TypeError
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"num_tokens": [12, 34]}).replace_schema_metadata({b"pandas": meta}),
                   path)
    assert load_dataset(str(path)).num_tokens.tolist() == [12, 34]


def test_a_large_csv_of_mixed_columns_reads_without_pandas_warnings(tmp_path: Path, capfd) -> None:
    """pandas' DtypeWarning (mixed types across its read chunks) quoted the file's header."""
    path = tmp_path / "l.csv"
    path.write_text("num_tokens,other-SECRET\n" + "100,1\n" * 400_000 + "100,abc\n")
    assert load_dataset(str(path)).num_tokens.size == 400_001
    assert "SECRET" not in capfd.readouterr().err


def test_a_txt_file_of_plain_numbers_reads_as_line_by_line(tmp_path: Path) -> None:
    """The C-speed path (numbers only) and the line-by-line one agree: signs, blank lines, CRLF
    and a form feed (a line break to str.splitlines) after the first odd line."""
    path = tmp_path / "l.txt"
    path.write_text(" 10\n\n+20\t\r\n30\r40\n\x0c7\n8\n", newline="")
    lengths = load_dataset(str(path)).num_tokens
    assert lengths.tolist() == [10, 20, 30, 40, 7, 8]


def test_csv_length_column_and_jsonl_length_field(tmp_path: Path) -> None:
    csv_path = tmp_path / "a.csv"
    csv_path.write_text("length,other\n10,x\n20,y\n")
    assert load_dataset(str(csv_path)).num_tokens.tolist() == [10, 20]
    jsonl_path = tmp_path / "a.jsonl"
    jsonl_path.write_text('{"length": 7}\n\n{"length": 9.0}\n')
    assert load_dataset(str(jsonl_path)).num_tokens.tolist() == [7, 9]


def test_a_whole_number_written_as_a_decimal_reads_alike_in_every_format(tmp_path: Path) -> None:
    for fmt, text in (("txt", "1024.0\n7.\n+9.00\n"), ("csv", "num_tokens\n1024.0\n7.\n+9.00\n"),
                      ("jsonl", '{"num_tokens": 1024.0}\n{"num_tokens": 7}\n{"num_tokens": 9.00}\n')):
        path = tmp_path / f"a.{fmt}"
        path.write_text(text)
        assert load_dataset(str(path)).num_tokens.tolist() == [1024, 7, 9], fmt


@pytest.mark.parametrize("content, fmt, message", [
    ("10\n20\nabc\n", "txt", r"a file of integer lengths.*; line 3 is not a whole number\. Fix: write each"),
    ("10\n2.5\n", "txt", r"line 2 is not a whole number"),
    ("10\n2.50\n", "txt", r"line 2 is not a whole number"),
    ("10\n.0\n", "txt", r"line 2 is not a whole number"),
    ("10\n1_000\n", "txt", r"line 2 is not a whole number"),
    ("10\n\n-99999999999999999999999\n", "txt", r"positive lengths.*; line 3 is below 1"),
    ("10\n20 30\n", "txt", r"line 2 is not a whole number"),
    ("10\r\n\r\n5+\r\n", "txt", r"line 3 is not a whole number"),
    ("10\n99999999999\n", "txt", r"at most 2,147,483,648 tokens.*; line 2 is longer"),
    ("10\n\u0661\u0662\n", "txt", r"line 2 is not a whole number"),
    ("num_tokens\n10\nx\n", "csv", r"row 2 of column num_tokens is not a whole number"),
    ("num_tokens\n10\n\n12.5\n", "csv", r"row 2 of column num_tokens is not a whole number\."),
    ('{"num_tokens": 4}\n{"num_tokens": "4"}\n', "jsonl", r"integer lengths.*line 2 is not a whole number"),
    ("10\n0\n", "txt", r"a file of positive lengths.*; line 2 is below 1\."),
    ("num_tokens\n10\n-3\n-4\n", "csv", r"positive lengths.*row 2 of column num_tokens is below 1 \(1 more rows"),
    ("tokens\n10\n", "csv", r"a table with a num_tokens or length column.*1 columns found"),
    ('{"num_tokens": 4}\n{"tokens": 4}\n', "jsonl", r"num_tokens or length field.*line 2"),
    ('{"num_tokens": 4}\nnot json\n', "jsonl", r"a JSON Lines file.*line 2"),
    ("", "txt", r"a non-empty length file"),
    ("\n\n", "txt", r"a non-empty length file"),
    ("", "csv", r"a non-empty length file"),
    ("num_tokens\n", "csv", r"a non-empty length file"),
    ("", "jsonl", r"a non-empty length file"),
])
def test_user_file_errors(tmp_path: Path, content: str, fmt: str, message: str) -> None:
    path = tmp_path / f"bad.{fmt}"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"^'workload.dataset' must be .*" + message):
        Workload(dataset=str(path), global_batch_size=4).validate()


def test_parquet_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pd.DataFrame({"tokens": [1, 2]}).to_parquet(path)
    with pytest.raises(ConfigError, match=r"num_tokens or length column.*1 columns found"):
        load_dataset(str(path))


def test_missing_file_and_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'workload.dataset' must be an existing length file.*nope.txt"):
        Workload(dataset=str(tmp_path / "nope.txt"), global_batch_size=4).validate()
    with pytest.raises(ConfigError, match=r"built-in dataset \(azure-conv, chatqa2-long-sft, chunkflow-eval, "
                                          r"docs-long, github-infinipipe, lmsys-chat-1m.*wikipedia-skrull\).*'lmsys'"):
        Workload(dataset="lmsys", global_batch_size=4).validate()
    other = tmp_path / "lengths.xlsx"
    other.write_text("1\n")
    with pytest.raises(ConfigError, match=r"a length file ending in .txt, .csv, .parquet, .jsonl"):
        load_dataset(str(other))


def test_edited_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_text("10\n")
    assert load_dataset(str(path)).num_tokens.tolist() == [10]
    path.write_text("10\n20\n")
    assert load_dataset(str(path)).num_tokens.tolist() == [10, 20]


@pytest.mark.parametrize("fields, pattern", [
    (dict(fixed_length=10**12, global_batch_size=1),
     r"'workload\.fixed_length' must be at most 2,147,483,648 tokens per sequence"),
    (dict(lengths=(10**12,)), r"'workload\.lengths' must be at most 2,147,483,648 tokens per sequence"),
    (dict(dataset="wikipedia", max_length=10**12, global_batch_size=4),
     r"'workload\.max_length' must be at most 2,147,483,648"),
    (dict(lengths=(6 * 10**8, 6 * 10**8)),
     r"'workload\.lengths' must be a global batch of at most 1,000,000,000 tokens \(got 1200000000\)"),
    (dict(fixed_length=2**30, global_batch_size=2),
     r"'workload\.global_batch_size' must be a global batch of at most 1,000,000,000 tokens"),
    (dict(dataset="wikipedia", global_batch_size=10**9),
     r"'workload\.global_batch_size' must be a global batch of at most 16,384 sequences"),
    (dict(fixed_length=1, global_batch_size=100_000),
     r"'workload\.global_batch_size' must be a global batch of at most 16,384 sequences"),
    (dict(lengths=(1,) * 20_000),
     r"'workload\.lengths' must be a global batch of at most 16,384 sequences \(got 20000\)"),
    (dict(dataset="wikipedia", global_batch_size=256, num_batches=65_536),
     r"'workload\.num_batches' must be such that num_batches x global_batch_size is at most"),
    (dict(dataset="wikipedia", global_batch_size=256, num_batches=10**8),
     r"'workload\.num_batches' must be such that num_batches x global_batch_size is at most"),
])
def test_size_guards_answer_at_once(fields, pattern):
    import time

    started = time.perf_counter()
    with pytest.raises(ConfigError, match=pattern):
        Workload(**fields).validate()
    assert time.perf_counter() - started < 5  # a hang guard; the guard itself is arithmetic


def test_a_sampled_batch_over_the_token_guard_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("2000000000\n")  # one sequence under 2^31, a batch of two over 10^9 tokens
    with pytest.raises(ConfigError, match=r"a sampled global batch holds at most 1,000,000,000 tokens"):
        Workload(dataset=str(path), global_batch_size=2).sample(seed=0)


def test_a_length_file_error_never_quotes_the_file(tmp_path: Path) -> None:
    secret = "api-key-0123456789"
    for name, content in (("a.txt", f"12\n{secret}\n"), ("a.csv", f"{secret}\n12\n"),
                          ("b.csv", f"num_tokens\n{secret}\n"), ("a.jsonl", f'{{"length": "{secret}"}}\n')):
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(ConfigError) as info:
            load_dataset(str(path))
        assert secret not in str(info.value) and name in str(info.value)


@pytest.mark.parametrize("line, rule", [("0" * 5000 + "7", None),  # leading zeros: 7
                                        ("-" + "9" * 4301, "positive lengths"),
                                        ("9" * 5000, "at most 2,147,483,648 tokens")])
def test_a_txt_length_of_thousands_of_digits(tmp_path: Path, line, rule) -> None:
    # int() refuses more than 4,300 digits: it was a ValueError traceback
    path = tmp_path / "l.txt"
    path.write_text(f"100\n{line}\n")
    if rule is None:
        assert load_dataset(str(path)).num_tokens.tolist() == [100, 7]
    else:
        with pytest.raises(ConfigError, match=rf"{rule}.*line 2"):
            load_dataset(str(path))


def test_a_csv_whose_first_row_is_longer_than_its_header(tmp_path: Path) -> None:
    # pandas made the extra leading fields an index: one sequence of 300 tokens, exit 0
    path = tmp_path / "l.csv"
    path.write_text("num_tokens\n100,200,300\n")
    with pytest.raises(ConfigError, match="as many fields in every row as in its header"):
        load_dataset(str(path))


@pytest.mark.parametrize("header", ["num_tokens,num_tokens", "length,x,length"])
def test_a_table_naming_its_length_column_twice(tmp_path: Path, header: str) -> None:
    # pandas renamed the second "<name>.1" and the first was read without a word
    path = tmp_path / "l.csv"
    path.write_text(f"{header}\n" + ",".join(["100"] * len(header.split(","))) + "\n")
    with pytest.raises(ConfigError, match=r"one (num_tokens|length) column.*names it twice"):
        load_dataset(str(path))


def test_a_table_with_two_length_columns_that_disagree(tmp_path: Path) -> None:
    # num_tokens was read and length ignored, without a word
    path = tmp_path / "l.csv"
    path.write_text("num_tokens,length\n100,200\n300,300\n")
    with pytest.raises(ConfigError, match=r"one length column \(num_tokens or length, or both"):
        load_dataset(str(path))
    path.write_text("num_tokens,length\n100,100\n300,300\n")
    assert load_dataset(str(path)).num_tokens.tolist() == [100, 300]
    # and JSON Lines alike (it read num_tokens and ignored length: found by a bad-input probe)
    path = tmp_path / "l.jsonl"
    path.write_text('{"num_tokens": 100}\n{"length": 100, "num_tokens": 200}\n')
    with pytest.raises(ConfigError, match=r"one length field \(num_tokens or length, or both.*"
                       r"they differ on line 2"):
        load_dataset(str(path))
    path.write_text('{"num_tokens": 100}\n{"length": "200", "num_tokens": 200}\n')
    assert load_dataset(str(path)).num_tokens.tolist() == [100, 200]  # read as numbers, as CSV


def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    # splitlines() cut a line inside a JSON string at U+2028 or U+0085
    path = tmp_path / "l.jsonl"
    path.write_text('{"num_tokens": 100, "t": "a\u2028b\u0085c"}\n{"num_tokens": 50}\r\n',
                    encoding="utf-8")
    assert load_dataset(str(path)).num_tokens.tolist() == [100, 50]


def test_a_jsonl_line_that_gives_its_length_field_twice_is_refused(tmp_path: Path) -> None:
    # json.loads keeps the last of two equal keys: 200 was read without a word (a fuzzing review);
    # a nested object's fields are not lengths, so they may repeat
    path = tmp_path / "l.jsonl"
    path.write_text('{"num_tokens": 100}\n{"num_tokens": 100, "num_tokens": 200}\n')
    with pytest.raises(ConfigError, match="gives a length field once a line.*keep one num_tokens "
                                          "on line 2"):
        load_dataset(str(path))
    path.write_text('{"num_tokens": 100, "meta": {"length": 1, "length": 2}}\n')
    assert load_dataset(str(path)).num_tokens.tolist() == [100]
