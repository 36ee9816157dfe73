"""Registry-wide conformance suite (scikit-learn's test_common idea): every strategy, random batches.

For each registered strategy: the plan validates; each chunk is forwarded and backwarded exactly once
per stage; tokens are conserved; the simulation terminates; no op starts before its dependencies
end or before the previous op of its stream; memory never goes negative and returns to the static
level at the end of the step.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.plan import OpKind
from ltsim.sim.engine import Engine
from ltsim.strategies import REGISTRY
from tests.conftest import unit_ctx

# Options that make small random batches interesting (splitting, packing) per strategy.
SMALL_OPTIONS: dict[str, list[dict]] = {
    "megatron-1f1b": [{}, {"micro_batch_size": 2}, {"pack_tokens": 40}],
    "chunkflow": [{"chunk_size": 16, "k": 1}, {"chunk_size": 8, "k": 2}, {"chunk_size": 32, "k": 4}],
}


def _cases():
    for name in sorted(REGISTRY):
        for options in SMALL_OPTIONS.get(name, [{}]):
            yield pytest.param(name, options, id=f"{name}-{options}")


@pytest.mark.parametrize("name,options", list(_cases()))
@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 5), dp=st.integers(1, 2),
       lengths=st.lists(st.integers(1, 64 * 4), min_size=2, max_size=16),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_strategy_conforms(name, options, p, dp, lengths, recompute):
    strategy = REGISTRY[name]
    ctx = unit_ctx(pp=p, dp=dp, recompute=recompute)
    plan = strategy.plan(tuple(lengths), ctx, strategy.parse(options)).validate()
    counts = Counter((op.kind, op.stage, op.chunk) for op in plan.ops())
    for chunk in plan.chunks:
        for stage in range(p):
            assert counts[(OpKind.F, stage, chunk.index)] == 1
            assert counts[(OpKind.B, stage, chunk.index)] == 1
    seq_tokens = Counter()
    for chunk in plan.chunks:
        for piece in chunk.slices:
            seq_tokens[piece.seq] += piece.num_tokens
    assert [seq_tokens[i] for i in range(len(lengths))] == list(lengths)

    trace = Engine(ctx.cost).run(plan)
    end = {(e.device, e.token): e.end_s for e in trace.events}
    start = {(e.device, e.token): e.start_s for e in trace.events}
    assert len(end) == sum(len(prog.ops) for prog in plan.programs)
    for program in plan.programs:
        prev = None
        for op in program.ops:
            key = (op.device, op.token)
            for dep in op.deps:
                device, token = dep.split(":", 1)
                assert start[key] >= end[(int(device), token)] - 1e-9
            if prev is not None:
                assert start[key] >= end[prev] - 1e-9
            prev = key
    assert all(level >= 0 for _, _, level in trace.memory)
    assert trace.final_memory_bytes() == list(trace.static_bytes)
