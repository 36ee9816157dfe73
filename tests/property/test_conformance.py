"""Registry-wide conformance suite (scikit-learn's test_common idea): every strategy, random batches.

For each registered strategy: the plan validates; each chunk is forwarded once per stage and, when
it gets gradients, backwarded once (token-layers of its F and B ops add up to the chunk's tokens
times the stage's layers; a CP-sharded op on one rank counts its share); tokens are conserved; the
simulation terminates; no op starts before its dependencies end, before the ops it starts with have
started, or before the previous op of its stream; memory (device and host) never goes negative and
returns to the static level at the end of the step.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.mirrors import expand_trace
from ltsim.plan import OpKind
from ltsim.strategies import REGISTRY
from tests.conftest import unit_ctx, unit_engine

# Options that make small random batches interesting (splitting, packing) per strategy.
SMALL_OPTIONS: dict[str, list[dict]] = {
    "megatron-1f1b": [{}, {"micro_batch_size": 2}, {"pack_tokens": 40}],
    "chunkflow": [{"chunk_size": 16, "k": 1}, {"chunk_size": 8, "k": 2}, {"chunk_size": 32, "k": 4}],
    "skrull": [{"bucket_size": 40}, {"bucket_size": 24, "placement": "round-robin"},
               {"bucket_size": 64, "scheduling": "none"}, {"bucket_size": 16, "rollback": False}],
    "deepspeed-cp": [{"bucket_size": 40}, {"bucket_size": 40, "micro_batch_size": 1}],
    "sorted-batching": [{"bucket_size": 64}],
    "seco": [{"chunk_size": 16}, {"chunk_size": 64}],
    "alst": [{}, {"tiled_mlp": False, "tiled_loss": False, "offload_async": True,
                  "offload_optimizer": False}],
    "spaco": [{"chunk_size": 16, "budget": 2}, {"chunk_size": 8, "budget": 3, "sampling": "bernoulli"},
              {"chunk_size": 32, "budget": 1, "compensation": "none"}],
    "infinipipe": [{}, {"num_slices": 3, "warmup": "1f1b"}, {"chunking": "fixed", "num_slices": 2},
                   {"chunking": "time-only", "checkpointing": "full", "grouping": False}],
    "seq1f1b": [{"chunk_size": 32}, {"variant": "original", "num_splits": 3},
                {"variant": "original", "num_splits": 2, "split": "average",
                 "checkpointing": "full"}],
    "deepspeed-ulysses": [{"bucket_size": 40}],
    "flexsp": [{}, {"min_sp": 1, "bucket_num": 2}],
}
# Layouts a strategy needs: DeepSpeed-based ones do not pipeline; CP ranks make them interesting.
NO_PIPELINE = {"skrull", "deepspeed-cp", "sorted-batching", "alst", "deepspeed-ulysses",
               "flexsp"}
# Strategies whose re-forward is their checkpoint refuse full recompute (a ConfigError, tested in
# tests/unit/test_seco.py); they run with "selective" here instead.
NO_FULL_RECOMPUTE = {"seco", "spaco", "infinipipe", "seq1f1b"}
# ALST offloads its layer-input checkpoints: it needs full recompute (tests/unit/test_alst.py
# checks the refusal and the other policies).
FULL_RECOMPUTE = {"alst"}


def conformance_ctx(name: str, pp: int, dp: int, cp: int, recompute: str):
    """The unit-preset context a strategy is checked in: DeepSpeed-based ones without pipeline
    (with CP ranks and ZeRO-2, ALST's ZeRO-3), the others without CP; "full" recompute becomes
    "selective" for the strategies that refuse it, and any policy "full" for ALST."""
    if name in NO_FULL_RECOMPUTE and recompute == "full":
        recompute = "selective"
    if name in FULL_RECOMPUTE:
        recompute = "full"
    if name in NO_PIPELINE:
        return unit_ctx(pp=1, dp=dp, cp=cp, recompute=recompute,
                        zero_stage=3 if name == "alst" else 2)
    return unit_ctx(pp=pp, dp=dp, recompute=recompute)


def _cases():
    for name in sorted(REGISTRY):
        for options in SMALL_OPTIONS.get(name, [{}]):
            yield pytest.param(name, options, id=f"{name}-{options}")


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 5), dp=st.integers(1, 2), cp=st.sampled_from([1, 2, 4]),
       lengths=st.lists(st.integers(1, 64 * 4), min_size=2, max_size=16),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_strategy_conforms(name, options, p, dp, cp, lengths, recompute):
    strategy = REGISTRY[name]
    ctx = conformance_ctx(name, p, dp, cp, recompute)
    compact = strategy.plan(tuple(lengths), ctx, strategy.parse(options)).validate()
    plan = compact.expand().validate()  # mirrored replicas written out (ltsim/mirrors.py)
    covered = Counter()
    for op in plan.ops():
        if op.kind in (OpKind.F, OpKind.B) and op.part != "attn":
            share = plan.devices[op.device].cp_width / op.work.split.cp
            covered[(op.kind, op.stage, op.chunk)] += op.work.num_tokens * op.work.num_layers * share
    for chunk in plan.chunks:
        for stage, (first, stop) in enumerate(plan.stage_layers):
            need = chunk.num_tokens * (stop - first)
            assert covered[(OpKind.F, stage, chunk.index)] == pytest.approx(need)
            grad = need if plan.gets_grad(chunk.index) else 0
            assert covered[(OpKind.B, stage, chunk.index)] == pytest.approx(grad)
    seq_tokens = Counter()
    for chunk in plan.chunks:
        for piece in chunk.slices:
            seq_tokens[piece.seq] += piece.num_tokens
    assert [seq_tokens[i] for i in range(len(lengths))] == list(lengths)

    trace = expand_trace(unit_engine().run(compact), compact)
    end = {(e.device, e.token): e.end_s for e in trace.events}
    start = {(e.device, e.token): e.start_s for e in trace.events}
    assert len(end) == sum(len(prog.ops) for prog in plan.programs)
    for program in plan.programs:
        prev = None
        for op in program.ops:
            key = (op.device, op.token)
            for dep in op.deps:
                assert start[key] >= end[(dep.device, dep.token)] - 1e-9
            for dep in op.start_deps:
                assert start[key] >= start[(dep.device, dep.token)] - 1e-9
            if prev is not None:
                assert start[key] >= end[prev] - 1e-9
            prev = key
    assert all(level >= 0 for _, _, level in trace.memory + trace.host_memory)
    assert trace.final_memory_bytes() == list(trace.static_bytes)
    assert all(level == 0 for level in _final_host(trace))


def _final_host(trace):
    final = [0] * trace.num_devices
    for _, device, level in trace.host_memory:
        final[device] = level
    return final
