"""The lowering's DP pass (ltsim/strategies/lowering.py): the gradient reduction over a stage's
data-parallel (and CP) shards, the optimizer step, and the distributed optimizer's parameter
gather; and the ZeRO / DP group a device's stage spans.

- Megatron (ZeRO <= 1 or unsharded): one reduction at the step's end on the coll stream, started
  with the device's last backward (``overlap_grad_reduce``) or after its last op;
- ZeRO-2/3 without a pipeline (DeepSpeed): a reduce-scatter every micro-step that the next one
  waits for (with ``overlap_comm``, its last part after every rank's backward has ended);
- ZeRO-2/3 in pipeline stages (FSDP): one after every backward;
then the optimizer step and, with a distributed optimizer (ZeRO-1/2), the parameter all-gather
(ZeRO-3 keeps its parameters sharded: its gathers are per op, ``lowering.add_zero3_gathers``).
"""

from __future__ import annotations

import numpy as np

import ltsim.optable as optable
from ltsim.optable import B, COLL, OPT, STREAM_CODE, ints
from ltsim.plan import Comm, Device, Split, Work
from ltsim.strategies.draft import Draft

_COMPUTE, _COLL = STREAM_CODE["compute"], STREAM_CODE["coll"]


def _params_work(device: Device) -> Work:
    return Work(chunk=-1, slices=(), layers=device.layers, split=Split(tp=device.tp),
                embed=device.embed, head=device.head)


def _shard_gpus(draft: Draft, device: Device) -> tuple[int, int]:
    """GPU ranks spanned by the devices of the same stage (the ZeRO / DP group)."""
    ranks = [r for d in draft.schedule.devices if d.stage == device.stage
             for r in draft.layout.gpus_of(d)]
    return min(ranks), max(ranks)


def add_dp_reduction(draft: Draft) -> Draft:
    devices = draft.schedule.devices
    single_stage = all(d.stage == 0 for d in devices)  # DeepSpeed: no ZeRO-2 with its pipeline
    chunks_of: dict[int, list[int]] = {}  # a DP replica's micro-steps are its chunks, in order
    if any(d.zero_stage >= 2 and d.num_shards > 1 for d in draft.schedule.live_devices):
        for chunk in draft.schedule.chunks:
            chunks_of.setdefault(chunk.replica, []).append(chunk.index)
    stage_groups: dict[int, tuple[int, ...]] = {}  # a stage's devices, every replica's
    for d in devices:
        stage_groups.setdefault(d.stage, ())
        stage_groups[d.stage] += (d.index,)
    shard_gpus: dict[int, tuple[int, int]] = {}  # per stage (_shard_gpus)
    for device in draft.schedule.live_devices:  # groups span every replica, mirrored or not
        group = stage_groups[device.stage]
        compute = list(draft.rows(device.index))
        coll = list(draft.rows(device.index, "coll"))
        params = _params_work(device)
        gpus = shard_gpus.get(device.stage)
        if gpus is None:
            gpus = shard_gpus[device.stage] = _shard_gpus(draft, device)
        grads = _grads_comm(draft, device, params, gpus)
        reduces: list[int] = []
        sharded = device.zero_stage >= 2 and device.num_shards > 1
        if sharded and single_stage:
            count = max(len(chunks_of.get(d.replica, ())) for d in devices if d.index in group)
            mine = chunks_of.get(device.replica, [])
            parts = (_overlapped_parts(draft, device, gpus) if device.overlap_grad_reduce
                     else [("", grads, False)])
            reduces = _per_step_reduction(draft, device, compute, mine, count, parts, group)
            if device.zero_stage == 2:  # no gathers to merge with
                coll += reduces
            elif reduces:  # ZeRO-3's, among its parameter gathers (each part its micro-step's)
                coll = _merge_by_trigger(draft, coll, reduces, compute,
                                         [chunk for chunk in mine for _ in parts],
                                         draft.rows(device.index, "cp"))
        elif sharded:  # sharded gradients in a pipeline
            spans = _backward_spans(draft, compute)
            count = max(len(_backward_spans(draft, draft.rows(d))) for d in group
                        if (d, "compute") in draft.programs)  # a mirror counts as its source
            reduces = _per_backward_reduction(draft, device, compute, spans, count, grads, group)
            if reduces:
                coll = _merge_by_trigger(draft, coll, reduces, compute,
                                         [chunk for _, _, chunk in spans],
                                         draft.rows(device.index, "cp"))
        if not reduces:  # unsharded, or no micro-step or backward in the whole group (SpaCO's
            # Bernoulli draw can pick no chunk): one reduction at the step's end, as every member
            reduces = [_step_end_reduction(draft, device, compute, grads, group)]
            coll += reduces
        step = draft.add(OPT, device.index, device.stage, -1, "", _COMPUTE, deps=(reduces[-1],))
        # the updated shards gathered back (Megatron's distributed optimizer, ZeRO-1/2); ZeRO-3
        # keeps its parameters sharded and gathers them per op (add_zero3_gathers) instead
        if 1 <= device.zero_stage <= 2 and device.num_shards > 1:
            coll.append(draft.add(COLL, device.index, device.stage, -1, "dp-params", _COLL,
                                  group=group, deps=(step,), comm=draft.comms.of(Comm(
                                      "all_gather", "params", params,
                                      group_size=device.num_shards, gpus=gpus))))
        draft.programs[(device.index, "compute")] = compute + [step]
        draft.programs[(device.index, "coll")] = coll
    return draft


