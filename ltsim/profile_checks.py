"""The rules a profile's tables are checked by when read or written (ltsim/profile_files.py):
their columns, the words and names their cells hold, whole counts, times from a nanosecond to an
hour, rates no hardware reaches, and points measured twice that disagree. Messages name the file,
the table and the row, never a cell's value (a profile may be pointed at any file)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from ltsim.errors import ProfileError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ltsim.profile_files import Table

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype", "time_s"),
    "gemm_bwd": ("m", "n", "k", "dtype", "time_s", "pass"),
    "attention": ("q_tokens", "kv_tokens", "num_heads", "num_kv_heads", "head_dim", "causal",
                  "pass", "time_s"),
    "collectives": ("op", "group_size", "scope", "bytes", "time_s"),
    # optional tables: what the cost model reads of them (ltsim/costs/eager.py, compute.py)
    "eager": ("model", "op", "layers", "num_tokens", "dtype", "time_s"),
    "elementwise": ("op", "num_tokens", "hidden", "dtype", "pass", "time_s"),
    "optimizer": ("model", "optimizer", "num_params", "dtype", "time_s"),
    "host_copy": ("direction", "host_memory", "bytes", "time_s"),  # ltsim/costs/host.py
}
# columns every row must fill with one of a few words
# how a row applied the causal mask (ltsim/profiler/attention.py); blank for published rows.
# CONTEXT_MASKS: paths only queries with context take (a boolean mask; torch's lower-right causal
# bias; the CPU flash kernel with a bottom-right mask), a kernel of their own (profiles.py)
CONTEXT_MASKS = ("bool_bottom_right", "causal_lower_right", "cpu_flash_bottom_right")
ATTENTION_MASKS = ("is_causal", "causal_bottom_right", *CONTEXT_MASKS, None)
# the names the cost model looks rows up by: a row of another name would be ignored without a
# word (a misspelt 'rmsnorm' drops the norms' time from every layer)
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
OP_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
              "alltoall": "all_to_all", "all2all": "all_to_all", "p2p": "send_recv",
              "sendrecv": "send_recv"}
ELEMENTWISE_OPS = ("rmsnorm", "residual_add", "swiglu", "rope", "layernorm", "gelu")
EAGER_OPS = ("F", "F_discard", "FB", "FdRB")  # ltsim/costs/eager.py
OPTIMIZERS = ("adam", "sgd")
CHOICE_COLUMNS: dict[str, dict[str, tuple[str | None, ...]]] = {
    "attention": {"pass": ("fwd", "bwd"), "mask": ATTENTION_MASKS},
    "gemm_bwd": {"pass": ("dgrad", "wgrad")},
    "collectives": {"scope": ("intra", "inter"), "op": (*COLLECTIVE_OPS, *OP_ALIASES)},
    "eager": {"stage": ("first", "middle", "last", None), "op": EAGER_OPS},  # blank: a middle stage
    "elementwise": {"op": ELEMENTWISE_OPS, "pass": ("fwd", "bwd")},
    "optimizer": {"optimizer": OPTIMIZERS},
    "host_copy": {"direction": ("d2h", "h2d"), "host_memory": ("pageable", "pinned")},
}
# columns every row must fill with a whole number of at least this: sizes and counts (where
# the table has them; eager's context_tokens may be blank: none)
COUNT_COLUMNS: dict[str, dict[str, int]] = {
    "gemm": {"m": 1, "n": 1, "k": 1},
    "gemm_bwd": {"m": 1, "n": 1, "k": 1},
    "attention": {"q_tokens": 1, "kv_tokens": 1, "num_heads": 1, "num_kv_heads": 1, "head_dim": 1},
    "collectives": {"group_size": 2, "bytes": 1},
    "eager": {"layers": 1, "num_tokens": 1, "context_tokens": 0, "hidden": 1},
    "elementwise": {"num_tokens": 1, "hidden": 1},
    "optimizer": {"num_params": 1, "hidden": 1},
    "host_copy": {"bytes": 1},
}
MAX_TIME_S = 3600.0  # no kernel, collective or op of a profile takes an hour
MIN_TIME_S = 1e-9  # nor less than a nanosecond (a few clock cycles)
# No GEMM runs at 10 PFLOP/s: about 4x the fastest GPU's dense BF16 (NVIDIA B200, 2.25 PFLOP/s,
# its datasheet); a row that implies more is a unit slip (ms as s) or a broken measurement
MAX_GEMM_FLOPS_PER_S = 10e15
# Nor does a collective move 10 TB/s of bus bandwidth (nccl-tests' busbw; 20x the 508 GB/s of
# the bundled H100 rows, about 10x NVLink 5's 900 GB/s a direction), nor attention run at 10
# PFLOP/s (13x the bundled H100's 756 TFLOP/s): a row past either is a unit slip
MAX_BUS_BYTES_PER_S = 10e12
MAX_ATTENTION_FLOPS_PER_S = 10e15
# columns every row must fill with a name (a word, not a number or a blank), where the table has them
TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("dtype",),
    "gemm_bwd": ("dtype",),
    "attention": ("kernel", "dtype"),  # mask may be blank: no mask
    "collectives": ("op", "scope"),
    "eager": ("model", "op", "dtype"),
    "elementwise": ("op", "dtype"),
    "optimizer": ("model", "optimizer", "dtype"),
}
# name columns a row may leave blank: attention rows published without a dtype (a numeric
# dtype was a TypeError where the cost model names the table's dtypes)
BLANK_NAMES = {("attention", "dtype")}
# a name in a TEXT_COLUMNS cell: a word of letters, digits, '_', '.' and '-' (an attention kernel
# may not hold '+': profiles.CONTEXT_SUFFIX marks a kernel's rows with context)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def _number(value: Any) -> float:
    """A cell as a number (NaN if it is none: text, or Python's ``1_024``, which pandas and the
    length files do not read)."""
    if isinstance(value, str) and "_" in value:
        return math.nan
    try:
        return float(value)
    except OverflowError:  # a whole number of hundreds of digits: past any bound
        return math.inf
    except (TypeError, ValueError):
        return math.nan


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _whole(value: Any, least: int) -> bool:
    """A whole number (1024 or 1024.0, never a bool) of at least ``least``."""
    if isinstance(value, bool):
        return False
    number = _number(value)
    return math.isfinite(number) and number == int(number) and number >= least


def check_table(name: str, frame: "pd.DataFrame | Table", *, source: str) -> None:
    """Raise ProfileError when a table lacks a required column, is empty, or holds a bad value:
    times (``MAX_TIME_S``), choices, names and counts by the tables above; the message names the
    row, never the value."""
    columns = list(frame.columns)
    missing = [c for c in TABLE_COLUMNS.get(name, ()) if c not in columns]
    if missing:
        # the columns found are the file's first line: counted, never quoted (a profile may be
        # pointed at any file)
        raise ProfileError(f"{source}: table '{name}' lacks column(s) {', '.join(missing)} "
                           f"({len(columns)} columns found). Fix: its first line must name the "
                           f"columns {', '.join(TABLE_COLUMNS[name])}")
    if len(frame) == 0:
        raise ProfileError(f"{source}: table '{name}' is empty. Fix: re-run the profiler for it")
    if "time_s" in columns and not all(MIN_TIME_S <= _number(v) <= MAX_TIME_S
                                       for v in frame["time_s"]):
        raise ProfileError(f"{source}: table '{name}' has time_s values that are not numbers "
                           f"of seconds from {MIN_TIME_S:g} to {MAX_TIME_S:g}. Fix: re-run the "
                           f"profiler for {name}")
    for column, allowed in CHOICE_COLUMNS.get(name, {}).items():
        if column not in columns:  # an optional column (eager's stage)
            continue
        bad = [i for i, v in enumerate(frame[column])
               if (None if _blank(v) else v) not in allowed]
        if bad:  # the row, not its value
            words = ", ".join(a for a in allowed if a) + (" or blank" if None in allowed else "")
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold one of "
                               f"{words} (data row {bad[0] + 1} does not). Fix: "
                               "correct those rows or re-run the profiler for this table")
    for column in (c for c in TEXT_COLUMNS.get(name, ()) if c in columns):
        blank_ok = (name, column) in BLANK_NAMES
        bad = [i for i, v in enumerate(frame[column]) if not (blank_ok and _blank(v)) and (
            not isinstance(v, str) or not NAME.fullmatch(v.strip()))]
        if bad:  # the row, not its value
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold names (letters, "
                               f"digits, '_', '.', '-'), not numbers or blanks (data row "
                               f"{bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct those "
                               "rows or re-run the profiler for this table")
    if name == "attention":
        _check_attention(frame, source)
    for column, least in COUNT_COLUMNS.get(name, {}).items():
        if column not in columns:
            continue
        blank_ok = column == "context_tokens"
        bad = [i for i, v in enumerate(frame[column]) if not (
            (blank_ok and _blank(v)) or _whole(v, least))]
        if bad:  # the row, not its value
            raise ProfileError(f"{source}: table '{name}' column '{column}' must hold whole "
                               f"numbers of at least {least} (data row {bad[0] + 1} does not, "
                               f"{len(bad)} rows in all). Fix: correct those rows or re-run the "
                               "profiler for this table")
    if name in ("gemm", "gemm_bwd"):
        _check_gemm_rate(name, frame, source)
    if name == "collectives":
        _check_collective_rate(frame, source)
    if name == "attention":
        _check_attention_rate(frame, source)
    _check_repeats(name, frame, source)
    if name == "eager":
        _check_eager(frame, source)


def _check_eager(frame: "pd.DataFrame | Table", source: str) -> None:
    """An FB row (forward and backward) takes longer than the F row of the same point: B = FB - F
    (costs/eager.py), so FB <= F made every backward's floor 0 s without a word."""
    keys = [c for c in frame.columns if c not in MEASUREMENT_COLUMNS and c != "op"]
    forward: dict[tuple, tuple[int, float]] = {}
    rows = list(zip(frame["op"], _keys(frame, keys), map(_number, frame["time_s"])))
    for row, (op, key, seconds) in enumerate(rows):
        if op == "F":
            forward.setdefault(key, (row, seconds))
    for row, (op, key, seconds) in enumerate(rows):
        found = forward.get(key) if op == "FB" else None
        if found is not None and seconds <= found[1]:
            raise ProfileError(f"{source}: table 'eager' must time an FB row (forward and "
                               f"backward) above the F row of its point (data row {row + 1} is "
                               f"not above row {found[0] + 1}). Fix: re-run the profiler for eager")


