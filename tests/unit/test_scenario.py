"""Scenario files: presets, overrides, and one clear message (exit code 2) for each kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from ltsim.cli import main
from ltsim.errors import ConfigError
from ltsim.overrides import parse_override
from ltsim.scenario import load_scenario

BASE = """
name = "t"
[model]
preset = "qwen2.5-7b"
[hardware]
preset = "unit"
gpus_per_node = 4
[parallel]
pp = 4
[workload]
lengths = [4, 2, 1, 1]
[strategy]
name = "megatron-1f1b"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_loads_presets_and_derives_dp(tmp_path):
    scenario = load_scenario(_write(tmp_path, BASE))
    assert scenario.model.hidden_size == 3584
    assert scenario.parallel.dp == 1 and scenario.cluster.num_devices == 4
    assert scenario.workload.lengths == (4, 2, 1, 1)


def test_a_leading_byte_order_mark_is_not_content(tmp_path):
    """Windows editors save UTF-8 with a BOM; the scenario and its length file still read."""
    (tmp_path / "l.txt").write_bytes(b"\xef\xbb\xbf4\n2\n")
    path = tmp_path / "s.toml"
    text = BASE.replace("lengths = [4, 2, 1, 1]", 'dataset = "l.txt"\nglobal_batch_size = 4')
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    scenario = load_scenario(path)
    assert scenario.name == "t"
    batch = scenario.workload.sample(0)[0]  # drawn from the file's two lengths
    assert len(batch) == 4 and set(batch) <= {2, 4}


def test_override_uses_toml_syntax(tmp_path):
    scenario = load_scenario(_write(tmp_path, BASE), ["parallel.pp=2", "workload.lengths=[3,3]"])
    assert scenario.parallel.pp == 2 and scenario.parallel.dp == 2
    assert scenario.workload.lengths == (3, 3)
    assert parse_override("strategy.name=chunkflow") == ("strategy.name", "chunkflow")
    assert parse_override('model.dtype="fp32"') == ("model.dtype", "fp32")


