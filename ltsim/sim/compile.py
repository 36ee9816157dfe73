"""Compiling a plan for the replay (issue 13): every op priced once per distinct shape of work,
over the plan's columns (ltsim/optable.py), into the per-op durations and memory deltas the
engine (ltsim/sim/engine.py) reads. Prices are values, shared by the engines of one price scope
(``shared_prices``)."""

from __future__ import annotations

from itertools import chain

import numpy as np

from ltsim.costs import CostModel, duration_s
from ltsim.errors import PlanError
import ltsim.optable as optable
from ltsim.optable import COLL, KEEP_OF, KIND_OF, OPT, PART_OF, ints
from ltsim.plan import Comm, Keep, Op, OpKind, Plan, Work
from ltsim.sim.layerwise import layerwise_deferrals


class Compiled:
    """A plan as the replay reads it, per op (row of the plan's table, ltsim/optable.py): its
    duration, memory deltas, the rows it waits for and its collective. Built once per plan
    (``compile_plan``)."""

    __slots__ = ("plan", "table", "programs", "dur", "memory", "deps", "start_deps", "coll",
                 "static", "host_static")

    def __init__(self, plan: Plan, programs: list[tuple[int, str, list[int]]], dur: list[float],
                 memory: list, coll: list, static: list[int], host_static: list[int]) -> None:
        self.plan = plan
        self.table = plan.table
        self.programs = programs  # (device, stream, its rows in order)
        self.dur = dur
        self.memory = memory  # per row: (alloc, host_alloc, free, host_free), None if all 0
        self.deps, self.start_deps = self.table.deps, self.table.start_deps  # row ids
        self.coll = coll  # per row: (token, members) of a collective of several devices, or None
        self.static = static
        self.host_static = host_static  # per device: what it keeps in host memory throughout

    @property
    def ops(self) -> list[Op]:
        """The Op of every row (written out: for messages and tests)."""
        return self.table.ops()

    @property
    def steps(self) -> list[tuple]:
        """Per row: (dur, alloc, host_alloc, free, host_free, deps, start_deps, coll)."""
        none = (0, 0, 0, 0)
        return [(dur, *(memory or none), deps, start_deps, coll) for dur, memory, deps, start_deps,
                coll in zip(self.dur, self.memory, self.deps, self.start_deps, self.coll)]


class Prices:
    """What a cost model said, by value: a compute op's duration and working-set bytes per (kind,
    cost shape, part, keep), comm durations per comm key, buffer bytes per shape, optimizer steps
    per device, each with the notes (would-be warnings) computing it made. Values only, so sound
    for any plan priced by a cost model of the same ``price_scope``: Engines of one scope share one
    (``shared_prices``: the batches of a run, the points of a sweep, maxlen's probes), and the
    notes of the prices a plan takes from it are made again (``CostModel.renote``), so each run
    warns as if it had priced alone."""

    __slots__ = ("compute", "durations", "comm_keys", "buffers", "optimizer", "layouts")

    def __init__(self) -> None:
        self.compute: dict = {}  # -> (seconds, working-set bytes, notes)
        self.durations: dict = {}  # comm key -> (seconds, notes)
        self.comm_keys: dict = {}  # a comm's value (its work by cost shape) -> its comm key
        self.buffers: dict = {}
        self.optimizer: dict = {}
        # a cost shape's token layout -> a number that stands for it in the keys above: hashed
        # once per plan, not on every lookup (a chunk of 256 sequences has 256 pairs)
        self.layouts: dict[tuple, int] = {}

    def __len__(self) -> int:
        return (len(self.compute) + len(self.durations) + len(self.comm_keys) + len(self.buffers)
                + len(self.optimizer) + len(self.layouts))

    def layout_id(self, layout: tuple) -> int:
        found = self.layouts.get(layout)
        if found is None:
            found = self.layouts[layout] = len(self.layouts)
        return found


_SHARED: dict = {}  # price scope -> Prices, the most recently used last
SHARED_SCOPES = 4
SHARED_ENTRIES = 200_000  # per scope, then begun anew: ~65 MB (324 B a price: cache_costs.py)


def shared_prices(cost: CostModel) -> Prices:
    """The Prices of ``cost``'s scope (a new one when it has none, or has grown past
    SHARED_ENTRIES)."""
    scope = cost.price_scope()
    if scope is None:
        return Prices()
    prices = _SHARED.pop(scope, None)
    if prices is None or len(prices) > SHARED_ENTRIES:
        prices = Prices()
    _SHARED[scope] = prices
    while len(_SHARED) > SHARED_SCOPES:
        del _SHARED[next(iter(_SHARED))]
    return prices


