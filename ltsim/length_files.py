"""User length files: a scenario's ``workload.dataset`` that is a path (.txt, .csv, .jsonl or
.parquet), read and checked (ltsim/datasets.py decides a name from a path and wraps the lengths).

Every message names the file and the place (line, row), never a row's text: a scenario may point
at any file (a key, a password), and messages end up in CI logs. The size guards keep a reading
under seconds: at most MAX_LENGTH_FILE_BYTES of text, MAX_TABLE_ROWS rows, MAX_SEQUENCE_TOKENS a
sequence.
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ltsim.errors import ConfigError
from ltsim.files import NotRegularFile, read_input

KEY = "workload.dataset"
MAX_LENGTH_FILE_BYTES = 16 * 2**20  # millions of lengths: a .jsonl this size took 8.8 s to read
MAX_TABLE_ROWS = MAX_LENGTH_FILE_BYTES // 2  # as many lengths as such a text file can hold
Rows = tuple[np.ndarray, Callable[[int], str]]  # a reader's lengths, and row index -> "line N" for messages
FILE_SUFFIXES = (".txt", ".csv", ".parquet", ".jsonl")
LENGTH_COLUMNS = ("num_tokens", "length")
MAX_SEQUENCE_TOKENS = 2**31  # the size guard on one sequence (ltsim.workload checks the rest)
# a table's columns: pandas took 92 s over a header of 100,000 (a fuzzing review); a length
# table needs one
MAX_TABLE_COLUMNS = 1024


def read_length_file(dataset: str, path: Path) -> np.ndarray:
    """The lengths of the file at ``path`` (``dataset``: the scenario's value, as messages name it),
    checked: a regular file of a known suffix, at most MAX_LENGTH_FILE_BYTES, every row a whole
    number of tokens in [1, MAX_SEQUENCE_TOKENS]. A read-only int64 array, cached by the path,
    the file it leads to, its modification time and size. Raises ConfigError."""
    if path.exists() and not path.is_file():  # a folder, a FIFO, a device
        raise ConfigError(KEY, "a regular file of lengths", dataset,
                          "point it at the length file itself (.txt, .csv, .jsonl or .parquet)")
    if not path.is_file():
        raise ConfigError(KEY, "an existing length file", dataset,
                          f"check the path (relative paths start at {Path.cwd()})")
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise ConfigError(KEY, f"a length file ending in {', '.join(FILE_SUFFIXES)}", dataset,
                          "write one integer per line (.txt) or a num_tokens column (.csv/.parquet/.jsonl)")
    stat = path.stat()
    if stat.st_size > MAX_LENGTH_FILE_BYTES:
        raise ConfigError(KEY, f"a length file of at most {MAX_LENGTH_FILE_BYTES // 2**20} MiB "
                          "(millions of lengths)", dataset, "give a sample of the lengths: a few "
                          "thousand describe a distribution, and reading more takes minutes")
    return _read_file(str(path), str(path.resolve()), stat.st_mtime_ns, stat.st_size)




@functools.lru_cache(maxsize=8)
def _read_file(path: str, target: str, mtime_ns: int, size: int) -> np.ndarray:
    """Read and check a user length file (messages name ``path`` as given); cached by it, the
    file it leads to, modification time and size."""
    del target, mtime_ns  # only part of the cache key: an edited or relinked file is read again
    if size == 0:
        raise ConfigError(KEY, "a non-empty length file", path, "add at least one sequence length")
    suffix = Path(path).suffix.lower()
    reader = {".txt": _read_txt, ".jsonl": _read_jsonl}.get(suffix, _read_table)
    values, where = reader(path)
    if values.size == 0:
        raise ConfigError(KEY, "a non-empty length file", path, "add at least one sequence length")
    bad = np.flatnonzero(values < 1)
    if bad.size:  # the place, never the value: a scenario may point at any file
        more = f" ({bad.size - 1} more rows are too)" if bad.size > 1 else ""
        raise ConfigError(KEY, "a file of positive lengths", path,
                          "every sequence has at least one token; remove or correct those rows",
                          context=f"{where(bad[0])} is below 1{more}")
    values.setflags(write=False)
    return values


def _not_integer(path: str, where: str) -> ConfigError:
    """The error for a row that is not a whole number. It names the place and never quotes the row:
    a scenario can point at any text file (a key, a password), and messages end up in CI logs."""
    return ConfigError(KEY, "a file of integer lengths", path, "write each length as a whole number of tokens",
                       context=f"{where} is not a whole number")


def _as_lengths(path: str, values: list[int], where: Callable[[int], str]) -> np.ndarray:
    """The lengths as an int64 array; a length past the size guard is refused by its place (it
    would not fit the array, and no model trains such a sequence)."""
    if values and max(values) > MAX_SEQUENCE_TOKENS:
        row = next(i for i, value in enumerate(values) if value > MAX_SEQUENCE_TOKENS)
        raise _too_long(path, where(row))
    return np.array(values, dtype=np.int64)


def _too_long(path: str, where: str) -> ConfigError:
    return ConfigError(KEY, f"a file of lengths of at most {MAX_SEQUENCE_TOKENS:,} tokens", path,
                       "remove or correct that row", context=f"{where} is longer")


_WHOLE = re.compile(r"[+-]?[0-9]+(?:\.0*)?")  # a .txt length: ASCII digits, and a whole
# number written as a decimal (1024.0, as an exported float column holds), as the CSV and
# JSON readers take them


def _read_txt(path: str) -> Rows:
    """One whole number per line (1024, or 1024.0); blank lines are skipped. Returns (lengths,
    row index -> 'line N').

    Lines of plain numbers are read at C speed (a 64 MiB file of them took 28 s line by line);
    from the first line that is anything else, line by line, so that a message names that line."""
    text = _read_text(path)
    odd = _first_odd(text)
    start = len(text) if odd < 0 else max(text.rfind("\n", 0, odd), text.rfind("\r", 0, odd)) + 1
    head = _plain_txt(text[:start])
    if head is None:  # a number of more than 18 digits: line by line from the start
        start, head = 0, np.zeros(0, dtype=np.int64)
    offset = len(text[:start].splitlines())
    rest = []
    for i, line in enumerate(text[start:].splitlines()):
        field = line.strip()
        if not field:
            continue
        if not _WHOLE.fullmatch(field):  # int() also takes 1_000 and other scripts' digits
            raise _not_integer(path, f"line {offset + i + 1}")
        # held within int64: below 1 and too long are refused by their place, however far (by
        # its digits: int() refuses more than 4,300, leading zeros included)
        negative, digits = field[0] == "-", field.partition(".")[0].lstrip("+-").lstrip("0") or "0"
        value = MAX_SEQUENCE_TOKENS + 1 if len(digits) > 18 else int(digits)
        rest.append(-1 if negative and value else min(value, MAX_SEQUENCE_TOKENS + 1))
    values = np.concatenate([head, np.array(rest, dtype=np.int64)]) if rest else head
    where = _line_of(text)
    long = np.flatnonzero(values > MAX_SEQUENCE_TOKENS)
    if long.size:
        raise _too_long(path, where(int(long[0])))
    return values, where


_TXT_PLAIN = str.maketrans("", "", "0123456789+- \t\r\n")
# a sign not at a number's start, or alone; two numbers on one line
_TXT_ODD = re.compile(r"[0-9][+-]|[+-][+-]|[+-](?![0-9])|[0-9+-][ \t]+[0-9+-]")


def _first_odd(text: str) -> int:
    """Where the first character of ``text`` that is not part of one number per line is (-1:
    none), in C-speed passes (a regex over every character took 4 s on 32 MiB)."""
    end = len(text)
    others = text.translate(_TXT_PLAIN)  # what is neither a digit, a sign nor a break, in order
    if others:
        end = text.find(others[0])
    if any(c in text for c in "+- \t"):  # signs and spaces: where they stand matters
        odd = _TXT_ODD.search(text, 0, end)
        if odd is not None:
            end = odd.start()
    return end if end < len(text) else -1


def _plain_txt(text: str) -> np.ndarray | None:
    """The numbers of ``text``, which holds only numbers, one per line (``_first_odd`` found
    nothing); None when one has more than 18 digits (beyond int64)."""
    fields = text.split()
    if any(len(f) > 18 for f in fields):
        return None
    return np.array(fields, dtype=np.int64) if fields else np.zeros(0, dtype=np.int64)


def _line_of(text: str) -> Callable[[int], str]:
    """Row index -> 'line N' of a .txt file whose blank lines were skipped (worked out only when
    a message needs it)."""
    def where(row: int) -> str:
        seen = -1
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                seen += 1
                if seen == row:
                    return f"line {i + 1}"
        return f"line {row + 1}"
    return where


def _read_text(path: str) -> str:
    try:
        return read_input(path).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(KEY, "a UTF-8 text file", path,
                          "give a text file, or a .parquet table for binary data") from None
    except OSError as err:
        raise _unreadable(path, err) from None


def _unreadable(path: str, err: OSError) -> ConfigError:
    if isinstance(err, NotRegularFile):
        return ConfigError(KEY, "a regular length file", path, "give a file, not a pipe or a "
                           "device", context=err.strerror)
    return ConfigError(KEY, "a readable length file", path, "check its permissions (ls -l)",
                       context=err.strerror or type(err).__name__)


def _read_jsonl(path: str) -> Rows:
    """One JSON object per line with a ``num_tokens`` or ``length`` field."""
    values, numbers = [], []
    # JSON Lines ends a line at "\n" alone (a "\r" before it is whitespace to JSON):
    # splitlines() also splits at U+2028, U+0085 and others, which a JSON string may hold
    for i, line in enumerate(_read_text(path).split("\n")):
        if not line.strip():
            continue
        try:
            # (the hook only where a length field's name is written twice: it halves the speed)
            twice = any(line.count(f'"{c}"') > 1 for c in LENGTH_COLUMNS)
            record = json.loads(line, object_pairs_hook=_Fields) if twice else json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(KEY, "a JSON Lines file", path, f"fix line {i + 1}: {err.msg}") from None
        except RecursionError:  # arrays nested thousands deep
            raise ConfigError(KEY, "a JSON Lines file of flat objects", path,
                              f"fix line {i + 1}: it nests too deep") from None
        except ValueError:  # an integer of thousands of digits
            raise ConfigError(KEY, "a JSON Lines file of realistic numbers", path,
                              f"fix line {i + 1}: a number there has thousands of digits") from None
        if isinstance(record, _Fields) and record.twice:  # json keeps the last: one is a guess
            raise ConfigError(KEY, "a JSON Lines file that gives a length field once a line", path,
                              f"keep one {record.twice} on line {i + 1}")
        field = next((c for c in LENGTH_COLUMNS if isinstance(record, dict) and c in record), None)
        if field is None:
            raise ConfigError(KEY, f"a JSON Lines file with a {' or '.join(LENGTH_COLUMNS)} field", path,
                              f"add the field to line {i + 1}")
        raw, other = record[field], LENGTH_COLUMNS[1]
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (
                isinstance(raw, float) and not (math.isfinite(raw) and raw.is_integer())):
            raise _not_integer(path, f"line {i + 1}")
        if field != other and other in record and not _same_number(record[other], raw):
            raise ConfigError(KEY, f"a JSON Lines file with one length field ({field} or {other}, "
                              "or both with the same value)", path,  # as _read_table: which
                              f"drop the {other} field, or rename it",  # is meant is a guess
                              context=f"they differ on line {i + 1}")
        values.append(int(raw)), numbers.append(i)
    where = lambda row: f"line {numbers[row] + 1}"  # noqa: E731
    return _as_lengths(path, values, where), where


class _Fields(dict):
    """A JSON object as read, and which length field it gives twice (None: neither)."""

    __slots__ = ("twice",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        keys = [key for key, _ in pairs]
        self.twice = next((c for c in LENGTH_COLUMNS if keys.count(c) > 1), None)


def _same_number(value: Any, length: int | float) -> bool:
    """Whether a second length field holds ``length`` read as a number, as the table reader
    compares its columns ("5" and 5 alike)."""
    try:
        return not isinstance(value, bool) and float(value) == float(length)
    except (TypeError, ValueError, OverflowError):
        return False


def _read_parquet(data: io.BytesIO, path: str) -> Any:
    """A parquet table's columns, without the pandas metadata a writer may have stored beside them
    (index columns, dtypes: free text a file can get wrong, and only the columns matter here)."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(data).metadata
    _check_columns(metadata.num_columns, path)
    rows = metadata.num_rows  # compressed: a few MB can hold 10^8 rows
    if rows > MAX_TABLE_ROWS:
        raise ConfigError(KEY, f"a length table of at most {MAX_TABLE_ROWS:,} rows", path,
                          "sample the lengths (a length distribution needs far fewer)",
                          context=f"it holds {rows:,}")
    data.seek(0)
    return pq.read_table(data).to_pandas(ignore_metadata=True)


def _check_columns(count: int, path: str) -> None:
    if count > MAX_TABLE_COLUMNS:
        raise ConfigError(KEY, f"a length table of at most {MAX_TABLE_COLUMNS:,} columns", path,
                          f"keep the length column ({' or '.join(LENGTH_COLUMNS)}) and drop "
                          "the others", context=f"it has {count:,}")


def _header_fields(data: io.BytesIO) -> int:
    """How many fields a CSV's header holds, counted before pandas reads it: its first line
    that is not blank (pandas skips blank lines), lines ended by \\n, \\r\\n or \\r; 0 when
    the csv module cannot read it (pandas then says what is wrong)."""
    import csv

    text = io.StringIO(data.getvalue().decode("utf-8", errors="replace"), newline=None)
    line = next((line for line in text if line.strip()), "")
    try:
        return len(next(csv.reader([line.rstrip("\n")]), []))
    except csv.Error:
        return 0


def _read_table(path: str) -> Rows:
    """A .csv or .parquet table with a ``num_tokens`` or ``length`` column (pandas; pyarrow for parquet)."""
    import pandas as pd  # pandas is slow to import; only user tables need it

    try:
        data = io.BytesIO(read_input(path))  # never pandas' own open: it could block
        if not path.lower().endswith(".parquet"):
            _check_columns(_header_fields(data), path)
        with warnings.catch_warnings():  # pandas' warnings (DtypeWarning) quote the header
            warnings.simplefilter("ignore")
            # a first row longer than the header: pandas made its leading fields an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = (_read_parquet(data, path) if path.lower().endswith(".parquet")
                     else pd.read_csv(data, low_memory=False, index_col=False))
    except pd.errors.EmptyDataError:
        raise ConfigError(KEY, "a non-empty length file", path, "add at least one sequence length") from None
    except MemoryError:  # pyarrow's ArrowMemoryError too
        raise ConfigError(KEY, "a length table that fits in this machine's memory", path,
                          "sample the lengths, or give fewer columns") from None
    except UnicodeDecodeError:
        raise ConfigError(KEY, "a UTF-8 text file", path,
                          "give a text file, or a .parquet table for binary data") from None
    except pd.errors.ParserWarning:
        raise ConfigError(KEY, "a table with as many fields in every row as in its header", path,
                          "check the file format", context="a row has more") from None
    except pd.errors.ParserError as err:  # "Expected 1 fields in line 3, saw 2": places, no content
        raise ConfigError(KEY, "a table with as many fields in every row as in its header", path,
                          "make every row hold the header's fields (a num_tokens column), or give "
                          "one length per line in a .txt file",
                          context=str(err).replace("Error tokenizing data. C error: ", "").strip()
                          ) from None
    except OSError as err:
        raise _unreadable(path, err) from None
    except (ValueError, KeyError, TypeError):  # pyarrow's ArrowInvalid is a ValueError; their
        # texts may quote the file
        what = ("a Parquet file pyarrow can read" if path.lower().endswith(".parquet")
                else "a CSV table pandas can read")
        raise ConfigError(KEY, what, path, "write the lengths again (a num_tokens column), or give "
                          "one length per line in a .txt file") from None
    column = next((c for c in LENGTH_COLUMNS if c in frame.columns), None)
    if column is None:  # the header is the file's first line: named by position, not quoted
        where = ("its schema (the names are exact: lower case)" if path.lower().endswith(".parquet")
                 else "the first line")
        raise ConfigError(KEY, f"a table with a {' or '.join(LENGTH_COLUMNS)} column", path,
                          f"name the length column {' or '.join(LENGTH_COLUMNS)} in {where} "
                          f"({len(frame.columns)} columns found, none of them that)")
    if list(frame.columns).count(column) > 1 or f"{column}.1" in frame.columns:  # pandas renames
        # a repeated header name "<name>.1"; which of the two holds the lengths is a guess
        raise ConfigError(KEY, f"a table with one {column} column", path,
                          f"keep one {column} column (rename or drop the other)",
                          context="its header names it twice")
    if frame[column].dtype.kind not in "iufO":  # dates, durations, booleans: not token counts
        raise ConfigError(KEY, "a file of integer lengths", path, "write each length as a whole "
                          "number of tokens", context=f"column {column} holds "
                          f"{frame[column].dtype} values")
    numeric = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    other = LENGTH_COLUMNS[1]
    if column != other and other in frame.columns and not np.array_equal(
            numeric, pd.to_numeric(frame[other], errors="coerce").to_numpy(dtype=np.float64),
            equal_nan=True):  # which of two length columns is meant is a guess
        raise ConfigError(KEY, f"a table with one length column ({column} or {other}, or both "
                          "with the same values)", path, f"drop the {other} column, or rename it",
                          context="they differ")
    bad = np.flatnonzero(~np.isfinite(numeric) | (numeric != np.round(numeric)))
    if bad.size:
        if frame[column].isna().iloc[bad[0]]:  # an empty cell (a Parquet null): none, not a bad one
            raise ConfigError(KEY, "a file of integer lengths", path, "fill or drop the rows "
                              "without a length", context=f"row {bad[0] + 1} of column {column} "
                              "is empty")
        raise _not_integer(path, f"row {bad[0] + 1} of column {column}")
    long = np.flatnonzero(numeric > MAX_SEQUENCE_TOKENS)
    if long.size:
        raise _too_long(path, f"row {long[0] + 1} of column {column}")
    return numeric.astype(np.int64), lambda row: f"row {row + 1} of column {column}"