@pytest.mark.parametrize("text,pattern", [
    (BASE.replace("pp = 4", "pp = 4\nppp = 1"), r"s\.toml @ parallel\.ppp must be a known key"),
    (BASE.replace("pp = 4", 'pp = "four"'), r"parallel\.pp must be an integer \(got 'four'\)"),
    (BASE.replace("pp = 4", "pp = 3"),
     r"parallel\.tp \* parallel\.cp \* parallel\.pp must be a divisor of the 4 devices "
     r"\(got 3\); tp=1, cp=1, pp=3"),
    (BASE + "\n[extra]\nx = 1\n", r"extra must be a known section"),
    (BASE.replace('name = "megatron-1f1b"', 'name = "megatron"'),
     r"strategy\.name must be one of alst, chunkflow, deepspeed-cp, deepspeed-ulysses, flexsp, infinipipe, megatron-1f1b, seco, seq1f1b, skrull, sorted-batching, spaco"),
    (BASE.replace('name = "megatron-1f1b"', 'name = "megatron-1f1b"\nmicro_batch = 2'),
     r"strategy\.micro_batch must be an option of 'megatron-1f1b'"),
    (BASE.replace("lengths = [4, 2, 1, 1]", "lengths = [4, -2]"),
     r"workload\.lengths must be a list of positive integers"),
    (BASE.replace('preset = "qwen2.5-7b"', 'preset = "gpt-9"'), r"model\.preset must be one of"),
    (BASE.replace('preset = "unit"', 'preset = "tpu"'), r"hardware\.preset must be one of"),
    (BASE.replace("pp = 4", "pp = 0"), r"s\.toml @ parallel\.pp must be a positive integer \(got 0\)"),
    (BASE.replace("pp = 4", "pp = 4\ntp = 0"), r"parallel\.tp must be a positive integer \(got 0\)"),
    (BASE.replace('name = "t"', 'name = "t"\nseed = -1'), r"@ seed must be a non-negative integer"),
    (BASE.replace("gpus_per_node = 4", "gpus_per_node = 4\nmemory_limit_gib = 0"),
     r"hardware\.memory_limit_gib must be a positive, finite number of GiB \(got 0\)"),
    # an 80 GB device said to hold 100,000 GiB: "fits" for anything (a fuzzing review)
    (BASE.replace('preset = "unit"', 'preset = "h100-sxm5-80gb"').replace(
        "gpus_per_node = 4", "gpus_per_node = 4\nmemory_limit_gib = 100000"),
     r"hardware\.memory_limit_gib must be at most the device's memory \(79.18 GiB on h100-sxm5-80gb\)"),
    # Qwen2.5-7B: 28 query heads, 4 KV heads
    (BASE.replace("pp = 4", "pp = 1\ntp = 8").replace("gpus_per_node = 4", "gpus_per_node = 8"),
     r"parallel\.tp must be a divisor of model\.num_attention_heads = 28 \(got 8\).*"
     r"Fix: choose parallel\.tp from 1, 2, 4, 28"),
    (BASE.replace("pp = 4", "pp = 1\ntp = 14").replace("gpus_per_node = 4", "gpus_per_node = 14"),
     r"parallel\.tp must be a multiple of model\.num_kv_heads = 4 when larger"),
    (BASE.replace('preset = "qwen2.5-7b"', 'preset = "qwen2.5-7b"\nnum_kv_heads = 7')
     .replace("pp = 4", "pp = 1\ntp = 2").replace("gpus_per_node = 4", "gpus_per_node = 2"),
     r"parallel\.tp must be a divisor of model\.num_kv_heads = 7 \(tp <= KV heads\) \(got 2\)"),
    (BASE.replace("pp = 4", 'pp = 1\ncp = 8\ncp_kind = "ulysses"').replace("gpus_per_node = 4",
                                                                          "gpus_per_node = 8"),
     r"parallel\.cp must be a divisor of the 28 heads per TP rank \(Ulysses splits heads\) \(got 8\)"),
    (BASE.replace("lengths = [4, 2, 1, 1]", "fixed_length = 1000000000000\nglobal_batch_size = 1"),
     r"workload\.fixed_length must be at most 2,147,483,648 tokens per sequence"),
    (BASE.replace("[parallel]\npp = 4", "").replace('name = "t"', 'name = "t"\nparallel = 3'),
     r"@ parallel must be a \[parallel\] table \(got 'int'\)"),
    (BASE.replace('name = "t"', 'name = "a\\nb"'), r"@ name must be printable text on one line"),
    (BASE.replace('name = "t"', 'name = "t"\ndescription = "x\\u0000"'),
     r"@ description must be printable text on one line"),
    (BASE.replace('preset = "unit"', 'preset = "h100-sxm5-80gb"\nloss_kernel = "flash"'),
     r"hardware\.loss_kernel must be one of torch, fused .* \(got 'flash'\)\. Fix: omit it"),
    (BASE.replace('preset = "unit"', 'preset = "h100-sxm5-80gb"\nloss_kernel = ""'),
     r"hardware\.loss_kernel must be one of torch, fused \(got ''\)\. Fix: omit "
     r"hardware\.loss_kernel for torch"),
    (BASE.replace('preset = "unit"', 'preset = "unit"\nloss_kernel = "fused"'),
     r"hardware\.loss_kernel must be absent with the unit preset"),
    # an empty list or name read as no source given ("got 'none'"; a fuzzing review)
    (BASE.replace("lengths = [4, 2, 1, 1]", "lengths = []"),
     r"workload\.lengths must be a non-empty list of sequence lengths \(got \[\]\)"),
    (BASE.replace("lengths = [4, 2, 1, 1]", 'dataset = ""\nglobal_batch_size = 4'),
     r"workload\.dataset must be a dataset name or a length-file path \(got ''\)"),
    (BASE.replace("lengths = [4, 2, 1, 1]",
                  "lengths = []\nfixed_length = 8\nglobal_batch_size = 4"),
     r"workload\.lengths must be a non-empty list .* Fix: remove it \(workload\.fixed_length is"),
])
def test_bad_input_names_the_key(tmp_path, capsys, text, pattern):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=pattern):
        load_scenario(path)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, command", [(["simulate", "s.toml", "extra"], "simulate"),
                                           (["workload", "describe", "a", "b"], "workload"),
                                           (["compare", "s.toml", "--strategies", "a", "--bogus"], "compare")])
