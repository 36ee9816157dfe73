"""``ltsim maxlen``: the answer fits and the next step does not, the peak splits into terms that add
up to the simulated peak, every registered strategy answers, and the command line's output."""

from __future__ import annotations

import json

import pytest

from ltsim.cli import main
from ltsim.maxlen import (DEVICE_TERMS, evaluate, find_max_length, length_scenario, peak_terms,
                          workload_scenario, worst_draw)
from ltsim.runner import make_cost_model, run
from ltsim.scenario import load_scenario
from ltsim.scenario import build_scenario
from ltsim.strategies import REGISTRY
from ltsim.strategies.spaco import EVERY_CHUNK
from tests.conftest import REPO

SINGLE_GPU = {"hardware.gpus_per_node": 1, "parallel.tp": 1, "parallel.pp": 1,
              "model.preset": "qwen2.5-1.5b"}


QUICKSTART = REPO / "scenarios" / "quickstart.toml"


@pytest.fixture(scope="module")
def quickstart():
    return load_scenario(QUICKSTART)


def test_quickstart_answer_fits_and_the_next_step_does_not(quickstart):
    answer = find_max_length(quickstart, step=4096)
    cost = make_cost_model(quickstart)
    assert answer.max_length > 32768 and answer.max_length % 4096 == 0
    assert evaluate(quickstart, answer.max_length, cost).fits
    assert not evaluate(quickstart, answer.max_length + 4096, cost).fits
    assert answer.failing.length == answer.max_length + 4096
    assert answer.binds in DEVICE_TERMS
    assert answer.at.time_per_token_s > 0


def test_time_per_token_counts_every_replicas_sequence(quickstart):
    # a step trains one sequence per replica: at dp 2 twice the tokens of one (the default mode
    # had divided by one replica's, dp times the --workload mode's time per token)
    scenario = build_scenario({**quickstart.raw, "parallel": {**quickstart.raw["parallel"],
                                                             "tp": 2, "dp": 2}},
                              source=quickstart.source)
    point = evaluate(scenario, 16384, make_cost_model(scenario))
    assert point.tokens == 2 * 16384
    assert point.time_per_token_s == pytest.approx(point.iteration_time_s / (2 * 16384))


