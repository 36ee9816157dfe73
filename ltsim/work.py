"""What ops compute and move: slices of sequences, chunks, how work is split over GPUs, the Work a
compute op covers, what a forward keeps, the buffers memory is made of, and comm payloads.

Values only, with no notion of devices, streams or order (those are ltsim.plan's). The cost model
prices these alone (ltsim/costs), so a planner can ask what a slice costs before any plan exists.
Slice, Split, Buffer and Comm are named tuples: immutable, and cheap to build and to hash, which
the cost caches and the plan checks do for every op. Work is a frozen dataclass that caches its hash
and token count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, NamedTuple, Sequence

import numpy as np


class Keep(str, Enum):
    """What a forward keeps for its backward (Megatron-LM's recompute policies, and no-grad)."""

    ALL = "all"  # every tensor backward needs (recompute "none")
    SELECTIVE = "selective"  # all but core attention's internals (recompute "selective")
    INPUT = "input"  # each layer's input only: recomputed before backward (recompute "full")
    KV = "kv"  # no autograd: only the K/V that later chunks of the sequence attend to
    NOTHING = "nothing"  # no autograd, nothing kept (no gradient follows)

    __hash__ = str.__hash__  # as OpKind's


class Slice(NamedTuple):
    """Tokens [start, stop) of sequence ``seq``. Its context is ``start`` earlier tokens.
    (Slice, Split, Buffer, Comm and Op are named tuples: immutable, and cheap to build and hash,
    which the cost caches do for every op.)"""

    seq: int
    start: int
    stop: int

    @property
    def num_tokens(self) -> int:
        return self.stop - self.start

    @property
    def context_tokens(self) -> int:
        return self.start


class Chunk(NamedTuple):
    """What one micro-batch carries through the pipeline: one or more slices, on one DP replica.
    A named tuple, as Slice: a batch of a 1024-GPU cluster makes thousands (``make_chunk``)."""

    index: int
    slices: tuple[Slice, ...]
    replica: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.slices)

    def kind(self, seq_lengths: dict[int, int]) -> str:
        """"standalone" (whole sequences), "dependent" (one piece of a long sequence) or "hybrid"."""
        whole = [s.start == 0 and s.stop == seq_lengths[s.seq] for s in self.slices]
        if all(whole):
            return "standalone"
        return "dependent" if len(self.slices) == 1 else "hybrid"


def make_chunk(index: int, slices: tuple[Slice, ...], replica: int) -> Chunk:
    """``Chunk(index, slices, replica)`` by position (a NamedTuple's own __new__ is Python)."""
    return _tuple_new(Chunk, (index, slices, replica))


def make_slice(seq: int, start: int, stop: int) -> Slice:
    """``Slice(seq, start, stop)`` by position."""
    return _tuple_new(Slice, (seq, start, stop))


def whole_sequences(seq_ids: list[int], lengths: tuple[int, ...], first: int,
                    replica: int) -> list[Chunk]:
    """A chunk per sequence of ``seq_ids``, whole, numbered from ``first``: ``make_chunk(index,
    (make_slice(s, 0, lengths[s]),), replica)`` of each, with ``tuple.__new__`` mapped so that
    no Python frame runs per chunk (a 1024-GPU batch has thousands)."""
    new = _tuple_new
    slices = map(new, repeat(Slice), zip(seq_ids, repeat(0), map(lengths.__getitem__, seq_ids)))
    return list(map(new, repeat(Chunk), zip(range(first, first + len(seq_ids)), zip(slices),
                                            repeat(replica))))


def whole_columns(seq_ids: Sequence[int], lengths: tuple[int, ...], first: int,
                  replicas: Sequence[int]) -> dict[str, np.ndarray]:
    """``slice_columns`` of whole-sequence chunks (``whole_sequences``) of ``seq_ids``, numbered
    from ``first``, the i-th chunk of replica ``replicas[i]``, made from the ids rather than by
    reading the chunks back (dp 32 of 256 sequences each: 8,192 chunks)."""
    n = len(seq_ids)
    seq = np.fromiter(seq_ids, np.int64, n)
    return {"index": np.arange(first, first + n, dtype=np.int64),
            "replica": np.fromiter(replicas, np.int64, n), "count": np.ones(n, np.int64),
            "chunk": np.arange(n, dtype=np.int64), "seq": seq, "start": np.zeros(n, np.int64),
            "stop": np.fromiter(lengths, np.int64, len(lengths))[seq]}


