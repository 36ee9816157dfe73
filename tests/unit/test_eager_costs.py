"""The eager floor and optimizer rate (ltsim/costs/eager.py) from eager.csv / optimizer.csv: the
arithmetic of B = FB - F, R's floor = F's, the least time over token counts, the per-op and
per-layer parts, the max(kernels, floor) rule, and the measured optimizer step for the
executor's dtype convention."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from ltsim.costs.eager import EagerFloor, OptimizerRate, eager_costs
from ltsim.costs.table import TableCostModel
from ltsim.errors import ProfileError
from ltsim.hardware import ClusterSpec, get_device
from ltsim.model import get_model
from ltsim.plan import Device, Keep, OpKind, Slice, Split, Work
from ltsim.profile_files import read_optional_rows
from ltsim.profiles import write_table
from tests.conftest import REPO

# whole-op seconds at 1 and 2 layers: F = 1 + 2 L ms, F_discard = 0.5 + 2 L, B = 2 + 3 L,
# R = 1 + 1.5 L, so FB = F + B and FdRB = F_discard + R + B; the 64-token rows take 3x as long
# except F at 2 layers, which is *faster* there (host jitter at 16 tokens): the least time counts
MS = 1e-3
TIMES = {"F": (3, 5), "F_discard": (2.5, 4.5), "FB": (3 + 5, 5 + 8),
         "FdRB": (2.5 + 2.5 + 5, 4.5 + 4 + 8)}


def _profile(tmp_path, repo, model="llama-tiny", dtype="fp32"):
    out = tmp_path / "prof"
    shutil.copytree(repo / "profiles" / "cpu-ci", out)
    rows = [{"model": model, "op": op, "layers": n, "num_tokens": tokens, "hidden": 256,
             "dtype": dtype, "time_s": t[n - 1] * MS * (
                 (0.9 if (op, n) == ("F", 2) else 3) if tokens == 64 else 1)}
            for op, t in TIMES.items() for n in (1, 2) for tokens in (16, 64)]
    write_table(out, "eager", pd.DataFrame(rows))
    write_table(out, "optimizer", pd.DataFrame([
        {"model": model, "optimizer": "adam", "layers": n, "num_params": p, "dtype": dtype,
         "time_s": 1e-4 + 2e-9 * p} for n, p in ((1, 1_000_000), (2, 2_000_000))]))
    return out


def test_floor_parts_come_from_the_least_time_and_subtract_to_b(tmp_path, repo):
    floor = EagerFloor.from_profile(_profile(tmp_path, repo), get_model("llama-tiny"), [])
    f1, f2 = 3, 0.9 * 5  # F at 2 layers: its 64-token row is the least
    b1, b2 = 8 - f1, 13 - f2  # B = FB - F at 1 and 2 layers
    expected = {"F": (f1 - (f2 - f1), f2 - f1), "F_discard": (0.5, 2),
                "B": (b1 - (b2 - b1), b2 - b1)}
    for name, (fixed, per_layer) in expected.items():
        assert floor.parts[name] == pytest.approx((fixed * MS, per_layer * MS))
    assert floor.parts["R"] == floor.parts["F"]  # a recompute runs a kept forward's code
    assert floor.floor_s(OpKind.F, 4, Keep.NOTHING) == pytest.approx(8.5 * MS)
    assert floor.floor_s(OpKind.F, 4, Keep.SELECTIVE) == pytest.approx(
        (f1 + 3 * (f2 - f1)) * MS)
    assert floor.floor_s(OpKind.B, 3, Keep.ALL) == pytest.approx((b1 + 2 * (b2 - b1)) * MS)
    assert floor.floor_s(OpKind.W, 4, Keep.ALL) == 0.0


def _bare(tmp_path, repo):
    """cpu-ci without its eager and optimizer tables: kernels alone."""
    out = tmp_path / "bare"
    if not out.exists():
        shutil.copytree(repo / "profiles" / "cpu-ci", out)
        for table in ("eager", "optimizer"):
            (out / f"{table}.csv").unlink()
    return out


def test_an_op_costs_the_larger_of_its_kernels_and_its_floor(tmp_path, repo):
    model = replace(get_model("llama-tiny"), dtype="fp32")
    gpu_like = replace(get_device("cpu"), synchronous=False)  # launches overlap the kernels
    base = ClusterSpec(device=gpu_like, num_nodes=1, gpus_per_node=2)
    plain = TableCostModel(model, replace(base, profile=str(_bare(tmp_path, repo))))
    eager = TableCostModel(model, replace(base, profile=str(_profile(tmp_path, repo))))
    layers = (0, model.num_layers)
    floored = set()
    for tokens in (16, 64, 256, 4096):
        work = Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=layers, split=Split())
        for kind in (OpKind.F, OpKind.B, OpKind.R):
            kernels = plain.compute_s(kind, work)
            floor = EagerFloor.from_profile(eager.profile.path, model, []).floor_s(
                kind, model.num_layers, Keep.ALL)
            assert eager.compute_s(kind, work) == pytest.approx(max(kernels, floor))
            # a CP-split op: the dense part its kernels, the attention part the floor's slack
            # (a ring exchange overlaps it), so the parts add to the whole
            attn, dense = (eager.compute_s(kind, work, part=p) for p in ("attn", "dense"))
            assert dense == plain.compute_s(kind, work, part="dense")
            assert attn == pytest.approx(max(plain.compute_s(kind, work, part="attn"),
                                             floor - dense))
            assert attn + dense == pytest.approx(max(kernels, floor))
            floored.add(floor > kernels)
    assert floored == {True, False}  # both cases met (the floor binds at 16 tokens, not 4,096)


def _middle(tokens: int, layers: int) -> Work:
    return Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=(1, 1 + layers), split=Split())


def test_on_a_synchronous_device_an_op_costs_its_kernels_plus_the_measured_residual(tmp_path,
                                                                                   repo):
    """On a CPU the host runs the kernels, so what a whole op costs beyond them adds: at a measured
    size the op costs exactly the measured whole op; elsewhere its kernels plus the residual,
    linear in layers through 1 and 2, linear in tokens between sizes, held outside them."""
    model = replace(get_model("llama-tiny"), dtype="fp32")
    base = ClusterSpec(device=get_device("cpu"), num_nodes=1, gpus_per_node=2)
    assert base.device.synchronous
    plain = TableCostModel(model, replace(base, profile=str(_bare(tmp_path, repo))))
    eager = TableCostModel(model, replace(base, profile=str(_profile(tmp_path, repo))))

    def measured(op, n, tokens):
        return TIMES[op][n - 1] * MS * ((0.9 if (op, n) == ("F", 2) else 3) if tokens == 64 else 1)

    whole = {"F": lambda n, t: measured("F", n, t),
             "B": lambda n, t: measured("FB", n, t) - measured("F", n, t)}
    for name, kind in (("F", OpKind.F), ("B", OpKind.B)):
        for n in (1, 2):
            for tokens in (16, 64):
                assert eager.compute_s(kind, _middle(tokens, n)) == pytest.approx(whole[name](n, tokens))

        def residual(n, tokens):
            return whole[name](n, tokens) - plain.compute_s(kind, _middle(tokens, n))

        for layers, tokens, size in ((4, 16, 16), (3, 64, 64), (4, 1024, 64)):  # held above 64
            r1, r2 = residual(1, size), residual(2, size)
            expected = plain.compute_s(kind, _middle(tokens, layers)) + r1 + (r2 - r1) * (layers - 1)
            assert eager.compute_s(kind, _middle(tokens, layers)) == pytest.approx(expected)
        low, high = residual(1, 16), residual(1, 64)
        assert eager.compute_s(kind, _middle(40, 1)) == pytest.approx(
            plain.compute_s(kind, _middle(40, 1)) + low + (high - low) * (40 - 16) / (64 - 16))
    # R runs the kept forward's code: the same residual as F
    assert (eager.compute_s(OpKind.R, _middle(40, 3)) - plain.compute_s(OpKind.R, _middle(40, 3))
            == pytest.approx(eager.compute_s(OpKind.F, _middle(40, 3))
                             - plain.compute_s(OpKind.F, _middle(40, 3))))
    # rows of another model say nothing about this one's kernels: only the floor is borrowed
    other = TableCostModel(model, replace(base, profile=str(_profile(tmp_path / "o", repo,
                                                                     model="llama-small"))))
    floor = EagerFloor.from_profile(other.profile.path, model, []).floor_s(OpKind.F, 4, Keep.ALL)
    work = _middle(256, 4)
    assert other.compute_s(OpKind.F, work) == pytest.approx(
        max(plain.compute_s(OpKind.F, work), floor))


def test_an_op_with_the_embedding_or_the_head_adds_what_those_stages_measure(tmp_path, repo):
    """eager.csv's first (embedding) and last (head and loss) stage rows: an op that has them adds
    their residual's difference from the middle stage's, each against kernels with the same
    embedding or head."""
    model = replace(get_model("llama-tiny"), dtype="fp32")
    base = ClusterSpec(device=get_device("cpu"), num_nodes=1, gpus_per_node=2)
    directory = _profile(tmp_path, repo)
    middle = pd.read_csv(directory / "eager.csv")
    extra_ms = {"first": 0.5, "last": 2.0}  # what the embedding / the head add to every row
    staged = [middle.assign(stage="middle")] + [
        middle.assign(stage=stage, time_s=middle.time_s + ms * MS) for stage, ms in extra_ms.items()]
    write_table(directory, "eager", pd.concat(staged, ignore_index=True))
    plain = TableCostModel(model, replace(base, profile=str(_bare(tmp_path, repo))))
    eager = TableCostModel(model, replace(base, profile=str(directory)))

    def work(tokens, embed=False, head=False):
        return Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=(0, 3), split=Split(),
                    embed=embed, head=head)

    def kernels(w):
        return plain.compute_s(OpKind.F, w)

    for tokens in (16, 40, 64):
        mid = eager.compute_s(OpKind.F, work(tokens)) - kernels(work(tokens))
        # first-stage rows measure 0.5 ms more than the middle's, against kernels with the
        # embedding (the model prices none): the op adds 0.5 ms
        assert eager.compute_s(OpKind.F, work(tokens, embed=True)) == pytest.approx(
            kernels(work(tokens, embed=True)) + mid + 0.5 * MS)
        # last-stage rows: 2 ms more, against kernels that include the head; both compose
        head_kernels = {size: kernels(work(size, head=True)) - kernels(work(size))
                        for size in (16, 64)}
        lift = np.interp(tokens, [16, 64], [2 * MS - head_kernels[16], 2 * MS - head_kernels[64]])
        assert eager.compute_s(OpKind.F, work(tokens, embed=True, head=True)) == pytest.approx(
            kernels(work(tokens, embed=True, head=True)) + mid + 0.5 * MS + lift)


def test_a_slice_with_context_adds_what_the_rows_with_context_measure(tmp_path, repo):
    """eager.csv's rows with context_tokens > 0: a slice after c earlier tokens adds the residual
    those rows measure (against kernels of attention with that context) less the plain residual,
    per slice, interpolated in query and context tokens from 0 (nothing) at no context; B is
    FB - F of the same rows, R takes F's; without such rows a slice with context adds nothing."""
    model = replace(get_model("llama-tiny"), dtype="fp32")
    base = ClusterSpec(device=get_device("cpu"), num_nodes=1, gpus_per_node=2)
    plain = TableCostModel(model, replace(base, profile=str(_bare(tmp_path, repo))))
    no_context = TableCostModel(model, replace(base, profile=str(_profile(tmp_path / "n", repo))))
    directory = _profile(tmp_path, repo)
    rows = pd.read_csv(directory / "eager.csv").assign(context_tokens=0)
    extra = {("F", 256): 1.0, ("F", 1024): 3.0, ("FB", 256): 2.5, ("FB", 1024): 7.0}  # ms

    def with_context(q, c, op, n):  # the op's measured time after c tokens: kernels + residual
        w = Work(chunk=0, slices=(Slice(0, c, c + q),), layers=(1, 1 + n), split=Split())
        forward = no_context.compute_s(OpKind.F, w) + extra[("F", c)] * MS
        if op == "F":
            return forward
        return forward + no_context.compute_s(OpKind.B, w) + (extra[("FB", c)] - extra[("F", c)]) * MS

    ctx = [{"model": "llama-tiny", "op": op, "layers": n, "num_tokens": q, "hidden": 256,
            "dtype": "fp32", "stage": "middle", "context_tokens": c,
            "time_s": with_context(q, c, op, n)}
           for op in ("F", "FB") for n in (1, 2) for q in (16, 64) for c in (256, 1024)]
    write_table(directory, "eager", pd.concat([rows, pd.DataFrame(ctx)], ignore_index=True))
    eager = TableCostModel(model, replace(base, profile=str(directory)))

    def work(*slices):
        return Work(chunk=0, slices=tuple(Slice(i, c, c + q) for i, (q, c) in enumerate(slices)),
                    layers=(1, 4), split=Split())

    for kind, added in ((OpKind.F, {256: 1.0, 1024: 3.0}), (OpKind.B, {256: 1.5, 1024: 4.0}),
                        (OpKind.R, {256: 1.0, 1024: 3.0})):
        for q, c, ms in ((16, 256, added[256]), (40, 1024, added[1024]),
                         (64, 640, (added[256] + added[1024]) / 2),  # linear in context
                         (64, 128, added[256] / 2),  # from nothing at no context
                         (64, 8192, added[1024])):  # held beyond the rows
            assert eager.compute_s(kind, work((q, c))) == pytest.approx(
                no_context.compute_s(kind, work((q, c))) + ms * MS), (kind, q, c)
        # per slice: a packed chunk with two slices after context adds both
        assert eager.compute_s(kind, work((16, 256), (16, 1024), (16, 0))) == pytest.approx(
            no_context.compute_s(kind, work((16, 256), (16, 1024), (16, 0)))
            + (added[256] + added[1024]) * MS)
        assert no_context.compute_s(kind, work((16, 256))) != plain.compute_s(kind, work((16, 256)))
    # a discarding forward reads the context as F does: it adds F's extra to its own plain cost
    for q, c in ((16, 256), (40, 1024)):
        w = work((q, c))
        assert eager.compute_s(OpKind.F, w, keep=Keep.KV) == pytest.approx(
            no_context.compute_s(OpKind.F, w, keep=Keep.KV) + {256: 1.0, 1024: 3.0}[c] * MS)


