"""CLI in-process on the shipped scenarios; sweeps (local, Dask, resume); the regression check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ltsim.cli import main
from ltsim.grid import expand_grid
from ltsim.planner import run_sweep
from ltsim.scenario import load_scenario
from ltsim.sweepstore import SweepStore

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(REPO / "scenarios")))
def test_every_scenario_simulates(path, capsys):
    assert main(["simulate", str(path), "--set", "workload.num_batches=1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["iteration_time_s"] > 0 and 0 <= result["bubble_ratio"] < 1
    assert result["peak_memory_bytes"] > 0


def test_simulate_writes_trace_and_plot(tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "g.png"
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["simulate", str(example), "--trace", str(trace), "--plot", str(plot)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"X", "C", "M"}
    # the unit preset's memory is tokens of activation: the counter says so (it said GiB)
    counters = [e["args"] for e in events if e["ph"] == "C"]
    assert counters and all(set(a) == {"tokens"} for a in counters)
    assert max(a["tokens"] for a in counters) == 6  # the peak simulate reports, in tokens
    assert plot.stat().st_size > 10_000
    assert "bubble ratio    45.83%" in capsys.readouterr().out


def test_an_output_path_that_is_a_socket_or_device_is_refused_not_replaced(tmp_path, capsys):
    # outputs are written beside the target and renamed over it: a device node (as root,
    # --trace /dev/null) or a socket was replaced by a regular file (found by a bad-input probe)
    import socket
    import stat

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    node = tmp_path / "t.json"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(node))
        for flag in ("--trace", "--out"):
            command = "export" if flag == "--out" else "simulate"
            extra = ["--format", "torch-pipelining"] if command == "export" else []
            assert main([command, str(example), *extra, flag, str(node)]) == 2
            err = capsys.readouterr().err
            assert f"'{flag}' must be a regular file (or a new one), not a device" in err
        assert stat.S_ISSOCK(node.stat().st_mode)


def test_unit_preset_prints_units_not_seconds_and_bytes(tmp_path, capsys):
    """The unit preset (the papers' figures) prices work in units and memory in tokens: the
    summary, the comparison table and the sweep table say so instead of "s" and "B"."""
    example = REPO / "scenarios/examples/chunkflow-fig2-baseline.toml"
    assert main(["simulate", str(example)]) == 0
    text = capsys.readouterr().out
    assert "iteration time  56 units" in text and "tokens per GPU" in text
    assert " s " not in text and " B " not in text
    assert main(["compare", str(example), "--strategies", "megatron-1f1b,chunkflow"]) == 0
    assert "units" in capsys.readouterr().out
    assert main(["sweep", str(example), "--grid", "workload.num_batches=1,2",
                 "--db", str(tmp_path / "s.db")]) == 0
    table = capsys.readouterr().out
    assert "56 units" in table and "tokens/unit" in table and " B " not in table


def test_compare_prints_speedups(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig2-baseline.toml"
    assert main(["compare", str(example), "--strategies",
                 "megatron-1f1b,chunkflow:chunk_size=2:k=2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["speedup"], 4) for r in rows] == [1.0, round(56 / 46, 4)]


def test_a_set_strategy_option_reaches_the_compared_strategies_that_take_it(capsys):
    # the file runs megatron-1f1b, which has no chunk_size: the --set was refused as the file's
    # (the design notes: refused only when none of the compared strategies takes it)
    example = REPO / "scenarios/examples/chunkflow-fig2-baseline.toml"
    assert main(["compare", str(example), "--strategies", "megatron-1f1b,chunkflow:k=2",
                 "--set", "strategy.chunk_size=2", "--json"]) == 0
    assert [round(r["speedup"], 4) for r in json.loads(capsys.readouterr().out)] == [
        1.0, round(56 / 46, 4)]  # as chunkflow:chunk_size=2:k=2 (test_compare_prints_speedups)
    assert main(["compare", str(example), "--strategies", "megatron-1f1b,chunkflow",
                 "--set", "strategy.bogus=2"]) == 2
    assert "'--set' must be an option one of the compared" in capsys.readouterr().err
    # every strategy that takes it gives its own value (which wins): the --set would be dropped
    assert main(["compare", str(example), "--strategies", "megatron-1f1b,chunkflow:k=4",
                 "--set", "strategy.k=1"]) == 2
    assert "does not give itself in --strategies (got 'strategy.k=1')" in capsys.readouterr().err
    assert main(["compare", str(example), "--strategies", "chunkflow:k=4,chunkflow",
                 "--set", "strategy.k=1", "--set", "strategy.chunk_size=2"]) == 0  # the 2nd's


@pytest.mark.parametrize("spec, got, fix", [
    ('chunkflow:k="2"', 'chunkflow:k="2"', "VALUE an integer"),  # as written, not k=2
    ("megatron-1f1b:micro_batch_size=true", "micro_batch_size=true", "VALUE an integer"),
    ("chunkflow:k=[1,2]", "chunkflow:k=[1,2]", "holds a comma or colon with --set"),  # whole
    ("chunkflow:k", "chunkflow:k", "write each option as key=value"),
    ('chunkflow:packing="min-bins",megatron-1f1b:k', "megatron-1f1b:k",  # the item at fault
     "write each option as key=value")])
def test_a_bad_strategy_option_is_echoed_as_written(capsys, spec, got, fix):
    # the echo dropped quotes, wrote Python's True, or cut a list at its comma (a probe)
    assert main(["compare", str(REPO / "scenarios/quickstart.toml"), "--strategies", spec]) == 2
    err = capsys.readouterr().err
    assert f"{got}')" in err and fix in err and len(err.strip().splitlines()) == 1


def test_compare_speedup_is_throughput_when_batches_differ(capsys):
    """Sorted batching samples its own batches (other tokens per iteration): the speedup is the
    ratio of tokens per second, not of iteration times."""
    scenario = REPO / "scenarios/skrull/qwen2.5-0.5b-wikipedia.toml"
    assert main(["compare", str(scenario), "--strategies", "deepspeed-cp,sorted-batching",
                 "--set", "workload.num_batches=2", "--json"]) == 0
    base, other = json.loads(capsys.readouterr().out)
    assert other["speedup"] == pytest.approx(other["tokens_per_s"] / base["tokens_per_s"])
    time_ratio = base["iteration_time_s"] / other["iteration_time_s"]
    assert abs(other["speedup"] - time_ratio) > 0.05  # its batches hold other token counts


def test_compare_says_what_its_table_cannot(capsys):
    # a new user's pass: sorted batching's 0.84x beside an iteration 4x longer, and a SeCO row
    # "NO" under fits with no limit or reason
    skrull = REPO / "scenarios/skrull/qwen2.5-0.5b-wikipedia.toml"
    assert main(["compare", str(skrull), "--strategies", "deepspeed-cp,sorted-batching,skrull",
                 "--set", "workload.num_batches=1"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == ["note: sorted-batching: speedup is tokens/s over the first row's; its "
                     "batches are its own (not the first row's), so its iteration time is not "
                     "comparable"]
    assert main(["compare", str(skrull), "--strategies", "deepspeed-cp,skrull",
                 "--set", "workload.num_batches=1", "--set", "hardware.memory_limit_gib=10"]) == 0
    out = capsys.readouterr().out
    assert "note: deepspeed-cp does not fit: device" in out and "the limit is" in out


def test_two_items_that_differ_only_in_an_unused_option_are_one_run(capsys):
    # Seq1F1B's original variant reads no chunk_size: the two rows printed alike, with only a
    # warning that chunk_size was unused (a fuzzing review)
    scenario = str(REPO / "scenarios/infinipipe/gpt-7b-64k-seq1f1b.toml")
    spec = 'seq1f1b:variant="original",seq1f1b:variant="original":chunk_size=4096'
    assert main(["compare", scenario, "--strategies", spec]) == 2
    err = capsys.readouterr().err
    assert ("Fix: remove seq1f1b variant=original chunk_size=4096: it runs exactly as seq1f1b "
            "variant=original") in err


def test_a_batching_the_strategy_overrides_is_a_warning_in_the_table(capsys):
    """Sorted batching samples "sorted-groups" whatever the scenario says: a scenario that wrote
    another batching is told so, under the comparison table as under simulate's summary; a
    scenario that wrote none is not."""
    scenario = REPO / "scenarios/skrull/qwen2.5-0.5b-wikipedia.toml"
    args = ["compare", str(scenario), "--strategies", "deepspeed-cp,sorted-batching",
            "--set", "workload.num_batches=1"]
    note = 'warning: sorted-batching: workload.batching = "iid" is not used'
    assert main(args) == 0
    assert note not in capsys.readouterr().out
    assert main([*args, "--set", 'workload.batching="iid"']) == 0
    out = capsys.readouterr().out
    assert note in out and "warning: deepspeed-cp: workload.batching" not in out


def test_a_unit_preset_that_does_not_fit_says_tokens(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["simulate", str(example), "--set", "hardware.memory_limit_gib=2e-9"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    assert "the limit is 2 tokens" in out and "GiB" not in out


def test_simulate_reports_each_batch_and_says_so_past_two_seconds(capsys, monkeypatch):
    """simulate and compare print a line per global batch on stderr once they have run 2 s (a
    MILP planner takes seconds a batch: the user sees it is working); quicker runs print none."""
    import ltsim.cli as cli
    from ltsim.runner import simulate

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    seen = []
    simulate(load_scenario(example, ["workload.num_batches=3"]),
             progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert main(["simulate", str(example), "--set", "workload.num_batches=3"]) == 0
    assert capsys.readouterr().err == ""
    clock = iter(range(0, 1000, 5))  # every reading 5 s after the one before
    monkeypatch.setattr(cli.time, "perf_counter", lambda: next(clock))
    assert main(["simulate", str(example), "--set", "workload.num_batches=3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["simulate: chunkflow: batch 1 of 3 done, 5 s",
                   "simulate: chunkflow: batch 2 of 3 done, 10 s"]


def test_sweep_ranks_fitting_plans_and_resumes(tmp_path, capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    args = ["sweep", str(example), "--grid", "strategy.chunk_size=1,2,4", "--grid", "strategy.k=1,2",
            "--db", str(db), "--json", "--set", "hardware.memory_limit_gib=7e-9"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 6
    fitting = [r for r in rows if r["fits"]]
    assert fitting and all(r["peak_memory_bytes"] <= 7 for r in fitting)
    assert rows[: len(fitting)] == fitting  # fitting plans first, fastest first
    times = [r["iteration_time_s"] for r in fitting]
    assert times == sorted(times)
    # resume: a second run with one more value evaluates only the new points
    scenario = load_scenario(example, ["hardware.memory_limit_gib=7e-9"])
    store = SweepStore(db)
    seen = []
    points = expand_grid(["strategy.chunk_size=1,2,4,8", "strategy.k=1,2"])
    reused = []
    run_sweep(scenario, points, store=store, progress=lambda d, t: seen.append(d),
              on_reused=lambda n, total: reused.append((n, total)))
    assert seen == [7, 8] and reused == [(6, 8)]
    # the command line says so; plans that do not fit get no "vs slowest" ratio
    assert main([a for a in args if a != "--json"]) == 0
    captured = capsys.readouterr()
    assert f"6 of 6 points read from {db}" in captured.err
    table = [line.split() for line in captured.out.splitlines()[2:8]]
    assert [row[4] == "-" for row in table] == [row[-3] == "NO" for row in table]  # "46.000 s"


def _swept(tmp_path, capsys):
    """A two-point sweep's command line, its store and the rows it printed (--json)."""
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    args = ["sweep", str(example), "--grid", "strategy.k=1,2", "--db", str(db), "--json"]
    assert main(args) == 0
    return args, db, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("stored", ["[1, 2]", "null", "7", "not json", "{}",
                                    "[" * 100_000 + "]" * 100_000,  # past json's recursion
                                    "json_set(result, '$.iteration_time_s', 'x')",
                                    "json_set(result, '$.fits', 'yes')",
                                    "json_object('error', 5, 'fits', json('false'))"])
def test_a_stored_row_edited_by_hand_is_simulated_again(tmp_path, capsys, stored):
    """A results row that is not a result (a store edited or damaged by hand) is simulated again
    and replaced; it was an AttributeError after "2 of 2 points read", and a metric of the wrong
    type a TypeError in the table."""
    import sqlite3

    if stored.startswith("json"):  # an SQL expression over the stored row
        stored = sqlite3.connect(":memory:").execute(
            f"SELECT {stored} FROM (SELECT ? AS result)",
            ('{"iteration_time_s": 1.0, "fits": true}',)).fetchone()[0]

    args, db, first = _swept(tmp_path, capsys)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE results SET result = ?", (stored,))
    assert main(args) == 0
    again = capsys.readouterr()
    assert json.loads(again.out) == first and "points read" not in again.err
    assert "stale" not in again.err  # its inputs did not change (it said so: a probe)


@pytest.mark.parametrize("edit", [{"iteration_time_s": math.nan}, {"iteration_time_s": math.inf},
                                  {"iteration_time_s": -48.0}, {"bubble_ratio": 7.5},
                                  {"peak_memory_bytes": -6}, {"strategy.k": "MARKER-7f3a"}])
def test_a_stored_row_with_impossible_numbers_or_another_points_values_is_simulated_again(
        tmp_path, capsys, edit):
    """A well-formed row edited by hand (a review's fuzzing): its NaN, infinite or negative time
    was printed and ranked first, a bubble of 750% printed, and text written into its point's
    value printed as the point's. Now each is simulated again and replaced."""
    import sqlite3

    args, db, first = _swept(tmp_path, capsys)
    with sqlite3.connect(db) as connection:
        for point, result in connection.execute("SELECT point, result FROM results").fetchall():
            connection.execute("UPDATE results SET result = ? WHERE point = ?",
                               (json.dumps({**json.loads(result), **edit}), point))
    assert main(args) == 0
    again = capsys.readouterr()
    assert json.loads(again.out) == first and "points read" not in again.err
    assert "MARKER" not in again.out + again.err


def test_a_stored_row_records_when_in_unix_seconds(tmp_path, capsys):
    # the column is created_s; it held julianday('now'), days since 4714 BC (a review)
    import sqlite3
    import time

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    before = time.time()
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2", "--db", str(db)]) == 0
    with sqlite3.connect(db) as connection:
        stamps = [row[0] for row in connection.execute("SELECT created_s FROM results")]
    assert len(stamps) == 2 and all(before - 5 < s < time.time() + 5 for s in stamps)


def test_a_damaged_store_is_bad_input(tmp_path, capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    args = ["sweep", str(example), "--grid", "strategy.k=1,2", "--db", str(db)]
    assert main(args) == 0
    capsys.readouterr()
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xff" * (len(data) - page)  # every page after the first
    db.write_bytes(bytes(data))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "'--db' must be a SQLite file ltsim can" in err and "Traceback" not in err


def test_a_store_that_refuses_writes_is_bad_input(tmp_path, capsys):
    # a trigger of the file's own (or a read-only file, a lock held past SQLite's wait) refused
    # the row: an IntegrityError traceback that printed the trigger's text
    import sqlite3

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    db = tmp_path / "s.sqlite"
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2", "--db", str(db)]) == 0
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TRIGGER t BEFORE INSERT ON results "
                           "BEGIN SELECT RAISE(ABORT, 'SECRET-text'); END")
    capsys.readouterr()
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2,3", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "'--db' must be a SQLite file ltsim can open and write" in err and "SQLITE_CONSTRAINT" in err
    assert "SECRET" not in err and len(err.strip().splitlines()) == 1


def test_sweep_bad_point_is_a_row_not_a_crash(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.chunk_size=0,2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert "must be a positive integer" in rows[-1]["error"]


def _strict(text: str):
    """json.loads refusing NaN and Infinity, as RFC 8259 (and jq) do."""
    def refuse(word):
        raise ValueError(f"not JSON: {word}")
    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_json(capsys):
    # Python wrote NaN for a rejected sweep point's metrics and Infinity for SpaCO's cap = inf
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.k=nan,1", "--json"]) == 0
    rows = _strict(capsys.readouterr().out)
    assert len(rows) == 2 and any(row.get("error") for row in rows)
    spaco = REPO / "scenarios/seco/rtx3090-llama3-8b-lora.toml"
    assert main(["simulate", str(spaco), "--set", 'strategy.name="spaco"', "--set",
                 "strategy.cap=inf", "--json"]) == 0
    result = _strict(capsys.readouterr().out)
    assert result["strategy_options"]["cap"] is None and result["iteration_time_s"] > 0


def test_sweep_on_dask():
    distributed = pytest.importorskip("distributed")
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "")
        rows = run_sweep(load_scenario(example), expand_grid(["strategy.k=1,2"]),
                         executor=f"dask://{address}")
    assert [r["iteration_time_s"] for r in rows] == [48.0, 46.0]


def test_sweep_on_an_address_where_no_dask_scheduler_answers(capsys):
    """Another service on the port (here one that answers with an HTTP error) is bad input, not a
    traceback from deep inside Dask's protocol."""
    pytest.importorskip("distributed")
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        for _ in range(8):  # Dask may retry
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 64)

    threading.Thread(target=answer, daemon=True).start()
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    try:
        code = main(["sweep", str(example), "--grid", "strategy.k=1,2",
                     "--executor", f"dask://127.0.0.1:{port}"])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "'--executor' must be the address of a running Dask scheduler" in err


