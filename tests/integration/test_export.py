"""``ltsim export --format torch-pipelining``: the simulated schedule, read back by torch's own
CSV loader (``_PipelineScheduleRuntime._load_csv``, which also lowers it with SEND/RECV and
REDUCE_GRAD), and the plans the format cannot express refused with one message."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from ltsim.cli import main
from ltsim.errors import ConfigError
from ltsim.export import get_format, torch_pipelining
from ltsim.plan import OpKind, Plan
from ltsim.runner import run
from ltsim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "scenarios/examples"
FIG2 = EXAMPLES / "chunkflow-fig2-baseline.toml"  # Megatron 1F1B, sequences 4, 2, 1, 1, pp 4
FIG6 = EXAMPLES / "chunkflow-fig6-cs2-k1.toml"  # ChunkFlow, chunk size 2, K = 1: recomputes
# (scenario, overrides, DP replica exported)
CASES = {
    "megatron-1f1b": (FIG2, [], 0),
    "chunkflow-standalone": (FIG6, ["strategy.chunk_size=4"], 0),  # every sequence <= chunk_size
    "chunkflow-dependent-kept": (FIG6, ["strategy.k=2"], 0),  # a sequence in 2 chunks, no R
    "megatron-dp2-replica1": (FIG2, ["hardware.gpus_per_node=8"], 1),  # chunks 2, 3 -> 0, 1
}
FIG2_GOLDEN = ("0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\r\n"  # Megatron 1F1B: warm-up p - stage - 1
               "1F0,1F1,1F2,1B0,1F3,1B1,1B2,1B3\r\n"
               "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2B3\r\n"
               "3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3\r\n")


def _plan(name: str) -> Plan:
    path, overrides, _ = CASES[name]
    return run(load_scenario(path, overrides)).plans[0]


def _simulated_order(plan: Plan, replica: int) -> dict[int, list[tuple[int, str, int]]]:
    """Per PP rank (= stage), the (stage, F/B, micro-batch) of each compute op of the replica's
    device, micro-batches numbered 0..n-1 in the order of the replica's chunk indices."""
    indices = sorted(c.index for c in plan.chunks if c.replica == replica)
    number = {c: i for i, c in enumerate(indices)}
    order = {}
    for device in plan.devices:
        if device.replica == replica:
            order[device.stage] = [(op.stage, op.kind.value, number[op.chunk])
                                   for op in plan.program(device.index).ops
                                   if op.kind in (OpKind.F, OpKind.B)]
    return order