def test_unrecognized_arguments_are_named_by_their_command(capsys, argv, command):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ltsim {command}: error: unrecognized arguments: ")
    assert f"see `ltsim {command} --help`" in err and len(err.strip().splitlines()) == 1


def test_version_with_other_arguments_is_refused(capsys):
    """argparse prints the version and drops what follows; `ltsim --version extra` is refused."""
    assert main(["--version", "extra"]) == 2
    err = capsys.readouterr().err
    assert "--version takes no other arguments (got extra)" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("ltsim ")
    assert main(["-h", "simulate"]) == 2  # the help of simulate is `ltsim simulate -h`
    assert "Fix: run `ltsim simulate --help`" in capsys.readouterr().err


def test_an_input_path_ending_in_a_slash_is_refused(capsys):
    """pathlib drops a trailing slash: `ltsim simulate scenario.toml/` read the file."""
    with pytest.raises(SystemExit) as done:  # an argparse usage error: one line, exit 2
        main(["simulate", "scenarios/quickstart.toml/"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "must be a file, not a folder (it ends in a slash)" in err


def test_missing_file_exit_code(capsys):
    assert main(["simulate", "no/such/file.toml"]) == 2
    assert "an existing TOML file" in capsys.readouterr().err


def test_bad_override_syntax(tmp_path, capsys):
    assert main(["simulate", str(_write(tmp_path, BASE)), "--set", "parallel.pp"]) == 2
    assert "section.key=value" in capsys.readouterr().err


def test_workload_batching_from_file_and_override(tmp_path):
    path = _write(tmp_path, BASE)
    assert load_scenario(path).workload.batching == "iid"
    scenario = load_scenario(path, ['workload.batching="sorted-groups"'])
    assert scenario.workload.batching == "sorted-groups"
    assert scenario.workload.sample(seed=0) == ((1, 1, 2, 4),)
    text = BASE.replace("lengths = [4, 2, 1, 1]", 'lengths = [4, 2, 1, 1]\nbatching = "sorted-groups"')
    assert load_scenario(_write(tmp_path, text)).workload.batching == "sorted-groups"
    assert main(["simulate", str(path), "--set", 'workload.batching="sorted-groups"']) == 0


def test_bad_workload_batching_exits_2(tmp_path, capsys):
    path = str(_write(tmp_path, BASE))
    with pytest.raises(ConfigError, match=r"s\.toml @ workload\.batching must be one of iid, sorted-groups "
                                          r"\(got 'sorted'\)"):
        load_scenario(path, ['workload.batching="sorted"'])
    assert main(["simulate", path, "--set", 'workload.batching="sorted"']) == 2
    err = capsys.readouterr().err
    assert "workload.batching must be one of iid, sorted-groups (got 'sorted')" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["simulate", path, "--set", "workload.batching=3"]) == 2
    assert "workload.batching must be a string (got 3)" in capsys.readouterr().err


def test_file_errors_name_the_file_and_never_quote_it(tmp_path, capsys):
    secret = "hunter2-do-not-print"
    cases = {
        "latin1.toml": (f'name = "caf\xe9 {secret}"'.encode("latin-1"),
                        r"'scenario' must be a UTF-8 text TOML file \(got '.*latin1\.toml'\); line 1 "
                        r"holds bytes that are not UTF-8"),
        "broken.toml": (f'name = "x\n{secret} = 1'.encode(),
                        r"'scenario' must be valid TOML \(got '.*broken\.toml'\); line 1, column 10: "
                        r"an illegal character"),
        "twice.toml": (f"[{secret}]\n[{secret}]\n".encode(),
                       r"must be valid TOML .*; line 2, column .*: a key or table declared twice"),
        "stray.toml": (BASE.replace('name = "t"', f'name = "t"\ntoken = "{secret}"').encode(),
                       r"stray\.toml @ token must be a known key \(description, name, seed\) "
                       r"\(got 'token'\)"),
    }
    for name, (content, pattern) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ConfigError, match=pattern) as info:
            load_scenario(path)
        assert secret not in str(info.value)
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"'scenario' must be a TOML file, not a directory"):
        load_scenario(folder)