def _merge_by_trigger(draft: Draft, coll: list[int], reduces: list[int], compute: list[int],
                      chunks: list[int], relays: list[int] = ()) -> list[int]:
    """The coll stream with the per-micro-step reductions placed among ZeRO-3's gathers in the
    order their compute ops run: reduction m after the gathers up to the next micro-step's first
    op (that prefetch overlaps the reduction) and before the later ones. Appended after all
    gathers instead, the gather for op j + 2 (which waits for op j) would sit ahead of the
    reduction that op j waits for: a deadlock. Without gathers the reductions come in order m.
    A gather that a ``relays`` op (Ulysses' all-to-all on the cp stream) waits for takes the
    position of the compute op that waits for that relay."""
    deps, starts = draft.deps, draft.start_deps
    position = {dep: i for i, row in enumerate(compute) for dep in deps[row]}
    for row in relays:
        if row in position:
            for dep in deps[row]:
                position.setdefault(dep, position[row])
    spans = {chunk: last for _, last, chunk in _backward_spans(draft, compute)}
    # a micro-step the device has no backward in (SpaCO's chunks it does not back-propagate):
    # its reduction joined after the device's own ops of that micro-step, not before its first
    # gather (there the gathers queued behind it, and the device's first forward waited for the
    # other ranks' backward: a review)
    chunk_of = draft.col("chunk")
    ends = dict(zip(chunk_of[ints(compute)].tolist(), range(len(compute)))) if compute else {}
    keyed = [(position.get(row, len(compute)), 0, i, row) for i, row in enumerate(coll)]
    index = {row: i for i, row in enumerate(compute)}
    key = -1.0  # reductions keep their order m (every member of the group runs them in one order);
    for m, row in enumerate(reduces):  # one past the device's micro-steps goes with the one before
        last = (spans.get(chunks[m], ends.get(chunks[m])) if m < len(chunks) else None)
        key = max(key, last + 1.5 if last is not None else key)
        # and after the gather of every compute op it waits for (a reduction joined after the
        # device's last op, which SpaCO's forward-only chunks can follow the last backward with)
        waits = [index[d] for d in deps[row] + starts[row] if d in index]
        if waits:
            key = max(key, max(waits) + 0.5)
        keyed.append((key, 1, m, row))
    return [row for *_, row in sorted(keyed, key=lambda k: k[:3])]


def _step_end_reduction(draft: Draft, device: Device, compute: list[int], grads: int,
                        group: tuple[int, ...]) -> int:
    """One reduction at the end of the step, started with the last backward's first part
    (Megatron's overlap_grad_reduce); without that overlap, or with no backward, after the last
    op (Megatron's finalize_model_grads, once the pipeline schedule has returned)."""
    start: tuple[int, ...] = ()
    if device.overlap_grad_reduce and compute:
        # the first backward op of the chunk whose backward ends last
        if len(compute) < optable.SMALL:  # op by op (a numpy call costs microseconds)
            kind, chunk = draft.col("kind"), draft.col("chunk")
            backs = [row for row in compute if kind[row] == B]
            if backs:
                last = chunk[backs[-1]]
                start = (next(row for row in backs if chunk[row] == last),)
        else:
            mine = ints(compute)
            at = np.flatnonzero(draft.col("kind")[mine] == B)
            if len(at):
                chunk = draft.col("chunk")[mine[at]]
                start = (compute[int(at[np.argmax(chunk == chunk[-1])])],)
    after = (compute[-1],) if compute and not start else ()
    return draft.add(COLL, device.index, device.stage, -1, "dp-grad", _COLL, comm=grads,
                     group=group, start_deps=start, deps=after)


def _grads_comm(draft: Draft, device: Device, params: Work, gpus: tuple[int, int]) -> int:
    """The DP reduction of ``params``' gradients (in fp32 or the model dtype) over the stage's
    shards: a reduce-scatter from ZeRO-1 on, else an all-reduce."""
    return draft.comms.of(Comm(
        "reduce_scatter" if device.zero_stage >= 1 else "all_reduce",
        "grads" if device.grad_dtype == "fp32" else "model_grads", params,
        group_size=device.num_shards, gpus=gpus))