def slice_columns(chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
    """Every chunk's slices as int64 columns: per chunk its ``index``, ``replica`` and slice
    ``count``; per slice, in order, its chunk's position in ``chunks`` (``chunk``), ``seq``,
    ``start`` and ``stop``."""
    n = len(chunks)
    counts = np.fromiter(map(len, map(_SLICES, chunks)), np.int64, n)
    total = int(counts.sum())
    seq, start, stop = ((np.fromiter(column, np.int64, total) for column in zip(
        *chain.from_iterable(map(_SLICES, chunks)))) if total else (np.zeros(0, np.int64),) * 3)
    return {"index": np.fromiter(map(_INDEX, chunks), np.int64, n),
            "replica": np.fromiter(map(_REPLICA, chunks), np.int64, n), "count": counts,
            "chunk": np.repeat(np.arange(n), counts), "seq": seq, "start": start, "stop": stop}


_INDEX, _SLICES, _REPLICA = itemgetter(0), itemgetter(1), itemgetter(2)  # of a Chunk
# a Slice's start, stop and (start, stop), read in C (map over thousands of slices)
SLICE_START, SLICE_STOP, SLICE_BOUNDS = itemgetter(1), itemgetter(2), itemgetter(1, 2)
_tuple_new = tuple.__new__


def slices_tokens(slices: Sequence[Slice]) -> int:
    """The tokens of ``slices``: the sum of stop - start, summed in C."""
    return sum(map(SLICE_STOP, slices)) - sum(map(SLICE_START, slices))


class Split(NamedTuple):
    """How one op's work is spread over GPUs.

    ``tp`` ranks split heads and hidden dimensions (Megatron TP; ``sp``: with sequence parallelism
    the tensors TP would replicate are split along the sequence). ``cp`` ranks split the slices:
    ``ring`` shards the tokens (Megatron CP, zig-zag balanced), ``ulysses`` the heads after an
    all-to-all. ``cp = 1`` means the slices are whole on this rank.
    """

    tp: int = 1
    cp: int = 1
    cp_kind: str = "ring"
    sp: bool = True


class Tiling(NamedTuple):
    """Sequence tiling of token-wise parts of a work (ALST's TiledCompute, PAPERS.md 6.1): ``mlp``
    runs each layer's MLP over shards of ceil(T / hidden) tokens under no-grad and re-runs each
    shard's forward in backward, so the MLP's activations are never kept; ``loss`` does the same
    for the LM head's logits and loss, in shards of about 1 GiB of fp32 logits."""

    mlp: bool = False
    loss: bool = False


NO_TILING = Tiling()


@dataclass(frozen=True, slots=True, eq=True, init=False)
class Work:
    """What a compute op (or a buffer, or a comm op's tensor) covers: the slices of one chunk on a
    layer range, split as ``split`` says; ``embed``/``head``: it includes the embedding / the LM
    head and loss; ``tiling``: which token-wise parts run tiled. A Work with no slices stands for
    the parameters of its layers (gradients, ZeRO gathers)."""

    chunk: int
    slices: tuple[Slice, ...]
    layers: tuple[int, int]
    split: Split = Split()
    embed: bool = False
    head: bool = False
    tiling: Tiling = NO_TILING
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _tokens: int = field(default=-1, init=False, repr=False, compare=False)

    def __init__(self, chunk: int, slices: tuple[Slice, ...], layers: tuple[int, int],
                 split: Split = Split(), embed: bool = False, head: bool = False,
                 tiling: Tiling = NO_TILING) -> None:
        # The dataclass's own __init__ of a frozen class sets each field through
        # object.__setattr__ by name; the slots' descriptors do it in half the time, and a plan
        # build makes thousands of Works (validation/perf/README.md)
        _SET_CHUNK(self, chunk)
        _SET_SLICES(self, slices)
        _SET_LAYERS(self, layers)
        _SET_SPLIT(self, split)
        _SET_EMBED(self, embed)
        _SET_HEAD(self, head)
        _SET_TILING(self, tiling)
        _SET_HASH(self, 0)
        _SET_TOKENS(self, -1)

    def evolve(self, **changes: Any) -> "Work":
        """A copy with ``changes`` (dataclasses.replace, without its per-field introspection)."""
        values = {"chunk": self.chunk, "slices": self.slices, "layers": self.layers,
                  "split": self.split, "embed": self.embed, "head": self.head,
                  "tiling": self.tiling}
        values.update(changes)
        return Work(**values)

    def __hash__(self) -> int:
        # Works key the cost caches and the buffer checks; hashing the nested slices on every
        # lookup dominated the replay, so the hash is computed once
        value = self._hash
        if not value:
            value = hash((self.chunk, self.slices, self.layers, self.split, self.embed, self.head,
                          self.tiling)) or 1
            object.__setattr__(self, "_hash", value)
        return value

    @property
    def num_tokens(self) -> int:
        tokens = self._tokens
        if tokens < 0:  # computed once: the cost model asks for every op
            tokens = slices_tokens(self.slices)
            object.__setattr__(self, "_tokens", tokens)
        return tokens

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]

    def cost_shape(self) -> tuple:
        """What a cost model reads of this work: its token layout, number of layers, split,
        embedding / head and tiling; not its chunk, sequence numbers or which layers (every layer
        of a model is alike). Equal shapes cost the same: the engine prices once per shape."""
        return (tuple((s.start, s.stop) for s in self.slices), self.layers[1] - self.layers[0],
                self.split, self.embed, self.head, self.tiling)


