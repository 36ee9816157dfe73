"""The CP lowering pass (ltsim/strategies/lowering.py): an op whose work is CP-sharded becomes its
attention part and the rest, with ring CP's K/V exchange or Ulysses' all-to-alls on the cp
stream."""

from __future__ import annotations

from ltsim.optable import B, COLL, F, KIND_OF, PART_CODE, R, STREAM_CODE
from ltsim.plan import Comm, Device
from ltsim.strategies.draft import Draft

_CP = STREAM_CODE["cp"]
_ATTN, _DENSE = PART_CODE["attn"], PART_CODE["dense"]


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