def test_a_chunked_strategy_answers_a_length_every_shorter_one_fits_at(quickstart):
    # ChunkFlow's peak rises as a sequence's last chunk fills and falls past each chunk's end:
    # a length past a failing chunk end can fit alone, and bisection with a step off the chunk
    # size landed there (2,377,000 tokens at --step 1000, above 2,097,152, which does not fit)
    cost = make_cost_model(quickstart)
    period = 8192  # the quickstart's chunk_size
    answers = {step: find_max_length(quickstart, step=step) for step in (1000, 1024)}
    for step, answer in answers.items():
        n = answer.max_length
        assert evaluate(quickstart, n, cost).fits
        assert evaluate(quickstart, (n - 1) // period * period, cost).fits
        assert not answer.failing.fits
        assert n < answer.failing.length <= n + step
    assert abs(answers[1000].max_length - answers[1024].max_length) < 1024
    end = answers[1000].failing.length  # a chunk end that does not fit ...
    assert end % period == 0 and evaluate(quickstart, end + period // 2, cost).fits  # ... past it


def test_peak_terms_add_up_to_the_simulated_peak(quickstart):
    scenario = length_scenario(quickstart, 65536)
    cost = make_cost_model(scenario)
    sim = run(scenario, cost=cost)
    trace = sim.traces[0]
    for device in range(trace.num_devices):
        terms = peak_terms(sim.plans[0], trace, cost, device)
        assert sum(terms.values()) == trace.peak_memory_bytes()[device]
        assert terms["optimizer"] > 0 and terms["activations"] > 0
    last = trace.num_devices - 1  # the LM head's stage holds the logits
    assert peak_terms(sim.plans[0], trace, cost, last)["logits"] > 0


def test_every_registered_strategy_answers(quickstart):
    scenario = quickstart.with_overrides(SINGLE_GPU)
    for name in sorted(REGISTRY):
        raw = {**scenario.raw, "strategy": {"name": name}}
        if name == "alst":  # it offloads layer-input checkpoints: full recompute
            raw["parallel"] = {**raw["parallel"], "recompute": "full"}
        answer = find_max_length(build_scenario(raw), step=8192, max_length=1 << 22)
        assert answer.max_length >= 8192, name
        assert answer.failing is None or not answer.failing.fits


def test_chunked_strategies_reach_further_than_plain_training(quickstart):
    scenario = quickstart.with_overrides(SINGLE_GPU)
    reach = {name: find_max_length(build_scenario({**scenario.raw, "strategy": {
        "name": name, **({"chunk_size": 4096} if name != "megatron-1f1b" else {})}}),
        step=4096).max_length for name in ("megatron-1f1b", "seco", "spaco")}
    assert reach["megatron-1f1b"] < reach["seco"] <= reach["spaco"]


def test_command_line_json_and_table(capsys):
    path = str(QUICKSTART)
    assert main(["maxlen", path, "--strategies", "megatron-1f1b", "--step", "8192", "--json"]) == 0
    (answer,) = json.loads(capsys.readouterr().out)
    assert answer["strategy"] == "megatron-1f1b" and answer["max_length"] % 8192 == 0
    assert set(answer["terms_bytes"]) >= set(DEVICE_TERMS)
    assert main(["maxlen", path, "--step", "8192"]) == 0
    out = capsys.readouterr().out
    assert "max length" in out and "do not fit" in out


@pytest.mark.parametrize("flags,key", [(["--step", "0"], "--step"),
                                       (["--max-length", "10"], "--max-length"),
                                       (["--strategies", "nope"], "--strategies"),
                                       # a seed draws nothing for one sequence per replica
                                       (["--set", "seed=5"], "--set")])
def test_bad_flags_exit_2_with_one_line(capsys, flags, key):
    assert main(["maxlen", str(QUICKSTART), *flags]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_workload_mode_cuts_the_scenarios_own_distribution(quickstart):
    """--workload: the longest cut of the quickstart's length distribution (its four sampled
    batches, longer sequences truncated) at which every batch fits, and the next step does not;
    ChunkFlow's bounded memory takes the whole distribution."""
    megatron = build_scenario({**quickstart.raw, "strategy": {"name": "megatron-1f1b"}})
    cost = make_cost_model(megatron)
    answer = find_max_length(megatron, step=4096, mode="workload", cost=cost)
    uncut = workload_scenario(megatron, 1 << 30)  # the draws before any cut
    longest = max(max(b) for b in uncut.workload.sample(uncut.seed))
    assert answer.mode == "workload" and 4096 <= answer.max_length < longest
    assert evaluate(megatron, answer.max_length, cost, "workload").fits
    assert not evaluate(megatron, answer.max_length + 4096, cost, "workload").fits
    # the same draws at every cut: the batch holding the longest draw peaks higher past the cut
    assert answer.failing.peak_bytes > answer.at.peak_bytes
    assert answer.at.tokens > answer.max_length  # time per token over the whole batch
    whole = find_max_length(quickstart, step=4096, mode="workload")
    assert whole.failing is None and whole.binds.startswith("none")
    assert whole.grows == "-"  # nothing fails, so nothing to shrink (was "weights")
    assert whole.max_length == 262144  # chunkflow-eval's longest sequence


def test_workload_mode_says_when_one_sequence_of_the_cut_does_not_fit(quickstart):
    # lmsys-chat-1m is long-tailed: the quickstart's four sampled batches hold no long sequence,
    # so every cut up to the longest fits; a batch that draws one that long does not
    lmsys = quickstart.with_overrides({"workload.dataset": "lmsys-chat-1m"})
    packed = build_scenario({**lmsys.raw, "strategy": {"name": "megatron-1f1b",
                                                        "pack_tokens": 32768}})
    answer = find_max_length(packed, step=4096, mode="workload")
    assert answer.failing is None and answer.binds == "none: every sampled batch fits uncut"
    assert f"one sequence of {answer.max_length:,} tokens per replica does not" in answer.note
    assert not evaluate(packed, answer.max_length, make_cost_model(packed)).fits
    assert "one sequence" not in find_max_length(lmsys, step=4096, mode="workload").note


def test_workload_mode_cuts_a_file_whose_sequences_are_all_longer_than_the_step(quickstart, tmp_path):
    """The first cut (one step) lies below every length of the file: the cut truncates, so no
    sequence is dropped (it was refused as "workload.max_length must be at least the shortest
    length", a key the user never set; a fuzzing review)."""
    path = tmp_path / "long.txt"
    path.write_text("5000\n6000\n7000\n")
    scenario = quickstart.with_overrides({"workload.dataset": str(path)})
    answer = find_max_length(scenario, step=1024, mode="workload", max_length=8192)
    assert answer.max_length == 7168 and answer.binds.startswith("none")


def test_workload_mode_needs_a_distribution(capsys):
    assert main(["maxlen", str(REPO / "scenarios" / "examples" / "chunkflow-cs4-k1.toml"),
                 "--workload"]) == 2
    err = capsys.readouterr().err
    assert "workload.dataset" in err and "Traceback" not in err


@pytest.mark.parametrize("key", ["workload.max_length=1024", 'workload.overlong="drop"'])
def test_workload_mode_refuses_the_keys_its_search_sets(capsys, key):
    # the search sets the cap and truncates: these were read and silently replaced (a fuzzing
    # review found the output byte for byte that of the plain run)
    assert main(["maxlen", str(QUICKSTART), "--workload", "--set", key]) == 2
    err = capsys.readouterr().err
    assert "no workload.max_length or workload.overlong with --workload (" in err
    assert f"(got '{key}')" in err and len(err.strip().splitlines()) == 1


def test_progress_lines_show_each_length_once_the_search_runs_long(capsys, quickstart):
    """A slow search (InfiniPipe's MILPs: minutes) prints a line per simulated length on stderr."""
    from ltsim.cli_progress import maxlen_progress

    answer = find_max_length(quickstart, step=1 << 18, max_length=1 << 21,
                             progress=maxlen_progress("chunkflow", 0.0, after_s=0.0))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(answer.points)
    assert lines[0].startswith("maxlen: chunkflow: 262,144 tokens fit, ")
    assert any("do not fit (device memory)" in line for line in lines)


def test_a_cap_off_the_step_grid_is_rounded_down_and_the_search_ends():
    """--max-length 3000 with --step 1024 once made the bisection spin (a gap of 1.9 steps); a
    daemon thread, so a regression fails here instead of hanging the suite."""
    import threading

    scenario = load_scenario(REPO / "scenarios" / "examples" / "chunkflow-fig2-equal.toml")
    out = []
    search = threading.Thread(target=lambda: out.append(
        find_max_length(scenario, step=1024, max_length=3000)), daemon=True)
    search.start()
    search.join(timeout=60)
    assert out, "the search did not end"
    (answer,) = out
    assert answer.max_length == 2048 and answer.failing is None
    assert answer.binds == "none up to 2,048 tokens"


def test_a_first_length_the_strategy_refuses_blames_the_step(capsys):
    """A length-dependent limit (the 1e9-token batch) at the first step is the step's fault,
    not the scenario's (whose own lengths are four tokens)."""
    assert main(["maxlen", str(REPO / "scenarios" / "examples" / "chunkflow-fig2-equal.toml"),
                 "--set", "hardware.gpus_per_node=16", "--set", "hardware.memory_limit_gib=1",
                 "--step", "300000000"]) == 2
    err = capsys.readouterr().err
    assert "'--step' must be a length the strategy can plan" in err and err.count("Fix:") == 1


def test_spaco_is_searched_with_its_worst_draw(quickstart):
    # its peak depends on which chunks a step draws (a run draws anew every step): the search
    # uses the draw of the largest peak, says so, and the answer fits every seeded draw
    scenario = build_scenario({**quickstart.with_overrides(SINGLE_GPU).raw, "strategy": {
        "name": "spaco", "chunk_size": 4096, "budget": 2}})
    answer = find_max_length(scenario, step=4096)
    assert "sampling" not in answer.options  # the options given; the note says what ran
    assert 'strategy.sampling = "worst"' in answer.note and "worst draw" in answer.note
    assert answer.to_dict()["note"] == answer.note
    cost = make_cost_model(scenario)
    for seed in range(4):
        drawn = build_scenario({**scenario.raw, "strategy": {**scenario.raw["strategy"],
                                                             "seed": seed}})
        assert evaluate(drawn, answer.max_length, cost).fits
    same = build_scenario({**scenario.raw, "strategy": {**scenario.raw["strategy"],
                                                        "sampling": "worst", "seed": 3}})
    assert find_max_length(same, step=4096).note == ""  # already its own (the seed unread)
    bernoulli = build_scenario({**scenario.raw, "strategy": {**scenario.raw["strategy"],
                                                             "sampling": "bernoulli"}})
    note = worst_draw(bernoulli)[1]  # every chunk, in words (not the budget that stands for it)
    assert "over every chunk" in note and str(EVERY_CHUNK) not in note and "seed" not in note


def test_an_option_the_run_does_not_read_is_left_out_of_its_label():
    # Seq1F1B's original variant reads no chunk_size: the label showed the file's chunk_size
    # beside variant=original with no warning (a fuzzing review)
    scenario = load_scenario(REPO / "scenarios" / "infinipipe" / "gpt-7b-64k-seq1f1b.toml",
                             ['strategy.variant="original"'])
    assert "chunk_size" in scenario.strategy_options
    answer = find_max_length(scenario, step=65536, max_length=65536)
    assert "chunk_size" not in answer.options and answer.options["variant"] == "original"


def test_two_strategies_that_search_alike_are_refused(capsys):
    # SpaCO is searched with its worst draw, so spaco and spaco:sampling=worst are one search;
    # the seed and the gradient compensation change neither its time nor its memory
    for other in ("spaco:sampling=worst", "spaco:seed=3", "spaco:compensation=none",
                  "spaco:cap=3"):
        code = main(["maxlen", str(QUICKSTART), "--strategies", f"spaco,{other}"])
        err = capsys.readouterr().err
        assert code == 2 and f"remove {other}: it runs exactly as spaco" in err


def test_a_search_with_room_to_spare_stops_at_a_batch_of_the_workload_cap():
    # a sequence per DP replica: past 10^9 tokens in all the batch itself is refused, and a
    # search with a huge limit ended on that refusal, naming workload.lengths (a probe)
    from ltsim.workload import MAX_BATCH_TOKENS

    scenario = load_scenario(REPO / "scenarios" / "examples" / "chunkflow-fig2-baseline.toml",
                             ["hardware.memory_limit_gib=1e6", "parallel.pp=1",
                              "hardware.gpus_per_node=2"], any_workload=True)
    assert scenario.parallel.dp == 2
    answer = find_max_length(scenario, step=1 << 20)
    assert answer.failing is None and answer.max_length == answer.cap
    assert answer.cap == MAX_BATCH_TOKENS // 2 // (1 << 20) * (1 << 20)
    assert answer.binds == f"none up to {answer.cap:,} tokens"


def test_a_gpt_position_table_grows_with_the_length_searched():
    """A review: maxlen answered a GPT's longest sequence with its 4,096-row learned position
    table, which a run that long cannot use (and whose rows' weights count): 8% too long at
    GPT-7B under FlexSP. Each length is now planned with a table of that many rows."""
    gpt = load_scenario(REPO / "scenarios/infinipipe/gpt-7b-64k-megatron.toml")
    assert length_scenario(gpt, 100_000).model.max_position_embeddings == 100_000
    assert length_scenario(gpt, 2_048).model.max_position_embeddings == 4_096
    llama = load_scenario(REPO / "scenarios/quickstart.toml")
    assert length_scenario(llama, 100_000).model == llama.model
    cost = make_cost_model(gpt)
    grown = evaluate(gpt, 65_536, cost)
    sized = load_scenario(REPO / "scenarios/infinipipe/gpt-7b-64k-megatron.toml",
                          ["model.max_position_embeddings=65536"])
    assert grown == evaluate(sized, 65_536, make_cost_model(sized))  # as if written so
    assert grown.terms["weights"] > evaluate(gpt, 4_096, cost).terms["weights"]
    assert not any("max_position_embeddings" in w for w in grown.warnings)
    answer = find_max_length(gpt, step=65_536, max_length=1 << 20)
    assert "grown to each length searched" in answer.note


def test_the_plot_says_tokens_and_draws_no_limit_on_the_unit_preset(quickstart, tmp_path,
                                                                      monkeypatch):
    """A fuzzing review: on the unit preset the figure's axis read GiB and its "device limit"
    line sat at the no-limit sentinel (2^62 / 2^30), squashing the data to nothing."""
    import ltsim.viz_maxlen as viz_maxlen

    figures = []
    monkeypatch.setattr(viz_maxlen, "_save", lambda fig, path: figures.append(fig) or path)
    unit = load_scenario(REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml")
    real = find_max_length(quickstart, step=16384, max_length=65536)
    for answer in (find_max_length(unit, step=16, max_length=64), real):
        viz_maxlen.plot_maxlen([answer], tmp_path / "m.png")
    (unit_ax,), (real_ax,) = (fig.axes for fig in figures)
    assert unit_ax.get_ylabel() == "peak memory per GPU (tokens)"
    assert not [line for line in unit_ax.lines if line.get_label().startswith("device")]
    assert real_ax.get_ylabel() == "peak memory per GPU (GiB)"
    limit, = (line for line in real_ax.lines if line.get_label().startswith("device"))
    assert limit.get_ydata()[0] == real.memory_limit_bytes / 2**30


def test_an_answers_warnings_are_its_own_runs(quickstart):
    """A review: every probe priced with one cost model, so the answer's warnings held lookups
    of longer probes that failed (SeCO at 2,383,872 tokens: "kv_tokens=4.1943e+06")."""
    import re

    answer = find_max_length(quickstart, step=4096)
    seen = [float(x) for w in answer.at.warnings for x in re.findall(r"kv_tokens=([0-9.e+]+)", w)]
    assert seen and max(seen) <= answer.max_length * (1 + 1e-5)  # (printed to 6 digits)
