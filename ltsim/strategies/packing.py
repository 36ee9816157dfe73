"""Bin packing of short sequences into chunks of at most ``capacity`` tokens (ChunkFlow Algorithm 1).

Algorithm 1 tries bin counts 1, 2, ... and takes the first that packs. We do the same, cheaply:
first-fit decreasing (FFD) gives an upper bound U, ceil(total / capacity) and the count of items
larger than half the capacity give a lower bound L, and an exact depth-first search tries each
count from L up to U - 1 within a node budget. When the search proves a smaller count feasible we
take it; when the budget runs out we keep FFD's packing (FFD uses at most 11/9 OPT + 6/9 bins,
Dosa 2007). Policies: ``"min-bins"`` (default, the above), ``"ffd"``, ``"in-order"`` (consecutive
sequences fill a chunk until the next does not fit, as a packed data loader would).
"""

from __future__ import annotations

import math

from ltsim.errors import ConfigError

POLICIES = ("min-bins", "ffd", "in-order")
NODE_BUDGET = 200_000


def pack(sizes: list[int], capacity: int, policy: str = "min-bins") -> list[list[int]]:
    """Indices of ``sizes`` grouped into bins of total size <= capacity, each bin sorted."""
    if any(s > capacity for s in sizes):
        raise ValueError("an item is larger than the bin capacity")
    if not sizes:
        return []
    if policy == "in-order":
        return _in_order(sizes, capacity)
    if policy not in POLICIES:
        raise ConfigError("strategy.packing", f"one of {', '.join(POLICIES)}", policy)
    bins = first_fit_decreasing(sizes, capacity)
    if policy == "ffd":
        return bins
    for count in range(lower_bound(sizes, capacity), len(bins)):
        found = exact_pack(sizes, capacity, count)
        if found is not None:
            return found
    return bins


def lower_bound(sizes: list[int], capacity: int) -> int:
    """max(ceil(total / capacity), items larger than capacity / 2): no two of those share a bin."""
    return max(math.ceil(sum(sizes) / capacity), sum(1 for s in sizes if 2 * s > capacity))


def first_fit_decreasing(sizes: list[int], capacity: int) -> list[list[int]]:
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if sizes[i] <= free:
                bins[b].append(i)
                room[b] -= sizes[i]
                break
        else:
            bins.append([i])
            room.append(capacity - sizes[i])
    return [sorted(b) for b in bins]


def exact_pack(sizes: list[int], capacity: int, count: int) -> list[list[int]] | None:
    """A packing into ``count`` bins, None if there is none, or None if the node budget runs out."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    items = [sizes[i] for i in order]
    suffix = [0] * (len(items) + 1)
    for j in range(len(items) - 1, -1, -1):
        suffix[j] = suffix[j + 1] + items[j]
    room = [capacity] * count
    assign = [-1] * len(items)
    budget = [NODE_BUDGET]

    def place(j: int) -> bool:
        if j == len(items):
            return True
        budget[0] -= 1
        if budget[0] < 0 or suffix[j] > sum(room):
            return False
        tried: set[int] = set()
        for b in range(count):
            if room[b] >= items[j] and room[b] not in tried:  # equal rooms are symmetric
                tried.add(room[b])
                room[b] -= items[j]
                assign[j] = b
                if place(j + 1):
                    return True
                room[b] += items[j]
        return False

    if not place(0):
        return None
    bins: list[list[int]] = [[] for _ in range(count)]
    for j, b in enumerate(assign):
        bins[b].append(order[j])
    return [sorted(b) for b in bins if b]


def _in_order(sizes: list[int], capacity: int) -> list[list[int]]:
    bins: list[list[int]] = [[]]
    used = 0
    for i, size in enumerate(sizes):
        if bins[-1] and used + size > capacity:
            bins.append([])
            used = 0
        bins[-1].append(i)
        used += size
    return bins
