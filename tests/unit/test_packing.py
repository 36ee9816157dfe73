"""Bin packing for ChunkFlow's chunk construction: the minimum bin count where it is known."""

from __future__ import annotations

import random

import pytest

from ltsim.strategies.packing import (exact_pack, ffd_by_scanning, first_fit_decreasing, fullest_bin,
                                      lower_bound, pack)


def _check(sizes, capacity, bins):
    assert sorted(i for b in bins for i in b) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= capacity for b in bins)


def test_ffd_misses_but_min_bins_finds_the_optimum():
    # Three full bins of 20 exist ({11,5,2,2}, {10,6,2,2}, {8,5,3,2,2}); FFD needs 4.
    sizes = [11, 10, 8, 6, 5, 5, 3, 2, 2, 2, 2, 2, 2]
    capacity = 20
    assert len(first_fit_decreasing(sizes, capacity)) == 4
    bins = pack(sizes, capacity)
    _check(sizes, capacity, bins)
    assert len(bins) == 3 == lower_bound(sizes, capacity)


@pytest.mark.parametrize("seed", range(20))
def test_perfect_packings_are_found(seed):
    """Cut `count` bins of capacity C into random pieces: the minimum is exactly `count`."""
    rng = random.Random(seed)
    capacity, count = 64, rng.randint(2, 6)
    sizes = []
    for _ in range(count):
        left = capacity
        while left:
            piece = min(left, rng.randint(1, 40))
            sizes.append(piece)
            left -= piece
    rng.shuffle(sizes)
    bins = pack(sizes, capacity)
    _check(sizes, capacity, bins)
    assert len(bins) == count


def test_exact_pack_reports_infeasible():
    assert exact_pack([6, 6, 6], 10, 2) is None


def test_in_order_and_ffd_policies():
    sizes = [3, 8, 2, 7]
    assert pack(sizes, 10, "in-order") == [[0], [1, 2], [3]]
    _check(sizes, 10, pack(sizes, 10, "ffd"))


def test_item_larger_than_capacity_rejected():
    with pytest.raises(ValueError):
        pack([11], 10)


@pytest.mark.parametrize("seed", range(20))
def test_ffd_tree_gives_the_scanning_packing(seed):
    rng = random.Random(seed)
    capacity = rng.randint(1, 200)
    sizes = [rng.randint(1, capacity) for _ in range(rng.randint(1, 300))]
    assert first_fit_decreasing(sizes, capacity) == ffd_by_scanning(sizes, capacity)


def test_fullest_bin_is_the_largest_subset_total_that_fits():
    assert fullest_bin([1000, 2000] * 10, 8192) == 8000  # every total is a multiple of 1,000
    assert fullest_bin([3, 5], 7) == 5
    assert fullest_bin([3, 4], 7) == 7
    assert fullest_bin([3, 4], 100) == 7  # everything fits in one bin
    assert fullest_bin([1, 2], 1 << 30) == 3


def test_a_few_distinct_lengths_are_packed_optimally_without_a_long_search():
    """256 lengths of 1,000 or 2,000 tokens into 8,192-token chunks: no bin holds more than 8,000,
    so the lower bound is ceil(total / 8,000), which FFD meets. Before, the search for one bin
    fewer than FFD explored symmetric states for seconds per batch (a ChunkFlow hang)."""
    rng = random.Random(0)
    sizes = [rng.choice([1000, 2000]) for _ in range(256)]
    bins = pack(sizes, 8192)
    _check(sizes, 8192, bins)
    assert len(bins) == lower_bound(sizes, 8192) == -(-sum(sizes) // 8000)


def test_the_search_is_bounded_and_falls_back_to_a_valid_packing(monkeypatch):
    import ltsim.strategies.packing as packing

    calls = []
    original = packing._subsets

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(packing, "_subsets", counted)
    rng = random.Random(1)
    sizes = [rng.choice([700, 1500, 2100, 4000]) for _ in range(256)]
    bins = pack(sizes, 8192)
    _check(sizes, 8192, bins)
    assert lower_bound(sizes, 8192) <= len(bins) <= len(first_fit_decreasing(sizes, 8192))
    assert len(calls) <= packing.NODE_BUDGET  # one enumeration per search node, all counts together
