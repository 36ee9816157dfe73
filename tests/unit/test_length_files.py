"""Tests for ltsim.length_files (through ltsim.datasets.load_dataset and Workload): user length
files (.txt, .csv, .jsonl, .parquet), their checks, size guards and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ltsim.datasets import load_dataset
from ltsim.errors import ConfigError
from ltsim.workload import Workload


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


def test_a_parquet_without_the_column_or_with_an_empty_cell(tmp_path: Path) -> None:
    """A fuzzing review: a Parquet file was told to name its column "in the first line", and an
    empty (null) cell was "not a whole number"."""
    pytest.importorskip("pyarrow")
    upper, empty = tmp_path / "upper.parquet", tmp_path / "empty.parquet"
    pd.DataFrame({"NUM_TOKENS": [1, 2]}).to_parquet(upper)
    pd.DataFrame({"num_tokens": [1.0, None, 3.0]}).to_parquet(empty)
    with pytest.raises(ConfigError, match="in its schema") as info:
        load_dataset(str(upper))
    assert "first line" not in str(info.value)
    with pytest.raises(ConfigError, match="row 2 of column num_tokens is empty"):
        load_dataset(str(empty))


def test_a_parquet_of_more_rows_than_a_length_file_may_hold(tmp_path: Path) -> None:
    """A compressed parquet of a few kB can hold 10^8 rows; reading it was an ArrowMemoryError
    traceback under a memory limit. The row count is read from its metadata first."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from ltsim.length_files import MAX_TABLE_ROWS

    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"num_tokens": pa.repeat(pa.scalar(100, pa.int32()), MAX_TABLE_ROWS + 1)}),
                   path)
    assert path.stat().st_size < 2**20
    with pytest.raises(ConfigError, match=r"at most 8,388,608 rows .*it holds 8,388,609"):
        load_dataset(str(path))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_of_too_many_columns_is_refused_before_it_is_read(tmp_path: Path, suffix) -> None:
    """A fuzzing review: a CSV header of 100,000 columns (200 kB, no rows) took pandas 92 s."""
    from ltsim.length_files import MAX_TABLE_COLUMNS

    names = ["num_tokens", *(f"c{i}" for i in range(MAX_TABLE_COLUMNS))]
    path = tmp_path / f"wide{suffix}"
    if suffix == ".csv":
        path.write_text(",".join(names) + "\n" + ",".join(["5"] * len(names)) + "\n")
    else:
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({name: [5] for name in names}), path)
    with pytest.raises(ConfigError, match=r"at most 1,024 columns .*it has 1,025"):
        load_dataset(str(path))
    narrow = tmp_path / f"narrow{suffix}"
    if suffix == ".csv":
        narrow.write_text(",".join(names[:MAX_TABLE_COLUMNS]) + "\n"
                          + ",".join(["5"] * MAX_TABLE_COLUMNS) + "\n")
    else:
        pq.write_table(pa.table({name: [5] for name in names[:MAX_TABLE_COLUMNS]}), narrow)
    assert load_dataset(str(narrow)).num_tokens.tolist() == [5]


def test_the_column_count_reads_the_header_as_pandas_does(tmp_path: Path) -> None:
    """A commit review: the count split the first line at \\n only (a file of \\r line ends
    was a csv.Error traceback, where pandas reads it) and took a blank first line for the
    header (blank lines before a 2,001-column header let it through)."""
    old_mac = tmp_path / "cr.csv"
    old_mac.write_bytes(b"num_tokens\r100\r200\r")
    assert load_dataset(str(old_mac)).num_tokens.tolist() == [100, 200]
    wide = tmp_path / "blank-first.csv"
    wide.write_text("\n\n" + ",".join(["num_tokens", *(f"c{i}" for i in range(2000))]) + "\n"
                    + ",".join(["5"] * 2001) + "\n")
    with pytest.raises(ConfigError, match=r"at most 1,024 columns .*it has 2,001"):
        load_dataset(str(wide))


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
