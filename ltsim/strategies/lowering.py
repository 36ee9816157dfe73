"""Lowering passes: a Schedule of compute actions -> a validated Plan.

``lower(schedule, layout)`` runs :data:`DEFAULT_PASSES` in order; a strategy may pass its own list
(skip one, add ``offload``). Each pass is a small function that takes a :class:`Draft` (ops as rows,
and each device stream's rows in order) and returns it extended:

- ``compute_ops``: actions -> compute ops carrying their Work and Buffers (Mem resolved);
- ``add_p2p``: SEND_F after the forward that covers a stage's last layer, SEND_B after the backward
  that covers its first, and the receivers' dependencies (under full recompute the R before a
  backward waits for its gradient: Megatron recomputes inside the backward step); sends ordered as
  their producers run;
- ``add_zero3_gathers``: ZeRO-3 parameter all-gathers of each compute op's layers on the coll
  stream, each prefetched one compute op ahead of the op that needs it (a device-local
  approximation: the gathers of one stage do not wait for the other shards' devices);
- ``split_cp``: an op whose work is CP-sharded becomes its attention part and the rest ("attn",
  "dense"); ring CP runs its K/V exchange on the cp stream, started with the attention part, and
  the rest waits for it (per layer: dense + max(attention, exchange)); Ulysses runs its
  all-to-alls before attention, exposed. On a lockstep device the exchange is the device's own; on
  one rank of a CP group it is a collective of the group's ranks (they wait for each other);
- ``add_dp_reduction``: the gradient reduction over the stage's data-parallel (and CP) shards on
  the coll stream, started with the device's last backward (Megatron's overlap_grad_reduce), or,
  with ZeRO-2 and no pipeline, a reduce-scatter every micro-step that the next one waits for
  (DeepSpeed), with ZeRO-2/3 in pipeline stages one after every backward (FSDP); with
  ``parallel.overlap_grad_reduce = false``, each after the backward instead of
  with it; then the optimizer step and, with a distributed optimizer (ZeRO-1/2), the parameter
  all-gather (ZeRO-3 keeps its parameters sharded: its gathers are per op);
- ``offload.offload(kinds, sync)`` (its own module): forward buffers of those kinds copied to host
  memory after the forward and back before the chunk's first recompute or backward (ALST's
  checkpoint offload); not in the default list.

The draft holds no Op tuples (issue 13): a row is a tuple of integer codes and ids (ltsim/optable.py),
and the plan it becomes stores them as columns. An op that splits in two (``split_cp``'s dense
part) keeps its row, so what waited for the op waits for that part, as it did for the op's key.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain, compress, repeat
from typing import Callable

import numpy as np

from ltsim.chunk_check import known_pieces
import ltsim.optable as optable
from ltsim.interned import _classes
from ltsim.optable import (B, COLL, F, KEEP_CODE, KIND_CODE, KIND_OF, PART_CODE, R,
                           SEND_B, SEND_F, STREAM_CODE, Works, ints)
from ltsim.plan import NO_TILING, WORK_KINDS, Comm, Device, Keep, OpKey, Plan, Split, Work
from ltsim.strategies.draft import ALL as _ALL
from ltsim.strategies.draft import Draft
from ltsim.strategies.reduction import _shard_gpus, add_dp_reduction
from ltsim.strategies.schedule import Action, Layout, Schedule

__all__ = ["DEFAULT_PASSES", "Draft", "Pass", "add_dp_reduction", "add_p2p", "add_zero3_gathers",
           "compute_ops", "lower", "split_cp"]

_INPUT = KEEP_CODE[Keep.INPUT]
_COMPUTE, _COMM, _CP, _COLL = (STREAM_CODE[s] for s in ("compute", "comm", "cp", "coll"))
_ATTN, _DENSE = PART_CODE["attn"], PART_CODE["dense"]
_WORK_CODES = frozenset(KIND_CODE[k] for k in WORK_KINDS)


Pass = Callable[[Draft], Draft]


# -- compute ops ----------------------------------------------------------------------------------
def compute_ops(schedule: Schedule, layout: Layout) -> Draft:
    draft = Draft(schedule, layout)
    split = layout.split  # a property that builds a Split: once, not per action
    works = draft.works
    for device in schedule.live_devices:
        order = schedule.orders.get(device.index, ())
        n = len(order)
        if not n:
            draft.programs[(device.index, "compute")] = []
            continue
        (kinds, chunks, keeps, allocs, frees, deps, layers, slices, splits, heads, names,
         tilings) = zip(*order)  # one column per Action field
        if (layers.count(None) == n and slices.count(None) == n and splits.count(None) == n
                and heads.count(True) == n and tilings.count(NO_TILING) == n):
            # every action covers the device's layers, its chunk's slices: one work per chunk
            whole = works.variant_id(device.layers, split, device.embed, device.head, NO_TILING)
            work = works.add_many(list(chunks), -1, whole)
        else:
            made: dict = {}
            work = [_work(works, action, device, split, made) for action in order]
        keep = list(map(KEEP_CODE.__getitem__, keeps))
        rows = draft.extend(
            n, kind=np.fromiter(map(KIND_CODE.__getitem__, kinds), np.int64, n),
            device=device.index, stage=device.stage, chunk=chunks,
            name=0 if names.count("") == n else list(map(draft.name_id, names)), stream=_COMPUTE,
            work=work, keep=keep, deps=deps,
            allocs=_effects(draft, allocs, order, work, keep, device),
            frees=_effects(draft, frees, order, work, keep, device))
        draft.keyed.update(compress(rows.tolist(), deps))  # a strategy names ops by key
        draft.programs[(device.index, "compute")] = rows.tolist()
    return draft


def _work(works: Works, action: Action, device: Device, split: Split, made: dict) -> int:
    """The work of an action (its own layers, slices, split, head or tiling, or the device's)."""
    kind, chunk, _, _, _, _, layers, slices, split_, head, _, tiling = action
    wkey = (chunk, layers, slices, split_, head, tiling)
    found = made.get(wkey)
    if found is None:
        layers = layers or device.layers
        found = made[wkey] = works.add(
            chunk, works.slices_id(chunk, slices) if slices else -1,
            works.variant_id(layers, split_ or split,
                             device.embed and layers[0] == device.layers[0],
                             device.head and head and layers[1] == device.layers[1], tiling))
    return found


def _effects(draft: Draft, column: tuple, order, work: list[int], keep: list[int],
             device: Device) -> list[tuple[int, ...]]:
    """Per action, the buffer ids of its allocs (or frees: ``column``, one Mem tuple per
    action). Actions sharing one Mem tuple of plain Mems (a kind on the action's own work) are
    resolved together; any other action alone (``_resolve``)."""
    n = len(column)
    if column.count(()) == n:
        return [()] * n
    out: list[tuple[int, ...]] = [()] * n
    ids = list(map(id, column))
    done = {id(())}  # the Mem tuples resolved: none, and those many actions share (below)
    # numpy over the ids of a long program; a short one in Python (a numpy call costs
    # microseconds whatever its size)
    ids_ = np.array(ids, dtype=np.int64) if n >= optable.SMALL else None
    counts = Counter(ids)  # (Counter counts in C)
    resolved = counts[id(())]  # actions whose effects are in ``out``
    for m, count in counts.items():
        if count < 8 or m in done:
            continue
        positions = (np.flatnonzero(ids_ == m).tolist() if ids_ is not None
                     else [i for i, x in enumerate(ids) if x == m])
        mems = column[positions[0]]
        if all(x.chunk < 0 and x.keep is None and x.layers is None and not x.one_layer
               for x in mems):
            tuples = zip(*(_plain(draft, mem, [work[i] for i in positions],
                                  [keep[i] for i in positions]) for mem in mems))
            list(map(out.__setitem__, positions, tuples))
            done.add(m)
            resolved += count
    if resolved == n:  # (1F1B's: the forwards share one tuple, the backwards another)
        return out
    if len(done) == 1:
        rest = range(n)
    elif ids_ is None:
        rest = [i for i, x in enumerate(ids) if x not in done]
    else:
        rest = np.flatnonzero(~np.isin(ids_, np.array(sorted(done), dtype=np.int64))).tolist()
    # the other actions: one resolution per (Mem tuple, work, keep), all of them in bulk
    first: dict = {}  # (Mem tuple, work, keep) -> the first action with it
    alone = [first.setdefault((ids[i], work[i], keep[i]), i) for i in rest]
    mine = list(first.values())
    for i, found in zip(mine, _resolve(draft, [column[i] for i in mine], [order[i] for i in mine],
                                       [work[i] for i in mine], device)):
        out[i] = found
    for i, j in zip(rest, alone):
        out[i] = out[j]
    return out


def _plain(draft: Draft, mem, work: list[int], keep: list[int]) -> list[int]:
    """The buffer ids of Mem ``mem`` (a kind, on the action's own work) for actions on works
    ``work`` with keep codes ``keep``."""
    works = draft.works
    if mem.kind == "act":
        return draft.buffers.add_many("act", work, keep, mem.host)
    bare = {}  # a variant -> the same layers and split without embedding, head or tiling
    for v in set(map(works.variant.__getitem__, work)):
        layers, split = works.variants[v][:2]
        bare[v] = works.variant_id(layers, split, False, False, NO_TILING)
    base = works.add_many([works.chunk[w] for w in work], [works.ref[w] for w in work],
                          [bare[works.variant[w]] for w in work])
    return draft.buffers.add_many(mem.kind, base, _ALL, mem.host)


def _resolve(draft: Draft, columns: list, actions: list[Action], work: list[int],
             device: Device) -> list[tuple[int, ...]]:
    """The buffers each action's effects (a tuple of Mems, ``columns``) stand for, on its work
    (``work``): each on the work of the action's chunk (or the Mem's other chunk, with that
    chunk's own slices) as the Mem's ``_held`` variant of the action's says. A plain Mem (a
    strategy shares one object per kind) is resolved for all its actions at once (``_plain``);
    the works and buffers of the others are added in bulk."""
    works = draft.works
    lens = list(map(len, columns))
    flat = list(chain.from_iterable(columns))
    owner = list(chain.from_iterable(map(repeat, range(len(columns)), lens)))
    found: list[int] = [0] * len(flat)
    keep = [KEEP_CODE[a.keep] for a in actions]
    others: list[int] = []  # positions of Mems resolved one by one
    for positions in _classes(list(map(id, flat))).values():
        mem = flat[positions[0]]
        if mem.chunk < 0 and mem.keep is None and mem.layers is None and not mem.one_layer:
            mine = [owner[k] for k in positions]
            list(map(found.__setitem__, positions,
                     _plain(draft, mem, [work[i] for i in mine], [keep[i] for i in mine])))
        else:
            others += positions
    if others:
        w_chunk, w_ref, w_variant = works.chunk, works.ref, works.variant
        chunks, refs, variants, kinds, keeps, hosts = [], [], [], [], [], []
        for k in others:
            mem, i = flat[k], owner[k]
            w = work[i]
            held = _held(works, w_variant[w], mem, device)
            if mem.chunk >= 0 and mem.chunk != actions[i].chunk:  # another chunk's, own slices
                chunks.append(mem.chunk)
                refs.append(-1)
            else:
                chunks.append(w_chunk[w])
                refs.append(w_ref[w])
            variants.append(held[0])
            kinds.append(mem.kind)
            keeps.append(held[1] if held[1] >= 0 else keep[i])
            hosts.append(mem.host)
        list(map(found.__setitem__, others, draft.buffers.add_mixed(
            kinds, works.add_many(chunks, refs, variants), keeps, hosts)))
    out, at = [], 0
    for count in lens:
        out.append(tuple(found[at:at + count]))
        at += count
    return out


def _held(works: Works, variant: int, mem, device: Device) -> tuple[int, int]:
    """The variant of the work a Mem's buffer holds, for an action's work of ``variant``, and
    the buffer's keep code (-1: the action's). Only activations depend on the keep policy, the
    embedding / head and tiling: the other kinds hold a chunk's slices on a layer range (one
    work per such value, which the K/V and gradients of a chunk and of the chunks after it
    share). Made once per (variant, the Mem's fields but its chunk and host, the device's
    embedding and head): strategies make a Mem per other chunk (ChunkFlow's K/V gradients)."""
    key = (variant, mem.kind, mem.keep, mem.one_layer, mem.layers, device.embed, device.head)
    found = works.derived.get(key)
    if found is not None:
        return found
    layers, split, embed, head, tiling = works.variants[variant]
    if mem.kind != "act":
        span = mem.layers or layers
        if mem.one_layer:
            span = (span[0], span[0] + 1)
        found = works.variant_id(span, split, False, False, NO_TILING), _ALL
    else:
        span, with_embed, with_head = layers, embed, head
        if mem.layers is not None:  # part of the action's layers: embedding / head at its ends
            span, with_embed, with_head = (mem.layers, embed and mem.layers[0] == layers[0],
                                           head and mem.layers[1] == layers[1])
        if mem.one_layer:  # a full recompute's working set: one layer, embedding input, logits
            span, with_embed, with_head = (span[0], span[0] + 1), device.embed, device.head
        found = (works.variant_id(span, split, with_embed, with_head, tiling),
                 KEEP_CODE[mem.keep] if mem.keep is not None else -1)
    works.derived[key] = found
    return found


# -- P2P ------------------------------------------------------------------------------------------
_TENSOR = ("act", "act_grad")  # of a SEND_F, a SEND_B


def add_p2p(draft: Draft) -> Draft:
    """SEND_F after the last forward over a stage's last layer of each chunk, SEND_B after the
    last backward over its first, in the order their producers run; the first forward over the
    first layer (backward over the last, or a full recompute's R before it) of each chunk waits
    for its peer's send. Over the compute programs' columns at once, or op by op for a small
    plan (``_p2p_rows``)."""
    devices = draft.schedule.devices
    stages = {(d.replica, d.cp_rank, d.stage): d for d in devices}
    live, peers = [], []  # devices with a neighbour stage, and their (previous, next) devices
    for device in draft.schedule.live_devices:
        prev = stages.get((device.replica, device.cp_rank, device.stage - 1))
        nxt = stages.get((device.replica, device.cp_rank, device.stage + 1))
        if prev is not None or nxt is not None:  # a single stage sends nothing
            live.append(device)
            peers.append((prev, nxt))
    if not live:
        return draft
    if draft.n < optable.SMALL:
        return _p2p_rows(draft, live, peers)
    programs = [draft.rows(d.index) for d in live]
    rows = np.fromiter(chain.from_iterable(programs), np.int64, sum(map(len, programs)))
    owner = np.repeat(np.arange(len(live)), [len(mine) for mine in programs])
    kind, chunk = draft.col("kind")[rows], draft.col("chunk")[rows]
    work, keep = draft.col("work")[rows], draft.col("keep")[rows]
    low, high = _work_layers(draft.works, work)
    # A chunk's input arrives before its first op that reads the stage input; its output leaves
    # after its last op that writes the stage output (several ops when a strategy splits layers)
    first = np.array([d.layers[0] for d in live])[owner]
    stop = np.array([d.layers[1] for d in live])[owner]
    forward, backward = (kind == F) & (work >= 0), (kind == B) & (work >= 0)
    # Megatron's full recompute runs inside the backward step, which starts by receiving the
    # output gradient: the gradient's wait is the recompute's
    redo = (kind == R) & (work >= 0) & (keep == _INPUT) & (high == stop)
    receive = (forward & (low == first)) | ((backward & (high == stop)) | redo)
    send = (forward & (high == stop)) | (backward & (low == first))
    prev = np.array([p.index if p is not None else -1 for p, _ in peers])[owner]
    nxt = np.array([q.index if q is not None else -1 for _, q in peers])[owner]
    width = int(chunk.max()) + 2 if len(chunk) else 2
    # sends: the last op of each (device, direction, chunk), where the device has that peer
    back = np.flatnonzero(send)[::-1]
    code = (owner[back] * 2 + backward[back]) * width + chunk[back]
    at = np.sort(back[np.unique(code, return_index=True)[1]])
    to = np.where(backward[at], prev[at], nxt[at])
    at, to = at[to >= 0], to[to >= 0]
    devices_of = np.array([d.index for d in live])
    sends = _sends(draft, rows[at], devices_of[owner[at]], to, backward[at], live, owner[at])
    bounds = np.searchsorted(owner[at], np.arange(len(live) + 1))
    for k, device in enumerate(live):
        draft.programs[(device.index, "comm")] = (draft.rows(device.index, "comm")
                                                  + sends[bounds[k]:bounds[k + 1]].tolist())
    # receives: the first op of each (device, direction, chunk) waits for its peer's send
    ahead = np.flatnonzero(receive)
    code = (owner[ahead] * 2 + ~forward[ahead]) * width + chunk[ahead]
    got = ahead[np.unique(code, return_index=True)[1]]
    source = np.where(forward[got], prev[got], nxt[got])
    got, source = got[source >= 0], source[source >= 0]
    made = (devices_of[owner[at]] * 2 + backward[at]) * width + chunk[at]
    by_code = np.argsort(made)
    wanted = (source * 2 + ~forward[got]) * width + chunk[got]
    where = np.minimum(np.searchsorted(made[by_code], wanted), max(len(made) - 1, 0))
    found = (made[by_code][where] == wanted) if len(made) else np.zeros(len(got), dtype=bool)
    deps = draft.deps
    receivers = rows[got[found]].tolist()
    waits = zip(sends[by_code[where[found]]].tolist())  # one send each, as 1-tuples
    if list(map(deps.__getitem__, receivers)).count(()) == len(receivers):  # (most: no deps yet)
        list(map(deps.__setitem__, receivers, waits))
    else:
        for row, wait in zip(receivers, waits):
            deps[row] = deps[row] + wait
    for row, want, peer in zip(rows[got[~found]].tolist(), wanted[~found].tolist(),
                               source[~found].tolist()):
        # by key: an op a strategy made, or none (the plan's check reports it)
        draft.add_deps(row, (OpKey(peer, devices[peer].stage, KIND_OF[SEND_F + want // width % 2],
                                   want % width, ""),))
    return draft


def _p2p_rows(draft: Draft, live: list[Device], peers: list[tuple]) -> Draft:
    """``add_p2p`` op by op, device by device."""
    works, devices = draft.works, draft.schedule.devices
    kinds, chunks, row_works, keeps = (draft.col(c).tolist() for c in ("kind", "chunk", "work",
                                                                        "keep"))
    first_gpu = {d.index: draft.layout.gpus_of(d)[0] for d in devices}
    made: dict[tuple[int, int, int], int] = {}  # (device, SEND kind, chunk) -> its row
    waits: list[tuple[int, Device, int, int]] = []  # receiver row, peer, SEND kind, chunk
    for device, (prev, nxt) in zip(live, peers):
        first, stop = device.layers
        receives: dict[tuple[int, int], int] = {}
        sends: dict[tuple[int, int], tuple[int, int]] = {}
        for i, row in enumerate(draft.rows(device.index)):
            kind, chunk, w = kinds[row], chunks[row], row_works[row]
            if kind == R and w >= 0 and keeps[row] == _INPUT:
                if works.layers(w)[1] == stop:  # Megatron's full recompute receives
                    receives.setdefault((B, chunk), row)
                continue
            if w < 0 or (kind != F and kind != B):
                continue
            low, high = works.layers(w)
            if (low == first) if kind == F else (high == stop):
                receives.setdefault((kind, chunk), row)
            if (high == stop) if kind == F else (low == first):
                sends[(kind, chunk)] = (i, row)
        for (kind, chunk), row in receives.items():
            peer = prev if kind == F else nxt
            if peer is not None:
                waits.append((row, peer, SEND_F if kind == F else SEND_B, chunk))
        columns: tuple[list, ...] = ([], [], [], [], [])  # per send: kind, chunk, comm, group, deps
        for (kind, chunk), (_, row) in sorted(sends.items(), key=lambda item: item[1][0]):
            peer = nxt if kind == F else prev
            if peer is not None:
                a, b = first_gpu[device.index], first_gpu[peer.index]
                whole = works.with_layers(row_works[row], device.layers)
                for column, value in zip(columns, (
                        SEND_F if kind == F else SEND_B, chunk,
                        draft.comms.add("send_recv", _TENSOR[kind == B], whole, 2,
                                        (a, b) if a < b else (b, a)),
                        draft.group_id((peer.index,)), (row,))):
                    column.append(value)
        send_kind, send_chunk, send_comm, group, producer = columns
        rows = draft.extend(len(send_kind), kind=send_kind, device=device.index,
                            stage=device.stage, chunk=send_chunk, stream=_COMM, comm=send_comm,
                            group=group, deps=producer).tolist()
        made.update(zip(zip(repeat(device.index), send_kind, send_chunk), rows))
        draft.programs[(device.index, "comm")] = list(draft.rows(device.index, "comm")) + rows
    deps = draft.deps
    for row, peer, kind, chunk in waits:
        send = made.get((peer.index, kind, chunk))
        if send is not None:
            deps[row] = deps[row] + (send,)
        else:  # by key: an op a strategy made, or none (the plan's check reports it)
            draft.add_deps(row, (OpKey(peer.index, devices[peer.index].stage, KIND_OF[kind],
                                       chunk, ""),))
    return draft


def _work_layers(works: Works, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The layer range (first, stop) of each work id (0, 0 where -1)."""
    variants = works.variants
    low = np.array([v[0][0] for v in variants] + [0])
    high = np.array([v[0][1] for v in variants] + [0])
    variant = ints(works.variant + [len(variants)])
    return low[variant[work]], high[variant[work]]  # -1 indexes the appended (0, 0)


def _sends(draft: Draft, producers: np.ndarray, devices: np.ndarray, peers: np.ndarray,
           backward: np.ndarray, live: list[Device], owner: np.ndarray) -> np.ndarray:
    """The SEND rows after ``producers`` (forwards, or backwards where ``backward``), from
    ``devices`` to ``peers``: the tensor of the stage's whole layer range of the producer's work,
    between the two devices' first GPUs. Their row ids."""
    count = len(producers)
    if not count:
        return np.zeros(0, dtype=np.int64)
    works, layout, all_devices = draft.works, draft.layout, draft.schedule.devices
    work = draft.col("work")[producers]
    low, high = _work_layers(works, work)
    first = np.array([d.layers[0] for d in live])[owner]
    stop = np.array([d.layers[1] for d in live])[owner]
    whole = work.copy()
    for i in np.flatnonzero((low != first) | (high != stop)).tolist():
        whole[i] = works.with_layers(int(work[i]), live[owner[i]].layers)
    first_gpu = np.zeros(len(all_devices), dtype=np.int64)
    for d in set(devices.tolist()) | set(peers.tolist()):
        first_gpu[d] = layout.gpus_of(all_devices[d])[0]
    a, b = first_gpu[devices], first_gpu[peers]
    low_gpu, high_gpu = np.minimum(a, b), np.maximum(a, b)
    comms = np.zeros(count, dtype=np.int64)
    for direction in (False, True):
        mine = np.flatnonzero(backward == direction)
        comms[mine] = draft.comms.add_new("send_recv", _TENSOR[direction], whole[mine], 2,
                                          low_gpu[mine], high_gpu[mine])
    group_of = np.zeros(len(all_devices), dtype=np.int64)
    for p in set(peers.tolist()):
        group_of[p] = draft.group_id((p,))
    groups = group_of[peers]
    return draft.extend(
        count, kind=np.where(backward, SEND_B, SEND_F), device=devices,
        stage=np.array([d.stage for d in all_devices])[devices],
        chunk=draft.col("chunk")[producers], stream=_COMM, comm=comms,
        group=groups, deps=list(zip(producers.tolist())))


# -- ZeRO-3 ---------------------------------------------------------------------------------------
def add_zero3_gathers(draft: Draft) -> Draft:
    for device in draft.schedule.live_devices:
        if device.zero_stage < 3 or device.num_shards <= 1:
            continue
        gpus = _shard_gpus(draft, device)
        comms: dict[tuple, int] = {}  # the parameters of the op's layers (embedding, head)
        coll = list(draft.rows(device.index, "coll"))
        rows = draft.rows(device.index)
        for i, row in enumerate(rows):
            kind, chunk, name = (draft.get(row, c) for c in ("kind", "chunk", "name"))
            if kind in _WORK_CODES:
                work = draft.work(row)
                shape = (work.layers, work.embed, work.head)
                comm = comms.get(shape)
                if comm is None:
                    params = Work(chunk=-1, slices=(), layers=work.layers,
                                  split=Split(tp=device.tp), embed=work.embed, head=work.head)
                    comm = comms[shape] = draft.comms.of(Comm(
                        "all_gather", "params", params, group_size=device.num_shards, gpus=gpus))
                text = draft.names[name]
                gather = draft.add(COLL, device.index, device.stage, chunk,
                                   f"z3-{KIND_OF[kind].value}" + (f"-{text}" if text else ""),
                                   _COLL, comm=comm, group=(device.index,),
                                   deps=(rows[i - 2],) if i >= 2 else ())
                coll.append(gather)
                draft.add_deps(row, (gather,))
        draft.programs[(device.index, "coll")] = coll
    return draft


# -- CP -------------------------------------------------------------------------------------------
def split_cp(draft: Draft) -> Draft:
    deps, starts, allocs, keyed = draft.deps, draft.start_deps, draft.allocs, draft.keyed
    split_kinds = (F, B, R)
    if not any(split.cp > 1 for _, split, _, _, _ in draft.works.variants):
        return draft  # nothing CP-sharded
    for device in draft.schedule.live_devices:
        rows = draft.rows(device.index)
        if not any(draft.get(r, "kind") in split_kinds and draft.get(r, "work") >= 0
                   and draft.works.split(draft.get(r, "work")).cp > 1 for r in rows):
            continue  # nothing CP-sharded on this device: its programs stay as they are
        compute, cp = [], list(draft.rows(device.index, "cp"))
        for row in rows:
            kind, dev, stage, chunk, name, stream, w, keep, part, comm, group = (
                draft.fields(row))
            work = draft.work(row)
            split = work.split if work is not None else None
            if (kind not in split_kinds or split is None or split.cp <= 1
                    or not work.num_layers):  # the LM head alone: no attention to split
                compute.append(row)
                continue
            members, gpus = _cp_group(draft, device, split.cp)
            text = draft.names[name]
            suffix = f"-{text}" if text else ""
            attn = draft.add(kind, dev, stage, chunk, "attn" + suffix, stream, work=w, keep=keep,
                             part=_ATTN, comm=comm, deps=deps[row], start_deps=starts[row],
                             allocs=allocs[row], group=draft.groups[group])
            if row in keyed:
                keyed.add(attn)
            if split.cp_kind == "ulysses":
                exchange = Comm("all_to_all", "qkvo", work, group_size=split.cp, gpus=gpus)
                before = (compute[-1],) if compute else ()
                coll = draft.add(COLL, dev, stage, chunk, f"a2a-{KIND_OF[kind].value}{suffix}",
                                 _CP, comm=draft.comms.of(exchange), deps=deps[row] + before,
                                 group=members)
                if row in keyed:
                    keyed.add(coll)
                deps[attn] = (coll,)
                keyed.discard(attn)
            else:
                steps = (split.cp - 1) * (2 if kind == B else 1)
                exchange = Comm("send_recv", "kv", work, group_size=2, gpus=gpus, steps=steps)
                local = _local_part(draft, compute, row, device)
                coll = draft.add(COLL, dev, stage, chunk, f"cp-{KIND_OF[kind].value}{suffix}",
                                 _CP, comm=draft.comms.of(exchange),
                                 start_deps=(local if local is not None else attn,), group=members)
                if local is not None:  # the exchange runs beside the local work: attention waits
                    deps[attn] = deps[attn] + (coll,)
            # the rest keeps the op's row (and key): what waited for the op waits for it
            draft.set(row, "part", _DENSE)
            deps[row] = (coll,)
            keyed.discard(row)
            allocs[row] = ()
            compute += [attn, row]
            cp.append(coll)
        draft.programs[(device.index, "compute")] = compute
        draft.programs[(device.index, "cp")] = cp
    return draft


def _local_part(draft: Draft, compute: list[int], row: int, device: Device) -> int | None:
    """On one rank of a CP group, the op just before ``row`` when it is the same step of the same
    chunk over slices kept whole on this rank: Skrull's Eq. 2 overlaps the sharded slices' exchange
    with that local work, max(T_comm, T_local) + T_dist."""
    if device.cp_rank < 0 or not compute:
        return None
    prev = compute[-1]
    kind, chunk = draft.get(row, "kind"), draft.get(row, "chunk")
    prev_kind, prev_chunk = draft.get(prev, "kind"), draft.get(prev, "chunk")
    work = draft.work(prev)
    if prev_kind != kind or prev_chunk != chunk or work is None or work.split.cp != 1:
        return None
    return prev


def _cp_group(draft: Draft, device: Device, cp: int) -> tuple[tuple[int, ...], tuple[int, int]]:
    """The devices and GPU ranks of a CP-sharded op: the lockstep device itself, or, when the
    device is one rank, the ranks of its CP group (they meet in a collective): the whole group, or
    for a degree below the group's the aligned block of ``cp`` ranks holding it (FlexSP)."""
    if device.cp_width == cp or device.cp_rank < 0:
        return (device.index,), draft.layout.gpus_of(device)
    members = [d for d in draft.schedule.devices if d.replica == device.replica
               and d.stage == device.stage and d.cp_rank >= 0
               and d.cp_rank // cp == device.cp_rank // cp]
    ranks = [r for d in members for r in draft.layout.gpus_of(d)]
    return tuple(d.index for d in members), (min(ranks), max(ranks))


DEFAULT_PASSES: tuple[Pass, ...] = (add_p2p, add_zero3_gathers, split_cp, add_dp_reduction)


def lower(schedule: Schedule, layout: Layout, passes: tuple[Pass, ...] = DEFAULT_PASSES) -> Plan:
    """Run the passes and assemble the Plan (validated, cycle search left to the engine)."""
    draft = compute_ops(schedule, layout)
    for lowering_pass in passes:
        draft = lowering_pass(draft)
    plan = Plan(strategy=schedule.strategy, options=schedule.options,
                seq_lengths=schedule.seq_lengths, chunks=schedule.chunks, table=draft.table(),
                devices=schedule.devices, grad_chunks=schedule.grad_chunks,
                grad_scales=schedule.grad_scales, mirrors=schedule.mirrors)
    if schedule.columns is not None:
        known_pieces(plan, schedule.columns)
    # The cycle search is left to the engine (a cycle deadlocks the replay, which reports it with
    # the grid); the conformance suite runs the full validate() on every registered strategy.
    return plan.validate(check_cycles=False)
