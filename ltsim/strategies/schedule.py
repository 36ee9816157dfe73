"""What a strategy hands to the lowering passes: a Schedule of per-device compute Actions.

A strategy decides the chunks, the devices, and *what each device computes in which order*; the
passes in lowering.py add everything every schedule shares (P2P, CP traffic, ZeRO gathers, the DP
reduction, host offload, the optimizer step). The types here are that contract:

- :class:`Layout`: the lockstep devices of a (tp, cp, pp, dp) grid in Megatron-LM's rank order
  (tp fastest, then cp, then dp, then pp), their layer ranges and global GPU ranks;
- :class:`Action`: one compute step (F, B, W, R) of a chunk on a device, with what the forward keeps,
  its buffer effects (:class:`Mem`, resolved against the device by the lowering) and extra
  dependencies; optional layer sub-range, slice subset and split for strategies that need them;
- :class:`Schedule`: the chunks, devices and orders of one global batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain
from functools import lru_cache
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from ltsim.errors import ConfigError
from ltsim.parallel import ParallelConfig
from ltsim.plan import (NO_TILING, Chunk, Device, Keep, Mirror, OpKey, OpKind, Slice, Split, Tiling,
                        Work, op_key)
from ltsim.work import slice_columns

_KEEP = {"none": Keep.ALL, "selective": Keep.SELECTIVE, "full": Keep.INPUT}


# A plan holds an op per chunk, stage and pass: past this many chunks a batch would take minutes
# to plan and replay and gigabytes to hold, so it is refused at once (18 us an op on the 1024-GPU
# plan of validation/perf/phases.py: 16,384 chunks at pp 8, about 400K ops, take some 7 s a
# batch). The largest bundled batches have a few thousand (validation/perf's 1024-GPU cases:
# 4,096 sequences; dp 32 x 256 micro-batches: 8,192).
MAX_CHUNKS = 16_384
# and at most a full batch of MAX_CHUNKS chunks on 32 stages: 16,384 one-token micro-batches on
# 256 stages took 95 s and 15 GB (a fuzzing review), on 16 stages (dp 64) 5.6 s and 1.1 GB
MAX_CHUNK_STAGES = 32 * MAX_CHUNKS


def check_chunk_count(num_chunks: int, key: str, value: object, *, what: str = "chunks",
                      fix: str = "use larger chunks or shorter sequences", stages: int = 1) -> None:
    """Raise ConfigError when a batch would be cut into more than MAX_CHUNKS chunks (or pieces
    planned as chunks are: ``what``), or into more than MAX_CHUNK_STAGES chunks times the
    pipeline's ``stages`` (each chunk's ops run on every stage). ``num_chunks`` is what a
    batch certainly makes, never more (a strategy that packs counts its tokens' chunks)."""
    if num_chunks > MAX_CHUNKS:
        raise ConfigError(key, f"such that a batch has at most {MAX_CHUNKS:,} {what}", value, fix,
                          context=f"this batch would make {num_chunks:,}")
    if num_chunks * stages > MAX_CHUNK_STAGES:
        raise ConfigError("parallel.pp", f"such that the batch's {what} times the stages are at "
                          f"most {MAX_CHUNK_STAGES:,}", stages, f"use fewer stages, or {fix}",
                          context=f"{num_chunks:,} {what} in all (over the replicas), each on "
                          f"{stages} stages")


def keep_policy(recompute: str) -> Keep:
    """Megatron-LM's recompute setting as what a kept forward keeps."""
    return _KEEP[recompute]


class Mem(NamedTuple):
    """A buffer effect of an action: a buffer of ``kind`` holding the action's work (or, with
    ``chunk`` >= 0, that chunk's work on the same device and layers; with ``layers``, that part of
    the action's layer range). ``keep`` (activations only) defaults to the action's; ``one_layer``:
    the working set of one layer while a full recompute rebuilds layer by layer (with the stage's
    embedding input and logits); ``host``: in host memory. Named tuples (Mem, Action): immutable
    and cheap to build, as a schedule holds one per op (see plan.Op)."""

    kind: str
    chunk: int = -1
    keep: Keep | None = None
    one_layer: bool = False
    host: bool = False
    layers: tuple[int, int] | None = None


def one_layer_work(work: Work, *, embed: bool, head: bool) -> Work:
    """What a ``Mem(one_layer=True)`` buffer holds: the work's first layer, with the stage's
    embedding input and logits (``embed``, ``head``): a full recompute's working set."""
    first = work.layers[0]
    return work.evolve(layers=(first, first + 1), embed=embed, head=head)


@lru_cache(maxsize=None)
def mems(*kinds: str) -> tuple[Mem, ...]:
    """Buffer effects of these kinds on the action's own work (one Mem object per kind: the
    lowering resolves a Mem object for all the actions that share it at once)."""
    return tuple(_mem(k) for k in kinds)


@lru_cache(maxsize=1 << 12)
def joined(*parts: tuple[Mem, ...]) -> tuple[Mem, ...]:
    """The Mems of ``parts`` in order, one tuple object per value: the lowering resolves the
    actions sharing an effects tuple together (what strategies concatenate per chunk)."""
    return tuple(chain.from_iterable(parts))


@lru_cache(maxsize=None)
def _mem(kind: str) -> Mem:
    return Mem(kind)


def context_grads(ids: list[int], top: int) -> tuple[Mem, ...]:
    """What the first backward of a sequence's chunks ``ids`` (that of ``ids[top]``) allocates: the
    K/V gradients ("kv_grad") of every chunk before it, and its own share of their
    concatenation, which stays while any of them lives (torch.cat's backward makes them views of
    it, kept as .grad by autograd); nothing when no chunk precedes it (ChunkFlow, SeCO/SpaCO)."""
    if top <= 0:
        return ()
    return tuple(Mem("kv_grad", ids[j]) for j in range(top)) + (Mem("kv_grad", ids[top]),)


def own_key(kind: OpKind, chunk: int, name: str = "") -> OpKey:
    """The key of an op of kind ``kind`` of ``chunk`` on the device whose action names it."""
    return op_key(-1, -1, kind, chunk, name)


class Action(NamedTuple):
    """One compute step of a device. ``layers``/``slices``/``split`` default to the device's layer
    range, the chunk's slices and the layout's split; ``head`` False drops the LM head from a
    last-stage op (a full recompute does not rebuild the logits); ``name`` tells apart several ops
    of one kind and chunk on a device; ``tiling`` the sequence tiling of its work. ``deps`` name
    ops by key; a key of device -1 (``own_key``) names an op of the action's own device, so one
    action serves every stage."""

    kind: OpKind
    chunk: int
    keep: Keep
    allocs: tuple[Mem, ...] = ()
    frees: tuple[Mem, ...] = ()
    deps: tuple[OpKey, ...] = ()
    layers: tuple[int, int] | None = None
    slices: tuple[Slice, ...] | None = None
    split: Split | None = None
    head: bool = True
    name: str = ""
    tiling: Tiling = NO_TILING


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """Chunks, devices and per-device compute orders of one global batch."""

    strategy: str
    options: dict[str, Any]
    seq_lengths: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    devices: tuple[Device, ...]
    orders: dict[int, list[Action]]
    grad_chunks: frozenset[int] | None = None
    grad_scales: tuple[tuple[int, float, float], ...] = ()  # see Plan
    mirrors: tuple[Mirror, ...] = ()  # see Plan: their devices have no orders
    # work.slice_columns(chunks), where the strategy made them (Layout.mirrors): the plan's
    # checks read them too
    columns: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def live_devices(self) -> tuple[Device, ...]:
        """The devices the plan holds programs for: all but the mirrors' (ltsim/mirrors.py)."""
        if not self.mirrors:
            return self.devices
        mirrored = {copy for mirror in self.mirrors for _, copy in mirror.devices}
        return tuple(d for d in self.devices if d.index not in mirrored)


def even_stage_layers(num_layers: int, num_stages: int) -> tuple[tuple[int, int], ...]:
    """Layers split as evenly as possible; earlier stages take the remainder (Megatron's uneven PP
    gives the first and last stage fewer layers instead; this is the simple even rule)."""
    if num_stages > num_layers:
        raise ConfigError("parallel.pp", f"at most the model's {num_layers} layers", num_stages,
                          "use fewer pipeline stages")
    base, extra = divmod(num_layers, num_stages)
    out, first = [], 0
    for stage in range(num_stages):
        stop = first + base + (1 if stage < extra else 0)
        out.append((first, stop))
        first = stop
    return tuple(out)


_INDEX = attrgetter("index")  # of a Chunk


@dataclass(frozen=True, slots=True)
class Layout:
    """Lockstep devices of a parallel grid: device = (dp replica, pp stage), its tp x cp GPUs
    represented once (Megatron, ChunkFlow). Global GPU rank = tp_rank + tp (cp_rank + cp (replica
    + dp stage)), Megatron-LM's default order."""

    parallel: ParallelConfig
    stage_layers: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, parallel: ParallelConfig, num_layers: int) -> "Layout":
        return cls(parallel, even_stage_layers(num_layers, parallel.pp))

    @property
    def split(self) -> Split:
        par = self.parallel
        return Split(tp=par.tp, cp=par.cp, cp_kind=par.cp_kind, sp=par.sequence_parallel)

    def device(self, replica: int, stage: int) -> int:
        return self.parallel.sim_device(dp_rank=replica, stage=stage)

    def first_gpu(self, replica: int, stage: int) -> int:
        par = self.parallel
        return par.tp * par.cp * (replica + par.dp * stage)

    def devices(self) -> tuple[Device, ...]:
        par = self.parallel
        return tuple(self._device(index, par.stage_of(index), par.dp_rank_of(index), cp_width=par.cp)
                     for index in range(par.num_sim_devices))

    def rank_devices(self) -> tuple[Device, ...]:
        """One device per CP rank of every (replica, stage), for ranks of a CP group that do
        different work (Skrull): index = (replica * pp + stage) * cp + cp rank."""
        par = self.parallel
        return tuple(self._device(self.rank_device(replica, stage, rank), stage, replica,
                                  cp_width=1, cp_rank=rank)
                     for replica in range(par.dp) for stage in range(par.pp)
                     for rank in range(par.cp))

    def _device(self, index: int, stage: int, replica: int, **cp) -> Device:
        par = self.parallel
        return Device(index=index, stage=stage, replica=replica, layers=self.stage_layers[stage],
                      embed=stage == 0, head=stage == par.pp - 1, tp=par.tp,
                      zero_stage=par.zero_stage, num_shards=par.dp * par.cp,
                      grad_dtype=par.grad_dtype, optimizer_dtype=par.optimizer_dtype,
                      overlap_grad_reduce=par.overlap_grad_reduce, **cp)

    def rank_device(self, replica: int, stage: int, rank: int) -> int:
        return (replica * self.parallel.pp + stage) * self.parallel.cp + rank

    def mirrors(self, replicas: list[list[Chunk]], seq_lengths: tuple[int, ...],
                columns: dict[str, np.ndarray] | None = None) -> tuple[Mirror, ...]:
        """The replicas (``replicas[r]``: replica r's chunks, in order) whose chunks have the token
        layout of an earlier replica's, in the same order, over sequence ids at the same offsets
        from the replica's first (its share of the batch as ``deal_replicas`` deals it): a
        strategy whose orders depend on nothing else plans the first only (ltsim/mirrors.py).
        ``columns``: work.slice_columns of the replicas' chunks one after another, if already
        made."""
        if len(replicas) < 2:
            return ()
        sources: dict[tuple, int] = {}
        out = []
        par = self.parallel
        width = par.tp * par.cp
        # every replica's chunks at once: per chunk its slice count, per slice (seq - the
        # replica's first seq, start, stop, length); a replica's key is the bytes of its part
        if columns is None:
            columns = slice_columns(list(chain.from_iterable(replicas)))
        counts, seq = columns["count"], columns["seq"]
        pieces = np.stack([seq, columns["start"], columns["stop"],
                           np.fromiter(seq_lengths, np.int64, len(seq_lengths))[seq]])
        chunk_bounds = np.cumsum([0] + [len(chunks) for chunks in replicas]).tolist()
        slice_bounds = np.concatenate([[0], np.cumsum(counts)])[chunk_bounds].tolist()
        for replica, chunks in enumerate(replicas):
            a, b = slice_bounds[replica], slice_bounds[replica + 1]
            mine = pieces[:, a:b].copy()
            mine[0] -= mine[0, 0] if b > a else 0
            key = (len(chunks), counts[chunk_bounds[replica]:chunk_bounds[replica + 1]].tobytes(),
                   mine.tobytes())
            source = sources.setdefault(key, replica)
            if source == replica:
                continue
            stages = range(par.pp)
            out.append(Mirror(
                replica=replica, source=source,
                devices=tuple((self.device(source, st), self.device(replica, st)) for st in stages),
                chunks=tuple(zip(map(_INDEX, replicas[source]), map(_INDEX, chunks))),
                gpus=tuple((self.first_gpu(source, st), self.first_gpu(source, st) + width - 1)
                           for st in stages),
                gpu_shift=width * (replica - source)))
        return tuple(out)

    def gpus_of(self, device: Device) -> tuple[int, int]:
        """Lowest and highest GPU rank of a device (its tp x cp group)."""
        first = self.first_gpu(device.replica, device.stage)
        if device.cp_rank >= 0:  # one rank of a CP group
            first += self.parallel.tp * device.cp_rank
        return first, first + self.parallel.tp * device.cp_width - 1


def ulysses_layout(parallel: ParallelConfig, num_layers: int, num_heads: int) -> Layout:
    """The lockstep layout with Ulysses sequence parallelism over the cp ranks (ALST, InfiniPipe,
    DeepSpeed-Ulysses): the heads must divide over tp x cp."""
    if num_heads % (parallel.tp * parallel.cp):
        raise ConfigError("parallel.cp", f"a divisor of the {num_heads} attention heads / tp (Ulysses "
                          "splits the heads over the sequence-parallel ranks)", parallel.cp,
                          "choose parallel.cp so that it divides the heads")
    return Layout.of(replace(parallel, cp_kind="ulysses") if parallel.cp > 1 else parallel,
                     num_layers)
