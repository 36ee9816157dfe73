"""Profile tables: loader errors, exact table points, monotone lookups, range warnings, and the
shipped profiles answering the cost model's whole range (ltsim/profiles.py, ltsim/lookup.py)."""

from __future__ import annotations

import json
import math
import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ltsim.errors import ConfigError, ProfileError
from ltsim.lookup import attention_work
from ltsim.profile_files import read_meta
from ltsim.profiles import (PROFILES_DIR, Profile, ProfileMeta, load_profile, read_table,
                            write_meta, write_table)
from tests.conftest import REPO

SHIPPED = ["a100-sxm4-80gb", "h100-sxm5-80gb-public", "h200-public"]  # from published data
POWERS = [2**i for i in range(4, 13)]  # 16 .. 4096


def _gemm_frame() -> pd.DataFrame:
    rows = []
    for n, k in [(1024, 1024), (4096, 1024), (1024, 4096), (4096, 4096)]:
        for m in POWERS:  # 5 us floor, then 100 TFLOP/s
            rows.append((m, n, k, "bf16", 5e-6 + 2.0 * m * n * k / 100e12))
    return pd.DataFrame(rows, columns=["m", "n", "k", "dtype", "time_s"])


def _attention_frame() -> pd.DataFrame:
    rows = []
    for causal in (True, False):
        for pass_, factor in (("fwd", 1.0), ("bwd", 2.5)):
            for q in POWERS:
                for kv in POWERS:
                    if causal and kv < q:
                        continue
                    t = 2e-6 + factor * 4 * 128 * 16 * attention_work(q, kv, causal) / 200e12
                    rows.append((q, kv, 16, 16, 128, causal, pass_, t))
    return pd.DataFrame(rows, columns=["q_tokens", "kv_tokens", "num_heads", "num_kv_heads",
                                       "head_dim", "causal", "pass", "time_s"])


def _collective_frame() -> pd.DataFrame:
    rows = [("all_reduce", g, "intra", b, 10e-6 + 2 * (g - 1) / g * b / 100e9)
            for g in (2, 8) for b in [2**i for i in range(10, 31, 2)]]
    rows += [("send_recv", 2, "inter", b, 20e-6 + b / 10e9) for b in [2**i for i in range(10, 31, 2)]]
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_s"])


def _write_profile(directory, **tables: pd.DataFrame) -> str:
    frames = {"gemm": _gemm_frame(), "attention": _attention_frame(),
              "collectives": _collective_frame(), **tables}
    for name, frame in frames.items():
        write_table(directory, name, frame)
    write_meta(directory, ProfileMeta(device="toy", memory_bytes=2**30, method="analytic",
                                      date="2026-01-01"))
    return str(directory)


@pytest.fixture()
def toy(tmp_path) -> Profile:
    return load_profile(_write_profile(tmp_path / "toy"))


# -- loader errors ---------------------------------------------------------------------------
def test_missing_column(tmp_path):
    directory = _write_profile(tmp_path / "p")
    (tmp_path / "p" / "gemm.csv").write_text("m,n,k,dtype\n1,2,3,bf16\n")
    with pytest.raises(ProfileError, match=r"table 'gemm' lacks column\(s\) time_s"):
        Profile(directory)


def test_empty_table(tmp_path):
    directory = _write_profile(tmp_path / "p")
    (tmp_path / "p" / "attention.csv").write_text(",".join(_attention_frame().columns) + "\n")
    with pytest.raises(ProfileError, match="table 'attention' is empty"):
        Profile(directory)


def test_missing_meta(tmp_path):
    directory = _write_profile(tmp_path / "p")
    (tmp_path / "p" / "meta.json").unlink()
    with pytest.raises(ProfileError, match="has no meta.json"):
        Profile(directory)