(_SET_CHUNK, _SET_SLICES, _SET_LAYERS, _SET_SPLIT, _SET_EMBED, _SET_HEAD, _SET_TILING, _SET_HASH,
 _SET_TOKENS) = (getattr(Work, name).__set__ for name in (
     "chunk", "slices", "layers", "split", "embed", "head", "tiling", "_hash", "_tokens"))


class Buffer(NamedTuple):
    """Memory held between ops; its size comes from the CostModel, from this value alone.

    kind: "act" (what backward needs from ``work``'s layers, as ``keep`` says), "ckpt" (each
    layer's input: full-recompute checkpoints), "input" (the stage input only, one tensor),
    "kv" (K/V kept for later chunks of the same sequence), "kv_grad" (their gradients).
    ``host``: it lives in host memory (offloaded), not on the device. A named tuple, as Op: a
    plan holds thousands, and its hash is cheap once its Work's is cached.
    """

    kind: str
    work: Work
    keep: Keep = Keep.ALL
    host: bool = False

    @property
    def name(self) -> str:
        first, stop = self.work.layers
        return f"{self.kind}:c{self.work.chunk}L{first}-{stop}" + ("@host" if self.host else "")


class Comm(NamedTuple):
    """What a comm op moves.

    collective: "send_recv" | "all_reduce" | "reduce_scatter" | "all_gather" | "all_to_all" |
      "d2h" | "h2d"; tensor: "act" (a stage's output), "act_grad" (its gradient), "kv" (K/V of the
      work's layers: ring CP), "qkvo" (Ulysses: Q, K, V in and the output back), "grads" (fp32),
      "model_grads" (in the model dtype), "params", or a Buffer kind for copies; ``work`` whose tensor it is; ``group_size`` GPUs take
      part; ``gpus`` the lowest and highest global GPU rank among them (on two nodes: the
      inter-node rows); ``steps`` repetitions (ring CP: cp - 1 exchanges, twice in backward);
      ``pinned``: a copy through page-locked host memory (asynchronous offload), else a plain
      synchronous one through pageable memory (costs/host.py).
    A named tuple, as Op: every SEND carries one.
    """

    collective: str
    tensor: str
    work: Work
    group_size: int = 1
    gpus: tuple[int, int] = (0, 0)
    steps: int = 1
    pinned: bool = False