def test_the_measured_optimizer_step_prices_the_executors_step_only(tmp_path, repo):
    model = replace(get_model("llama-tiny"), dtype="fp32")
    cluster = ClusterSpec(device=get_device("cpu"), num_nodes=1, gpus_per_node=2,
                          profile=str(_profile(tmp_path, repo)))
    cost = TableCostModel(model, cluster)
    device = Device(index=0, stage=0, replica=0, layers=(0, model.num_layers), embed=True,
                    head=True, optimizer_dtype="model", grad_dtype="model")
    params = cost._buffers.static_bytes(device).num_parameters
    assert cost.optimizer_s(device) == pytest.approx(1e-4 + 2e-9 * params)
    # an fp32 model under "fp32" keeps the same state (no master copy) and takes the same step
    fp32 = replace(device, optimizer_dtype="fp32", grad_dtype="fp32")
    assert cost.optimizer_s(fp32) == cost.optimizer_s(device)
    # fp32 master weights of a 16-bit model: not the executor's step, bytes through memory
    bf16 = TableCostModel(replace(model, dtype="bf16"), cluster)
    assert bf16.optimizer_s(fp32) == pytest.approx(
        params * 28.0 / cluster.device.hbm_bytes_per_s)


def test_another_models_rows_are_borrowed_with_a_note_and_absent_tables_give_none(tmp_path, repo):
    directory = str(_profile(tmp_path, repo, model="llama-small"))
    floor, rate, notes = eager_costs(directory, get_model("llama-tiny"))
    assert floor is not None and isinstance(rate, OptimizerRate)
    assert notes == ("eager.csv has no rows for llama-tiny; used llama-small's",
                     "optimizer.csv has no rows for llama-tiny; used llama-small's")
    bare = tmp_path / "bare"
    shutil.copytree(repo / "profiles" / "cpu-ci", bare)
    for table in ("eager", "optimizer"):
        (bare / f"{table}.csv").unlink()
    assert eager_costs(str(bare), get_model("llama-tiny"))[:2] == (None, None)