def test_meta_json_is_replaced_in_one_step(tmp_path, monkeypatch):
    # the profiler rewrites meta.json after every table: a run killed in the middle of a write
    # left it truncated, and --resume then refused the folder
    first = ProfileMeta(device="toy", memory_bytes=2**30, method="analytic", date="2026-01-01")
    write_meta(tmp_path, first)
    write = Path.write_text

    def cut_short(self, text, *args, **kwargs):
        write(self, text[:10], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut_short)
    with pytest.raises(KeyboardInterrupt):
        write_meta(tmp_path, ProfileMeta(device="other", memory_bytes=1, method="measured",
                                         date="2026-01-02"))
    monkeypatch.undo()
    assert read_meta(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_missing_table(tmp_path):
    directory = _write_profile(tmp_path / "p")
    (tmp_path / "p" / "gemm.csv").unlink()
    with pytest.raises(ProfileError, match="has no gemm.csv"):
        Profile(directory)


@pytest.mark.parametrize("field, value", [("method", "bogus"), ("device", 123), ("device", ""),
                                          ("software", "x"), ("software", {"torch": 2}),
                                          ("date", 5), ("notes", ["a"])])
def test_meta_fields_of_the_wrong_kind(tmp_path, field, value):
    # each was accepted: only memory_bytes and tables were checked
    directory = _write_profile(tmp_path / "p")
    meta = tmp_path / "p" / "meta.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | {field: value}))
    with pytest.raises(ProfileError, match=r"meta.json must give device \(non-empty\), date.*"
                       r"method as one of measured, published, analytic, mixed, derived") as err:
        read_meta(directory)
    assert "bogus" not in str(err.value)  # a file's content is never quoted


def test_an_optional_table_that_is_a_link_to_nothing_is_not_left_out(tmp_path):
    # read as absent: cpu-ci without its eager table read 17% faster, without a word
    from ltsim.profile_files import read_optional_rows

    directory = _write_profile(tmp_path / "p")
    assert read_optional_rows(directory, "eager") is None  # absent: left out
    (tmp_path / "p" / "eager.csv").symlink_to(tmp_path / "nowhere.csv")
    with pytest.raises(ProfileError, match=r"has no eager.csv \(a link to no file there\)"):
        read_optional_rows(directory, "eager")


@pytest.mark.parametrize("table, column, value", [
    ("gemm", "dtype", 16), ("gemm", "dtype", None), ("attention", "kernel", 7),
    ("attention", "kernel", None), ("attention", "kernel", "torch_sdpa+context"),
    ("attention", "kernel", "torch sdpa")])
def test_a_name_column_holding_numbers_or_blanks(tmp_path, table, column, value):
    """A dtype or kernel column of numbers, blanks or other than a word names the column and the
    row (it was a TypeError or an IndexError in the lookups; a kernel named '...+context' hid
    another kernel's context rows)."""
    frame = {"gemm": _gemm_frame, "attention": _attention_frame}[table]()
    directory = _write_profile(tmp_path / "p")
    frame[column] = value
    frame.to_csv(tmp_path / "p" / f"{table}.csv", index=False)
    with pytest.raises(ProfileError, match=rf"table '{table}' column '{column}' must hold names "
                                           r"\(letters, .*\), not numbers or blanks \(data row 1"):
        Profile(directory)


@pytest.mark.parametrize("table, column, value, rule", [
    ("collectives", "group_size", 1, "whole numbers of at least 2"),  # a ZeroDivisionError
    ("collectives", "group_size", 2.5, "whole numbers of at least 2"),
    ("collectives", "op", None, "one of all_reduce, all_gather"),
    ("collectives", "op", "all_gathr", "one of all_reduce, all_gather"),  # derived from all_reduce
    ("collectives", "scope", "rack", "one of intra, inter"),
    ("eager", "hidden", "x", "whole numbers of at least 1"),  # a TypeError
    ("eager", "context_tokens", -5, "whole numbers of at least 0"),
    ("eager", "context_tokens", "inf", "whole numbers of at least 0"),  # an OverflowError
    ("eager", "stage", "bogus", "one of first, middle, last or blank"),
    ("eager", "op", None, "one of F, F_discard, FB, FdRB"),
    ("eager", "op", "FBB", "one of F, F_discard, FB, FdRB"),
    ("optimizer", "optimizer", "adamw", "one of adam, sgd"),
    ("elementwise", "op", "rmsnrom", "one of rmsnorm, residual_add"),  # the norms' time dropped
    ("optimizer", "model", None, "names"),
    ("elementwise", "num_tokens", 0.5, "whole numbers of at least 1"),  # numpy log warnings
    ("gemm", "time_s", 1e300, "numbers of seconds from 1e-09 to 3600"),
    ("gemm", "time_s", 1e-300, "numbers of seconds from 1e-09 to 3600"),  # MFU 0, exit 0
    ("attention", "mask", "bogus_mask", "one of is_causal, .*cpu_flash_bottom_right or blank"),
    ("attention", "causal", "maybe", "True or False"),  # read as False, silently
    ("attention", "causal", 1, "True or False"),
])
def test_the_optional_tables_columns_are_checked(tmp_path, table, column, value, rule):
    """Each of these edits of the CPU profile was a traceback, a warning from numpy, or a silently
    different prediction (an op name the cost model never looks up: its rows ignored)."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    frame = read_table(directory, table)
    frame[column] = frame[column].astype(object)
    frame.loc[frame.index[::2], column] = value  # every other row
    frame.to_csv(directory / f"{table}.csv", index=False)
    from ltsim.profile_files import read_optional_rows

    with pytest.raises(ProfileError, match=rf"table '{table}' column '{column}' must hold {rule}|"
                                           rf"table '{table}' has time_s values that are not {rule}"):
        Profile(directory)
        read_optional_rows(directory, table)


@pytest.mark.parametrize("table", ["gemm", "gemm_bwd"])
def test_a_gemm_row_faster_than_any_gpu_is_refused(tmp_path, table):
    """A fuzzing review: times in ms read as s (or 1e-300) gave 1.4M tokens/s and MFU 0 with
    exit 0; a row implying more than 10 PFLOP/s names its row."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    frame = read_table(directory, table)
    row = 7
    flops = 2 * frame["m"].iloc[row] * frame["n"].iloc[row] * frame["k"].iloc[row]
    frame.loc[frame.index[row], "time_s"] = flops / 20e15  # 20 PFLOP/s
    frame.to_csv(directory / f"{table}.csv", index=False)
    from ltsim.profile_files import read_optional_rows

    with pytest.raises(ProfileError, match=rf"table '{table}' data row {row + 1} implies more "
                                           r"than 10 PFLOP/s"):
        Profile(directory) if table == "gemm" else read_optional_rows(directory, table)


@pytest.mark.parametrize("table,factor,refused", [
    ("gemm", 100.0, True), ("collectives", 100.0, True), ("attention", 1 / 100, True),
    ("gemm", 1.2, False), ("host_copy", 100.0, True)])
def test_a_point_measured_twice_must_agree_with_itself(tmp_path, table, factor, refused):
    """A fuzzing review: a row repeated at 100x its time was combined without a word, by each
    table its own way (the geometric mean in GEMM's, spreading 4x into its neighbours; the
    larger in attention's; the median in host_copy's). Repeats within 1.5x (noise) still
    read; further apart the rows are named."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    frame = read_table(directory, table)
    repeat = frame.iloc[[3]].copy()
    repeat["time_s"] = repeat["time_s"] * factor
    pd.concat([frame, repeat]).to_csv(directory / f"{table}.csv", index=False)
    from ltsim.profile_files import read_optional_rows

    if refused:
        with pytest.raises(ProfileError, match=rf"table '{table}' measures one point twice .* "
                                               rf"\(data rows 4 and {len(frame) + 1},"):
            read_optional_rows(directory, table)
    else:
        assert len(read_optional_rows(directory, table)) == len(frame) + 1


def test_attention_rows_of_two_dtypes_are_read_by_the_model_dtype(tmp_path):
    """A fuzzing review: the h100 table's rows again as fp32 at 10x their time were combined
    with the bf16 ones (449 ms -> 1.07 s, no warning). The profiler writes both dtypes when it
    profiles an fp32 and a bf16 model together, so each dtype's rows are a lookup of their own
    (a commit review: refusing the table failed such a profiler run after measuring it)."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    frame = read_table(directory, "attention")
    other = frame[frame["dtype"] == "bf16"].copy()
    other["dtype"], other["time_s"] = "fp32", other["time_s"] * 10
    pd.concat([frame, other]).to_csv(directory / "attention.csv", index=False)
    bundled, both = load_profile("h100-sxm5-80gb"), Profile(directory)
    assert both.attention_dtypes == {"bf16", "fp32"}
    shape = dict(num_heads=28, num_kv_heads=4, head_dim=128)
    for dtype, factor in (("bf16", 1), ("fp16", 1), ("fp32", 10)):  # (fp16: bf16 stands in)
        assert both.attention_time_s(8192, 8192, dtype=dtype, **shape) == pytest.approx(
            factor * bundled.attention_time_s(8192, 8192, dtype="bf16", **shape))


def test_elementwise_rows_are_read_by_the_model_dtype(tmp_path):
    """fp32 rows at 10x beside the bf16 ones moved a bf16 model's layers; they are another
    dtype's, unread; a model of a dtype the table lacks is said."""
    from ltsim.costs.table import TableCostModel
    from ltsim.hardware import ClusterSpec, get_device
    from ltsim.model import get_model

    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    model = get_model("qwen2.5-7b")

    def layer_s():
        cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), profile=str(directory))
        cost = TableCostModel(model, cluster)
        return cost._compute._elementwise_s(8192, 1), cost.warnings()

    (before, _), frame = layer_s(), read_table(directory, "elementwise")
    other = frame.copy()
    other["dtype"], other["time_s"] = "fp32", other["time_s"] * 10
    pd.concat([frame, other]).to_csv(directory / "elementwise.csv", index=False)
    after, notes = layer_s()
    assert after == before and not [n for n in notes if "elementwise.csv" in n]
    model = replace(model, dtype="fp16")  # bf16's rows stand in, as for GEMMs (a commit review:
    fp16, notes = layer_s()  # an fp16 model was priced from bytes, 28% fast)
    assert fp16 == before and not [n for n in notes if "elementwise.csv" in n]
    model = replace(model, dtype="bf16")
    other.to_csv(directory / "elementwise.csv", index=False)  # fp32 rows only
    _, notes = layer_s()
    assert [n for n in notes if n.startswith("elementwise.csv has no bf16 rows")]