# what a row records of its measurement rather than of what was measured: rows equal in every
# other column are one point measured more than once
MEASUREMENT_COLUMNS = ("time_s", "time_s_spread", "repeats", "method", "source",
                       "algbw_bytes_per_s")
MAX_REPEAT_RATIO = 1.5  # the most a point's repeated measurements may disagree (slowest/fastest)


def _check_repeats(name: str, frame: "pd.DataFrame | Table", source: str) -> None:
    """A point measured more than once must agree with itself within ``MAX_REPEAT_RATIO``: the
    lookups combine repeats (a geometric mean, a median or the larger, by table), so a repeat
    ten times slower moved a GEMM's time 4x without a word. The rows are named, never values."""
    if "time_s" not in frame.columns:
        return
    keys = [c for c in frame.columns if c not in MEASUREMENT_COLUMNS]
    # per point, its fastest and slowest rows: (time, row) of each (the extremes, whatever the
    # rows' order: three repeats 2x apart passed when each was within 1.5x of the first)
    span: dict[tuple, tuple[tuple[float, int], tuple[float, int]]] = {}
    for row, (key, seconds) in enumerate(zip(_keys(frame, keys), map(_number, frame["time_s"]))):
        low, high = span.get(key, ((seconds, row), (seconds, row)))
        span[key] = (min(low, (seconds, row)), max(high, (seconds, row)))
    for (fast, one), (slow, other) in span.values():
        if slow > MAX_REPEAT_RATIO * fast:
            first, second = sorted((one, other))
            raise ProfileError(
                f"{source}: table '{name}' measures one point twice with times more than "
                f"{MAX_REPEAT_RATIO:g}x apart (data rows {first + 1} and {second + 1}, equal in "
                f"every column but "
                f"{', '.join(c for c in MEASUREMENT_COLUMNS if c in frame.columns)}). Fix: keep "
                "one row per point (the measurement you trust), or re-run the profiler for "
                f"{name}")