def test_check_passes_and_detects_drift(tmp_path, capsys):
    assert main(["check", str(REPO / "validation/regression.toml")]) == 0
    bad = tmp_path / "validation" / "r.toml"
    bad.parent.mkdir()
    bad.write_text(f'''[[case]]
name = "drift"
baseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"
candidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"
expected_speedup = 1.5
tolerance = 0.01
''')
    assert main(["check", str(bad)]) == 1
    assert "drifts" in capsys.readouterr().out
    assert main(["check", str(bad), "--update"]) == 0
    assert "expected_speedup = 1.2174" in bad.read_text()


def test_check_update_keeps_the_files_byte_order_mark_and_line_ends(tmp_path, capsys):
    """--update on a CRLF file with a BOM dropped the BOM and added an LF-only line."""
    path = tmp_path / "r.toml"
    text = (f'# gate\n[[case]]\nname = "x"\nbaseline = "{REPO}/scenarios/examples/'
            f'chunkflow-fig2-baseline.toml"\ncandidate = "{REPO}/scenarios/examples/'
            'chunkflow-fig6-cs2-k2.toml"\nmin_speedup = 0.5\n')
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert main(["check", str(path), "--update"]) == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# gate\r\n") and b"expected_speedup" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    mixed = text.replace("\n", "\r\n", 1).encode()  # the first line CRLF, the others LF
    path.write_bytes(mixed)
    assert main(["check", str(path), "--update"]) == 0
    data = path.read_bytes()
    assert data.startswith(mixed[:-1]) and data.count(b"\r\n") == 1  # untouched lines kept