def test_repeats_are_judged_by_their_extremes_whatever_their_order(tmp_path):
    """A review: 0.010, 0.0145 and 0.007 s (2.07x apart) passed, each within 1.5x of the first;
    the fastest and the slowest rows are named."""
    from ltsim.profile_files import read_optional_rows

    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    (directory / "host_copy.csv").write_text(
        "direction,host_memory,bytes,time_s\nd2h,pageable,1048576,0.010\n"
        "d2h,pageable,1048576,0.0145\nd2h,pageable,1048576,0.007\n")
    with pytest.raises(ProfileError, match=r"\(data rows 2 and 3, equal"):
        read_optional_rows(directory, "host_copy")


def test_a_column_named_twice_is_refused(tmp_path):
    """A header naming time_s twice read the last copy (a column of 5 s: MFU 0%)."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    lines = (directory / "gemm.csv").read_text().splitlines()
    (directory / "gemm.csv").write_text("\n".join([lines[0] + ",time_s"]
                                                  + [line + ",5" for line in lines[1:]]) + "\n")
    fields = len(lines[0].split(","))
    with pytest.raises(ProfileError, match=rf"names a column twice in its header \(fields \d+ "
                                           rf"and {fields + 1}\)"):
        Profile(directory)


def test_a_causal_attention_row_with_more_queries_than_keys(tmp_path):
    # a (kernel, pass) group of only such rows was a ValueError in the lookup; one beside valid
    # rows was dropped silently
    directory = _write_profile(tmp_path / "p")
    frame = _attention_frame()
    frame.loc[0, "q_tokens"] = frame.loc[0, "kv_tokens"] * 2
    frame.to_csv(tmp_path / "p" / "attention.csv", index=False)
    with pytest.raises(ProfileError, match=r"q_tokens <= kv_tokens in its causal rows .*data row 1"):
        Profile(directory)


@pytest.mark.parametrize("default", ["fa9", 5, None, ""])
def test_a_default_kernel_the_table_lacks(tmp_path, default):
    # it fell back to the first kernel without a word
    import json

    directory = _write_profile(tmp_path / "p")
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    meta.setdefault("tables", {}).setdefault("attention", {})["default_kernel"] = default
    (tmp_path / "p" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ProfileError, match=r"meta.json: tables.attention.default_kernel must name "
                                           r"one of the kernels attention.csv holds \(default\)"):
        Profile(directory)


def test_a_row_with_fewer_fields_than_its_header(tmp_path):
    directory = _write_profile(tmp_path / "p")
    path = tmp_path / "p" / "gemm.csv"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError, match=r"as many fields in every row as in its header \(some "
                                           r"rows have fewer\)"):
        Profile(directory)


def test_an_attention_table_with_only_context_rows(tmp_path):
    directory = _write_profile(tmp_path / "p")
    frame = _attention_frame().assign(mask="causal_lower_right")
    frame.to_csv(tmp_path / "p" / "attention.csv", index=False)
    with pytest.raises(ProfileError, match="no rows of attention without context"):
        Profile(directory)


def test_unknown_profile_lists_available():
    with pytest.raises(ProfileError, match=r"unknown profile 'no-such-gpu'.*h100-sxm5-80gb"):
        load_profile("no-such-gpu")


def test_unknown_dtype_and_kernel(toy, tmp_path):
    with pytest.raises(ProfileError, match="no rows for dtype 'fp32'"):
        toy.gemm_time_s(16, 1024, 1024, dtype="fp32")
    assert toy.gemm_time_s(16, 1024, 1024, dtype="fp16") == toy.gemm_time_s(16, 1024, 1024)
    with pytest.raises(ConfigError, match="attention_kernel' must be one of default"):
        Profile(toy.path, attention_kernel="fa9")


def test_a_missing_dtype_does_not_quote_the_tables_cells(tmp_path):
    # the tables' dtype cells are file content: the message names only dtypes it knows
    directory = _write_profile(tmp_path / "p")
    gemm = tmp_path / "p" / "gemm.csv"
    gemm.write_text(gemm.read_text().replace("bf16", "ZZSECRET"))
    with pytest.raises(ProfileError, match=r"no rows for dtype 'bf16' \(none of bf16") as raised:
        Profile(directory).gemm_time_s(16, 1024, 1024)
    assert "ZZSECRET" not in str(raised.value)


def test_bare_name_resolves_and_caches():
    assert load_profile("h100-sxm5-80gb") is load_profile(PROFILES_DIR / "h100-sxm5-80gb")


# -- exact table points ------------------------------------------------------------------------
def test_gemm_reproduces_points(toy):
    for m, n, k, _, t in _gemm_frame().itertuples(index=False):
        assert toy.gemm_time_s(m, n, k) == pytest.approx(t, rel=1e-12)
    assert toy.take_warnings() == []


def test_attention_reproduces_points(toy):
    for q, kv, heads, kv_heads, hd, causal, pass_, t in _attention_frame().itertuples(index=False):
        got = toy.attention_time_s(q, kv, num_heads=heads, num_kv_heads=kv_heads, head_dim=hd,
                                   causal=causal, pass_=pass_)
        assert got == pytest.approx(t, rel=1e-12)


def test_collectives_reproduce_points(toy):
    for op, g, scope, b, t in _collective_frame().itertuples(index=False):
        assert toy.collective_time_s(op, group_size=g, scope=scope, num_bytes=b) == \
            pytest.approx(t, rel=1e-12)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_published_attention_points_exact(name):
    profile = load_profile(name)
    rows = read_table(profile.path, "attention")
    rows = rows[(rows.method == "published") & (rows.kernel == profile.attention_kernel)]
    assert len(rows) >= 40
    for r in rows.itertuples(index=False):
        got = profile.attention_time_s(r.q_tokens, r.kv_tokens, num_heads=r.num_heads,
                                       num_kv_heads=r.num_kv_heads, head_dim=r.head_dim,
                                       causal=bool(r.causal), pass_=r._6)
        assert got == pytest.approx(r.time_s, rel=1e-9)


def test_scattered_attention_table(tmp_path):
    """A profiler's (q, kv) pairs form no grid: inverse-distance weighting of time per work."""
    pairs = [(16, 16), (16, 64), (16, 2048), (128, 128), (128, 512), (128, 2048), (1024, 1024),
             (1024, 2048)]
    frame = pd.DataFrame([(q, kv, 4, 4, 64, True, p, 1e-6 + 4 * 64 * 4 * attention_work(q, kv, True)
                           / (50e12 if q < 128 else 80e12)) for q, kv in pairs for p in ("fwd", "bwd")],
                         columns=_attention_frame().columns)
    profile = load_profile(_write_profile(tmp_path / "p", attention=frame))
    args = dict(num_heads=4, num_kv_heads=4, head_dim=64)
    for q, kv, *_, pass_, t in frame.itertuples(index=False):
        assert profile.attention_time_s(q, kv, pass_=pass_, **args) == pytest.approx(t, rel=1e-12)
    low, high = (profile.attention_time_s(q, kv, **args) for q, kv in ((128, 512), (1024, 2048)))
    assert low < profile.attention_time_s(512, 1024, **args) < high


