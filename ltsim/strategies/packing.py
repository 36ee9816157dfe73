"""Bin packing of short sequences into chunks of at most ``capacity`` tokens (ChunkFlow Algorithm 1).

Algorithm 1 tries bin counts 1, 2, ... and takes the first that packs. We do the same, cheaply:
first-fit decreasing (FFD) gives an upper bound U, ceil(total / fullest bin) and the count of items
larger than half the capacity give a lower bound L, and an exact depth-first search tries each
count from L up to U - 1 within a budget of nodes and steps shared by the counts (bounded time:
0.43 s on the hardest batch of validation/perf/packing_search.py, 2-core machine). When the search proves a smaller count feasible we
take it; when the budget runs out we keep FFD's packing (FFD uses at most 11/9 OPT + 6/9 bins,
Dosa 2007). Policies: ``"min-bins"`` (default, the above), ``"ffd"``, ``"in-order"`` (consecutive
sequences fill a chunk until the next does not fit, as a packed data loader would).
"""

from __future__ import annotations

import math

from ltsim.errors import ConfigError

POLICIES = ("min-bins", "ffd", "in-order")
NODE_BUDGET = 20_000  # search nodes, over all the bin counts tried (~20 us each on 256 items)
STEP_BUDGET = 1_000_000  # subset-enumeration steps, likewise
SUBSET_SUM_BITS = 1 << 20  # fullest_bin tabulates capacities up to this


def pack(sizes: list[int], capacity: int, policy: str = "min-bins", *,
         spent: list | None = None) -> list[list[int]]:
    """Indices of ``sizes`` grouped into bins of total size <= capacity, each bin sorted.
    ``spent``: True is appended to it when the exact search ran out of budget before it could
    prove FFD's count the least (FFD's packing is then kept unproven)."""
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
    budget = [NODE_BUDGET, STEP_BUDGET]  # shared by the counts tried: bounds the whole search
    fullest = fullest_bin(sizes, capacity)
    for count in range(lower_bound(sizes, capacity, fullest), len(bins)):
        found = exact_pack(sizes, capacity, count, budget, fullest)
        if found is not None:
            return found
    if spent is not None and (budget[0] < 0 or budget[1] < 0):
        spent.append(True)
    return bins


def lower_bound(sizes: list[int], capacity: int, fullest: int | None = None) -> int:
    """max(ceil(total / fullest), items larger than capacity / 2): no bin holds more than the
    fullest subset total ``fullest_bin`` allows, and no two of those items share a bin."""
    fullest = fullest_bin(sizes, capacity) if fullest is None else fullest
    return max(math.ceil(sum(sizes) / fullest), sum(1 for s in sizes if 2 * s > capacity))


def fullest_bin(sizes: list[int], capacity: int) -> int:
    """The largest total of a subset of ``sizes`` that is at most ``capacity``: what a bin can
    hold at best (8,000 of 8,192 when every length is a multiple of 1,000). Subset sums on a
    bitset; ``capacity`` itself when that is too wide to tabulate cheaply or is reached."""
    if capacity > SUBSET_SUM_BITS or sum(sizes) <= capacity:
        return min(capacity, sum(sizes)) or capacity
    top = 1 << capacity
    reach = 1  # bit t set: some subset totals t
    for size in sizes:
        reach |= (reach << size) & (2 * top - 1)
        if reach & top:
            return capacity
    return reach.bit_length() - 1