def test_override_keys_and_values_are_checked():
    for text in ("=2", "parallel.=2", ".tp=2", "parallel.tp.x=2"):
        with pytest.raises(ConfigError, match=r"'--set' must be of the form section\.key=value with a key"):
            parse_override(text)
    with pytest.raises(ConfigError, match=r"'--set' must be a TOML value .*\(got 'workload\.lengths=\[4, 2'\)"):
        parse_override("workload.lengths=[4, 2")
    assert parse_override("strategy.order=dependent-last") == ("strategy.order", "dependent-last")


def test_bundled_scenarios_are_found_by_their_repository_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario("scenarios/quickstart.toml").name == "quickstart-qwen2.5-7b-32k"
    assert load_scenario("examples/chunkflow-fig2-baseline.toml").workload.lengths


def test_set_lengths_replaces_the_dataset_draw_and_its_batch_size():
    """--set workload.lengths=[...] on a dataset scenario (DESIGN.md's own example) runs those
    lengths as the batch: the file's global_batch_size, the dataset draw's size, goes with it."""
    from ltsim.overrides import apply_overrides

    raw = {"workload": {"dataset": "lmsys-chat-1m", "global_batch_size": 256, "num_batches": 2}}
    merged = apply_overrides(raw, ["workload.lengths=[4,2,1,1]"])
    assert merged["workload"] == {"lengths": [4, 2, 1, 1], "num_batches": 2}
    both = apply_overrides(raw, ["workload.lengths=[4,2]", "workload.global_batch_size=2"])
    assert both["workload"]["global_batch_size"] == 2


def test_set_strategy_name_keeps_only_the_file_options_the_new_strategy_takes(capsys):
    """--set strategy.name=X (DESIGN.md section 4: every value can be overridden) runs X with the
    file's strategy options that X also takes, as compare --strategies does; the file's options
    of its own strategy were blamed on the file ("strategy.chunk_size must be an option of
    'megatron-1f1b'"). An option given with --set is still checked against X."""
    switched = load_scenario("scenarios/quickstart.toml", ["strategy.name=megatron-1f1b"])
    assert switched.strategy == "megatron-1f1b" and switched.strategy_options == {}
    same = load_scenario("scenarios/quickstart.toml", ["strategy.name=ChunkFlow"])
    assert same.strategy_options == {"chunk_size": 8192, "k": 2}
    skrull = load_scenario("scenarios/skrull/qwen2.5-0.5b-wikipedia.toml",
                           ["strategy.name=deepspeed-cp"])  # shares skrull's bucket_size
    assert "bucket_size" in skrull.strategy_options
    assert main(["simulate", "scenarios/quickstart.toml", "--set", "strategy.name=megatron-1f1b"]) == 0
    capsys.readouterr()
    assert main(["simulate", "scenarios/quickstart.toml", "--set", "strategy.name=megatron-1f1b",
                 "--set", "strategy.k=4"]) == 2
    assert "strategy.k" in capsys.readouterr().err


@pytest.mark.parametrize("tp, gpus", [(14, 14), (6, 6), (3, 3)])
def test_a_refused_tp_is_fixed_with_degrees_both_head_rules_take(tp, gpus):
    """Qwen2.5-7B (28 query heads, 4 KV heads) takes tp = 1, 2, 4 or 28: the fix listed the
    divisors of 28 (7 and 14 among them, the first refused value itself) or of 4 (28 left out)."""
    with pytest.raises(ConfigError) as info:
        load_scenario("scenarios/quickstart.toml", [f"hardware.gpus_per_node={gpus}",
                                                    f"parallel.tp={tp}", "parallel.pp=1"])
    assert info.value.key == "parallel.tp"
    assert info.value.fix == "choose parallel.tp from 1, 2, 4, 28"


def test_a_scenario_name_is_at_most_200_characters(tmp_path):
    """A name of 200,000 characters hung `simulate --plot` (matplotlib laying out the title)."""
    text = (Path(__file__).resolve().parents[2] / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
            ).read_text().splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("name"))
    for length, ok in ((200, True), (201, False)):
        text[at] = f'name = "{"é" * length}"'
        path = tmp_path / f"n{length}.toml"
        path.write_text("\n".join(text) + "\n")
        if ok:
            assert len(load_scenario(str(path)).name) == 200
        else:
            with pytest.raises(ConfigError, match=r"n201.toml @ name must be at most 200 characters .*"
                               r"\(got '201 characters'\)"):
                load_scenario(str(path))