def _keys(frame: "pd.DataFrame | Table", columns: list[str]) -> list[tuple]:
    """Each row's cells of ``columns``, a blank cell as None: written by pandas a blank is a NaN
    of its own, which equals nothing (a table passed the checks written and failed them read)."""
    return [tuple(None if _blank(v) else v for v in row)
            for row in zip(*(frame[c] for c in columns))]


def _floats(column: Any) -> "np.ndarray":
    """A checked column as float64 (read as numbers, or as text of numbers)."""
    import numpy as np

    try:
        return np.asarray(column, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_number(v) for v in column], dtype=np.float64)


def _check_gemm_rate(name: str, frame: "pd.DataFrame | Table", source: str) -> None:
    """No row implies more than ``MAX_GEMM_FLOPS_PER_S`` (2 m n k / time_s; its columns already
    checked as whole numbers and times); the row is named, never its values."""
    import numpy as np

    m, n, k, time_s = map(_floats, (frame[c] for c in ("m", "n", "k", "time_s")))
    with np.errstate(over="ignore"):  # (sizes near 1e308: inf, refused, without numpy's warning)
        fast = np.flatnonzero(2 * m * n * k > MAX_GEMM_FLOPS_PER_S * time_s)
    if len(fast):
        raise ProfileError(f"{source}: table '{name}' data row {fast[0] + 1} implies more than "
                           f"{MAX_GEMM_FLOPS_PER_S / 1e15:g} PFLOP/s (2 m n k / time_s; the "
                           "fastest GPU's dense BF16 is 2.25). Fix: time_s is in seconds; "
                           f"correct the row or re-run the profiler for {name}")


