"""ChunkFlow's chunk construction is memoized per batch and ChunkSize (a sweep over K reuses it)."""

from __future__ import annotations

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