# -- scaling rules -------------------------------------------------------------------------------
def test_attention_scales_with_heads_and_head_dim(toy):
    base = toy.attention_time_s(1024, 4096, num_heads=16, num_kv_heads=4, head_dim=128)
    assert toy.attention_time_s(1024, 4096, num_heads=32, num_kv_heads=8, head_dim=128) == \
        pytest.approx(2 * base)
    assert toy.attention_time_s(1024, 4096, num_heads=16, num_kv_heads=16, head_dim=64) == \
        pytest.approx(base / 2)
    assert toy.warnings() == ["attention: head_dim=64 outside measured 128..128 "
                              "(time scaled in proportion to head_dim)"]


def test_gemm_between_shapes_is_bracketed(toy):
    t = toy.gemm_time_s(1024, 2048, 2048)
    assert toy.gemm_time_s(1024, 1024, 1024) < t < toy.gemm_time_s(1024, 4096, 4096)


def test_collective_rules(toy):
    assert toy.collective_time_s("all_reduce", group_size=1, scope="intra", num_bytes=2**20) == 0.0
    ar = toy.collective_time_s("all_reduce", group_size=8, scope="intra", num_bytes=2**24)
    assert toy.collective_time_s("all_gather", group_size=8, scope="intra", num_bytes=2**24) == \
        pytest.approx(ar / 2)
    ar4 = toy.collective_time_s("all_reduce", group_size=4, scope="intra", num_bytes=2**24)
    assert ar4 == pytest.approx(ar * (2 * 3 / 4) / (2 * 7 / 8))  # nearest group, bus factor
    text = " ".join(toy.take_warnings())
    assert "no all_gather rows (intra); derived from all_reduce x 0.5" in text
    assert "all_reduce group_size=4 (intra) not in table; used 8" in text
    with pytest.raises(ValueError, match="op must be one of"):
        toy.collective_time_s("broadcast", group_size=2, scope="intra", num_bytes=1)


