"""The profiler on CPU: a quick profile (collectives over 2 gloo processes), interrupt and resume;
what a machine or model cannot give is skipped (a TP degree, collectives on one device).

Everything runs the quick CPU sizes (or fewer) for llama-tiny only, so the file takes well under 90 s.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from ltsim.errors import ConfigError, ProfileError  # noqa: E402
from ltsim.memory import activation_bytes_per_token  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.profiler import run_profile  # noqa: E402
from ltsim.cli_device import cmd_profile  # noqa: E402
from ltsim.profiler.cli import add_arguments  # noqa: E402
from ltsim.profiler.activations import make_layer, saved_bytes  # noqa: E402
from ltsim.profiler.attention import sdpa_slice  # noqa: E402
from ltsim.profiler.elementwise import _op_inputs  # noqa: E402
from ltsim.profiler.shapes import shard  # noqa: E402
from ltsim.profiler import harness  # noqa: E402
from ltsim.profiler.tables import (Progress, TableJob, make_point, progress_stream,  # noqa: E402
                                   run_table)
from ltsim.profiles import TABLE_COLUMNS, load_profile, read_meta, read_table  # noqa: E402
from ltsim.runner import simulate  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TABLES = ("gemm", "gemm_bwd", "elementwise", "attention", "attention_varlen", "memory", "eager",
          "optimizer", "collectives")
COLUMNS = {
    "gemm": (*TABLE_COLUMNS["gemm"], "time_s_spread", "repeats", "pass", "op", "kernel", "method"),
    "gemm_bwd": (*TABLE_COLUMNS["gemm"], "time_s_spread", "repeats", "pass", "op", "method"),
    "attention": (*TABLE_COLUMNS["attention"], "time_s_spread", "repeats", "kernel", "mask",
                  "method"),
    "attention_varlen": ("num_seqs", "total_tokens", "max_seqlen", "num_heads", "num_kv_heads",
                         "head_dim", "causal", "pass", "time_s", "kernel", "method"),
    "elementwise": ("op", "num_tokens", "hidden", "pass", "time_s", "kernel", "method"),
    "memory": ("model", "tp", "recompute", "num_tokens", "activation_bytes", "bytes_per_token",
               "method"),
    "eager": ("model", "op", "layers", "num_tokens", "hidden", "dtype", "time_s", "kernel",
              "method"),
    "optimizer": ("model", "optimizer", "layers", "num_params", "dtype", "time_s",
                  "implementation", "method"),
    "collectives": (*TABLE_COLUMNS["collectives"], "time_s_spread", "repeats", "impl", "method"),
}
QUICK = ["--device", "cpu", "--quick", "--model", "llama-tiny", "--tp", "1"]


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu-quick")
    return run_profile(device="cpu", out=out, models=["llama-tiny"], tp_degrees=[1], quick=True,
                       resume=False, progress=False)


@pytest.mark.parametrize("name", TABLES)
def test_every_table_has_rows_unit_columns_and_positive_times(quick_profile: Path,
                                                              name: str) -> None:
    frame = read_table(quick_profile, name)
    assert len(frame) > 0
    assert set(COLUMNS[name]) <= set(frame.columns)
    assert (frame["method"] == "measured").all()
    if "time_s" in frame.columns:
        assert (frame["time_s"] > 0).all()
    assert not (quick_profile / f"{name}.partial.csv").exists()


def test_collectives_ran_across_two_gloo_processes(quick_profile: Path) -> None:
    frame = read_table(quick_profile, "collectives")
    assert set(frame["op"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                "send_recv"}
    assert set(frame["group_size"]) == {2}
    assert frame["impl"].str.match(r"^(gloo:|emulated:)").all()


def test_gemm_rows_hold_the_layer_shapes(quick_profile: Path) -> None:
    frame = read_table(quick_profile, "gemm")
    shapes = set(zip(frame["m"], frame["n"], frame["k"]))
    # llama-tiny: h 256, q 256 + k/v 2 x 128, ffn 704, vocab 2048; 16 tokens
    assert {(16, 512, 256), (16, 256, 256), (16, 1408, 256), (16, 256, 704), (16, 2048, 256)} <= shapes
    assert set(frame["pass"]) == {"fwd"}
    backward = read_table(quick_profile, "gemm_bwd")
    assert {(16, 256, 512), (512, 256, 16)} <= set(zip(backward["m"], backward["n"], backward["k"]))
    assert set(backward["pass"]) == {"dgrad", "wgrad"}
    for table in (frame, backward):
        assert table.duplicated(["m", "n", "k", "dtype"]).sum() == 0


def test_attention_rows_form_the_causal_grid_of_one_kernel(quick_profile: Path) -> None:
    frame = read_table(quick_profile, "attention")
    assert frame["kernel"].nunique() == 1
    assert set(frame["mask"]) == {"is_causal", "cpu_flash_bottom_right"}
    tokens = sorted(set(frame["q_tokens"]))
    assert sorted(set(frame["kv_tokens"])) == tokens
    pairs = set(zip(frame["q_tokens"], frame["kv_tokens"]))
    assert pairs == {(q, kv) for q in tokens for kv in tokens if q <= kv}


def test_memory_per_token_is_linear_and_full_recompute_keeps_the_input(quick_profile: Path) -> None:
    frame = read_table(quick_profile, "memory")
    full = frame[frame["recompute"] == "full"]
    assert (full["bytes_per_token"] == 256 * 4).all()  # one fp32 hidden vector per token
    none = frame[frame["recompute"] == "none"]
    assert none["bytes_per_token"].nunique() == 1 and (none["bytes_per_token"] > 10 * 256 * 4).all()


def test_meta_records_the_machine_and_every_table(quick_profile: Path) -> None:
    meta = read_meta(quick_profile)
    assert meta.method == "measured" and meta.device.startswith("cpu")
    assert meta.command.startswith("ltsim profile --device cpu")
    assert meta.notes.startswith("complete")
    assert {"torch", "cpu_model", "num_threads"} <= set(meta.software)
    assert set(meta.tables) == {*TABLES, "host_copy"}  # host_copy: skipped on a CPU, noted
    assert meta.tables["host_copy"]["skipped"].startswith("the device is the host")
    assert all(t["method"] == "measured" for n, t in meta.tables.items() if n != "host_copy")


def test_the_cost_model_loader_reads_the_profile(quick_profile: Path) -> None:
    profiles = pytest.importorskip("ltsim.profiles")
    if not hasattr(profiles, "load_profile"):
        pytest.skip("ltsim.profiles has no load_profile yet")
    profile = profiles.load_profile(quick_profile)
    assert profile.gemm_time_s(100, 512, 256, "fp32") > 0
    assert profile.attention_time_s(100, 1000, num_heads=8, num_kv_heads=4, head_dim=32,
                                    pass_="bwd") > 0
    assert profile.collective_time_s("all_reduce", group_size=2, scope="intra",
                                     num_bytes=1 << 20) > 0


def test_slice_attention_is_the_tail_of_a_causal_sequence() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, h, 8, generator=gen) for h in (4, 2, 2))
    whole = sdpa_slice(q, k, v)
    assert torch.allclose(sdpa_slice(q[-10:], k, v), whole[-10:], atol=1e-5)


@pytest.mark.parametrize("op, backward", [("rmsnorm", "_RMSNormBackward"),
                                          ("swiglu", "_SwiGLUBackward"),
                                          ("rope", "_RopeBackward")])
def test_elementwise_rows_time_the_executors_own_functions(op: str, backward: str) -> None:
    # a row must time the kernels the executor launches: its memory-lean Functions run other
    # kernels in backward than plain autograd of the same formula (gpu_notes.md)
    fn, inputs = _op_inputs({"op": op, "num_tokens": 8, "hidden": 64, "head_dim": 16},
                            torch.float32, torch.device("cpu"))
    out = fn(*(x.detach().requires_grad_(True) for x in inputs))
    assert type(out.grad_fn).__name__ == backward


def test_memory_rows_count_the_layer_the_memory_model_counts() -> None:
    # the profiler's layer is the executor's (memory-lean norms, SwiGLU and RoPE), whose saved
    # tensors ltsim.memory counts, less the fp32 norm statistics and int64 positions it leaves out
    spec = get_model("llama-tiny")
    tokens = 256
    for recompute in ("none", "selective"):
        layer, params = make_layer(shard(spec, 1), recompute, torch.float32, torch.device("cpu"))
        x = torch.randn(tokens, spec.hidden_size, requires_grad=True)
        measured = saved_bytes(layer, x, list(params.values())) / tokens
        modelled = activation_bytes_per_token(spec, ParallelConfig(), num_layers=1,
                                              recompute=recompute)
        assert measured - modelled == 2 * 4 + 8  # two rstd (fp32) and the positions (int64)


def test_interrupted_profile_resumes_without_remeasuring(tmp_path: Path) -> None:
    out = tmp_path / "profile"
    proc = subprocess.Popen([sys.executable, "-m", "ltsim.profiler", *QUICK, "--out", str(out)],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (out / "gemm.csv").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.name: p.read_bytes() for p in out.glob("*.csv") if ".partial" not in p.name}
    assert "gemm.csv" in finished and len(finished) < len(TABLES)

    done = subprocess.run([sys.executable, "-m", "ltsim.profiler", *QUICK, "--out", str(out),
                           "--resume"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name, content in finished.items():
        assert (out / name).read_bytes() == content, f"{name} was measured again"
    for name in TABLES:
        assert len(read_table(out, name)) > 0
    assert not list(out.glob("*.partial.csv"))
    assert read_meta(out).notes.startswith("complete")


def test_resume_measures_only_the_points_missing_from_the_checkpoint(tmp_path: Path) -> None:
    points = tuple(make_point(("m",), m=m) for m in (1, 2, 3, 4))
    measured: list[int] = []

    def measure(todo, emit, advance) -> None:  # type: ignore[no-untyped-def]
        for point in todo:
            measured.append(point.values["m"])
            emit({"point": point.key, "m": point.values["m"], "n": 1, "k": 1, "dtype": "fp32",
                  "time_s": 1.0})
            advance(1)

    pd.DataFrame([{"point": "m=1", "m": 1, "n": 1, "k": 1, "dtype": "fp32", "time_s": 2.0},
                  {"point": "m=9", "m": 9, "n": 1, "k": 1, "dtype": "fp32", "time_s": 2.0}]
                 ).to_csv(tmp_path / "gemm.partial.csv", index=False)
    job = TableJob(name="gemm", points=points, measure=measure, provenance={})
    assert run_table(job, tmp_path, resume=True, progress=Progress(enabled=False)) == 4
    assert measured == [2, 3, 4]
    table = read_table(tmp_path, "gemm")
    assert list(table["m"]) == [1, 2, 3, 4] and table["time_s"].iloc[0] == 2.0
    assert not (tmp_path / "gemm.partial.csv").exists()


def test_resume_refuses_other_arguments(quick_profile: Path) -> None:
    with pytest.raises(ConfigError, match="'--resume' must be used with the arguments that wrote"):
        run_profile(device="cpu", out=quick_profile, models=["llama-tiny"], tp_degrees=[1],
                    quick=False, resume=True, progress=False)


def test_resume_refuses_a_checkpoint_measured_with_other_arguments(tmp_path: Path) -> None:
    # an interrupted --threads 2 run, resumed with --threads 1, reused the rows timed on 2 threads
    import json

    out = tmp_path / "p"
    out.mkdir()
    pd.DataFrame([{"point": "x", "time_s": 1.0}]).to_csv(out / "gemm.partial.csv", index=False)
    (out / "gemm.partial.args.json").write_text(json.dumps({"args": {
        "device": "cpu", "models": ["llama-tiny"], "tp": [1], "quick": True, "threads": 2}}))
    with pytest.raises(ConfigError, match=r"'--resume' must be used with the arguments that wrote "
                       r"gemm.partial.csv \(these differ: threads\)"):
        run_profile(device="cpu", out=out, models=["llama-tiny"], tp_degrees=[1], quick=True,
                    resume=True, progress=False, threads=1)
    assert sorted(p.name for p in out.iterdir()) == ["gemm.partial.args.json", "gemm.partial.csv"]


def test_a_checkpoints_record_that_does_not_read_is_no_record(tmp_path: Path) -> None:
    # nested past json's recursion limit (a RecursionError), or a named pipe (read, it waited
    # forever): found by a bad-input probe; either reads as no record, as an older run's
    import os
    import threading

    from ltsim.profiler.tables import partial_made_with

    (tmp_path / "gemm.partial.args.json").write_text("[" * 100_000 + "]" * 100_000)
    assert partial_made_with(tmp_path, "gemm") is None
    os.mkfifo(tmp_path / "attention.partial.args.json")
    found: list = []
    reader = threading.Thread(target=lambda: found.append(partial_made_with(tmp_path, "attention")),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and found == [None]
    (tmp_path / "x.partial.args.json").write_text('{"args": {"threads": 1}}')
    assert partial_made_with(tmp_path, "x") == {"args": {"threads": 1}}


def test_progress_bar_on_a_terminal_and_a_line_per_table_elsewhere(monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    quiet, tty, off = io.StringIO(), Tty(), io.StringIO()
    for stream, enabled in ((quiet, True), (tty, True), (off, False)):
        progress = Progress(enabled=enabled, stream=stream)
        progress.update("gemm", 1, 2)
        progress.finished("gemm", 330, 22.46)
    assert quiet.getvalue() == "gemm: 330 rows in 22.5 s\n"
    assert "\r" in tty.getvalue() and "1/2" in tty.getvalue() and "rows in" not in tty.getvalue()
    assert off.getvalue() == ""
    # a long table says where it is every LINE_EVERY_S, not only when it ends
    clock = iter([0.0, 10.0, 31.0, 31.0, 31.0, 40.0, 70.0, 70.0, 70.0])
    monkeypatch.setattr("ltsim.profiler.tables.time.perf_counter", lambda: next(clock))
    log = io.StringIO()
    progress = Progress(enabled=True, stream=log)
    for done in (1, 2, 3, 4):
        progress.update("gemm", done, 330)
    monkeypatch.undo()
    assert log.getvalue() == "gemm: 2 of 330 rows, 31 s\ngemm: 4 of 330 rows, 70 s\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["--tp", "3"], "'--tp' must be divisors of llama-tiny's num_attention_heads (8) (got 3)"),
    (["--tp", "3,5"], "'--tp' must be degrees that llama-tiny can take (got [3, 5]); tp 3: "
     "divisors of llama-tiny's num_attention_heads (8)"),
    (["--model", "nope"], "'--model' must be one of"),
    # an existing profile was measured again and replaced, a shipped one too
    (["--out", "profiles/cpu-ci"], "'--out' must be a folder without a profile, or given with "
     "--resume (got 'profiles/cpu-ci')"),
])
def test_cli_rejects_bad_input_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                argv: list[str], message: str) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--device", "cpu", "--out", str(tmp_path), "--model", "llama-tiny",
                              *argv])
    assert cmd_profile(args) == 2
    assert message in capsys.readouterr().err


# --- what one machine cannot give: a TP degree a model cannot take, collectives on one device ---

def _fewer_sizes(device: str, *, quick: bool, max_group_size: int):  # type: ignore[no-untyped-def]
    """The quick CPU sizes, fewer of them (this profile measures llama-tiny at two TP degrees)."""
    from dataclasses import replace

    from ltsim.profiler.sizes import sizes_for
    sizes = sizes_for(device, quick=quick, max_group_size=max_group_size)
    return replace(sizes, gemm_tokens=(16, 256), attention_tokens=(16, 256, 1024),
                   varlen_total_tokens=(512,), varlen_num_seqs=(2,), elementwise_tokens=(16, 256),
                   memory_tokens=(128,))


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def one_device_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """llama-tiny at tp 1, 2, 3 where only one device is seen: tp 3 (8 heads) and collectives are
    skipped. Returns the directory, what the progress stream (not a terminal) got, the log lines."""
    out = tmp_path_factory.mktemp("one-device")
    stream, records = io.StringIO(), _Records()
    logger = logging.getLogger(harness.__name__)
    logger.addHandler(records)
    threads = torch.get_num_threads()
    try:
        with pytest.MonkeyPatch.context() as patch, progress_stream(stream):
            patch.setattr(harness, "collective_devices", lambda device: 1)
            patch.setattr(harness, "sizes_for", _fewer_sizes)
            run_profile(device="cpu", out=out, models=["llama-tiny"], tp_degrees=[1, 2, 3],
                        quick=True, resume=False, progress=True)
    finally:
        logger.removeHandler(records)
    assert torch.get_num_threads() == threads  # the profile's thread count is set back
    return out, stream.getvalue(), records.lines


def test_a_tp_degree_the_model_cannot_take_is_skipped_with_a_note(
        one_device_profile: tuple[Path, str, list[str]]) -> None:
    out, _, logged = one_device_profile
    note = "llama-tiny at tp 3: tp must be divisors of llama-tiny's num_attention_heads (8)"
    meta = read_meta(out)
    for name in ("gemm", "gemm_bwd", "elementwise", "attention", "attention_varlen", "memory",
                 "eager", "optimizer"):
        assert meta.tables[name]["skipped_tp"] == [note]
        assert meta.tables[name]["args"]["tp"] == [1, 2, 3]
    assert note in meta.notes and meta.notes.startswith("complete")
    assert f"skipped {note}" in logged
    assert set(read_table(out, "memory")["tp"]) == {1, 2}
    ops = read_table(out, "gemm")["op"]
    assert ops.str.contains("llama-tiny/tp1/").any() and ops.str.contains("llama-tiny/tp2/").any()
    assert not ops.str.contains("/tp3/").any()
    assert meta.command.endswith("--model llama-tiny --tp 1,2,3 --threads 1 --quick")


def test_one_device_skips_collectives_and_the_profile_still_loads_and_simulates(
        one_device_profile: tuple[Path, str, list[str]], repo: Path) -> None:
    out, _, logged = one_device_profile
    meta = read_meta(out)
    assert meta.tables["collectives"]["skipped"].startswith("one device: no group of 2 to measure")
    assert "collectives (one device: no group of 2" in meta.notes
    assert any(line.startswith("collectives: skipped (one device") for line in logged)
    assert not (out / "collectives.csv").exists() and not list(out.glob("*.partial.csv"))
    # on a CPU the device is the host: no copies between them to measure, noted
    assert meta.tables["host_copy"]["skipped"].startswith("the device is the host")
    assert not (out / "host_copy.csv").exists()
    assert all(t["num_threads"] == 1 for n, t in meta.tables.items()
               if n not in ("collectives", "host_copy"))

    profile = load_profile(out)
    assert profile.gemm_time_s(100, 512, 256, "fp32") > 0
    assert profile.collective_time_s("all_reduce", group_size=1, scope="intra",
                                     num_bytes=1 << 20) == 0.0
    with pytest.raises(ProfileError) as error:
        profile.collective_time_s("all_reduce", group_size=2, scope="intra", num_bytes=1 << 20)
    for part in (str(out), "has no collectives.csv", ">= 2 GPUs", "copy a collectives.csv from a "
                 "published profile such as profiles/", "mark it in meta.json"):
        assert part in str(error.value)

    scenario = repo / "scenarios" / "examples" / "cpu-llama-tiny-chunkflow.toml"
    one = load_scenario(scenario, {"hardware.profile": str(out), "hardware.gpus_per_node": 1,
                                   "parallel.pp": 1})
    assert (simulate(one).iteration_times_s > 0).all()
    two = load_scenario(scenario, {"hardware.profile": str(out)})  # pp 2: stage sends
    with pytest.raises(ProfileError, match="has no collectives.csv"):
        simulate(two)


def test_progress_shows_a_line_per_table_when_not_on_a_terminal(
        one_device_profile: tuple[Path, str, list[str]]) -> None:
    out, shown, _ = one_device_profile
    # (a table past Progress.LINE_EVERY_S also says where it is: "gemm: 12 of 330 rows, 31 s")
    interim = re.compile(r"\w+: \d+ of \d+ rows, \d+ s")
    lines = [line for line in shown.splitlines() if not interim.fullmatch(line)]
    names = ("gemm", "gemm_bwd", "elementwise", "attention", "attention_varlen", "memory", "eager",
             "optimizer")
    assert [line.split(":")[0] for line in lines] == list(names)
    for name, line in zip(names, lines):
        rows = len(read_table(out, name))
        assert line.startswith(f"{name}: {rows} rows in ") and line.endswith(" s")
    assert "\r" not in shown


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_default_cuda_degrees_skip_tp8_for_qwen_and_one_gpu_skips_collectives(
        tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "sizes_for", _fewer_cuda_sizes)
        run_profile(device="cuda", out=tmp_path, models=["qwen2.5-7b"], tp_degrees=[],
                    quick=True, resume=False, progress=False)
    meta = read_meta(tmp_path)
    assert meta.notes.startswith("complete")
    assert meta.tables["gemm"]["skipped_tp"] == [
        "qwen2.5-7b at tp 8: tp must be divisors of qwen2.5-7b's num_attention_heads (28)"]
    assert set(read_table(tmp_path, "memory")["tp"]) == {1, 2, 4}
    if torch.cuda.device_count() < 2:
        assert meta.tables["collectives"]["skipped"].startswith("one GPU: no group of 2")
        assert not (tmp_path / "collectives.csv").exists()
    load_profile(tmp_path)


def _fewer_cuda_sizes(device: str, *, quick: bool,  # type: ignore[no-untyped-def]
                      max_group_size: int):
    from dataclasses import replace

    from ltsim.profiler.sizes import sizes_for
    sizes = sizes_for(device, quick=quick, max_group_size=max_group_size)
    return replace(sizes, gemm_tokens=(256,), attention_tokens=(512, 4096),
                   varlen_total_tokens=(4096,), varlen_num_seqs=(2,), elementwise_tokens=(1024,),
                   memory_tokens=(1024,))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_kernels_only_timing_drops_the_launch_gaps_and_keeps_long_kernels() -> None:
    from ltsim.profiler.timing import TimingPlan, sample, summarize

    device = torch.device("cuda")
    plan = TimingPlan(warmup=2, min_repeats=10, max_repeats=30, target_s=0.05)
    tiny = torch.ones(1024, device=device)

    def launches() -> None:  # 200 tiny kernels: the host's launch rate, not the GPU, sets the pace
        for _ in range(200):
            tiny.add_(1.0)
    wall = summarize(sample(launches, plan=plan, device=device)).time_s
    gpu = summarize(sample(launches, plan=plan, device=device, kernels_only=True)).time_s
    assert gpu < 0.8 * wall
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    big_wall = summarize(sample(lambda: a @ a, plan=plan, device=device)).time_s
    big_gpu = summarize(sample(lambda: a @ a, plan=plan, device=device, kernels_only=True)).time_s
    assert big_gpu == pytest.approx(big_wall, rel=0.1)


def test_an_eager_op_with_context_reads_the_same_state_at_every_call() -> None:
    """eager.csv's rows with context: the earlier tokens' K/V are forwarded once, before timing,
    and every timed call (F, or F+B that accumulates their gradients) finds the store as the
    first did: its own K/V leave after it, so nothing builds up over the repeats."""
    from ltsim.profiler.eager import _op_run, _stage

    stage = _stage("llama-tiny", 1, "fp32", torch.device("cpu"))
    for param in stage.parameters():
        param.requires_grad_(True)
    for op in ("F", "FB"):
        run = _op_run(op, stage, 16, torch.device("cpu"), context=48)
        before = len(run.store)
        assert before == 1  # the context's K/V at the stage's one layer
        for _ in range(3):
            handle = run()
            assert handle.batch.slices[0][1:] == (48, 64)  # tokens [48, 64) of the sequence
            assert len(run.store) == before
        assert _op_run(op, stage, 16, torch.device("cpu")).store is None  # no context: none