@pytest.mark.parametrize("tolerance", [0.05, 1e-6, 0])
def test_check_update_records_what_the_next_check_passes(tmp_path, capsys, tolerance):
    """A review: with tolerance 1e-6, --update recorded 1.2174 for 1.21739, which the next
    check failed; the recorded value has the digits the tolerance needs."""
    path = tmp_path / "r.toml"
    path.write_text(f'[[case]]\nname = "x"\nbaseline = "{REPO}/scenarios/examples/'
                    f'chunkflow-fig2-baseline.toml"\ncandidate = "{REPO}/scenarios/examples/'
                    f'chunkflow-fig6-cs2-k2.toml"\ntolerance = {tolerance}\n')
    assert main(["check", str(path), "--update"]) == 0
    assert "recorded 1 speedup in" in capsys.readouterr().out
    assert main(["check", str(path)]) == 0
    assert ("expected_speedup = 1.2174\n" in path.read_text()) == (tolerance == 0.05)


def test_check_update_records_significant_digits_and_no_speedup_it_cannot():
    """A review: four decimals wrote 0.0 for a speedup of 4e-5 (which the file then refuses);
    a speedup that is not a positive number is left unrecorded."""
    from ltsim.check import _recorded

    assert _recorded(4e-5, 0.05) == 4e-5 and _recorded(1.2173913, 0.05) == 1.2174
    assert _recorded(1.2173913, 1e-6) == 1.2173913 and _recorded(1.21739131234, 0) == 1.21739131234
    assert _recorded(0.0, 0.05) is None and _recorded(float("inf"), 0.05) is None