# -- monotone in tokens ----------------------------------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
def test_gemm_monotone_in_m(name):
    profile = load_profile(name)
    ms = np.unique(np.geomspace(1, 400_000, 150).astype(int))
    for n, k in [(896, 896), (1152, 896), (4608, 3584), (6144, 4096), (29568, 8192), (4096, 1792)]:
        times = [profile.gemm_time_s(int(m), n, k) for m in ms]
        assert np.all(np.diff(times) >= 0), (n, k)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_monotone_in_tokens(name, causal):
    profile = load_profile(name)
    tokens = np.unique(np.geomspace(1, 300_000, 80).astype(int))

    def t(q, kv, pass_="fwd"):
        return profile.attention_time_s(int(q), int(kv), num_heads=28, num_kv_heads=4,
                                        head_dim=128, causal=causal, pass_=pass_)
    for pass_ in ("fwd", "bwd"):
        assert np.all(np.diff([t(s, s, pass_) for s in tokens]) >= 0)  # whole sequences
        for q in (1, 300, 8192):  # more context
            assert np.all(np.diff([t(q, kv, pass_) for kv in tokens if kv >= q]) >= 0)
        for kv in (4096, 262144):  # a longer slice of the same sequence
            assert np.all(np.diff([t(q, kv, pass_) for q in tokens if q <= kv]) >= 0)


@pytest.mark.parametrize("kernel", ["torch_sdpa", "torch_sdpa_boolmask"])
def test_measured_context_attention_is_monotone(kernel):
    # the H100 profile's context rows are the 15 (q, kv) pairs q < kv of two power-of-4 axes a
    # step apart: not taken as a grid, they were weighted by inverse distance, and 128 queries
    # after 1152 keys cost less than after 640, 512 queries after 513 keys less than 128 after
    # 512 (a review)
    profile = load_profile("h100-sxm5-80gb", attention_kernel=kernel)
    tokens = np.unique(np.geomspace(2, 262_144, 90).astype(int))

    def t(q, kv, pass_):
        return profile.attention_time_s(int(q), int(kv), num_heads=7, num_kv_heads=1,
                                        head_dim=128, causal=True, pass_=pass_)
    for pass_ in ("fwd", "bwd"):
        for q in (128, 300, 512, 2048):
            assert np.all(np.diff([t(q, kv, pass_) for kv in tokens if kv > q]) >= 0), q
        for kv in (640, 1152, 4096, 65536):
            assert np.all(np.diff([t(q, kv, pass_) for q in tokens if q < kv]) >= 0), kv
        assert t(512, 513, pass_) >= t(128, 512, pass_)


def test_collectives_monotone_in_bytes():
    profile = load_profile("h100-sxm5-80gb")
    sizes = np.geomspace(1, 2**35, 120)
    for op, g, scope in [("all_reduce", 8, "intra"), ("send_recv", 2, "inter"),
                         ("all_gather", 32, "inter"), ("all_to_all", 4, "intra")]:
        times = [profile.collective_time_s(op, group_size=g, scope=scope, num_bytes=int(b))
                 for b in sizes]
        assert np.all(np.diff(times) >= 0), op


# -- warnings ----------------------------------------------------------------------------------
def test_out_of_range_warnings(toy):
    toy.take_warnings()
    inside = toy.gemm_time_s(4096, 4096, 4096)
    assert toy.gemm_time_s(8192, 4096, 4096) == pytest.approx(2 * inside)  # constant throughput
    toy.gemm_time_s(16384, 4096, 4096)
    assert toy.gemm_time_s(1, 4096, 4096) == toy.gemm_time_s(16, 4096, 4096)  # latency floor
    toy.attention_time_s(300_000, 300_000, num_heads=16, num_kv_heads=16, head_dim=128)
    assert toy.warnings() == [
        "attention: kv_tokens=300000 above measured max 4096 (extrapolated at constant throughput)",
        "attention: q_tokens=300000 above measured max 4096 (extrapolated at constant throughput)",
        "gemm: m=1 below measured min 16 (held at the smallest measured point)",
        "gemm: m=16384 above measured max 4096 (extrapolated at constant throughput)"]
    assert len(toy.take_warnings()) == 4
    assert toy.warnings() == []
    toy.gemm_time_s(16384, 4096, 4096)  # a cached lookup warns again after take_warnings()
    assert len(toy.warnings()) == 1


