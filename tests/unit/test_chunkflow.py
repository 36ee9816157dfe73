"""ChunkFlow's chunk construction is memoized per batch and ChunkSize (a sweep over K reuses it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ltsim.strategies import chunkflow, get_strategy
from tests.conftest import unit_ctx


def test_chunks_are_built_once_per_batch_and_chunk_size_whatever_k():
    strategy = get_strategy("chunkflow")
    batch = (900, 40, 300, 70, 2000, 10)
    chunkflow._chunks.cache_clear()
    plans = [strategy.plan(batch, unit_ctx(pp=2), strategy.parse({"chunk_size": 512, "k": k}))
             for k in (1, 2, 4)]
    info = chunkflow._chunks.cache_info()
    assert (info.misses, info.hits) == (1, 2)
    assert plans[0].chunks == plans[1].chunks == plans[2].chunks
    # the memo hands out copies: a caller that edits its lists changes nothing for the next one
    options = strategy.parse({"chunk_size": 512, "k": 1})
    chunks, groups = chunkflow.construct_chunks(list(range(len(batch))), batch, options)
    chunks.clear()
    groups.append([99])
    again, groups_again = chunkflow.construct_chunks(list(range(len(batch))), batch, options)
    assert tuple(again) == plans[0].chunks and [99] not in groups_again
    # and what it returns is what the construction gives without it
    fresh = chunkflow._chunks.__wrapped__(tuple(range(len(batch))), batch, 512, options.packing,
                                          options.order, 0, 0)
    assert fresh[0] == tuple(again)


# -- memory inside the backwards of a dependent group, against the H100 ----------------------------
# validation/executor/chunk_memory.py measured ChunkFlow K = 1 on one 16K sequence in two chunks of
# 8K (4-layer Llama-2-7B, bf16) at every phase; chunk_memory-h100.json. Weight gradients are in the
# executor's static memory, so the run's are subtracted: the head's (0.25 GiB) by B1's loss
# backward, all of them (2.0 GiB) in B0 (gpu_notes.md item 19).
_H100_RUN = "validation/executor/h100-run2/fix16k-cf8k-k1.toml"


def _phase_levels(kernel: str) -> tuple[dict[str, float], float, object, object]:
    import ltsim
    from ltsim.runner import run
    from ltsim.validate import bare_cost_model

    scenario = ltsim.load_scenario(_H100_RUN, ["workload.global_batch_size=1",
                                               f'hardware.attention_kernel="{kernel}"'])
    cost = bare_cost_model(scenario)
    sim = run(scenario, cost=cost)
    trace = sim.traces[0]
    static = trace.static_bytes[0]
    levels = {}
    for event in trace.events:
        if event.stream == "compute":
            inside = [level for t, _, level in trace.memory if event.start_s <= t < event.end_s]
            levels[event.token] = (max(inside) - static) / 2**30 if inside else 0.0
    return levels, (max(trace.peak_memory_bytes()) - static) / 2**30, sim.plans[0], cost


def _measured_phases(backend: str) -> dict[str, float]:
    import json

    data = json.loads(Path("validation/executor/chunk_memory-h100.json").read_text())
    run = next(r for r in data["results"] if (r["seq"], r["chunk"], r["backend"])
               == (16384, 8192, backend))
    marks = {m["at"]: m["peak_since_last"] / 2**30 for m in run["marks"]}
    loss_backward = [m["peak_since_last"] / 2**30 for m in run["marks"]
                     if m["at"] == "backward of layer 3 starts"]
    head_grad, all_grads = 0.25, 2.0
    return {"B1": loss_backward[0] - head_grad, "R0": marks["R0 done"] - all_grads,
            "B0": loss_backward[1] - all_grads}


@pytest.mark.parametrize("kernel, backend, peak_op", [
    ("torch_sdpa", "sdpa", "s0B0"), ("torch_sdpa_boolmask", "sdpa_boolmask", "s0B1")])
def test_dependent_group_peaks_in_the_backward_the_h100_measured(kernel, backend, peak_op):
    """The context K/V gradients accrue layer by layer through B1 (sim/layerwise.layerwise_deferrals),
    chunk 0's stored K/V stay to its own backward, and B1's concatenated dK/dV stay pinned by the
    earlier chunk's gradients, views of it: so with the plain kernel the peak is B0's (after R0),
    as measured, and with the boolean mask's bias kept through B1, B1's."""
    levels, peak, plan, cost = _phase_levels(kernel)
    measured = _measured_phases(backend)
    assert max(levels, key=levels.get) == peak_op
    assert max(measured, key=measured.get) == peak_op[-2:]
    assert levels["s0B0"] == pytest.approx(measured["B0"], rel=0.02)
    assert levels[peak_op] == pytest.approx(peak)
    # B1 holds A - (L - 1) / L min(A, act) of its A bytes of context K/V gradients at its start
    b1 = next(op for op in plan.ops() if op.token == "s0B1")
    grads = sum(cost.buffer_bytes(b) for b in b1.allocs if b.kind == "kv_grad")
    acts = sum(cost.buffer_bytes(b) for b in b1.frees if b.kind == "act")
    assert {b.work.chunk for b in b1.allocs} == {0, 1}  # chunk 0's dK/dV, chunk 1's own share
    held = sum(cost.buffer_bytes(b) for op in plan.ops() if op.token in ("s0F0", "s0F1")
               for b in op.allocs)
    working = cost.working_bytes(b1.kind, b1.work)
    expected = held + grads - 3 * min(grads, acts) // 4 + working
    assert levels["s0B1"] == pytest.approx(expected / 2**30, abs=1e-6)


# -- the layer-by-layer deferral with context parallelism and under full recompute -----------------
def _last_backward_deferral(recompute: str, cp: int) -> tuple[int, list, object, object]:
    """ChunkFlow K = 1 on one 32K sequence in chunks of 8K, Qwen2.5-7B at tp 2 on the quickstart's
    H100 profile: the deferral of the last chunk's backward on stage 0, its op(s), the cost model
    and the plan."""
    import ltsim
    from ltsim.runner import make_cost_model
    from ltsim.sim.layerwise import layerwise_deferrals
    from ltsim.strategies.base import PlanContext

    scenario = ltsim.load_scenario("scenarios/quickstart.toml", [
        "parallel.tp=2", "parallel.pp=1", f"parallel.cp={cp}", f'parallel.recompute="{recompute}"',
        "hardware.gpus_per_node=4", "strategy.k=1"])
    cost = make_cost_model(scenario)
    strategy = get_strategy("chunkflow")
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel, cost=cost)
    plan = strategy.plan((32768,), ctx, strategy.parse({"chunk_size": 8192, "k": 1}))
    program = plan.program(0)
    table = plan.table
    sizes = np.array([cost.buffer_bytes(buf) for buf in table.buffers], dtype=np.int64)
    deferrals = {table.key(row): less for row, less in layerwise_deferrals(table, sizes).items()}
    ops = [op for op in program.ops if op.kind.value == "B" and op.chunk == 3]
    return sum(d for op in ops for d, _ in [deferrals.get(op.key, (0, 0))]), ops, cost, plan


def test_a_backward_split_for_context_parallelism_still_defers_its_context_gradients():
    """split_cp puts a backward's allocations on its attention part and its releases on the rest;
    the deferral spans the pair (charged less at the first's start, released less at the second's
    end), and per rank it is half the lockstep one at cp 2: every buffer is sharded over cp."""
    from ltsim.sim.engine import compile_plan

    whole, (op,), _, _ = _last_backward_deferral("selective", 1)
    split, (attn, dense), cost, plan = _last_backward_deferral("selective", 2)
    assert whole > 0 and (attn.part, dense.part) == ("attn", "dense")
    assert split == pytest.approx(whole / 2, rel=1e-3)
    # and the engine applies it so: the attention part charges less, the rest releases less
    compiled = compile_plan(plan, cost)
    steps = {o.key: step for o, step in zip(compiled.ops, compiled.steps)}

    def device(buffers) -> int:
        return sum(cost.buffer_bytes(b) for b in buffers if not b.host)

    for o, charged, released in ((attn, device(attn.allocs) - split, device(attn.frees)),
                                 (dense, device(dense.allocs), device(dense.frees) - split)):
        working = cost.working_bytes(o.kind, o.work, part=o.part)
        assert (steps[o.key][1], steps[o.key][3]) == (charged + working, released + working)


def test_under_full_recompute_the_layer_inputs_are_what_a_backward_releases_layer_by_layer():
    """With full recompute a backward's one-layer working set ("act" of one layer) is rebuilt for
    every layer and held to the end; its layer inputs ("ckpt") go one by one. So the deferral is
    (L - 1) / L x min(context gradients, layer inputs)."""
    deferred, (op,), cost, _ = _last_backward_deferral("full", 1)
    grads = sum(cost.buffer_bytes(b) for b in op.allocs if b.kind == "kv_grad")
    inputs = sum(cost.buffer_bytes(b) for b in op.frees if b.kind == "ckpt")
    layers = op.work.num_layers
    assert {b.work.num_layers for b in op.frees if b.kind == "act"} == {1}
    assert 0 < inputs < grads
    assert deferred == (layers - 1) * min(grads, inputs) // layers


def test_a_packing_search_out_of_budget_is_a_warning(monkeypatch):
    # issue 13: the exact packer keeps FFD's chunks when its budget runs out; the run said
    # nothing (a review). Nine short sequences into chunks of 10: FFD needs 4, the fewest is 3
    from ltsim.runner import run
    from ltsim.scenario import load_scenario
    from ltsim.strategies import packing
    from tests.conftest import REPO

    sets = ["strategy.chunk_size=10", "workload.lengths=[4, 4, 4, 3, 3, 3, 3, 3, 3]"]
    example = REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml"
    chunkflow._chunks.cache_clear()
    found = run(load_scenario(example, sets))
    assert not any("search budget" in w for w in found.result.warnings)
    monkeypatch.setattr(packing, "NODE_BUDGET", 0)
    chunkflow._chunks.cache_clear()
    spent = run(load_scenario(example, sets))
    chunkflow._chunks.cache_clear()
    assert any("ran out of search budget; first-fit decreasing's chunks were kept" in w
               for w in spent.result.warnings)
    assert "notes" not in spent.result.strategy_options
    assert (len(found.plans[0].chunks), len(spent.plans[0].chunks)) == (3, 4)


@pytest.mark.parametrize("name, options", [("chunkflow", {"chunk_size": 4, "k": 1}),
                                           ("seco", {"chunk_size": 4})])
def test_a_recompute_frees_the_stage_input_its_activations_hold(name, options):
    """A re-forwarded chunk kept its stage input to its backward beside the rebuilt activations,
    which hold it as their first layer's input (the executor keeps one tensor): one chunk's input
    counted twice (a metamorphic review: 7.3 MB of the quickstart's K = 1 peak at 4K chunks)."""
    strategy = get_strategy(name)
    plan = strategy.plan((12,), unit_ctx(pp=2), strategy.parse(options))
    for op in plan.program(0).ops:
        kinds = {b.kind for b in op.frees}
        if op.kind.value == "R":
            assert "input" in kinds, op.token
        if op.kind.value == "B" and any(o.kind.value == "R" and o.chunk == op.chunk
                                        for o in plan.program(0).ops):
            assert "input" not in kinds, op.token