def compile_plan(plan: Plan, cost: CostModel, prices: Prices | None = None) -> Compiled:
    """Price every op once per distinct shape, over the plan's columns (op by op for a small
    plan: ``optable.SMALL``). ``prices``: what earlier plans priced with a cost model of
    ``cost``'s scope, filled in as a side effect."""
    prices = Prices() if prices is None else prices
    table = plan.table
    n = len(table)
    if table.missing:
        row, missing, _ = table.missing[0]
        key = table.key(row)
        raise PlanError(f"{plan.strategy}: op {key} depends on {missing}, which is not in the "
                        f"plan\n{plan.grid(mark=key)}")
    pricer = _Pricer(table, cost, prices, small=n < optable.SMALL)
    if pricer.small:
        dur, size, sizes, alloc, host_alloc, free, host_free = _price_rows(plan, pricer)
    else:
        dur, size, sizes = _price_arrays(plan, pricer)
        alloc, host_alloc = _effect_bytes(table, "allocs", sizes)
        free, host_free = _effect_bytes(table, "frees", sizes)
    alloc += size
    free += size
    _defer_layerwise(table, alloc, free, sizes)
    if pricer.again:
        cost.renote(tuple(pricer.again))
    coll: list = [None] * n
    groups, group = table.groups, table.group
    for row in np.flatnonzero(table.array("kind") == COLL).tolist():
        members = groups[group[row]]
        if len(members) > 1:
            coll[row] = (table.token(row), members)
    static = [cost.static_memory_bytes(d) for d in plan.devices]
    host_static = [cost.static_host_bytes(d) for d in plan.devices]
    memory: list = [None] * n
    changed = np.flatnonzero(alloc | host_alloc | free | host_free)
    list(map(memory.__setitem__, changed.tolist(), zip(*(column[changed].tolist() for column in (
        alloc, host_alloc, free, host_free)))))
    return Compiled(plan, table.programs, dur.tolist(), memory, coll, static, host_static)


class _Pricer:
    """A table's prices, each asked of the cost model once per value (``prices``: shared by
    value between plans) and its notes kept for ``again`` (CostModel.renote). Cost shapes
    (Work.cost_shape) come from the works' fields, numbered (``number``: per work), or for a
    small plan from the Work objects themselves."""

    __slots__ = ("table", "cost", "prices", "again", "small", "number", "_arrays", "_shapes",
                 "_layouts")

    def __init__(self, table, cost: CostModel, prices: Prices, *, small: bool) -> None:
        self.table, self.cost, self.prices, self.small = table, cost, prices, small
        self.again: set = set()  # the notes of the prices this plan takes: made once, at the end
        self._shapes: dict[int, tuple] = {}
        self._layouts: dict[tuple[int, int], tuple] = {}  # small: Works.cost_shape's memo
        if not small:
            self._arrays = table.work_arrays()
            self.number = self._arrays["shape"]

    def shape(self, w: int) -> tuple:
        """The cost shape of work ``w``, its token layout as a number (Prices.layout_id)."""
        if self.small:
            found = self._shapes.get(w)
            if found is None:
                found = self._shapes[w] = self.table.works.cost_shape(
                    w, self._layouts, self.prices.layout_id)
            return found
        number = int(self.number[w])
        found = self._shapes.get(number)
        if found is None:
            layout, *rest = self.table.works.shape(number, self._arrays)
            found = self._shapes[number] = (self.prices.layout_id(layout), *rest)
        return found

    def _hit(self, hit: tuple) -> tuple:
        if hit[-1]:
            self.again.update(hit[-1])
        return hit

    def compute(self, row: int) -> tuple[float, int, tuple]:
        """A compute op's seconds and working-set bytes, per (kind, cost shape, part, keep)."""
        table = self.table
        work = table.work[row]
        pkey = kind, _, part, keep = (KIND_OF[table.kind[row]], self.shape(work),
                                      PART_OF[table.part[row]], KEEP_OF[table.keep[row]])
        hit = self.prices.compute.get(pkey)
        if hit is None:
            (seconds, size), notes = self.cost.noted(_compute_price, self.cost, kind,
                                                     table.works[work], part, keep)
            hit = self.prices.compute[pkey] = (seconds, size, notes)
        return self._hit(hit)

    def comm(self, c: int) -> float:
        """A comm's seconds, by comm_key (which sends on other GPUs share; a key by shape and
        GPUs first cost as much as it saved), each key found once per value of the comm with its
        work by cost shape."""
        comms, prices, cost = self.table.comms, self.prices, self.cost
        collective, tensor, group_size, steps, pinned = comms.classes[comms.cls[c]]
        vkey = (collective, tensor, self.shape(comms.work[c]), group_size, comms.gpus[c], steps,
                pinned)
        ckey = prices.comm_keys.get(vkey)
        if ckey is None:
            ckey = prices.comm_keys[vkey] = cost.comm_key(comms[c])
        hit = prices.durations.get(ckey)
        if hit is None:
            hit = prices.durations[ckey] = cost.noted(duration_s, cost, _comm_op(comms[c]))
        return self._hit(hit)[0]

    def buffer(self, b: int) -> int:
        """A buffer's bytes, per (kind, cost shape, keep, host)."""
        buffers = self.table.buffers
        bkey = (buffers.kinds[buffers.kind[b]], self.shape(buffers.work[b]),
                KEEP_OF[buffers.keep[b]], buffers.host[b])
        hit = self.prices.buffers.get(bkey)
        if hit is None:
            hit = self.prices.buffers[bkey] = self.cost.noted(self.cost.buffer_bytes, buffers[b])
        return self._hit(hit)[0]

    def optimizer(self, plan: Plan, row: int) -> tuple[float, int]:
        """An optimizer step's seconds, per device (and a working set, were it to name a work:
        none does)."""
        device = plan.devices[self.table.device[row]]
        hit = self.prices.optimizer.get(device)
        if hit is None:
            hit = self.prices.optimizer[device] = self.cost.noted(self.cost.optimizer_s, device)
        held = 0
        work = self.table.work[row]
        if work >= 0:
            held, notes = self.cost.noted(_working_set, self.cost, OpKind.OPT,
                                          self.table.works[work], PART_OF[self.table.part[row]])
            self.again.update(notes)
        return self._hit(hit)[0], held