@pytest.mark.parametrize("sets, pattern", [
    (["parallel.pp=0", "parallel.pp=2"], r"'--set' must be each key once \(got 'parallel.pp'\)"),
    (["workload.dataset=\"wikipedia\"", "workload.lengths=[4, 2]"],
     r"'--set' must be one workload source .* \(got 'workload.dataset and workload.lengths'\)"),
])
def test_an_override_that_a_later_one_would_silently_replace_is_refused(sets, pattern):
    # the last --set of a key won (hiding a bad first value); lengths dropped the dataset given too
    quickstart = str(Path(__file__).resolve().parents[2] / "scenarios/quickstart.toml")
    with pytest.raises(ConfigError, match=pattern):
        load_scenario(quickstart, sets)


@pytest.mark.parametrize("argv, flag", [
    (["simulate", "scenarios/quickstart.toml", "--plot", "a.png", "--plot", "b.png"], "--plot"),
    (["sweep", "scenarios/quickstart.toml", "--grid", "strategy.k=1,2", "--executor", "local:0",
      "--executor", "local"], "--executor"),
    (["maxlen", "scenarios/quickstart.toml", "--step", "1024", "--step", "2048"], "--step"),
    (["profile", "--device", "cpu", "--out", "p", "--threads", "2", "--threads", "1"], "--threads"),
])
def test_an_option_of_one_value_given_twice_is_refused(argv, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    with pytest.raises(SystemExit, match="2"):
        main(argv)
    err = capsys.readouterr().err
    assert f"argument {flag}: given more than once (it takes one value)" in err
    assert len(err.splitlines()) == 1


def test_a_builtin_dataset_name_is_not_shadowed_by_a_file_beside_the_scenario(tmp_path):
    """A stray file named like a built-in dataset beside the scenario was read instead of the
    built-in (and refused for its suffix); in the working directory it never was. ``./NAME``
    reaches such a file."""
    scenario = tmp_path / "qs.toml"
    scenario.write_text((Path("scenarios/quickstart.toml")).read_text())
    (tmp_path / "chunkflow-eval").write_text("100\n")
    assert load_scenario(scenario).workload.dataset == "chunkflow-eval"
    (tmp_path / "mine.txt").write_text("100\n")
    assert load_scenario(scenario, ["workload.dataset='mine.txt'"]).workload.dataset == str(
        tmp_path / "mine.txt")


def test_a_toml_file_that_is_not_a_scenario_is_not_quoted(tmp_path):
    """A fuzzing review: another TOML file's first key or section name was quoted back (its
    content); with no key or table of a scenario it is called what it is."""
    path = tmp_path / "other.toml"
    path.write_text('AWS_SECRET_ACCESS_KEY = "x"\n[SECRET-do-not-echo-7f3a]\ny = 1\n')
    with pytest.raises(ConfigError, match="other.toml @ scenario must be a scenario file") as info:
        load_scenario(path)
    assert "SECRET" not in str(info.value)


def test_a_toml_date_is_shown_as_written(tmp_path):
    """A fuzzing review: a date where a number belongs was shown as Python's
    datetime.datetime(1979, 5, 27, ...)."""
    path = tmp_path / "d.toml"
    path.write_text('name = "x"\nseed = 1979-05-27T07:32:00Z\n')
    with pytest.raises(ConfigError, match=r"seed must be an integer \(got the date/time "
                                          r"1979-05-27T07:32:00\+00:00\)"):
        load_scenario(path)


def test_a_profile_path_beside_the_scenario_says_where_paths_are_read(tmp_path, monkeypatch):
    """A fuzzing review: a profile folder beside the scenario was not found (paths are read from
    the working directory), and the message did not say where it looked."""
    (tmp_path / "myprof").mkdir()
    scenario = tmp_path / "s.toml"
    scenario.write_text((Path(__file__).parents[2] / "scenarios/quickstart.toml").read_text())
    monkeypatch.chdir("/")
    with pytest.raises(ConfigError, match="a bare name is looked up among the bundled profiles, "
                                          "then in the working directory; .*neither from the "
                                          "scenario's folder"):
        load_scenario(scenario, ['hardware.profile="myprof"'])