def _torch_runtime(num_stages: int, num_microbatches: int):
    """torch's schedule runtime without process groups: it reads only these fields of a stage."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="the parse-back check needs torch")
    stage = SimpleNamespace(num_stages=num_stages, group_size=num_stages, group_rank=0,
                            stage_index_to_group_rank=None)
    return schedules, schedules._PipelineScheduleRuntime([stage], n_microbatches=num_microbatches)


@pytest.mark.parametrize("name", CASES)
def test_torch_loads_the_simulated_order(name, tmp_path):
    plan = _plan(name)
    replica = CASES[name][2]
    schedule = torch_pipelining(plan, replica=replica)
    path = tmp_path / "schedule.csv"
    path.write_text(schedule.to_csv(), newline="")
    torch_schedules, runtime = _torch_runtime(plan.num_stages, len(schedule.microbatches))
    runtime._load_csv(str(path))  # compute_only: validates, then adds comms and REDUCE_GRAD
    parsed = {rank: [(a.stage_index, a.computation_type.value, a.microbatch_index) for a in actions]
              for rank, actions in runtime.pipeline_order.items()}
    assert parsed == _simulated_order(plan, replica)
    assert runtime.stage_index_to_group_rank == {s: s for s in range(plan.num_stages)}
    # torch's lowering placed a SEND/RECV pair per boundary crossing and one REDUCE_GRAD per rank,
    # and its dry run of the lowered schedule does not deadlock
    lowered = runtime.pipeline_order_with_comms
    counts = {t: sum(a.computation_type.value == t for r in lowered for a in lowered[r])
              for t in ("REDUCE_GRAD", "SEND_F", "RECV_F")}
    num_mb = len(schedule.microbatches)
    assert counts == {"REDUCE_GRAD": plan.num_stages, "SEND_F": (plan.num_stages - 1) * num_mb,
                      "RECV_F": (plan.num_stages - 1) * num_mb}
    skip = {"UNSHARD", "RESHARD", "REDUCE_GRAD"}  # FSDP and DP: the dry run does not know them
    comms = {r: [a for a in acts if a.computation_type.value not in skip]
             for r, acts in lowered.items()}
    torch_schedules._simulate_comms_compute(comms, lambda s: s, plan.num_stages)
    # and torch writes the same bytes back
    runtime._dump_csv(str(tmp_path / "torch.csv"), format="compute_only")
    assert (tmp_path / "torch.csv").read_bytes() == path.read_bytes()


def test_megatron_1f1b_golden_csv():
    assert torch_pipelining(_plan("megatron-1f1b")).to_csv() == FIG2_GOLDEN


def test_microbatches_are_the_replicas_chunks_renumbered():
    plan = _plan("megatron-dp2-replica1")
    schedule = torch_pipelining(plan, replica=1)
    assert [c.index for c in schedule.microbatches] == [2, 3]
    assert schedule.rows == (("0F0", "0F1", "0B0", "0B1"), ("1F0", "1F1", "1B0", "1B1"),
                             ("2F0", "2F1", "2B0", "2B1"), ("3F0", "3B0", "3F1", "3B1"))
    assert (schedule.replica, schedule.num_replicas) == (1, 2)
    packed = torch_pipelining(_plan("chunkflow-standalone")).microbatches
    assert [[(s.seq, s.start, s.stop) for s in c.slices] for c in packed] == [
        [(0, 0, 4)], [(1, 0, 2), (2, 0, 1), (3, 0, 1)]]


def test_cli_writes_the_schedule(tmp_path, capsys):
    out = tmp_path / "schedule.csv"
    assert main(["export", str(FIG2), "--format", "torch-pipelining", "--out", str(out)]) == 0
    assert out.read_bytes() == FIG2_GOLDEN.encode()
    text = capsys.readouterr().out
    assert "megatron-1f1b: 4 pipeline ranks, 4 micro-batches, DP replica 0 of 1" in text
    assert "micro-batch 0 = chunk 0, 4 tokens: 0[0:4]" in text
    assert f"schedule written to {out}" in text


def test_cli_writes_the_schedule_to_standard_output_with_out_dash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(FIG2), "--format", "torch-pipelining", "--out", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == FIG2_GOLDEN  # the schedule alone: a pipe reads a CSV
    assert "megatron-1f1b: 4 pipeline ranks, 4 micro-batches" in captured.err
    assert list(tmp_path.iterdir()) == []  # no file named '-'


@pytest.mark.parametrize("argv", [["simulate", str(FIG2), "--trace", "-"],
                                  ["simulate", str(FIG2), "--plot", "-"],
                                  ["validate", str(FIG2), "--out", "-"]])
def test_a_dash_is_refused_where_an_output_cannot_go_to_standard_output(argv, tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="2"):
        main(argv)
    err = capsys.readouterr().err
    assert "'-' (standard output) is not taken here; write ./-" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_chunkflow_recompute(tmp_path, capsys):
    out = tmp_path / "schedule.csv"
    assert main(["export", str(FIG6), "--format", "torch-pipelining", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert captured.err == (
        "ltsim export: error: '--format' must be a format that can express the plan (got "
        "'torch-pipelining'); the chunkflow plan has a recompute-forward (R) (s0R2 on device 0), "
        "and torch.distributed.pipelining has no action that re-runs a discarded forward "
        "(ChunkFlow re-forwards when a sequence has more chunks than K). Fix: set strategy.k to "
        "at least the most chunks of one sequence, or strategy.chunk_size to at least the longest "
        "sequence\n")


def test_a_recompute_other_than_chunkflows_gets_its_own_fix():
    """Megatron with full recompute was told to set ChunkFlow's strategy.k, which it refuses."""
    plan = run(load_scenario(FIG2, ['parallel.recompute="full"'])).plans[0]
    with pytest.raises(ConfigError) as info:
        get_format("torch-pipelining")(plan)
    assert "(the plan recomputes checkpointed activations)" in str(info.value)
    assert 'Fix: export a plan without recompute (parallel.recompute = "none"' in str(info.value)


