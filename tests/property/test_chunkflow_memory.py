"""ChunkFlow's memory promise: with K = 1 the peak activation memory is one chunk's activations
(plus K/V state, free in the unit model), whatever the longest sequence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ltsim.strategies import get_strategy
from tests.conftest import unit_ctx, unit_engine

CHUNKFLOW = get_strategy("chunkflow")


@settings(max_examples=40, deadline=None)
@given(chunk_size=st.sampled_from([4, 8, 16]), long_factors=st.lists(st.integers(1, 64), min_size=1,
                                                                     max_size=3),
       shorts=st.lists(st.integers(1, 16), max_size=12), seed=st.randoms())
def test_k1_peak_is_one_chunk(chunk_size, long_factors, shorts, seed):
    """Several long sequences (up to 64x ChunkSize) mixed with short ones, in random order."""
    lengths = [chunk_size * f for f in long_factors] + [min(s, chunk_size) for s in shorts]
    seed.shuffle(lengths)
    lengths = tuple(lengths)
    ctx = unit_ctx(pp=1)
    plan = CHUNKFLOW.plan(lengths, ctx, CHUNKFLOW.parse({"chunk_size": chunk_size, "k": 1}))
    trace = unit_engine().run(plan)
    assert max(trace.peak_memory_bytes()) <= chunk_size  # unit model: 1 byte per token


@settings(max_examples=20, deadline=None)
@given(k=st.integers(1, 6), n=st.integers(1, 12))
def test_k_chunks_kept(k, n):
    """One sequence of n chunks on one stage: peak = min(k, n) chunks of activations."""
    ctx = unit_ctx(pp=1)
    plan = CHUNKFLOW.plan((8 * n,), ctx, CHUNKFLOW.parse({"chunk_size": 8, "k": k}))
    assert max(unit_engine().run(plan).peak_memory_bytes()) == 8 * min(k, n)