def _price_rows(plan: Plan, pricer: _Pricer):
    """Durations, working sets, buffer sizes and memory deltas, op by op (a small plan)."""
    table = pricer.table
    n = len(table)
    dur, size = np.zeros(n), np.zeros(n, dtype=np.int64)
    seen: dict[tuple, tuple] = {}  # (kind, work, part, keep) -> price
    comms: dict[int, float] = {}
    for row, (kind, work, comm, part, keep) in enumerate(zip(
            table.kind, table.work, table.comm, table.part, table.keep)):
        if work >= 0 and kind != OPT:
            key = (kind, work, part, keep)
            hit = seen.get(key)
            if hit is None:
                hit = seen[key] = pricer.compute(row)
            dur[row], size[row] = hit[0], hit[1]
        elif comm >= 0:
            seconds = comms.get(comm)
            if seconds is None:
                seconds = comms[comm] = pricer.comm(comm)
            dur[row] = seconds
        elif kind == OPT:
            dur[row], size[row] = pricer.optimizer(plan, row)
        else:
            raise ValueError(f"op {table.token(row)} carries neither work nor comm")
    buffers = table.buffers
    sizes = np.zeros(len(buffers), dtype=np.int64)
    used = set(chain.from_iterable(table.allocs)) | set(chain.from_iterable(table.frees))
    for b in used:
        sizes[b] = pricer.buffer(b)
    listed, host = sizes.tolist(), buffers.host
    deltas = []
    for effects in (table.allocs, table.frees):
        device_bytes, host_bytes = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for row, mine in enumerate(effects):
            for b in mine:
                if host[b]:
                    host_bytes[row] += listed[b]
                else:
                    device_bytes[row] += listed[b]
        deltas += [device_bytes, host_bytes]
    return (dur, size, sizes, *deltas)