def test_check_finds_scenarios_beside_its_file(tmp_path, capsys, monkeypatch):
    """A review: scenarios beside the regression file were looked up only from its folder's
    parent (as validation/regression.toml names scenarios/...)."""
    import shutil

    for name, source in (("base.toml", "chunkflow-fig2-baseline.toml"),
                         ("cand.toml", "chunkflow-fig6-cs2-k2.toml")):
        shutil.copy(REPO / "scenarios/examples" / source, tmp_path / name)
    (tmp_path / "r.toml").write_text('[[case]]\nname = "c"\nbaseline = "base.toml"\n'
                                     'candidate = "cand.toml"\n')
    monkeypatch.chdir("/")
    assert main(["check", str(tmp_path / "r.toml")]) == 0


def test_check_update_still_fails_a_candidate_that_does_not_fit(tmp_path, capsys):
    """--update records the new speedup and drops only the drift from the old one: a candidate
    that does not fit still fails (exit 1), as it does without --update."""
    path = tmp_path / "r.toml"
    path.write_text(f'''[[case]]
name = "nofit"
baseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"
candidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"
expected_speedup = 1.5
set = ["hardware.memory_limit_gib=1e-9"]
''')
    assert main(["check", str(path), "--update"]) == 1
    out = capsys.readouterr().out
    assert "candidate does not fit" in out and "drifts" not in out
    assert "expected_speedup = 1.2174" in path.read_text()


def test_check_notes_a_baseline_that_does_not_fit(tmp_path, capsys):
    # it passed without a word (a review): the speedup was over a run that would not start
    path = tmp_path / "r.toml"
    pair = {side: f"{REPO}/scenarios/chunkflow/qwen2.5-14b-32k-{strategy}.toml"
            for side, strategy in (("baseline", "megatron"), ("candidate", "chunkflow"))}
    path.write_text(f'[[case]]\nname = "big baseline"\nbaseline = "{pair["baseline"]}"\n'
                    f'candidate = "{pair["candidate"]}"\nset = ["hardware.memory_limit_gib=40"]\n')
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note big baseline: baseline does not fit (device" in out and "FAIL" not in out


def test_check_names_the_case_whose_plan_is_refused(tmp_path, capsys):
    # a case's set that the strategy refuses when it plans (too many chunks), not when the
    # scenario loads, named no file nor case (a bad-input probe)
    path = tmp_path / "r.toml"
    path.write_text(f'''[[case]]
name = "many chunks"
baseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"
candidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"
set = ["workload.lengths=[40000]"]
min_speedup = 0.5
''')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "chunkflow-fig6-cs2-k2.toml @ strategy.chunk_size must be such that" in err
    assert f"from {path} case[0].candidate" in err and len(err.strip().splitlines()) == 1


def test_check_names_a_case_set_as_the_source_of_its_values(tmp_path, capsys):
    """A bad value a case's set gives was blamed on the case's baseline scenario file."""
    path = tmp_path / "r.toml"
    case = (f'[[case]]\nname = "x"\nbaseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"'
            f'\ncandidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"\nmin_speedup = 0.5\n')
    path.write_text(case + 'set = ["strategy.k=1", "strategy.k=2"]\n')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path} @ case[0].set must be each key once" in err and "baseline" not in err
    path.write_text(case + 'set = ["parallel.pp=0"]\n')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ltsim check: error: {path} @ parallel.pp") and "case[0].set" in err


