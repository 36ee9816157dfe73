"""Lowering passes: a Schedule of compute actions -> a validated Plan.

``lower(schedule, layout)`` runs :data:`DEFAULT_PASSES` in order; a strategy may pass its own list
(skip one, add ``offload``). Each pass is a small pure function from a :class:`Draft` (programs
per device and stream) to a new Draft:

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
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from ltsim.plan import (NO_TILING, STREAMS, WORK_KINDS, Buffer, Comm, Device, Keep, Op, OpKind, Plan, Program,
                        Split, Work, make_op, op_key)
from ltsim.strategies.schedule import Action, Layout, Mem, Schedule, one_layer_work


@dataclass(frozen=True, slots=True)
class Draft:
    schedule: Schedule
    layout: Layout
    programs: dict[tuple[int, str], tuple[Op, ...]]

    def ops(self, device: int, stream: str = "compute") -> tuple[Op, ...]:
        return self.programs.get((device, stream), ())

    def update(self, changes: dict[tuple[int, str], list[Op] | tuple[Op, ...]]) -> "Draft":
        programs = dict(self.programs)
        programs.update({k: tuple(v) for k, v in changes.items()})
        return Draft(self.schedule, self.layout, programs)


Pass = Callable[[Draft], Draft]


# -- compute ops ----------------------------------------------------------------------------------
def compute_ops(schedule: Schedule, layout: Layout) -> Draft:
    chunks = {c.index: c for c in schedule.chunks}
    split = layout.split  # a property that builds a Split: once, not per action
    programs = {}
    for device in schedule.live_devices:
        ops = []
        index, stage = device.index, device.stage
        works: dict = {}  # one Work per distinct value: F and B of a chunk share it
        effects: dict = {}  # and one Buffer per distinct buffer (_resolve)
        plain: dict = {}  # and one Work per distinct value a non-activation buffer holds
        resolved: dict = {}  # an action's allocs or frees on a work: resolved once

        def effects_of(mems, action: Action, work: Work) -> tuple:
            # by identity: the schedule, alive throughout, holds every effects tuple (strategies
            # share one tuple among many actions)
            rkey = (id(mems), id(work), action.keep)
            out = resolved.get(rkey)
            if out is None:
                out = resolved[rkey] = _resolve(mems, action, work, device, chunks, effects, plain)
            return out

        for action in schedule.orders.get(device.index, ()):
            (kind, chunk, keep, mems_in, mems_out, deps, layers, slices, split_, head, name,
             tiling) = action
            wkey = (chunk, layers, slices, split_, head, tiling)
            work = works.get(wkey)
            if work is None:
                work = works[wkey] = _work(action, chunks[chunk].slices, chunk, device, split)
            allocs = effects_of(mems_in, action, work) if mems_in else ()
            frees = effects_of(mems_out, action, work) if mems_out else ()
            ops.append(make_op(kind, index, stage, chunk, name, "compute", work, keep, "", None,
                               deps, (), allocs, frees, ()))
        programs[(device.index, "compute")] = tuple(ops)
    return Draft(schedule, layout, programs)


def _resolve(mems, action: Action, work: Work, device: Device, chunks, cache: dict, plain: dict):
    """The Buffers of an action's effects; one object per distinct buffer of the device (F and B
    of a chunk share their Work, so the Work's identity keys the cache, as the Mem's does: the
    schedule holds both while the ops are made, and equal Mems that are distinct objects make
    the same Buffer, found by value)."""
    out = []
    keep = action.keep
    work_id = id(work)
    for mem in mems:
        mkey = (id(mem), work_id, keep if mem[0] == "act" else None)
        buf = cache.get(mkey)
        if buf is None:
            buf = _buffer(mem, action, work, device, chunks, plain)
            buf = cache[mkey] = cache.setdefault(buf, buf)
        out.append(buf)
    return tuple(out)


def _work(action: Action, slices, chunk: int, device: Device, split: Split) -> Work:
    layers = action.layers or device.layers
    return Work(chunk=chunk, slices=action.slices or slices, layers=layers,
                split=action.split or split,
                embed=device.embed and layers[0] == device.layers[0],
                head=device.head and action.head and layers[1] == device.layers[1],
                tiling=action.tiling)


def _buffer(mem: Mem, action: Action, work: Work, device: Device, chunks, plain: dict) -> Buffer:
    """The Buffer a Mem of ``action`` on ``work`` stands for. Only activations depend on the keep
    policy, the embedding / head and tiling: the other kinds hold a chunk's slices on a layer
    range (``plain``: one Work per such value, which the K/V and gradients of a chunk and of the
    chunks after it share)."""
    other = mem.chunk >= 0 and mem.chunk != action.chunk
    if mem.kind != "act":
        chunk = mem.chunk if other else work.chunk
        slices = chunks[chunk].slices if other else work.slices
        layers = mem.layers or work.layers
        if mem.one_layer:
            layers = (layers[0], layers[0] + 1)
        key = (chunk, id(slices), layers, work.split)  # chunks and works hold the slices
        base = plain.get(key)
        if base is None:
            bare = not (work.embed or work.head or work.tiling != NO_TILING)
            base = plain[key] = (work if not other and layers == work.layers and bare else
                                 Work(chunk=chunk, slices=slices, layers=layers, split=work.split))
        return Buffer(mem.kind, base, Keep.ALL, mem.host)
    if other:
        work = Work(chunk=mem.chunk, slices=chunks[mem.chunk].slices, layers=work.layers,
                    split=work.split, embed=work.embed, head=work.head, tiling=work.tiling)
    if mem.layers is not None:  # part of the action's layers: embedding / head only at its ends
        work = work.evolve(layers=mem.layers, embed=work.embed and mem.layers[0] == work.layers[0],
                           head=work.head and mem.layers[1] == work.layers[1])
    if mem.one_layer:  # a full recompute's working set: one layer, plus embedding input and logits
        work = one_layer_work(work, embed=device.embed, head=device.head)
    return Buffer(mem.kind, work, mem.keep or action.keep, mem.host)


# -- P2P ------------------------------------------------------------------------------------------
def add_p2p(draft: Draft) -> Draft:
    layout, devices = draft.layout, draft.schedule.devices
    first_gpu = {d.index: layout.gpus_of(d)[0] for d in devices}
    chain = {(d.replica, d.cp_rank, d.stage): d for d in devices}
    F, B, R = OpKind.F, OpKind.B, OpKind.R
    changes = {}
    for device in draft.schedule.live_devices:
        prev = chain.get((device.replica, device.cp_rank, device.stage - 1))
        nxt = chain.get((device.replica, device.cp_rank, device.stage + 1))
        if prev is None and nxt is None:
            continue  # a single stage: nothing to send or receive
        ops = draft.ops(device.index)
        # A chunk's input arrives before its first op that reads the stage input; its output leaves
        # after its last op that writes the stage output (several ops when a strategy splits layers).
        first, stop = device.layers
        receives, sends = {}, {}
        for i, (kind, chunk, work) in enumerate(map(_KIND_CHUNK_WORK, ops)):
            if kind is R and work is not None and ops[i].keep is Keep.INPUT:
                # Megatron's full recompute runs inside the backward step, which starts by
                # receiving the output gradient: the gradient's wait is the recompute's
                if work.layers[1] == stop:
                    receives.setdefault((B, chunk), i)
                continue
            if work is None or (kind is not F and kind is not B):
                continue
            low, high = work.layers
            if (low == first) if kind is F else (high == stop):
                receives.setdefault((kind, chunk), i)
            if (high == stop) if kind is F else (low == first):
                sends[(kind, chunk)] = i
        compute = list(ops)
        for (kind, chunk), i in receives.items():  # the receiver waits for its peer's send
            peer = prev if kind is F else nxt
            if peer is not None:
                compute[i] = compute[i].with_deps((op_key(peer.index, peer.stage, _SEND[kind], chunk),))
        # sends leave in the order their producers run
        comm = list(draft.ops(device.index, "comm"))
        works: dict = {}  # the stage's whole layer range of a work: one per work
        a = first_gpu[device.index]
        for (kind, chunk), i in sorted(sends.items(), key=_POSITION):
            peer = nxt if kind is F else prev
            if peer is not None:
                comm.append(_send(ops[i], kind, device, peer, a, first_gpu[peer.index], works))
        changes[(device.index, "compute")] = compute
        changes[(device.index, "comm")] = comm
    return draft.update(changes)


_KIND_CHUNK_WORK = itemgetter(0, 3, 6)  # Op's kind, chunk and work
_POSITION = itemgetter(1)  # of a ((kind, chunk), op position) item
_SEND = {OpKind.F: OpKind.SEND_F, OpKind.B: OpKind.SEND_B}
_tuple_new = tuple.__new__
_TENSOR = {OpKind.F: "act", OpKind.B: "act_grad"}


def _send(op: Op, kind: OpKind, device: Device, peer: Device, a: int, b: int, works: dict) -> Op:
    """The SEND after producer ``op`` (of ``kind``, F or B) to ``peer``, GPU ranks ``a`` and ``b``."""
    work = op.work
    if work.layers != device.layers:
        whole = works.get(id(work))
        if whole is None:
            whole = works[id(work)] = work.evolve(layers=device.layers)
        work = whole
    comm = _tuple_new(Comm, ("send_recv", _TENSOR[kind], work, 2, (a, b) if a < b else (b, a), 1,
                             False))  # Comm(...) by position: NamedTuple's __new__ is Python
    return make_op(_SEND[kind], device.index, device.stage, op.chunk, "", "comm", None, Keep.ALL, "",
                   comm, (op.key,), (), (), (), (peer.index,))


# -- ZeRO-3 ---------------------------------------------------------------------------------------
def add_zero3_gathers(draft: Draft) -> Draft:
    changes = {}
    for device in draft.schedule.live_devices:
        if device.zero_stage < 3 or device.num_shards <= 1:
            continue
        gpus = _shard_gpus(draft, device)
        comms: dict[tuple, Comm] = {}  # the parameters of the op's layers (embedding, head)
        compute, coll = [], list(draft.ops(device.index, "coll"))
        ops = draft.ops(device.index)
        for i, op in enumerate(ops):
            if op.kind in WORK_KINDS:
                work = op.work
                shape = (work.layers, work.embed, work.head)
                comm = comms.get(shape)
                if comm is None:
                    params = Work(chunk=-1, slices=(), layers=work.layers,
                                  split=Split(tp=device.tp), embed=work.embed, head=work.head)
                    comm = comms[shape] = Comm("all_gather", "params", params,
                                               group_size=device.num_shards, gpus=gpus)
                name = f"z3-{op.kind.value}" + (f"-{op.name}" if op.name else "")
                gather = Op(kind=OpKind.COLL, device=device.index, stage=device.stage,
                            chunk=op.chunk, name=name, comm=comm, group=(device.index,),
                            deps=(ops[i - 2].key,) if i >= 2 else ())
                coll.append(gather)
                op = op.with_deps((gather.key,))
            compute.append(op)
        changes[(device.index, "compute")] = compute
        changes[(device.index, "coll")] = coll
    return draft.update(changes)


def _params_work(device: Device) -> Work:
    return Work(chunk=-1, slices=(), layers=device.layers, split=Split(tp=device.tp),
                embed=device.embed, head=device.head)


def _shard_gpus(draft: Draft, device: Device) -> tuple[int, int]:
    """GPU ranks spanned by the devices of the same stage (the ZeRO / DP group)."""
    ranks = [r for d in draft.schedule.devices if d.stage == device.stage
             for r in draft.layout.gpus_of(d)]
    return min(ranks), max(ranks)


# -- CP -------------------------------------------------------------------------------------------
def split_cp(draft: Draft) -> Draft:
    changes = {}
    split_kinds = (OpKind.F, OpKind.B, OpKind.R)
    for device in draft.schedule.live_devices:
        ops = draft.ops(device.index)
        if not any(op.work.split.cp > 1 for op in ops if op.kind in split_kinds and op.work):
            continue  # nothing CP-sharded on this device: its programs stay as they are
        compute, cp = [], list(draft.ops(device.index, "cp"))
        for op in ops:
            split = op.work.split if op.work is not None else None
            if (op.kind not in (OpKind.F, OpKind.B, OpKind.R) or split is None or split.cp <= 1
                    or not op.work.num_layers):  # the LM head alone: no attention to split
                compute.append(op)
                continue
            group, gpus = _cp_group(draft, device, split.cp)
            suffix = f"-{op.name}" if op.name else ""
            attn = op.evolve(name="attn" + suffix, part="attn", frees=())
            if split.cp_kind == "ulysses":
                comm = Comm("all_to_all", "qkvo", op.work, group_size=split.cp, gpus=gpus)
                before = (compute[-1].key,) if compute else ()
                coll = Op(kind=OpKind.COLL, stream="cp", device=device.index, stage=device.stage,
                          chunk=op.chunk, name=f"a2a-{op.kind.value}{suffix}", comm=comm,
                          deps=op.deps + before, group=group)
                attn = attn.evolve(deps=(coll.key,))
            else:
                steps = (split.cp - 1) * (2 if op.kind is OpKind.B else 1)
                comm = Comm("send_recv", "kv", op.work, group_size=2, gpus=gpus, steps=steps)
                local = _local_part(compute, op, device)
                coll = Op(kind=OpKind.COLL, stream="cp", device=device.index, stage=device.stage,
                          chunk=op.chunk, name=f"cp-{op.kind.value}{suffix}", comm=comm,
                          start_deps=((local or attn).key,), group=group)
                if local is not None:  # the exchange runs beside the local work: attention waits
                    attn = attn.evolve(deps=attn.deps + (coll.key,))
            dense = op.evolve(part="dense", allocs=(), deps=(coll.key,))
            compute += [attn, dense]
            cp.append(coll)
        changes[(device.index, "compute")] = compute
        changes[(device.index, "cp")] = cp
    return draft.update(changes)


def _local_part(compute: list[Op], op: Op, device: Device) -> Op | None:
    """On one rank of a CP group, the op just before ``op`` when it is the same step of the same
    chunk over slices kept whole on this rank: Skrull's Eq. 2 overlaps the sharded slices' exchange
    with that local work, max(T_comm, T_local) + T_dist."""
    prev = compute[-1] if compute else None
    if (device.cp_rank < 0 or prev is None or prev.kind is not op.kind or prev.chunk != op.chunk
            or prev.work is None or prev.work.split.cp != 1):
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


# -- DP -------------------------------------------------------------------------------------------
def add_dp_reduction(draft: Draft) -> Draft:
    devices = draft.schedule.devices
    single_stage = all(d.stage == 0 for d in devices)  # DeepSpeed: no ZeRO-2 with its pipeline
    chunks_of = {}  # a DP replica's micro-steps are its chunks, in order
    for chunk in draft.schedule.chunks:
        chunks_of.setdefault(chunk.replica, []).append(chunk.index)
    changes = {}
    for device in draft.schedule.live_devices:  # groups span every replica, mirrored or not
        group = tuple(d.index for d in devices if d.stage == device.stage)
        compute = list(draft.ops(device.index))
        coll = list(draft.ops(device.index, "coll"))
        params = _params_work(device)
        gpus = _shard_gpus(draft, device)
        grads = Comm("reduce_scatter" if device.zero_stage >= 1 else "all_reduce",
                     "grads" if device.grad_dtype == "fp32" else "model_grads", params,
                     group_size=device.num_shards, gpus=gpus)
        reduces: list[Op] = []
        sharded = device.zero_stage >= 2 and device.num_shards > 1
        if sharded and single_stage:
            count = max(len(chunks_of.get(d.replica, ())) for d in devices if d.index in group)
            reduces = _per_step_reduction(device, compute, chunks_of.get(device.replica, []), count,
                                          grads, group)
            if reduces:
                coll = _merge_by_trigger(coll, reduces, compute, chunks_of.get(device.replica, []),
                                         draft.ops(device.index, "cp"))
        elif sharded:  # sharded gradients in a pipeline
            spans = _backward_spans(compute)
            count = max(len(_backward_spans(draft.ops(d))) for d in group
                        if (d, "compute") in draft.programs)  # a mirror counts as its source
            reduces = _per_backward_reduction(device, compute, spans, count, grads, group)
            if reduces:
                coll = _merge_by_trigger(coll, reduces, compute, [chunk for _, _, chunk in spans],
                                         draft.ops(device.index, "cp"))
        if not reduces:  # unsharded, or no micro-step or backward in the whole group (SpaCO's
            # Bernoulli draw can pick no chunk): one reduction at the step's end, as every member
            reduces = [_step_end_reduction(device, compute, grads, group)]
            coll += reduces
        step = Op(kind=OpKind.OPT, device=device.index, stage=device.stage, deps=(reduces[-1].key,))
        # the updated shards gathered back (Megatron's distributed optimizer, ZeRO-1/2); ZeRO-3
        # keeps its parameters sharded and gathers them per op (add_zero3_gathers) instead
        if 1 <= device.zero_stage <= 2 and device.num_shards > 1:
            coll.append(Op(kind=OpKind.COLL, device=device.index, stage=device.stage,
                           name="dp-params", group=group, deps=(step.key,),
                           comm=Comm("all_gather", "params", params,
                                     group_size=device.num_shards, gpus=gpus)))
        changes[(device.index, "compute")] = compute + [step]
        changes[(device.index, "coll")] = coll
    return draft.update(changes)


def _merge_by_trigger(coll: list[Op], reduces: list[Op], compute: list[Op], chunks: list[int],
                      relays: tuple[Op, ...] = ()) -> list[Op]:
    """The coll stream with the per-micro-step reductions placed among ZeRO-3's gathers in the
    order their compute ops run: reduction m after the gathers up to the next micro-step's first
    op (that prefetch overlaps the reduction) and before the later ones. Appended after all
    gathers instead, the gather for op j + 2 (which waits for op j) would sit ahead of the
    reduction that op j waits for: a deadlock. Without gathers the reductions come in order m.
    A gather that a ``relays`` op (Ulysses' all-to-all on the cp stream) waits for takes the
    position of the compute op that waits for that relay."""
    position = {dep: i for i, op in enumerate(compute) for dep in op.deps}
    for op in relays:
        if op.key in position:
            for dep in op.deps:
                position.setdefault(dep, position[op.key])
    spans = {chunk: last for _, last, chunk in _backward_spans(compute)}
    keyed = [(position.get(op.key, len(compute)), 0, i, op) for i, op in enumerate(coll)]
    index = {op.key: i for i, op in enumerate(compute)}
    key = -1.0  # reductions keep their order m (every member of the group runs them in one order);
    for m, op in enumerate(reduces):  # one the device sits out goes with the one before it
        last = spans.get(chunks[m]) if m < len(chunks) else None
        key = max(key, last + 1.5 if last is not None else key)
        # and after the gather of every compute op it waits for (a reduction joined after the
        # device's last op, which SpaCO's forward-only chunks can follow the last backward with)
        waits = [index[d] for d in op.deps + op.start_deps if d in index]
        if waits:
            key = max(key, max(waits) + 0.5)
        keyed.append((key, 1, m, op))
    return [op for *_, op in sorted(keyed, key=lambda k: k[:3])]


def _step_end_reduction(device: Device, compute: list[Op], grads: Comm, group) -> Op:
    """One reduction at the end of the step, started with the last backward's first part
    (Megatron's overlap_grad_reduce); without that overlap, or with no backward, after the last
    op (Megatron's finalize_model_grads, once the pipeline schedule has returned)."""
    spans = _backward_spans(compute) if device.overlap_grad_reduce else ()
    start = (compute[spans[-1][0]].key,) if spans else ()
    after = (compute[-1].key,) if compute and not start else ()
    return Op(kind=OpKind.COLL, device=device.index, stage=device.stage, name="dp-grad",
              comm=grads, group=group, start_deps=start, deps=after)


def _per_step_reduction(device: Device, compute: list[Op], chunks: list[int], count: int,
                        grads: Comm, group) -> list[Op]:
    """ZeRO-2 (DeepSpeed stage_1_and_2): a gradient reduce-scatter every micro-step (chunk m of the
    replica), started with that step's backward on this device (overlap_comm; without it, after
    that backward), and the device's next compute waits
    for it, so every micro-step waits for the slowest rank of the group. A device with no work in a
    micro-step, or a replica with fewer micro-steps, joins those reductions idle (DeepSpeed runs the
    same number of micro-steps on every rank). Only the next micro-step's first op waits (not the
    recompute of an earlier chunk, as ChunkFlow runs a group's backwards last chunk first). Without
    pipeline stages only: DeepSpeed does not run ZeRO-2 with its pipeline engine, and with stages
    the reduction stays at the step end."""
    spans = {chunk: (first, last) for first, last, chunk in _backward_spans(compute)}
    overlap = device.overlap_grad_reduce
    out = []
    latest = -1  # the last backward op of micro-steps 0..m: reduction m runs after it
    for m in range(count):
        span = spans.get(chunks[m]) if m < len(chunks) else None
        out.append(Op(kind=OpKind.COLL, device=device.index, stage=device.stage,
                      name=f"dp-grad-{m}", comm=grads, group=group,
                      start_deps=(compute[span[0]].key,) if span and overlap else (),
                      deps=(compute[span[1]].key,) if span and not overlap else ()))
        if span is None:
            continue
        latest = max(latest, span[1])
        nxt = span[1] + 1
        # the next micro-step waits, unless an earlier micro-step's backward runs later (Seq1F1B
        # back-propagates a sequence's chunks last first): reduction m, queued behind that one's,
        # cannot be waited for before it (a deadlock), so the wait falls away
        if nxt < len(compute) and compute[nxt].chunk > chunks[m] and latest == span[1]:
            compute[nxt] = compute[nxt].with_deps((out[-1].key,))
    return out


def _per_backward_reduction(device: Device, compute: list[Op], spans: list[tuple[int, int, int]],
                            count: int, grads: Comm, group) -> list[Op]:
    """ZeRO-2/3 within pipeline stages (FSDP, InfiniPipe's and Seq1F1B's setup: it keeps no
    unsharded gradients from one backward to the next): the stage's gradients reduce-scattered
    over the shards after every chunk's backward on this device (``spans``, in the order they
    run), started with that backward (FSDP reduces each layer's as its backward ends), or after it
    without ``overlap_grad_reduce``. Nothing but the optimizer step waits for them. Reduction m
    is the device's m-th backward's on every member of the group; a device with fewer backwards
    joins the others' remaining ones after its last op (collectives match one to one)."""
    overlap = device.overlap_grad_reduce
    last = (compute[-1].key,) if compute else ()
    out = []
    for m in range(count):
        first, final, _ = spans[m] if m < len(spans) else (None, None, None)
        started = first is not None and overlap
        out.append(Op(kind=OpKind.COLL, device=device.index, stage=device.stage,
                      name=f"dp-grad-{m}", comm=grads, group=group,
                      start_deps=(compute[first].key,) if started else (),
                      deps=() if started else (compute[final].key,) if final is not None else last))
    return out


def _backward_spans(ops) -> list[tuple[int, int, int]]:
    """(first, last, chunk) index of each chunk's backward ops, in order of the last."""
    spans: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        if op.kind is OpKind.B:
            spans.setdefault(op.chunk, [i, i])[1] = i
    return sorted(((a, b, c) for c, (a, b) in spans.items()), key=lambda span: span[1])


DEFAULT_PASSES: tuple[Pass, ...] = (add_p2p, add_zero3_gathers, split_cp, add_dp_reduction)


def lower(schedule: Schedule, layout: Layout, passes: tuple[Pass, ...] = DEFAULT_PASSES) -> Plan:
    """Run the passes and assemble the Plan (validated, cycle search left to the engine)."""
    draft = compute_ops(schedule, layout)
    for lowering_pass in passes:
        draft = lowering_pass(draft)
    programs = tuple(Program(device, stream, ops) for (device, stream), ops
                     in sorted(draft.programs.items(), key=lambda kv: (kv[0][0], STREAMS.index(kv[0][1])))
                     if ops or stream in ("compute", "comm", "coll"))
    plan = Plan(strategy=schedule.strategy, options=schedule.options,
                seq_lengths=schedule.seq_lengths, chunks=schedule.chunks, programs=programs,
                devices=schedule.devices, grad_chunks=schedule.grad_chunks,
                grad_scales=schedule.grad_scales, mirrors=schedule.mirrors)
    # The cycle search is left to the engine (a cycle deadlocks the replay, which reports it with
    # the grid); the conformance suite runs the full validate() on every registered strategy.
    return plan.validate(check_cycles=False)