def _per_step_reduction(draft: Draft, device: Device, compute: list[int], chunks: list[int],
                        count: int, parts: list[tuple[str, int, bool]],
                        group: tuple[int, ...]) -> list[int]:
    """ZeRO-2 (DeepSpeed stage_1_and_2): a gradient reduce-scatter every micro-step (chunk m of the
    replica), started with that step's backward on this device (overlap_comm; without it, after
    that backward), and the device's next compute waits
    for it, so every micro-step waits for the slowest rank of the group. A device with no work in a
    micro-step, or a replica with fewer micro-steps, joins those reductions idle (DeepSpeed runs the
    same number of micro-steps on every rank). Only the next micro-step's first op waits (not the
    recompute of an earlier chunk, as ChunkFlow runs a group's backwards last chunk first). Without
    pipeline stages only: DeepSpeed does not run ZeRO-2 with its pipeline engine, and with stages
    the reduction stays at the step end. ``parts``: (name suffix, comm, started with the backward
    rather than after it) of each collective a micro-step's reduction is made of, in order; the
    next micro-step waits for the last."""
    spans = {chunk: (first, last) for first, last, chunk in _backward_spans(draft, compute)}
    out: list[int] = []
    latest = -1  # the last backward op of micro-steps 0..m: reduction m runs after it
    for m in range(count):
        span = spans.get(chunks[m]) if m < len(chunks) else None
        for suffix, comm, started in parts:
            out.append(draft.add(COLL, device.index, device.stage, -1, f"dp-grad-{m}{suffix}",
                                 _COLL, comm=comm, group=group,
                                 start_deps=(compute[span[0]],) if span and started else (),
                                 deps=(compute[span[1]],) if span and not started else ()))
        if span is None:
            continue
        latest = max(latest, span[1])
        nxt = span[1] + 1
        # the next micro-step waits, unless an earlier micro-step's backward runs later (Seq1F1B
        # back-propagates a sequence's chunks last first): reduction m, queued behind that one's,
        # cannot be waited for before it (a deadlock), so the wait falls away
        if (nxt < len(compute) and draft.get(compute[nxt], "chunk") > chunks[m]
                and latest == span[1]):
            draft.add_deps(compute[nxt], (out[-1],))
    return out


def _overlapped_parts(draft: Draft, device: Device, gpus: tuple[int, int]
                      ) -> list[tuple[str, int, bool]]:
    """ZeRO-2's (and ZeRO-3's) per-micro-step reduce-scatter with DeepSpeed's ``overlap_comm``,
    in two parts:
    the gradients of every layer but the stage's first, started with the micro-step's backward
    (``dp-grad-m``), then those its backward makes last, the first layer's and the embedding's
    (``dp-grad-m-last``), after that backward has ended. No reduction ends before every rank of
    the group has made its gradients, so the next micro-step waits for the slowest rank's
    backward to end (as DeepSpeed's epilogue waits for the reduction), not just to begin: one
    overlapped reduction let a short micro-step's rank run ahead while a long one's backward ran
    (a review, DP 2, [16000, 1000 | 1000, 16000]: 341 ms, against 520 ms without the overlap;
    now 517 ms, as all-long micro-steps take). The last
    part is at least the first layer's and embedding's gradients: DeepSpeed's buckets
    (``reduce_bucket_size``, 5e8 elements) leave at least that to reduce after the backward."""
    first, stop = device.layers
    split = Split(tp=device.tp)
    bulk, tail = (_grads_comm(draft, device, Work(chunk=-1, slices=(), layers=layers, split=split,
                                                  embed=embed, head=head), gpus)
                  for layers, embed, head in (((first + 1, stop), False, device.head),
                                              ((first, first + 1), device.embed, False)))
    return [("", bulk, True), ("-last", tail, False)]


def _per_backward_reduction(draft: Draft, device: Device, compute: list[int],
                            spans: list[tuple[int, int, int]], count: int, grads: int,
                            group: tuple[int, ...]) -> list[int]:
    """ZeRO-2/3 within pipeline stages (FSDP, InfiniPipe's and Seq1F1B's setup: it keeps no
    unsharded gradients from one backward to the next): the stage's gradients reduce-scattered
    over the shards after every chunk's backward on this device (``spans``, in the order they
    run), started with that backward (FSDP reduces each layer's as its backward ends), or after it
    without ``overlap_grad_reduce``. Nothing but the optimizer step waits for them. Reduction m
    is the device's m-th backward's on every member of the group; a device with fewer backwards
    joins the others' remaining ones after its last op (collectives match one to one)."""
    overlap = device.overlap_grad_reduce
    last = (compute[-1],) if compute else ()
    out = []
    for m in range(count):
        first, final, _ = spans[m] if m < len(spans) else (None, None, None)
        started = first is not None and overlap
        out.append(draft.add(COLL, device.index, device.stage, -1, f"dp-grad-{m}", _COLL,
                             comm=grads, group=group,
                             start_deps=(compute[first],) if started else (),
                             deps=() if started else (compute[final],) if final is not None
                             else last))
    return out


def _backward_spans(draft: Draft, rows: list[int]) -> list[tuple[int, int, int]]:
    """(first, last, chunk) index of each chunk's backward ops, in order of the last."""
    mine = ints(rows)
    at = np.flatnonzero(draft.col("kind")[mine] == B)
    if not len(at):
        return []
    chunk = draft.col("chunk")[mine[at]]
    chunks, first = np.unique(chunk, return_index=True)
    last = len(at) - 1 - np.unique(chunk[::-1], return_index=True)[1]
    order = np.argsort(at[last], kind="stable")
    return list(zip(at[first][order].tolist(), at[last][order].tolist(), chunks[order].tolist()))