# -- shipped profiles over the cost model's range ---------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_answer_whole_range(name):
    profile = load_profile(name)
    assert profile.meta.memory_bytes == profile.memory_bytes > 70 * 2**30
    profile.take_warnings()
    for hidden in (896, 3584, 8192):
        for out in (128, hidden, 30_000 // 8, 30_000):
            for m in (1, 100, 4096, 65_536, 300_000):
                t = profile.gemm_time_s(m, out, hidden)
                assert math.isfinite(t) and t > 0
                if m >= 4096 and out >= 1024:
                    tflops = 2 * m * out * hidden / t / 1e12
                    assert 50 < tflops < 1000, (hidden, out, m, tflops)
    for q, kv in [(1, 1), (100, 100), (8192, 8192), (8192, 262_144), (262_144, 262_144),
                  (262_144, 400_000)]:
        for pass_ in ("fwd", "bwd"):
            t = profile.attention_time_s(q, kv, num_heads=28, num_kv_heads=4, head_dim=128,
                                         pass_=pass_)
            tflops = 4 * 128 * 28 * attention_work(q, kv, True) * (2.5 if pass_ == "bwd" else 1)
            assert t > 0 and (q < 4096 or 50 < tflops / t / 1e12 < 1000)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        for scope, group in (("intra", 8), ("inter", 16)):
            t = profile.collective_time_s(op, group_size=group, scope=scope, num_bytes=2**28)
            assert 1e-5 < t < 1.0
    assert profile.warnings() == []  # all of the above lies inside the tables


def test_h100_kernels_and_h200_memory():
    fa3 = load_profile("h100-sxm5-80gb-public")
    fa2 = load_profile("h100-sxm5-80gb-public", attention_kernel="fa2")
    assert fa3.attention_kernel == "fa3" and fa2.attention_kernel == "fa2"
    args = dict(num_heads=32, num_kv_heads=8, head_dim=128)
    assert fa2.attention_time_s(8192, 8192, **args) > 1.3 * fa3.attention_time_s(8192, 8192, **args)
    assert load_profile("h200").memory_bytes == 141 * 10**9
    assert load_profile("a100-sxm4-80gb").attention_kernel == "fa2"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_tables_carry_provenance(name):
    profile = load_profile(name)
    for table in ("gemm", "attention", "collectives"):
        frame = read_table(profile.path, table)
        assert set(frame.method) <= {"published", "analytic"}
        assert frame.source.notna().all()
        assert "published" in set(frame.method)
        assert profile.meta.tables[table]["sources"]


def test_measured_h100_is_the_default_with_its_masked_kernel_apart():
    """The h100-sxm5-80gb preset's tables are measured (validation/profiles) with published
    collectives; queries with context use the lower-right kernel's rows, never the diagonal's."""
    profile = load_profile("h100-sxm5-80gb")
    assert profile.attention_kernel == "torch_sdpa"
    assert set(read_table(profile.path, "collectives").method) <= {"published", "analytic"}
    assert profile.meta.tables["collectives"]["copied_from"].startswith("profiles/h100-sxm5-80gb-public")
    args = dict(num_heads=32, num_kv_heads=32, head_dim=128)
    # the measured rows themselves: (2048, 8192) masked and (8192, 8192) causal
    frame = read_table(profile.path, "attention")
    row = frame[(frame.q_tokens == 2048) & (frame.kv_tokens == 8192) & (frame.num_heads == 32)
                & (frame["pass"] == "fwd") & (frame.kernel == "torch_sdpa")]
    assert profile.attention_time_s(2048, 8192, **args) == pytest.approx(float(row.time_s.iloc[0]))
    # a slice with context between grid points is priced from masked rows only: slower per unit
    # of work than the is_causal kernel of a whole sequence
    ctx = profile.attention_time_s(4096, 12288, **args) / attention_work(4096, 12288, True)
    whole = profile.attention_time_s(8192, 8192, **args) / attention_work(8192, 8192, True)
    assert ctx > 1.5 * whole
    assert load_profile("h100-sxm5-80gb", attention_kernel="fa2").attention_kernel == "fa2"

def test_monotone_attention_lifts_each_row_to_the_largest_time_it_dominates():
    """The sweep over sorted q (a Fenwick tree of maxima over kv) gives the definition: each
    row's time becomes the largest time of its kernel group at q' <= q and kv' <= kv (random rows,
    ties and repeats included, few and many distinct kv)."""
    from ltsim.profiles import _monotone_attention

    rng = random.Random(3)
    for trial in range(80):
        kvs = [1, 3, 9] if trial % 2 else list(range(1, 60))
        rows = [(rng.choice("ab"), "fwd", True, 128, rng.choice([8, 16]), rng.choice([1, 2, 4, 8]),
                 rng.choice(kvs), rng.random()) for _ in range(rng.randint(1, 80))]
        expected = [(*row[:7], max(r[7] for r in rows if r[:5] == row[:5] and r[5] <= row[5]
                                   and r[6] <= row[6])) for row in rows]
        assert sorted(_monotone_attention(rows)) == sorted(expected)


def test_only_the_profiles_own_files_are_read_and_each_at_most_64_mib(tmp_path, monkeypatch):
    # the cache's key read every *.csv of the folder whole (a 200 GB stray file: the OOM killer),
    # and a sweep's store key every file under it (a profile of / took minutes)
    import shutil

    import ltsim.profile_cache as cache
    from ltsim.profile_files import MAX_TABLE_BYTES, PROFILE_FILES
    from ltsim.sweepstore import _sized_digest

    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    with open(directory / "zzz.csv", "wb") as stray:
        stray.truncate(2 * MAX_TABLE_BYTES)  # sparse: no disk used
    read = []
    real = cache.read_input
    monkeypatch.setattr(cache, "read_input", lambda path, *a: read.append(path.name) or real(path, *a))
    assert cache._digest(directory, "") is not None
    assert "zzz.csv" not in read and set(read) <= set(PROFILE_FILES)
    assert _sized_digest(directory / "zzz.csv", MAX_TABLE_BYTES) == f"size:{2 * MAX_TABLE_BYTES}"
    with open(directory / "gemm.csv", "r+b") as table:
        table.truncate(MAX_TABLE_BYTES + 1)
    with pytest.raises(ProfileError, match=r"gemm.csv: table 'gemm' must be at most 64 MiB"):
        Profile(directory)


@pytest.mark.parametrize("name", sorted(p.name for p in PROFILES_DIR.iterdir()
                                        if (p / "meta.json").exists()))
def test_gemm_blend_reads_each_curve_as_the_curve_does(name):
    # GemmLookup.time_s reads its blend's curves inline (a lookup reads up to dozens): the same
    # time and the same range notes as calling each curve, bit for bit, over shapes inside,
    # between and beyond the bundled tables
    from ltsim.lookup import ABOVE, INSIDE, _clamp_note

    gemm = load_profile(name)._gemm
    rng = random.Random(0)
    for dtype in gemm.dtypes:
        for _ in range(300):
            m = rng.choice([1, 100, 4096, 65536, 10**6, 3 * 10**7]) * rng.uniform(0.5, 2)
            m = int(m) if rng.random() < 0.7 else m
            n = rng.choice([64, 1024, 4096, 18944, 38016, 10**6]) * rng.uniform(0.5, 2)
            k = rng.choice([64, 1024, 3584, 5120, 18944, 10**6]) * rng.uniform(0.5, 2)
            notes, want_notes = [], []
            (n_lo, n_hi), (k_lo, k_hi) = gemm._ranges[dtype]
            nc = _clamp_note(want_notes, "gemm", "n", n, n_lo, n_hi)
            kc = _clamp_note(want_notes, "gemm", "k", k, k_lo, k_hi)
            log_t = math.log(nc) + math.log(kc)
            for w, lnk, curve in gemm._blend(dtype, math.log(nc), math.log(kc)):
                t, where = curve(m)
                if where != INSIDE and w > 0.05:
                    want_notes.append(("range", "gemm", "m", m,
                                       curve.x_max if where == ABOVE else curve.x_min, where))
                log_t += w * (math.log(t) - lnk)
            want = math.exp(log_t) * max(1.0, (n * k) / (nc * kc))
            assert gemm.time_s(m, n, k, dtype, notes) == want and notes == want_notes


def test_the_h200_preset_prices_with_the_measured_h100_tables():
    # the same GH100 compute and host: the h200 preset read only public tables (FA3, no eager
    # floors) while h100's read measured ones, and the quickstart ran 25% faster on "H200"
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    h100, h200 = load_profile("h100-sxm5-80gb"), load_profile("h200")
    for table in ("gemm", "gemm_bwd", "attention", "elementwise", "eager", "optimizer"):
        assert (Path(h200.path) / f"{table}.csv").read_bytes() == \
            (Path(h100.path) / f"{table}.csv").read_bytes()
    assert (Path(h200.path) / "collectives.csv").read_bytes() == \
        (Path(load_profile("h200-public").path) / "collectives.csv").read_bytes()
    assert h200.attention_kernel == h100.attention_kernel and h200.memory_bytes == 141 * 10**9
    times = {preset: simulate(load_scenario(REPO / "scenarios" / "quickstart.toml", [
        f"hardware.preset={preset}", "workload.num_batches=1"])).batches[0].iteration_time_s
        for preset in ("h100-sxm5-80gb", "h200")}
    assert times["h200"] <= times["h100-sxm5-80gb"] < 1.05 * times["h200"]  # collectives alone


def test_a_bundled_profile_is_found_with_a_trailing_slash_or_in_another_case():
    """hardware.profile = "cpu-ci/" (a folder's name) and "CPU-CI" were refused as unknown,
    while model, dataset and strategy names are case-insensitive."""
    from ltsim.profiles import PROFILES_DIR, resolve_profile

    want = (PROFILES_DIR / "cpu-ci").resolve()
    for text in ("cpu-ci", "cpu-ci/", "CPU-CI", "Cpu-Ci/", "profiles/cpu-ci/"):
        assert resolve_profile(text) == want, text
    with pytest.raises(ProfileError):
        resolve_profile("nosuch/")


def test_a_local_profile_folder_written_with_a_slash_is_the_local_one(tmp_path, monkeypatch):
    """``cpu-ci/`` (as a shell completes a folder) names the folder here, not the bundled one."""
    from ltsim.profiles import resolve_profile

    shutil.copytree(PROFILES_DIR / "cpu-ci", tmp_path / "cpu-ci")
    monkeypatch.chdir(tmp_path)
    assert resolve_profile("cpu-ci/") == (tmp_path / "cpu-ci").resolve()
    assert resolve_profile("cpu-ci") == (PROFILES_DIR / "cpu-ci").resolve()


@pytest.mark.parametrize("lookup", [
    lambda p: p.gemm_time_s(np.float32("nan"), 64, 64, "bf16"),
    lambda p: p.gemm_time_s(-math.inf, 64, 64, "bf16"),
    lambda p: p.attention_time_s(np.float32("inf"), 64, num_heads=8, num_kv_heads=8,
                                 head_dim=128),
    lambda p: p.collective_time_s("all_reduce", group_size=8, scope="intra",
                                  num_bytes=np.float64("nan")),
    lambda p: p.gemm_time_s(math.nan, 64, 64, "bf16"),
    lambda p: p.attention_time_s(math.inf, math.inf, num_heads=8, num_kv_heads=8, head_dim=128),
    lambda p: p.collective_time_s("all_reduce", group_size=8, scope="intra", num_bytes=math.nan)])
def test_a_lookup_of_a_size_that_is_not_finite_is_a_value_error(lookup):
    """A fuzzing review: NaN was an IndexError inside the lookup, inf a finite 3.6 s."""
    with pytest.raises(ValueError, match=r"lookup needs finite sizes"):
        lookup(load_profile("h100-sxm5-80gb"))


@pytest.mark.parametrize("table,pattern", [
    ("collectives", r"table 'collectives' data row 8 implies more than 10 TB/s of bus bandwidth"),
    ("attention", r"table 'attention' data row 8 implies more than 10 PFLOP/s")])
def test_a_collective_or_attention_row_faster_than_any_hardware_is_refused(tmp_path, table,
                                                                           pattern):
    """A fuzzing review: collectives.csv at 1e-3 of its times (1000x NVLink) read a prediction
    of 400 ms without a word; as GEMM rows past 10 PFLOP/s are, such rows are named."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "h100-sxm5-80gb", directory)
    frame = read_table(directory, table)
    frame.loc[frame.index[7], "time_s"] = 1e-9  # the least time a row may hold
    frame.to_csv(directory / f"{table}.csv", index=False)
    from ltsim.profile_files import read_optional_rows

    with pytest.raises(ProfileError, match=pattern):
        read_optional_rows(directory, table)


def test_a_kernel_timed_in_another_dtype_only_reads_its_rows_of_every_dtype(tmp_path):
    """A commit review: the profiler labels fp32 attention torch_sdpa and bf16 flash_attn_varlen
    (with flash-attn installed), so a per-dtype lookup lacked the default kernel: a KeyError
    traceback. That kernel's rows are read whatever their dtype, and the warnings say so."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    frame = read_table(directory, "attention")
    other = frame.copy()
    other["dtype"], other["kernel"] = "bf16", "flash_attn_varlen"
    pd.concat([frame, other]).to_csv(directory / "attention.csv", index=False)
    profile = Profile(directory)  # default kernel: the first, torch_sdpa (fp32 rows only)
    shape = dict(num_heads=8, num_kv_heads=4, head_dim=32)
    fp32 = profile.attention_time_s(64, 64, dtype="fp32", **shape)
    assert profile.attention_time_s(64, 64, dtype="bf16", **shape) == fp32
    assert [w for w in profile.warnings() if "has no torch_sdpa rows of bf16" in w]


def test_attention_dtypes_are_names_or_blank(tmp_path):
    """A review: a dtype cell of 32 was a TypeError traceback where the dtypes are named."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    frame = read_table(directory, "attention")
    frame["dtype"] = 32  # a column of numbers reads as numbers
    frame.to_csv(directory / "attention.csv", index=False)
    with pytest.raises(ProfileError, match=r"table 'attention' column 'dtype' must hold names"):
        Profile(directory)
    frame["dtype"] = "fp32"
    frame["dtype"] = frame["dtype"].astype(object)
    frame.loc[frame.index[2], "dtype"] = None  # a blank dtype: a published row
    frame.to_csv(directory / "attention.csv", index=False)
    Profile(directory)


def test_repeats_with_blank_cells_are_judged_alike_written_and_read(tmp_path):
    """A review: pandas writes a blank cell as a NaN of its own, which equals nothing, so a
    table passed the repeats check when written and failed it when read."""
    frame = read_table(PROFILES_DIR / "cpu-ci", "attention")
    frame["mask"] = math.nan  # a column of blanks: float NaNs, a new object per cell read
    repeat = frame.iloc[[0]].copy()
    repeat["time_s"] = repeat["time_s"] * 10
    with pytest.raises(ProfileError, match=r"measures one point twice"):
        write_table(tmp_path / "p", "attention", pd.concat([frame, repeat]))


def test_a_meta_json_naming_a_key_twice_is_refused(tmp_path):
    """A review: json keeps the last copy of a repeated key, silently."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    text = (directory / "meta.json").read_text()
    (directory / "meta.json").write_text(text.replace('"method":', '"device": "x",\n  "method":', 1))
    with pytest.raises(ProfileError, match=r"meta\.json must name each key of an object once"):
        read_meta(directory)


def test_a_number_written_with_an_underscore_is_refused(tmp_path):
    """A review: ``1_024`` read as 1024 (Python's int and float take it), where pandas and the
    length files refuse it."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    lines = (directory / "gemm.csv").read_text().splitlines()
    lines[1] = "1_6" + lines[1][2:]  # m = 16
    (directory / "gemm.csv").write_text("\n".join(lines) + "\n")
    from ltsim.profile_files import read_optional_rows

    with pytest.raises(ProfileError, match=r"table 'gemm' column 'm' must hold whole numbers"):
        read_optional_rows(directory, "gemm")


def test_a_nan_cell_is_not_a_blank(tmp_path):
    """A fuzzing review: a cell reading ``nan`` (Python's float takes it) counted as a blank
    where a column allows blanks (eager's context_tokens), and the cost model's int() of it was
    a traceback. A blank is an empty field; ``nan`` is text, refused as a count."""
    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    lines = (directory / "eager.csv").read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("context_tokens")] = "nan"
    lines[1] = ",".join(row)
    (directory / "eager.csv").write_text("\n".join(lines) + "\n")
    from ltsim.profile_files import read_optional_rows

    with pytest.raises(ProfileError, match=r"table 'eager' column 'context_tokens' must hold whole"):
        read_optional_rows(directory, "eager")


@pytest.mark.parametrize("table, columns", [("gemm", ("m",)), ("collectives", ("group_size",)),
                                            ("attention", ("kv_tokens", "num_heads", "head_dim"))])
def test_sizes_near_the_float_limit_are_refused_without_numpy_warnings(tmp_path, table, columns):
    """A fuzzing review: a size of 1e308 was refused, but numpy's overflow warning (a second
    and third line on stderr) came first; in attention, inf - inf made a NaN rate that passed."""
    import csv
    import warnings

    from ltsim.profile_files import read_optional_rows

    directory = tmp_path / "p"
    shutil.copytree(PROFILES_DIR / "cpu-ci", directory)
    path = directory / f"{table}.csv"
    rows = list(csv.reader(path.read_text().splitlines()))
    for column in columns:
        rows[1][rows[0].index(column)] = "1e308"
    with path.open("w", newline="") as out:
        csv.writer(out).writerows(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ProfileError, match=rf"table '{table}' data row 1 implies more than"):
            read_optional_rows(directory, table)