def first_fit_decreasing(sizes: list[int], capacity: int) -> list[list[int]]:
    """FFD: items longest first, each into the lowest-numbered bin with room. The lowest bin with
    room is found in O(log n) on a max-tree over every possible bin's room (an unopened bin has
    the whole capacity, so when no open bin fits, the first unopened one is found): the same
    packing as scanning the bins, without its O(n x bins) time."""
    n = len(sizes)
    order = sorted(range(n), key=lambda i: (-sizes[i], i))
    # first fit leaves at most one bin half empty or less, so it opens < 2 total / capacity + 1
    most = min(n, 2 * -(-sum(sizes) // capacity) + 1)
    width = 1 << max(0, (most - 1).bit_length())
    tree = [capacity] * (2 * width)  # tree[1] the root; leaves width .. 2 width - 1, bin = leaf
    bins: list[list[int]] = []
    for i in order:
        need, node = sizes[i], 1
        while node < width:  # descend to the leftmost leaf with room >= need
            node = 2 * node if tree[2 * node] >= need else 2 * node + 1
        b = node - width
        if b == len(bins):
            bins.append([])
        bins[b].append(i)
        tree[node] -= need
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return [sorted(b) for b in bins]


def ffd_by_scanning(sizes: list[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing as printed, scanning the bins for each item (O(n x bins)): the
    reference ``first_fit_decreasing`` is tested and benchmarked against."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        for b, free in enumerate(room):
            if sizes[i] <= free:
                bins[b].append(i)
                room[b] -= sizes[i]
                break
        else:
            bins.append([i])
            room.append(capacity - sizes[i])
    return [sorted(b) for b in bins]


def exact_pack(sizes: list[int], capacity: int, count: int, budget: list[int] | None = None,
               fullest: int | None = None) -> list[list[int]] | None:
    """A packing into ``count`` bins, or None (none exists, or a budget ran out).

    Bin completion (Korf 2002, simplified): put the largest item left into a new bin, fill the
    rest of that bin with a subset of the remaining items (fullest first), recurse. A bin may
    fall short of the fullest total a bin can hold (``fullest_bin``) by at most the slack
    ``count * fullest - total``, which prunes hard near the optimum. Items
    of equal size are interchangeable, so a state is its multiset of sizes left (with the bins
    left): one that failed is not searched again (a batch of a few distinct lengths reaches the
    same state along many paths). Two budgets bound the time: search nodes, and the steps of the
    subset enumeration.
    """
    fullest = fullest_bin(sizes, capacity) if fullest is None else fullest
    slack = fullest * count - sum(sizes)  # the waste a packing can afford, against full bins
    if slack < 0:
        return None
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    budget = [NODE_BUDGET, STEP_BUDGET] if budget is None else budget  # [nodes, steps] left
    failed: set = set()

    def fill(left: list[int], slack: int, bins_left: int) -> list[list[int]] | None:
        if not left:
            return []
        budget[0] -= 1
        if bins_left == 0 or budget[0] < 0 or budget[1] < 0:
            return None
        state = (tuple([sizes[i] for i in left]), bins_left)
        if state in failed:
            return None
        first, rest = left[0], left[1:]
        room = capacity - sizes[first]
        best = fullest - sizes[first]  # no subset of what is left fills more
        for subset in _subsets(rest, sizes, room, best - slack, budget):
            taken = set(subset)
            used = sum(sizes[i] for i in subset)
            tail = fill([i for i in rest if i not in taken], slack - (best - used), bins_left - 1)
            if tail is not None:
                return [sorted([first, *subset])] + tail
        if budget[0] >= 0 and budget[1] >= 0:  # a proof, not a search cut short
            failed.add(state)
        return None

    return fill(order, slack, count)


def _subsets(items: list[int], sizes: list[int], room: int, min_fill: int, budget: list[int],
             limit: int = 4096):
    """Subsets of ``items`` (sorted by size, descending) whose total lies in [min_fill, room],
    fullest first; equal sizes are interchangeable, so only one ordering of them is produced (a
    run of equal sizes is tried once, by its first item). ``budget[1]``: steps left, spent here."""
    found: list[tuple[int, list[int]]] = []
    n = len(items)
    following = [n] * n  # the position of the next item of another size
    for pos in range(n - 2, -1, -1):
        same = sizes[items[pos]] == sizes[items[pos + 1]]
        following[pos] = following[pos + 1] if same else pos + 1

    def walk(start: int, chosen: list[int], total: int) -> None:
        if len(found) >= limit or budget[1] < 0:
            return
        if total >= min_fill:
            found.append((total, list(chosen)))
        pos = start
        while pos < n:
            budget[1] -= 1
            size = sizes[items[pos]]
            if total + size <= room:
                chosen.append(items[pos])
                walk(pos + 1, chosen, total + size)
                chosen.pop()
            pos = following[pos]

    walk(0, [], 0)
    found.sort(key=lambda pair: -pair[0])
    return [subset for _, subset in found]


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
