"""Chunking toolkit shared by chunked schedules: split long sequences into pieces, pack short ones.

``split_sequence`` cuts one sequence into consecutive slices of at most ``size`` tokens (ChunkFlow's
dependent chunks, Seq1F1B's and InfiniPipe's token-level pieces); ``pack_sequences`` bin-packs whole
sequences into chunks of at most ``capacity`` tokens with a packing.py policy (ChunkFlow's standalone
chunks, fixed-size packs of short sequences).
"""

from __future__ import annotations

from ltsim.plan import Chunk, Slice
from ltsim.strategies.packing import pack


def split_sequence(seq: int, length: int, size: int, replica: int = 0) -> list[Chunk]:
    """Chunks (index 0, renumbered by the caller) of ``size`` tokens, the last one shorter."""
    return [Chunk(0, (Slice(seq, a, min(a + size, length)),), replica) for a in range(0, length, size)]


def pack_sequences(seq_ids: list[int], lengths: tuple[int, ...], capacity: int, policy: str,
                   replica: int = 0, spent: list | None = None) -> list[Chunk]:
    """Whole sequences packed into the chunks ``policy`` chooses (index 0, renumbered by the
    caller); ``spent`` as packing.pack's."""
    bins = pack([lengths[s] for s in seq_ids], capacity, policy, spent=spent)
    return [Chunk(0, tuple(Slice(seq_ids[i], 0, lengths[seq_ids[i]]) for i in b), replica)
            for b in bins]


def renumber(units: list[list[Chunk]], first_index: int) -> tuple[list[Chunk], list[list[int]]]:
    """Chunks numbered in unit order from ``first_index``; the indices of each unit of several."""
    chunks: list[Chunk] = []
    groups: list[list[int]] = []
    for unit in units:
        ids = []
        for chunk in unit:
            ids.append(first_index + len(chunks))
            chunks.append(Chunk(ids[-1], chunk.slices, chunk.replica))
        if len(unit) > 1:
            groups.append(ids)
    return chunks, groups