def test_grid_syntax_errors(capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.k"]) == 2
    assert "section.key=v1,v2" in capsys.readouterr().err
    assert main(["sweep", str(example), "--grid", "workload.lengths=[4],[8"]) == 2
    assert "close the brackets" in capsys.readouterr().err
    # the grid replaced the --set value of the same key without a word
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2", "--set", "strategy.k=3"]) == 2
    assert "a key not also given with --set (got 'strategy.k')" in capsys.readouterr().err
    # nor a --set workload source by another one (each replaces the others; a fuzzing review)
    assert main(["sweep", str(example), "--grid", "workload.fixed_length=100,200",
                 "--set", 'workload.dataset="wikipedia"',
                 "--set", "workload.global_batch_size=4"]) == 2
    assert ("no --set gives another of: each point's would replace it (got "
            "'workload.fixed_length'). Fix: drop --set workload.dataset") in capsys.readouterr().err
    # nor rank unit-cost points beside real hardware's (units are not seconds; a fuzzing review)
    assert main(["sweep", str(example), "--grid", 'hardware.preset="unit","h100-sxm5-80gb"']) == 2
    assert ("points all on the unit preset or all on real hardware" in capsys.readouterr().err)
    # SQLite's in-memory database: nothing stored, nothing to resume
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2", "--db", ":memory:"]) == 2
    assert "'--db' must be a file" in capsys.readouterr().err


def test_grid_values_split_at_top_level_commas():
    # "[4],[8]" was one value that did not parse ("close the brackets"): lists could not be gridded
    assert expand_grid(["workload.lengths=[4, 2],[8]", 'name="a,b",c']) == [
        {"workload.lengths": [4, 2], "name": "a,b"}, {"workload.lengths": [4, 2], "name": "c"},
        {"workload.lengths": [8], "name": "a,b"}, {"workload.lengths": [8], "name": "c"}]
    assert expand_grid(["workload.lengths=[4, 2]"]) == [{"workload.lengths": [4, 2]}]


def test_a_grid_name_repeated_in_another_case_is_a_repeat():
    """A fuzzing review: chunkflow,CHUNKFLOW ran the same points twice (names are read in any
    case; compare refused the same repeat)."""
    from ltsim.errors import ConfigError

    with pytest.raises(ConfigError, match="distinct values"):
        expand_grid(["strategy.name=chunkflow,CHUNKFLOW"])
    with pytest.raises(ConfigError, match="distinct values"):
        expand_grid(['workload.dataset="wikipedia"," WIKIPEDIA"'])
    assert len(expand_grid(['name="a","A"'])) == 2  # a scenario's name is text, case kept
    assert len(expand_grid(['workload.dataset="l.txt","L.txt"'])) == 2  # files keep their case


def test_pool_tasks_keep_the_last_key_s_values_together():
    from ltsim.planner import _tasks

    grid = expand_grid(["strategy.chunk_size=2048,4096,8192,16384", "strategy.k=1,2,4,8"])
    tasks = _tasks(grid, 2)
    assert [p for task in tasks for p in task] == grid  # every point once, in grid order
    # the K values of one ChunkSize share its chunks and prices: one worker computes them
    assert [{p["strategy.chunk_size"] for p in task} for task in tasks] == [
        {2048}, {4096}, {8192}, {16384}]
    one_axis = expand_grid(["strategy.k=" + ",".join(map(str, range(1, 17)))])
    split = _tasks(one_axis, 2)
    assert [p for task in split for p in task] == one_axis
    assert len(split) >= 4  # two tasks a worker at least: the pool stays busy
    wide = expand_grid(["strategy.chunk_size=1,2", "strategy.k=" + ",".join(map(str, range(40)))])
    assert max(len(task) for task in _tasks(wide, 2)) <= 20


def test_sweep_plot_with_one_key_writes_a_line_chart(tmp_path, capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    plot = tmp_path / "line.png"
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2", "--plot", str(plot)]) == 0
    assert f"line chart written to {plot}" in capsys.readouterr().out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5_000


def test_sweep_top_cuts_the_json_rows_too(capsys):
    """--top N with --json printed every row (the flag was dropped unread); without --top the
    JSON keeps every row and the table its first 20."""
    import json

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2,3", "--top", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2,3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3


def test_sweep_grids_over_strategies(capsys):
    """--grid strategy.name runs each strategy with the file's options it takes (the file's
    ChunkFlow chunk_size and k were refused as Megatron's, each such point a rejected row)."""
    import json

    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.name=megatron-1f1b,chunkflow",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["strategy.name"] for r in rows) == ["chunkflow", "megatron-1f1b"]
    assert not any("error" in r for r in rows)


def test_a_grid_option_a_strategy_lacks_is_named_as_the_grids(capsys):
    """A fuzzing review: with strategy.name and strategy.k both gridded, Megatron's rows blamed
    the scenario file for k ("remove it") and the fix could not be followed."""
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.name=chunkflow,megatron-1f1b",
                 "--grid", "strategy.k=1,2", "--json"]) == 0
    errors = [r["error"] for r in json.loads(capsys.readouterr().out) if "error" in r]
    assert len(errors) == 2
    assert all("given by --grid strategy.k" in e and "ltsim compare" in e for e in errors)