def _price_arrays(plan: Plan, pricer: _Pricer):
    """Durations, working sets and buffer sizes over arrays: each distinct price asked once."""
    table = pricer.table
    n = len(table)
    kind, work, comm = table.array("kind"), table.array("work"), table.array("comm")
    dur = np.zeros(n)
    size = np.zeros(n, dtype=np.int64)  # a compute op's working set, held while it runs
    # compute ops: priced once per (kind, cost shape, part, keep)
    computed = (work >= 0) & (kind != OPT)
    rows = np.flatnonzero(computed)
    if len(rows):
        code = (((pricer.number[work[rows]] * len(KIND_OF) + kind[rows]) * len(PART_OF)
                 + table.array("part")[rows]) * len(KEEP_OF) + table.array("keep")[rows])
        unique, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        seconds, working = np.zeros(len(unique)), np.zeros(len(unique), dtype=np.int64)
        for u, row in enumerate(rows[first].tolist()):
            seconds[u], working[u], _ = pricer.compute(row)
        dur[rows] = seconds[inverse]
        size[rows] = working[inverse]
    rest = np.flatnonzero(~computed)
    moved = rest[comm[rest] >= 0]
    if len(moved):
        dur[moved] = _comm_seconds(pricer, cost=pricer.cost)[comm[moved]]
    for row in rest[comm[rest] < 0].tolist():  # optimizer steps, per device
        if kind[row] != OPT:
            raise ValueError(f"op {table.token(row)} carries neither work nor comm")
        dur[row], size[row] = pricer.optimizer(plan, row)
    return dur, size, _buffer_sizes(pricer)


def _comm_seconds(pricer: _Pricer, cost: CostModel) -> np.ndarray:
    """Per comm of the table, its seconds, asked once per class, work cost shape and what
    ``comm_key`` reads of the GPUs (CostModel.comm_scopes; without it, the GPUs)."""
    comms = pricer.table.comms
    gpus = np.fromiter(chain.from_iterable(comms.gpus), np.int64, 2 * len(comms)).reshape(-1, 2)
    scopes = getattr(cost, "comm_scopes", None)
    if scopes is not None:  # what the key reads of the GPUs
        where = np.asarray(scopes(gpus[:, 0], gpus[:, 1]), dtype=np.int64)[:, None]
    else:
        where = gpus
    code = ints(comms.cls) * (int(pricer.number.max()) + 1) + pricer.number[ints(comms.work)]
    for column in where.T:
        code = code * (int(column.max()) + 1 if len(column) else 1) + column
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    seconds = np.array([pricer.comm(c) for c in first.tolist()])
    return seconds[inverse]


def _comm_op(comm: Comm) -> Op:
    return Op(kind=OpKind.COLL, device=0, stage=0, comm=comm)


def _buffer_sizes(pricer: _Pricer) -> np.ndarray:
    """Per buffer of the table, its bytes, asked once per (kind, cost shape, keep, host)."""
    buffers = pricer.table.buffers
    sizes = np.zeros(len(buffers), dtype=np.int64)
    if not len(buffers):
        return sizes
    code = (((ints(buffers.kind) * (int(pricer.number.max()) + 1)
              + pricer.number[ints(buffers.work)]) * len(KEEP_OF) + ints(buffers.keep))
            * 2 + np.fromiter(buffers.host, np.int64, len(buffers)))
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    sizes[:] = np.array([pricer.buffer(b) for b in first.tolist()], dtype=np.int64)[inverse]
    return sizes


def _effect_bytes(table, which: str, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the device and the host bytes of the buffers it allocates or frees
    (``which``)."""
    n = len(table)
    counts, _, flat = table.effects(which)
    if not len(flat):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    owner = np.repeat(np.arange(n), counts)
    host = table.buffers.host
    on_host = np.fromiter(host, bool, len(host))[flat]
    device_bytes = np.bincount(owner[~on_host], weights=sizes[flat][~on_host], minlength=n)
    host_bytes = np.bincount(owner[on_host], weights=sizes[flat][on_host], minlength=n)
    return device_bytes.astype(np.int64), host_bytes.astype(np.int64)


def _defer_layerwise(table, alloc: np.ndarray, free: np.ndarray, sizes: np.ndarray) -> None:
    """Move the part of a backward's context K/V gradients that ``layerwise_deferrals`` charges
    at its end (or its rest's end), in place. ``sizes``: per buffer id, its bytes."""
    for row, (less_charge, less_release) in layerwise_deferrals(table, sizes).items():
        alloc[row] -= less_charge
        free[row] -= less_release


def _compute_price(cost: CostModel, kind: OpKind, work: Work, part: str, keep: Keep
                   ) -> tuple[float, int]:
    """A compute op's seconds and working-set bytes (``duration_s`` of an op with a work, and
    ``CostModel.working_bytes``), from what they read of the op."""
    return (cost.compute_s(kind, work, part=part, keep=keep),
            _working_set(cost, kind, work, part, keep))


def _working_set(cost: CostModel, kind: OpKind, work: Work, part: str,
                 keep: Keep | None = None) -> int:
    return cost.working_bytes(kind, work, part=part, keep=keep)