def test_cli_warns_when_the_exported_plan_does_not_fit(tmp_path, capsys):
    out = tmp_path / "schedule.csv"
    assert main(["export", str(REPO / "scenarios/quickstart.toml"), "--set", "hardware.memory_limit_gib=2", "--set",
                 "strategy.k=64", "--format", "torch-pipelining", "--out", str(out)]) == 0
    assert out.exists()
    assert capsys.readouterr().err.startswith("warning: the plan does not fit: device ")


def test_cli_unknown_format_lists_the_formats(tmp_path, capsys):
    assert main(["export", str(FIG2), "--format", "gpipe", "--out", str(tmp_path / "s")]) == 2
    assert capsys.readouterr().err == ("ltsim export: error: '--format' must be one of "
                                       "torch-pipelining (got 'gpipe'). Fix: give --format one "
                                       "of torch-pipelining\n")


@pytest.mark.parametrize("overrides, what", [
    (["parallel.zero_stage=3"], "a collective inside the step (s0COLL0[z3-F] on device 0)"),
    (["parallel.cp=2"], "context-parallel work (s0F0[attn] on device 0)"),
], ids=["zero3", "cp"])
def test_what_cannot_be_expressed(overrides, what):
    plan = run(load_scenario(FIG2, ["hardware.gpus_per_node=8", *overrides])).plans[0]
    with pytest.raises(ConfigError) as info:
        get_format("Torch-Pipelining")(plan)
    assert f"the megatron-1f1b plan has {what}, and " in str(info.value)


@pytest.mark.parametrize("cp, what", [
    (1, "a micro-batch computed as several ops a stage"),  # one rank per group: no CP
    (2, "context-parallel work (device 1 is CP rank 1)"),
])
def test_per_rank_devices_are_cp_only_in_a_group_of_several(cp, what):
    """Skrull plans a device per CP rank; at cp = 1 each group is one rank 0, which is no CP (it
    was refused as CP with the fix "export with parallel.cp = 1"; a fuzzing review)."""
    scenario = load_scenario(REPO / "scenarios" / "skrull" / "qwen2.5-0.5b-wikipedia.toml",
                             [f"parallel.cp={cp}", "parallel.dp=4", "hardware.num_nodes=1",
                              f"hardware.gpus_per_node={4 * cp}", "workload.global_batch_size=16",
                              "workload.num_batches=1", 'parallel.recompute="none"'])
    with pytest.raises(ConfigError) as info:
        get_format("torch-pipelining")(run(scenario).plans[0])
    assert f"the skrull plan has {what}" in str(info.value)
    if cp == 1:  # not told to set what it already has
        assert "export with parallel.cp = 1" not in str(info.value)


def test_split_weight_gradient_exports_as_i_and_w(tmp_path):
    """No registered strategy splits W off yet; a Megatron plan with a W after every B stands in
    (torch validates that W follows its I)."""
    plan = _plan("megatron-1f1b")
    programs = tuple(
        dataclasses.replace(p, ops=tuple(o for op in p.ops for o in (
            (op, op.evolve(kind=OpKind.W)) if op.kind is OpKind.B else (op,))))
        if p.stream == "compute" else p for p in plan.programs)
    schedule = torch_pipelining(plan.with_programs(programs))
    assert schedule.rows[3][:4] == ("3F0", "3I0", "3W0", "3F1")
    path = tmp_path / "zb.csv"
    path.write_text(schedule.to_csv(), newline="")
    _, runtime = _torch_runtime(4, 4)
    runtime._load_csv(str(path))
    assert [str(a) for a in runtime.pipeline_order[3]] == list(schedule.rows[3])