def test_a_sweep_whose_points_all_fail_alike_gives_that_problems_fix(tmp_path, capsys):
    """Every point rejected for one reason that is not the grid's (a profile without
    collectives.csv) is that reason, with its own fix, not "correct the grid's values"."""
    import shutil

    profile = tmp_path / "p"
    shutil.copytree(REPO / "profiles/h100-sxm5-80gb", profile)
    (profile / "collectives.csv").unlink()
    assert main(["sweep", str(REPO / "scenarios/quickstart.toml"), "--set",
                 f'hardware.profile="{profile}"', "--grid", "strategy.k=1,2"]) == 2
    err = capsys.readouterr().err
    assert "has no collectives.csv" in err and "correct the grid" not in err
    assert main(["sweep", str(REPO / "scenarios/quickstart.toml"), "--grid", "strategy.k=0"]) == 2
    assert "at least one point that runs" in capsys.readouterr().err


def test_sweep_recomputes_when_the_length_file_changes(tmp_path, capsys):
    """The store keys a result by the scenario and by what it points at: the bytes of the length
    file (and the profile tables, and ltsim itself). An edited file is recomputed, and said so."""
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("4\n2\n1\n1\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "s"\n[model]\npreset = "qwen2.5-7b"\n'
                        '[hardware]\npreset = "unit"\ngpus_per_node = 4\n[parallel]\npp = 4\n'
                        '[workload]\ndataset = "lengths.txt"\n'
                        'global_batch_size = 4\n[strategy]\nname = "chunkflow"\nchunk_size = 2\n')
    args = ["sweep", str(scenario), "--grid", "strategy.k=1,2", "--db", str(tmp_path / "s.sqlite"),
            "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0  # unchanged: resumed from the store, nothing stale
    out, err = capsys.readouterr()
    assert json.loads(out) == first and "stale" not in err
    lengths.write_text("40\n20\n10\n10\n")
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "2 stored results are stale (inputs changed); recomputing" in err
    again = json.loads(out)
    assert [r["iteration_time_s"] for r in again] != [r["iteration_time_s"] for r in first]


def test_check_update_keeps_comments_and_quoted_overrides(tmp_path, capsys):
    path = tmp_path / "validation" / "r.toml"
    path.parent.mkdir()
    path.write_text(f'''# the regression gate  (a comment that must survive)

[[case]]
name = "fig 6"   # trailing comment
baseline = "{REPO}/scenarios/examples/chunkflow-fig2-baseline.toml"
candidate = "{REPO}/scenarios/examples/chunkflow-fig6-cs2-k2.toml"
min_speedup = 1.0
expected_speedup = 9.99  # recorded by --update
tolerance = 0.01
set = ["workload.lengths=[4, 2, 1, 1]", 'workload.num_batches=1']  # quoted override
''')
    assert main(["check", str(path)]) == 1  # 9.99 is far from the predicted 1.2174
    capsys.readouterr()
    assert main(["check", str(path), "--update"]) == 0
    text = path.read_text()
    assert "expected_speedup = 1.2174  # recorded by --update" in text
    assert text.startswith("# the regression gate  (a comment that must survive)\n")
    assert 'name = "fig 6"   # trailing comment' in text
    assert '''set = ["workload.lengths=[4, 2, 1, 1]", 'workload.num_batches=1']  # quoted override''' in text
    assert main(["check", str(path)]) == 0


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        parents = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        out, todo = [], [pid]
        while todo:
            kids = parents.get(todo.pop(), [])
            out += kids
            todo += kids
        return out
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_pooled_sweep_ends_without_tracebacks(tmp_path):
    """Stopping the pool at the end must not print the workers' interrupts."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ltsim", "sweep", str(REPO / "scenarios/quickstart.toml"),
         "--grid", "strategy.k=1,2,3,4", "--executor", "local:2", "--db",
         str(tmp_path / "s.sqlite")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_killing_a_local_sweep_leaves_no_workers(signal_name, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    sweep = subprocess.Popen(
        [sys.executable, "-m", "ltsim", "sweep", str(REPO / "scenarios/quickstart.toml"),
         "--grid", "strategy.k=1,2,3,4", "--executor", "local:2",
         "--set", "workload.num_batches=200", "--db", str(tmp_path / "s.sqlite")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(_descendants(sweep.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = _descendants(sweep.pid)
        assert len(workers) >= 2, "the pool did not start"
        time.sleep(0.5)  # the workers are now inside a point
        sweep.send_signal(getattr(signal, signal_name))
        sweep.wait(timeout=20)
        if signal_name != "SIGKILL":
            assert sweep.returncode == 130  # main's "interrupted"
            assert "Traceback" not in sweep.stderr.read()  # the workers die quietly too
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)]
    finally:  # a failing run must not leave its own orphans behind
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if sweep.poll() is None:
            sweep.kill()
        sweep.communicate()


def test_maxlen_checks_every_strategy_before_any_search_prints(capsys, monkeypatch):
    """A strategy that cannot plan the scenario fails before the other strategies' searches
    print their progress (the message was the last of a dozen lines)."""
    import ltsim.cli as cli

    clock = iter(range(0, 100_000, 5))  # past the 2 s after which searches print each length
    monkeypatch.setattr(cli.time, "perf_counter", lambda: next(clock))
    scenario = REPO / "scenarios/seco/cpu-llama-tiny-seco.toml"
    assert main(["maxlen", str(scenario), "--strategies", "megatron-1f1b,alst"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "offload_checkpoints" in err[0]


def test_a_silent_server_is_not_a_dask_scheduler(capsys):
    # an HTTP server (it waits for a request) left Dask's client waiting without end
    import socket
    import threading

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        accepted = []
        threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
        port = server.getsockname()[1]
        example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
        assert main(["sweep", str(example), "--grid", "strategy.k=1,2",
                     "--executor", f"dask://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "no reply within 3 s (not a Dask scheduler" in err and len(err.splitlines()) == 1


def test_an_output_never_overwrites_the_length_file(tmp_path, capsys):
    # only the scenario file was protected: export --out replaced the lengths with a schedule
    (tmp_path / "l.txt").write_text("4\n4\n4\n4\n")
    text = (REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml").read_text()
    (tmp_path / "s.toml").write_text(text.replace("lengths = [4, 2, 1, 1]",
                                                  'dataset = "l.txt"\nglobal_batch_size = 4'))
    for argv in (["export", str(tmp_path / "s.toml"), "--format", "torch-pipelining", "--out"],
                 ["simulate", str(tmp_path / "s.toml"), "--trace"]):
        assert main([*argv, str(tmp_path / "l.txt")]) == 2
        assert "must be a file other than the command's input" in capsys.readouterr().err
    assert (tmp_path / "l.txt").read_text() == "4\n4\n4\n4\n"
    with pytest.raises(SystemExit, match="2"):  # a folder's name: it wrote a file called new
        main(["export", str(tmp_path / "s.toml"), "--format", "torch-pipelining", "--out",
              f"{tmp_path}/new/"])
    assert "must be a file name, not a folder" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_later_batch_too_large_to_plan_fails_before_any_is_planned(monkeypatch):
    # it failed after the progress lines of the batches before it (10 s); now every batch's
    # size check (Strategy.check) runs before the first plan
    from ltsim.errors import ConfigError
    from ltsim.runner import first_plan, run
    import dataclasses

    from ltsim.strategies import REGISTRY, get_strategy
    from ltsim.workload import Workload

    scenario = load_scenario(REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml")
    monkeypatch.setattr(Workload, "sample", lambda self, seed: iter([(4, 4), (40_000, 4)]))
    strategy = get_strategy(scenario.strategy)
    planned = []
    real = strategy.plan_fn
    monkeypatch.setitem(REGISTRY, strategy.name, dataclasses.replace(
        strategy, plan_fn=lambda *a: planned.append(1) or real(*a)))
    for call in (run, first_plan):  # the second batch: 20,002 chunks of 2 tokens
        with pytest.raises(ConfigError, match="at most 16,384 chunks"):
            call(scenario)
    assert planned == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("argv, full", [(["simulate", "scenarios/quickstart.toml"], "stdout"),
                                        (["simulate", "scenarios/quickstart.toml", "--json"], "stdout"),
                                        (["simulate", "scenarios/quickstart.toml", "--set",
                                          "strategy.k=0"], "stderr")])
def test_output_to_a_full_disk_is_one_line_not_a_traceback(argv, full):
    """Standard output on a full disk was a traceback from print (or Python's complaint when it
    flushed at exit), exit 1; a bad input whose message cannot be written exited 1 too."""
    import subprocess
    import sys

    with open("/dev/full", "w") as sink:
        done = subprocess.run([sys.executable, "-m", "ltsim", *argv], cwd=REPO, timeout=120,
                              text=True, **{full: sink},
                              **{"stderr" if full == "stdout" else "stdout": subprocess.PIPE})
    assert done.returncode == 2
    if full == "stdout":
        assert done.stderr.startswith("ltsim simulate: error: its output could not be written (got "
                                      "No space left on device). Fix: ")
        assert len(done.stderr.splitlines()) == 1


def test_sweep_progress_off_a_terminal(capsys):
    """Nothing in a sweep's first 2 s (a 20-point sweep of a second printed 11 lines); then a
    line per tenth of the points from 20 points, a line per point below (19 InfiniPipe points
    ran minutes without a word)."""
    import time

    from ltsim.cli_progress import progress_bar

    quick, slow = progress_bar(time.perf_counter()), progress_bar(time.perf_counter() - 5)
    quick_long, long = progress_bar(time.perf_counter()), progress_bar(time.perf_counter() - 5)
    for done in range(6):
        quick(done, 5)
        slow(done, 5)
    slow(5, 5)
    for done in range(41):
        quick_long(done, 40)
        long(done, 40)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == (
        [f"sweep: {d}/5 points" for d in range(1, 6)] + [f"sweep: {d}/40 points" for d in range(0, 41, 4)])


def test_a_long_sweep_off_a_terminal_says_how_long_is_left(capsys, monkeypatch):
    """90,000 points at 0.5 s each said nothing for their first 9,000 (a tenth): a line at
    least every minute, each with the time left at the pace so far."""
    from ltsim import cli_progress

    clock = [0.0]
    monkeypatch.setattr(cli_progress.time, "perf_counter", lambda: clock[0])
    show = cli_progress.progress_bar(0.0)
    for done in range(301):
        clock[0] = done * 0.5
        show(done, 90_000)
    assert capsys.readouterr().err.splitlines() == [
        "sweep: 4/90000 points, 2 s, about 12.5 h left",
        "sweep: 124/90000 points, 62 s, about 12.5 h left",
        "sweep: 244/90000 points, 122 s, about 12.5 h left"]
    show = cli_progress.progress_bar(0.0)
    for done, at in ((0, 0.0), (10, 50.0), (20, 61.0), (40, 70.0)):
        clock[0] = at
        show(done, 40)
    assert capsys.readouterr().err.splitlines() == [
        "sweep: 10/40 points, 50 s, about 2 min left",
        "sweep: 20/40 points, 61 s, about 61 s left", "sweep: 40/40 points, 70 s"]


def test_a_long_silent_step_gets_a_line_every_while_and_counts_the_milps(capsys):
    """A planner's MILPs inside one batch ran minutes without a word (FlexSP on 4,096 GPUs):
    the heartbeat says the command is working, with the solves so far; a progress line of its
    own resets it, and it stops with the body."""
    import time

    from ltsim.cli_progress import heartbeat, say
    from ltsim.strategies import milp

    solved = milp.solved()
    with heartbeat("compare", every_s=0.2):
        time.sleep(0.5)
        milp._solved[0] += 3
        time.sleep(0.7)
        say("compare: batch 1 of 2 done")
        time.sleep(0.05)  # shorter than every_s after the line: no heartbeat
    time.sleep(0.5)  # none after the body
    lines = capsys.readouterr().err.splitlines()
    milp._solved[0] -= 3
    assert lines[-1] == "compare: batch 1 of 2 done"
    beats = lines[:-1]
    assert 2 <= len(beats) <= 6  # one per 0.2 s of 1.2 s at most, one per phase at least
    assert all(line.startswith("ltsim compare: still working, ") for line in beats)
    assert f"{solved + 3:,} MILPs solved" in beats[-1]


def test_a_refused_grid_value_prints_on_one_line(tmp_path, capsys):
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", 'name="a\\nb","c"',
                 "--db", str(tmp_path / "s.db")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("a\\nb ") and line.rstrip().endswith("-") for line in lines)
    assert not any(line.startswith("b ") for line in lines)


def test_a_refused_run_leaves_no_output_folder(tmp_path, capsys):
    # the folder check made --out before the scenario was read: an empty folder per bad run
    out = tmp_path / "new" / "deeper"
    assert main(["validate", str(tmp_path / "missing.toml"), "--profile", "cpu-ci",
                 "--out", str(out)]) == 2
    assert "'scenario' must be an existing TOML file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_trace_named_gz_is_gzipped_json_and_a_model_twice_is_refused(tmp_path, capsys):
    import gzip

    fig2 = REPO / "scenarios/examples/chunkflow-fig2-baseline.toml"
    assert main(["simulate", str(fig2), "--trace", str(tmp_path / "t.json.gz")]) == 0
    events = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    pytest.importorskip("torch")
    assert main(["profile", "--device", "cpu", "--out", str(tmp_path / "p"), "--model",
                 "llama-tiny", "--model", "llama-tiny"]) == 2
    assert "'--model' must be each model once (got 'llama-tiny')" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("flags", [["--trace", "t.json"], ["--plot", "g.png"]])
def test_an_output_in_a_deleted_working_directory_is_refused_as_such(tmp_path, monkeypatch,
                                                                      capsys, flags):
    """Run from a folder deleted under the shell, a relative output was refused as "a path without
    a symbolic-link loop" (a fuzzing review): Path.resolve() fails on getcwd."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["simulate", str(example), *flags]) == 2
    err = capsys.readouterr().err
    assert "the current directory no longer exists" in err and "link loop" not in err


