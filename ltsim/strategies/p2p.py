"""The P2P lowering pass (ltsim/strategies/lowering.py): SEND_F after the forward that covers a
stage's last layer, SEND_B after the backward that covers its first, and the receivers'
dependencies."""

from __future__ import annotations

from itertools import chain, repeat

import numpy as np

import ltsim.optable as optable
from ltsim.optable import B, F, KEEP_CODE, KIND_OF, R, SEND_B, SEND_F, STREAM_CODE, Works, ints
from ltsim.plan import Device, Keep, OpKey
from ltsim.strategies.draft import Draft

_INPUT = KEEP_CODE[Keep.INPUT]
_COMM = STREAM_CODE["comm"]


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
