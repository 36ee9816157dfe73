"""Lowering passes: a Schedule of compute actions -> a validated Plan.

``lower(schedule, layout)`` runs :data:`DEFAULT_PASSES` in order; a strategy may pass its own list
(skip one, add ``offload``). Each pass is a small function that takes a :class:`Draft` (ops as rows,
and each device stream's rows in order) and returns it extended:

- ``compute_ops``: actions -> compute ops carrying their Work and Buffers (Mem resolved);
- ``add_p2p`` (ltsim/strategies/p2p.py): SEND_F after the forward that covers a stage's last layer, SEND_B after the backward
  that covers its first, and the receivers' dependencies (under full recompute the R before a
  backward waits for its gradient: Megatron recomputes inside the backward step); sends ordered as
  their producers run;
- ``add_zero3_gathers``: ZeRO-3 parameter all-gathers of each compute op's layers on the coll
  stream, each prefetched one compute op ahead of the op that needs it (a device-local
  approximation: the gathers of one stage do not wait for the other shards' devices);
- ``split_cp`` (ltsim/strategies/cp_split.py): an op whose work is CP-sharded becomes its attention part and the rest ("attn",
  "dense"); ring CP runs its K/V exchange on the cp stream, started with the attention part, and
  the rest waits for it (per layer: dense + max(attention, exchange)); Ulysses runs its
  all-to-alls before attention, exposed. On a lockstep device the exchange is the device's own; on
  one rank of a CP group it is a collective of the group's ranks (they wait for each other);
- ``add_dp_reduction`` (ltsim/strategies/reduction.py): the gradient reduction over the stage's data-parallel (and CP) shards on
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
from ltsim.optable import COLL, KEEP_CODE, KIND_CODE, KIND_OF, STREAM_CODE, Works
from ltsim.plan import NO_TILING, WORK_KINDS, Comm, Device, Plan, Split, Work
from ltsim.strategies.cp_split import split_cp
from ltsim.strategies.draft import ALL as _ALL
from ltsim.strategies.draft import Draft
from ltsim.strategies.p2p import add_p2p
from ltsim.strategies.reduction import _shard_gpus, add_dp_reduction
from ltsim.strategies.schedule import Action, Layout, Schedule

__all__ = ["DEFAULT_PASSES", "Draft", "Pass", "add_dp_reduction", "add_p2p", "add_zero3_gathers",
           "compute_ops", "lower", "split_cp"]

_COMPUTE, _COLL = STREAM_CODE["compute"], STREAM_CODE["coll"]
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
    resolved together; the others in bulk (``_resolve``), once per (Mem tuple, work, keep)."""
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