def test_ring_cp_iteration_does_not_shorten_as_sequences_grow(repo):
    """Where the eager floor binds, a ring exchange exposed beyond the attention kernels overlaps
    the floor's host time (the attention part takes the slack): with the slack on the dense part,
    after the exchange, a longer attention made a shorter op (the bundled tp 4 x cp 4 example was
    3.5% faster at 6,144 tokens than at 2,048)."""
    import ltsim
    from ltsim.runner import simulate

    path = repo / "scenarios" / "examples" / "qwen2.5-7b-32k-tp4-cp4.toml"
    times = [simulate(ltsim.load_scenario(path, [
        "workload.num_batches=1", "workload.global_batch_size=4",
        f"workload.fixed_length={n}"])).batches[0].iteration_time_s for n in (2048, 4096, 6144,
                                                                              8192)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:])) and times[-1] > times[0]


def test_an_fb_row_not_above_its_f_row_is_refused(tmp_path):
    """A fuzzing review: FB rows at a tenth of their time made B = FB - F negative, clamped to
    a 0 s floor for every backward (MFU 79%) without a word."""
    directory = tmp_path / "p"
    shutil.copytree(REPO / "profiles" / "cpu-ci", directory)
    lines = (directory / "eager.csv").read_text().splitlines()
    header = lines[0].split(",")
    op, column = header.index("op"), header.index("time_s")
    (directory / "eager.csv").write_text("\n".join([lines[0]] + [
        ",".join(repr(float(v) / 10) if i == column and line.split(",")[op] == "FB" else v
                 for i, v in enumerate(line.split(","))) for line in lines[1:]]) + "\n")
    with pytest.raises(ProfileError, match=r"table 'eager' must time an FB row .* above the F "
                                           r"row of its point \(data row \d+ is not above row"):
        read_optional_rows(directory, "eager")


