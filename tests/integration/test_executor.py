"""Executor on CPU (gloo): multi-process pipeline and DP runs of real plans against a single process.

Every run spawns one process per simulated device, so the runs are few and share fixtures: a
float64 model small enough that a run takes a few seconds, most of it process start-up.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from ltsim.cli import main as cli_main  # noqa: E402
from ltsim.errors import ConfigError, PlanError  # noqa: E402
from ltsim.executor import kernels  # noqa: E402
from ltsim.executor.memtrack import MemoryTracker  # noqa: E402
from ltsim.executor.model import Transformer, pack_chunk  # noqa: E402
from ltsim.executor.runtime import check_trace, execute_plan, make_tokens  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.parallel import ParallelConfig  # noqa: E402
from ltsim.costs import UnitCostModel  # noqa: E402
from ltsim.plan import OpKind  # noqa: E402
from ltsim.sim.metrics import batch_metrics  # noqa: E402
from ltsim.trace import Trace  # noqa: E402
from ltsim.strategies import get_strategy  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402

SPEC = dataclasses.replace(get_model("llama-tiny"), hidden_size=64, ffn_hidden_size=128,
                           vocab_size=256)  # 4 layers, 8 heads, 4 KV heads, untied
LENGTHS = (96, 7, 12, 5, 40)
SEED = 5
TOL = 1e-10


def make_plan(name: str, pp: int = 2, dp: int = 1, lengths=LENGTHS, **options):
    # the executor's Adam is not sharded, and it reduces the gradients after the last backward
    parallel = ParallelConfig(pp=pp, dp=dp, zero_stage=0, overlap_grad_reduce=False)
    ctx = PlanContext(model=SPEC, parallel=parallel, cost=UnitCostModel())
    strategy = get_strategy(name)
    return strategy.plan(tuple(lengths), ctx, strategy.parse(options)), parallel


def run(plan, parallel, **kwargs):
    return execute_plan(plan, SPEC, parallel, seed=SEED, dtype="fp64", warmup=0, repeats=1,
                        return_grads=True, **kwargs)


@pytest.fixture(scope="module")
def reference():
    """Loss and gradients of one process over the whole sequences (whole model, float64)."""
    tokens = make_tokens(LENGTHS, SPEC.vocab_size, SEED)
    model = Transformer(SPEC, seed=SEED, dtype=torch.float64)
    loss = model(pack_chunk([(s, 0, n) for s, n in enumerate(LENGTHS)], tokens))
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def rel_err(got: dict, ref: dict) -> float:
    return max(((got[n] - ref[n]).abs().max() / ref[n].abs().max()).item() for n in got)


def assert_matches(measured, reference, replicas: int = 1) -> None:
    ref_loss, ref_grads = reference
    assert abs(measured.loss - ref_loss) / abs(ref_loss) < TOL
    per_replica = len(measured.grads) // replicas
    for replica in range(replicas):
        merged = {}
        for grads in measured.grads[replica * per_replica:(replica + 1) * per_replica]:
            assert not set(grads) & set(merged)
            merged.update(grads)
        assert set(merged) == set(ref_grads)
        assert rel_err(merged, ref_grads) < TOL


def test_full_recompute_waits_for_the_gradient_and_matches_single_process(reference):
    """Megatron's full recompute with pp 2: each stage-0 R now carries the receive of its chunk's
    output gradient (the simulator's rule), which the executor hands on to the B after it."""
    parallel = ParallelConfig(pp=2, zero_stage=0, recompute="full", overlap_grad_reduce=False)
    ctx = PlanContext(model=SPEC, parallel=parallel, cost=UnitCostModel())
    megatron = get_strategy("megatron-1f1b")
    plan = megatron.plan(tuple(LENGTHS), ctx, megatron.parse({}))
    redo = [op for op in plan.program(0).ops if op.kind is OpKind.R]
    assert redo and all(any(d.device == 1 for d in op.deps) for op in redo)
    measured = run(plan, parallel)
    assert_matches(measured, reference)
    assert check_trace(plan, measured.trace) == []


def test_seco_pipeline_matches_single_process(reference):
    plan, parallel = make_plan("seco", chunk_size=24)
    assert_matches(run(plan, parallel), reference)


def test_spaco_pipeline_matches_its_single_process_estimate(reference):
    """The executor back-propagates exactly the plan's chosen chunks with its scales: equal to the
    state API's run_spaco_group over each sequence with the same choice."""
    from ltsim.executor.state import run_spaco_group

    plan, parallel = make_plan("spaco", chunk_size=24, budget=2, seed=1)
    assert plan.grad_chunks != frozenset(c.index for c in plan.chunks)
    measured = run(plan, parallel)
    assert abs(measured.loss - reference[0]) / abs(reference[0]) < TOL  # every chunk forwarded
    tokens = make_tokens(LENGTHS, SPEC.vocab_size, SEED)
    model = Transformer(SPEC, seed=SEED, dtype=torch.float64)
    scales = {c: (loss, relay) for c, loss, relay in plan.grad_scales}
    for seq in range(len(LENGTHS)):
        chunks = [c for c in plan.chunks if c.slices[0].seq == seq]
        chosen = {i for i, c in enumerate(chunks) if c.index in plan.grad_chunks}
        loss, relay = scales.get(next(c.index for c in chunks if c.index in plan.grad_chunks),
                                 (1.0, 1.0))
        run_spaco_group(model, [pack_chunk(c.slices, tokens) for c in chunks], chosen,
                        loss_scale=loss, kv_scale=relay)
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert_matches(measured, (reference[0], expected))


def test_megatron_pipeline_matches_single_process(reference):
    plan, parallel = make_plan("megatron-1f1b")
    measured = run(plan, parallel)
    assert_matches(measured, reference)
    trace = measured.trace
    assert isinstance(trace, Trace) and trace.source == "measured"
    assert check_trace(plan, trace) == []
    assert len(trace.events) == sum(len(p.ops) for p in plan.programs)
    metrics = batch_metrics(plan, trace, 1.0)
    assert metrics.iteration_time_s == pytest.approx(trace.makespan_s) and trace.makespan_s > 0
    assert 0.0 <= metrics.bubble_ratio < 1.0
    assert trace.to_frame().shape == (len(trace.events), 8)
    peaks = measured.peak_memory_bytes_per_device
    assert all(p > s for p, s in zip(peaks, trace.static_bytes))
    params = [sum(p.numel() * 8 for p in Transformer(SPEC, layers=r, dtype=torch.float64)
                  .parameters()) for r in plan.stage_layers]
    # fp64 Adam: weights + grads + two moments are created by the first step (not yet here)
    assert list(trace.static_bytes) == [2 * p for p in params]


@pytest.mark.parametrize("k,attention", [(1, "auto"), (2, "auto"), (1, "sdpa_boolmask")])
def test_chunkflow_dependent_chunks_match_single_process(reference, k, attention):
    plan, parallel = make_plan("chunkflow", chunk_size=32, k=k)
    assert any(op.kind is OpKind.R for op in plan.ops())  # 96 tokens -> 3 dependent chunks
    measured = run(plan, parallel, attention=attention)
    assert_matches(measured, reference)
    assert check_trace(plan, measured.trace) == []


def test_data_parallel_replicas_get_identical_gradients(reference):
    plan, parallel = make_plan("chunkflow", pp=1, dp=2, chunk_size=64, k=1)
    measured = run(plan, parallel)
    assert len(measured.grads) == 2
    a, b = measured.grads
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert_matches(measured, reference, replicas=2)  # the all-reduced sum is the whole batch's gradient
    coll = [e for e in measured.trace.events if e.kind == "COLL"]
    assert len(coll) == 2 and all(e.end_s > e.start_s for e in coll)


def _alst_plan(offload: bool, lengths=LENGTHS):
    parallel = ParallelConfig(zero_stage=0, recompute="full" if offload else "selective")
    ctx = PlanContext(model=SPEC, parallel=parallel, cost=UnitCostModel())
    alst = get_strategy("alst")
    options = alst.parse(dict(ulysses=False, tiled_mlp=False, tiled_loss=False,
                              offload_checkpoints=offload, offload_optimizer=False))
    return alst.plan(tuple(lengths), ctx, options), parallel


@pytest.mark.parametrize("offload", [True, False])
def test_alst_per_layer_ops_and_checkpoint_offload_match_single_process(reference, offload):
    """Layer by layer, each checkpoint to host memory and back before its recompute: the
    gradients of whole-sequence training, and every checkpoint back on the device by the end."""
    plan, parallel = _alst_plan(offload)
    assert any(op.kind is OpKind.COPY for op in plan.ops()) == offload
    measured = run(plan, parallel)
    assert_matches(measured, reference)
    assert check_trace(plan, measured.trace) == []
    layer = LENGTHS[0] * SPEC.hidden_size * 8  # the longest sequence's layer input, fp64
    assert measured.peak_host_memory_bytes_per_device == ((SPEC.num_layers * layer,) if offload
                                                          else (0,))


def _one_cpu_scenario(tmp_path, length: int, strategy: str, recompute: str = "selective"):
    """A scenario file: llama-tiny on one CPU process, one sequence of ``length`` tokens."""
    path = tmp_path / "scenario.toml"
    path.write_text(f'''name = "cpu-one-sequence"
[model]
preset = "llama-tiny"
[hardware]
preset = "cpu"
gpus_per_node = 1
[parallel]
zero_stage = 0
recompute = "{recompute}"
[workload]
lengths = [{length}]
num_batches = 1
[strategy]
{strategy}
''')
    return path


def test_alst_offload_memory_effect_as_predicted(tmp_path):
    """ltsim validate on CPU: offloading the layer checkpoints lowers the device peak by what the
    memory model says, and host memory holds exactly the checkpoints."""
    from ltsim.scenario import load_scenario
    from ltsim.validate import validate_scenario

    path = _one_cpu_scenario(tmp_path, 512, '''name = "alst"
ulysses = false
tiled_mlp = false
tiled_loss = false
offload_optimizer = false''', recompute="full")
    rows = {}
    for offload in (True, False):
        scenario = load_scenario(path, [f"strategy.offload_checkpoints={str(offload).lower()}"])
        validation = validate_scenario(scenario, warmup=1, repeats=1)  # Adam state static
        rows[offload] = {r.metric: r for r in validation.rows}
    on, off = rows[True], rows[False]
    host = on["peak host memory device 0"]
    assert host.predicted == host.measured == 4 * 512 * 256 * 4  # 4 layer inputs, fp32
    assert "peak host memory device 0" not in off
    device = "peak memory device 0"
    assert abs(on[device].rel_error) < 0.05 and abs(off[device].rel_error) < 0.05
    saved_pred = off[device].predicted - on[device].predicted
    saved_meas = off[device].measured - on[device].measured
    assert saved_pred > 0 and abs(saved_meas - saved_pred) <= 0.02 * saved_pred


def test_spaco_state_of_chunks_without_a_graph_counts_in_the_measured_peak(tmp_path):
    """SpaCO's first pass forwards every chunk without a graph, and the K/V state it leaves is held
    until the sequence's last backward: the CPU executor's samples count it, so the measured peak
    agrees with the predicted one (it read 6.8% low when only chunks with a graph counted)."""
    from ltsim.scenario import load_scenario
    from ltsim.validate import validate_scenario

    path = _one_cpu_scenario(tmp_path, 1024, '''name = "spaco"
chunk_size = 128
budget = 2''')
    validation = validate_scenario(load_scenario(path), warmup=1, repeats=1)
    peak = {r.metric: r for r in validation.rows}["peak memory device 0"]
    assert abs(peak.rel_error) < 0.02, (peak.predicted, peak.measured)


def test_measured_iterations_and_memory():
    plan, parallel = make_plan("megatron-1f1b", pp=1, lengths=(64, 32))
    measured = execute_plan(plan, SPEC, parallel, warmup=1, repeats=2, optimizer="sgd")
    assert len(measured.traces) == 2 and len(measured.losses) == 2
    assert measured.iteration_time_s > 0 and measured.grads is None
    assert measured.losses[1] < measured.losses[0] + 1.0  # steps did not blow up
    for trace in measured.traces:
        assert check_trace(plan, trace) == []
    assert measured.trace in measured.traces


def test_bad_arguments():
    plan, parallel = make_plan("megatron-1f1b", pp=2)
    with pytest.raises(ConfigError, match="'executor.backend' must be 'gloo' or 'nccl'"):
        execute_plan(plan, SPEC, parallel, backend="mpi")
    with pytest.raises(ConfigError, match="'executor.backend' must be 'gloo' on CPU"):
        execute_plan(plan, SPEC, parallel, backend="nccl")
    with pytest.raises(ConfigError, match="'parallel' must be pp x dp = 2"):
        execute_plan(plan, SPEC, ParallelConfig(pp=1))
    with pytest.raises(ConfigError, match=r"'parallel.tp' must be 1 for the executor .* \(got 2\)"):
        execute_plan(plan, SPEC, ParallelConfig(pp=2, tp=2))
    with pytest.raises(ConfigError, match=r"'parallel.cp' must be 1 for the executor .* \(got 2\)"):
        execute_plan(plan, SPEC, ParallelConfig(pp=2, cp=2))  # it named tp, with (1, 2)
    with pytest.raises(ConfigError, match="'executor.attention' must be one of auto, sdpa"):
        execute_plan(plan, SPEC, parallel, attention="mask")
    replicas, two = make_plan("megatron-1f1b", pp=1, dp=2)
    with pytest.raises(ConfigError, match=r"'parallel.overlap_grad_reduce' must be false for the "
                       r"executor with dp > 1 .*Fix: set parallel.overlap_grad_reduce = false"):
        execute_plan(replicas, SPEC, dataclasses.replace(two, overlap_grad_reduce=True))
    for stage in (1, 2, 3):  # (found as its first collective, with a grid and no fix: a review)
        with pytest.raises(ConfigError, match=r"'parallel.zero_stage' must be 0 for the executor "
                           rf"with dp > 1 .*\(got {stage}\)\. Fix: set parallel.zero_stage = 0"):
            execute_plan(replicas, SPEC, dataclasses.replace(two, zero_stage=stage))
    split = plan.with_programs(tuple(
        dataclasses.replace(p, ops=tuple(op.evolve(kind=OpKind.W)
                                         if op.kind is OpKind.B else op for op in p.ops))
        for p in plan.programs))
    with pytest.raises(PlanError, match="cannot run W ops"):
        execute_plan(split, SPEC, parallel)


def test_lean_kernels_match_eager_formulas_and_gradcheck():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, generator=gen, requires_grad=True)
    eager = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(kernels.rms_norm(x, w, 1e-6), eager, rtol=1e-12, atol=0)
    assert torch.autograd.gradcheck(lambda a, b: kernels.rms_norm(a, b, 1e-6), (x, w))
    u = torch.randn(5, 12, dtype=torch.float64, generator=gen, requires_grad=True)
    gate, up = u.chunk(2, dim=-1)
    assert torch.allclose(kernels.swiglu(u), torch.nn.functional.silu(gate) * up, rtol=1e-12)
    assert torch.autograd.gradcheck(kernels.swiglu, (u,))
    q = torch.randn(7, 3, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    positions = torch.arange(5, 12)
    cos, sin = kernels.rope_tables(positions, 8, torch.float64)
    rotated = torch.cat([-q[..., 4:], q[..., :4]], dim=-1)
    assert torch.allclose(kernels.rope(q, positions), q * cos + rotated * sin, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda a: kernels.rope(a, positions), (q,))


def test_memory_tracker_counts_saved_storages_once():
    layer = torch.nn.Linear(16, 16, dtype=torch.float64)
    tracker = MemoryTracker()
    static = tracker.set_static(layer.parameters())
    assert static == (16 * 16 + 16) * 8
    x = torch.randn(32, 16, dtype=torch.float64, requires_grad=True)
    with tracker.hooks():
        y = layer(x)  # saves x (the weight is static, not counted again)
        z = (y * y).sum()  # saves y twice: one storage
    assert tracker.saved_bytes == 2 * 32 * 16 * 8 and tracker.num_saved_storages == 2
    assert tracker.live_bytes([x, y[:3], None]) == static + tracker.saved_bytes
    z.backward()
    assert tracker.saved_bytes == 0 and tracker.num_saved_storages == 0
    assert tracker.live_bytes([x]) == static + 32 * 16 * 8


def test_validate_command_writes_the_comparison(repo, tmp_path, capsys):
    from ltsim.errors import ProfileError
    from ltsim.profiles import load_profile

    try:
        load_profile("profiles/cpu-ci")
    except ProfileError as exc:  # being rebuilt (the profiler writes its tables one by one)
        pytest.skip(str(exc))
    scenario = repo / "validation" / "executor" / "cpu-llama-tiny.toml"
    # a copy that names another profile: validate says it prices with --profile instead
    named = tmp_path / "tiny.toml"
    named.write_text(scenario.read_text().replace(
        "[hardware]\n", '[hardware]\nprofile = "h100-sxm5-80gb"\n', 1))
    args = ["validate", str(named), "--profile", "profiles/cpu-ci", "--out", str(tmp_path),
            "--set", "workload.lengths=[96, 32]", "--set", "strategy.chunk_size=64",
            "--tolerance", "10"]  # tiny chunks: only the outputs and the exit code are checked
    assert cli_main(args) == 0
    out, err = capsys.readouterr()
    assert "| iteration time |" in out and "| peak memory device 1 |" in out
    assert "the scenario's hardware.profile (h100-sxm5-80gb) is not used" in err
    for name in ("comparison.csv", "comparison.md", "summary.json", "gantt.png",
                 "predicted_trace.json", "measured_trace.json"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["within"] and summary["rows"][0]["metric"] == "iteration time"
    assert abs(summary["iteration_time_error"]) > 1e-9  # so --tolerance 1e-9 would exit 1
    assert cli_main(["validate", str(scenario), "--profile", "no-such-profile"]) == 2
    assert cli_main(["validate", str(scenario), "--profile", "profiles/cpu-ci",
                     "--set", "hardware.preset=unit"]) == 2
    assert "must be a real device" in capsys.readouterr().err
    assert cli_main(["validate", str(scenario), "--profile", "profiles/cpu-ci",
                     "--set", "hardware.loss_kernel=fused"]) == 2  # the executor runs torch's
    assert "@ hardware.loss_kernel must be torch to validate" in capsys.readouterr().err
    # --profile is the hardware.profile validate prices with: a --set of it was dropped silently
    assert cli_main(["validate", str(scenario), "--profile", "profiles/cpu-ci",
                     "--set", "hardware.profile=h200"]) == 2
    assert "'--set' must be a key other than hardware.profile" in capsys.readouterr().err
    # a setup the executor does not run is refused before the run is announced (it followed it)
    tiny = repo / "scenarios" / "examples" / "cpu-llama-tiny-chunkflow.toml"
    assert cli_main(["validate", str(tiny), "--profile", "profiles/cpu-ci", "--set",
                     "parallel.tp=2", "--set", "parallel.pp=1"]) == 2
    err = capsys.readouterr().err
    assert "@ parallel.tp must be 1 for the executor" in err and "running" not in err


def test_validate_warns_of_a_profile_of_another_cpu_model(repo, tmp_path):
    # cpu-ci was measured on an Intel Xeon; on an AMD EPYC it read +73% without a word
    from ltsim.validate import same_kind_of_device
    from ltsim.profiler.environment import cpu_model
    from ltsim.scenario import load_scenario

    scenario = load_scenario(repo / "validation" / "executor" / "cpu-llama-tiny.toml")
    meta = json.loads((repo / "profiles" / "cpu-ci" / "meta.json").read_text())
    for device, warned in ((f"cpu: {cpu_model()}", False), ("cpu: Another CPU 9000", True)):
        (tmp_path / "meta.json").write_text(json.dumps(meta | {"device": device}))
        err = same_kind_of_device(scenario, tmp_path, "mine")
        assert ("mine was measured on another CPU model than this machine's" in err) == warned
        assert "9000" not in err  # a file's content is never quoted


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_pipeline_on_gpu(reference):
    plan, parallel = make_plan("chunkflow", chunk_size=32, k=1)
    measured = run(plan, parallel, backend="nccl", device="cuda")
    assert_matches(measured, reference)
    assert check_trace(plan, measured.trace) == []


def test_validate_names_a_profile_of_the_device_kind_the_scenario_runs_on(repo):
    # a GPU scenario given cpu-ci was told "use cpu-ci": the profile it had just given
    from ltsim.validate import same_kind_of_device
    from ltsim.scenario import load_scenario

    with pytest.raises(ConfigError) as info:
        same_kind_of_device(load_scenario(repo / "scenarios" / "quickstart.toml"),
                            repo / "profiles" / "cpu-ci", "cpu-ci")
    assert "Fix: use h100-sxm5-80gb or a profile `ltsim profile --device cuda`" in str(info.value)
    assert "use cpu-ci" not in str(info.value)


def test_validate_refuses_an_out_folder_over_its_inputs(repo, tmp_path, capsys):
    """--out's files over the scenario (a scenario named comparison.md, or a summary.json link
    to it) or into the --profile folder replaced the input with the report (a fuzzing review)."""
    import shutil

    scenario = tmp_path / "comparison.md"
    shutil.copy(repo / "scenarios" / "seco" / "cpu-llama-tiny-seco.toml", scenario)
    before = scenario.read_bytes()
    assert cli_main(["validate", str(scenario), "--profile", "cpu-ci", "--out",
                     str(tmp_path)]) == 2
    assert "its comparison.md is an input the command would overwrite" in capsys.readouterr().err
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "summary.json").symlink_to(scenario)
    assert cli_main(["validate", str(scenario), "--profile", "cpu-ci", "--out", str(linked)]) == 2
    assert "its summary.json is an input" in capsys.readouterr().err
    profile = tmp_path / "profile"
    shutil.copytree(repo / "profiles" / "cpu-ci", profile)
    assert cli_main(["validate", str(scenario), "--profile", str(profile), "--out",
                     str(profile)]) == 2
    assert "'--out' must be a folder other than the profile's" in capsys.readouterr().err
    assert scenario.read_bytes() == before


@pytest.mark.parametrize("option", ["strategy.tiled_mlp=true", "strategy.tiled_loss=true"])
def test_a_tiling_the_executor_does_not_run_is_refused_in_one_line(repo, option, capsys):
    # the refusal drew the plan's grid under it: four lines for an option the user chose
    assert cli_main(["validate", str(repo / "scenarios" / "alst" / "cpu-llama-tiny-alst.toml"),
                     "--profile", "cpu-ci", "--set", "workload.lengths=[256]", "--set",
                     option]) == 2
    err = capsys.readouterr().err
    assert "does not tile the MLP or the loss" in err and len(err.strip().splitlines()) == 1


def test_a_gpt_shape_needs_a_position_table_as_long_as_its_sequences(repo, tmp_path, capsys):
    """arch = "gpt" ran the executor's workers, which failed with a traceback on a table of 0
    rows, and model.max_position_embeddings was not a scenario key (a fuzzing review)."""
    from ltsim.scenario import load_scenario

    scenario = repo / "scenarios" / "seco" / "cpu-llama-tiny-seco.toml"
    sets = ["--set", "workload.lengths=[256]", "--set", 'model.arch="gpt"']
    assert cli_main(["validate", str(scenario), "--profile", "cpu-ci", *sets]) == 2
    err = capsys.readouterr().err
    assert ("model.max_position_embeddings must be at least the plan's longest sequence (256 "
            "tokens)") in err and len(err.strip().splitlines()) == 1
    spec = load_scenario(scenario, ['model.arch="gpt"', "model.max_position_embeddings=512"]).model
    assert (spec.arch, spec.max_position_embeddings) == ("gpt", 512)


def test_a_tied_model_split_over_stages_is_refused_before_any_process(repo, capsys):
    """A fuzzing review: the executor's model refused tied embeddings over stages only inside
    its worker processes, a torch multiprocessing traceback of 37 lines."""
    scenario = repo / "scenarios" / "examples" / "cpu-llama-tiny-chunkflow.toml"  # pp 2
    assert cli_main(["validate", str(scenario), "--profile", "cpu-ci", "--set",
                     "model.tied_embeddings=true"]) == 2
    err = capsys.readouterr().err
    assert "model.tied_embeddings must be false when the layers are split over stages" in err
    assert len(err.strip().splitlines()) == 1