def test_an_absolute_output_in_a_deleted_working_directory_is_written(tmp_path, monkeypatch,
                                                                       capsys):
    """A built-in dataset's name was resolved as a relative input path, which fails in a deleted
    working directory: the absolute --trace was refused as "'--trace' must be a path ltsim can
    resolve (got 'chunkflow-eval')" (a fuzzing review)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    trace = tmp_path / "t.json"
    assert main(["simulate", str(REPO / "scenarios/quickstart.toml"), "--set",
                 "workload.num_batches=1", "--trace", str(trace)]) == 0
    assert trace.exists()


def test_an_sqlite_uri_as_the_store_is_refused_before_any_folder_is_made(tmp_path, monkeypatch,
                                                                         capsys):
    """SQLite reads a name that starts "file:" as a URI (its mode, its options): --db
    'file:x/y.sqlite?mode=ro' made a folder 'file:x', then failed to open (a fuzzing review)."""
    monkeypatch.chdir(tmp_path)
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    assert main(["sweep", str(example), "--grid", "strategy.k=1,2",
                 "--db", "file:x/y.sqlite?mode=ro"]) == 2
    assert "'--db' must be a file path, not an SQLite URI" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_failed_point_of_a_toml_date_is_tried_again_and_the_other_read_back(tmp_path, capsys):
    """A TOML date in a grid is stored as its text; the stored row is the point's all the same
    (comparing the values themselves recomputed it on every resume: a review). The date is
    refused (a description is text), and a failed point is always tried again, so one of the
    two is read back, and the same rows printed."""
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    args = ["sweep", str(example), "--grid", "description=1979-05-27,x",
            "--db", str(tmp_path / "s.sqlite")]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    again = capsys.readouterr()
    assert "1 of 2 points read" in again.err and again.out == first


def test_a_failed_point_is_tried_again_not_read_back(tmp_path, capsys):
    """A fuzzing review: a store's error text, edited, was printed as the command's error
    (several lines, none of ltsim's). A failed point is simulated again on every run."""
    import sqlite3

    args, db, rows = _swept(tmp_path, capsys)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE results SET result = json_object('strategy.k', json_extract(result, "
                    "'$.\"strategy.k\"'), 'error', 'SECRET\nTraceback (most recent call last)',"
                    " 'fits', json('false'))")
    con.close()
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "SECRET" not in captured.out + captured.err
    assert json.loads(captured.out) == rows


def test_a_sweep_over_a_dataset_name_that_is_not_utf8(tmp_path, capsys):
    """A fuzzing review: a --grid value whose bytes are not UTF-8 (Python hands them over as
    surrogates) was a UnicodeEncodeError where the point's input digest is hashed; now that
    point is refused like any unknown dataset and the others run."""
    import os

    bad = os.fsdecode(b"\xff")
    args = ["sweep", str(REPO / "scenarios/quickstart.toml"), "--grid",
            f"workload.dataset={bad},lmsys-chat-1m", "--db", str(tmp_path / "s.sqlite"), "--json",
            "--set", "workload.global_batch_size=8", "--set", "workload.num_batches=1"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["fits"] for r in rows] == [True, False]
    assert "must be a built-in dataset" in rows[1]["error"]