def test_an_eager_table_without_its_backward_rows_is_said(tmp_path):
    """Only F rows: the floor was dropped without a note (350 -> 295 ms)."""
    directory = tmp_path / "p"
    shutil.copytree(REPO / "profiles" / "cpu-ci", directory)
    lines = (directory / "eager.csv").read_text().splitlines()
    op = lines[0].split(",").index("op")
    (directory / "eager.csv").write_text("\n".join(
        [lines[0]] + [line for line in lines[1:] if line.split(",")[op] == "F"]) + "\n")
    floor, _, notes = eager_costs(str(directory), get_model("llama-tiny"))
    assert floor is None
    assert [n for n in notes if "priced by their kernels alone, without the eager floor" in n]


def test_an_fp16_model_reads_the_bf16_eager_rows_and_an_fp32_one_is_said():
    """A commit review: an fp16 model on the H100 profile ran without the eager floor (its rows
    are bf16), 2.7x faster than bf16, without a word. bf16's rows stand in for fp16's, as GEMM
    rows do; a dtype with none is said."""
    bf16 = get_model("qwen2.5-7b")
    directory = str(REPO / "profiles" / "h100-sxm5-80gb")
    floor, _, notes = eager_costs(directory, bf16)
    half, _, half_notes = eager_costs(directory, replace(bf16, dtype="fp16"))
    assert floor is not None and half is not None and half.parts == floor.parts
    assert not [n for n in half_notes if "no fp16 rows" in n]
    full, _, full_notes = eager_costs(directory, replace(bf16, dtype="fp32"))
    assert full is None
    assert "eager.csv has no rows of fp32: it is not used" in full_notes
    assert "optimizer.csv has no adam rows of fp32: it is not used" in full_notes