def _check_collective_rate(frame: "pd.DataFrame | Table", source: str) -> None:
    """No row implies more than ``MAX_BUS_BYTES_PER_S`` of bus bandwidth (bytes / time_s times
    nccl-tests' bus factor); the row is named, never its values."""
    import numpy as np

    from ltsim.collectives import bus_factor  # (which imports this module's vocabulary)

    n, nbytes, time_s = map(_floats, (frame[c] for c in ("group_size", "bytes", "time_s")))
    with np.errstate(over="ignore", invalid="ignore"):  # (sizes near 1e308, as above)
        factor = np.array([bus_factor(OP_ALIASES.get(str(op), str(op)), size)
                           for op, size in zip(frame["op"], n)])
        fast = np.flatnonzero(nbytes * factor > MAX_BUS_BYTES_PER_S * time_s)
    if len(fast):
        raise ProfileError(f"{source}: table 'collectives' data row {fast[0] + 1} implies more "
                           f"than {MAX_BUS_BYTES_PER_S / 1e12:g} TB/s of bus bandwidth (bytes / "
                           "time_s x nccl-tests' bus factor; NVLink 5 moves 0.9 a direction). "
                           "Fix: time_s is in seconds and bytes in bytes; correct the row or "
                           "re-run the profiler for collectives")


def _check_attention_rate(frame: "pd.DataFrame | Table", source: str) -> None:
    """No row implies more than ``MAX_ATTENTION_FLOPS_PER_S``: 4 d h FLOPs a (query, key) pair
    a causal row's queries see (the last q of kv), 2.5 times that backward."""
    import numpy as np

    q, kv, heads, dim, time_s = map(_floats, (frame[c] for c in (
        "q_tokens", "kv_tokens", "num_heads", "head_dim", "time_s")))
    causal = np.array([str(c).strip().lower() == "true" for c in frame["causal"]])
    with np.errstate(over="ignore", invalid="ignore"):  # (sizes near 1e308, as above)
        pairs = q * kv - np.where(causal, q * (q - 1) / 2, 0.0)
        flops = 4 * pairs * heads * dim * np.where(np.array(
            [str(p) == "bwd" for p in frame["pass"]]), 2.5, 1.0)
        fast = np.flatnonzero(~(flops <= MAX_ATTENTION_FLOPS_PER_S * time_s))
    if len(fast):
        raise ProfileError(f"{source}: table 'attention' data row {fast[0] + 1} implies more than "
                           f"{MAX_ATTENTION_FLOPS_PER_S / 1e15:g} PFLOP/s (4 d h per query-key "
                           "pair, 2.5x backward). Fix: time_s is in seconds; correct the row or "
                           "re-run the profiler for attention")


def _check_attention(frame: "pd.DataFrame | Table", source: str) -> None:
    """``causal`` is True or False in every row, and a causal row's queries are the last q_tokens
    of its kv_tokens (q <= kv)."""
    causal = [str(v).strip().lower() for v in frame["causal"]]
    bad = [i for i, v in enumerate(causal) if v not in ("true", "false")]
    if bad:
        raise ProfileError(f"{source}: table 'attention' column 'causal' must hold True or False "
                           f"(data row {bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct "
                           "those rows or re-run the profiler for this table")
    bad = [i for i, (c, q, kv) in enumerate(zip(causal, frame["q_tokens"], frame["kv_tokens"]))
           if c == "true" and _number(q) > _number(kv)]
    if bad:
        raise ProfileError(f"{source}: table 'attention' must have q_tokens <= kv_tokens in its "
                           f"causal rows (the queries are the last q_tokens of kv_tokens; data row "
                           f"{bad[0] + 1} does not, {len(bad)} rows in all). Fix: correct those "
                           "rows or re-run the profiler for this table")
