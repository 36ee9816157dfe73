"""eager.csv and optimizer.csv: what the executor's eager PyTorch costs beyond its kernels.

eager.csv (the host/dispatch floor). The executor's own ops (``ltsim.executor.state``:
``forward_chunk``, ``recompute_chunk``, ``backward_chunk``) run on the executor's own layers
(``ltsim.executor.model.Transformer``, a middle stage of ``layers`` layers: no embedding, no LM
head; on a CPU also a first stage, with the embedding, and a last one, with the head and loss:
column ``stage``) for one sequence of ``num_tokens`` tokens, timed whole. At a few dozen tokens
the kernels take microseconds and the time is what launching them costs: the Python of each
layer, autograd's graph, the K/V hook, one launch per kernel. Rows, per op:
- ``F``: a forward that keeps its graph (op.keep all or selective); ``F_discard``: one without;
- ``FB``: F then its backward; ``FdRB``: F_discard, the recompute R, then the backward.
F and FB are also timed over a chunk that attends to ``context_tokens`` earlier tokens
of its sequence (middle stage), as a ChunkFlow or SeCO chunk does: reading the earlier K/V through
the state store at every layer and, in backward, accumulating their gradients.
B = FB - F and R = FdRB - F_discard - B; rows at 1 and 2 layers give a per-op and a per-layer
part. ``ltsim.costs.compute`` takes an op's time as the larger of its kernels' time and this
floor: with asynchronous launches (CUDA) the host runs ahead of long kernels, and is the
bottleneck of short ones. On a CPU the same rows are measured up to a few thousand tokens: there the
host runs the kernels, so an op costs its kernels plus what the whole op measures beyond them at
its size (dispatch, and kernels slower inside a layer than timed alone).

optimizer.csv: the executor's optimizer step (``torch.optim.Adam`` / ``SGD``, ``foreach=False``,
states in the parameters' dtype: ltsim/executor/worker.py) over the parameters of 1 and 2 layers,
with gradients set. Its time per parameter, slope and intercept, is what an OPT op of
``parallel.optimizer_dtype = "model"`` costs (the executor's convention).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

import torch

from ltsim.executor.model import Transformer, pack_chunk
from ltsim.executor.state import StateStore, backward_chunk, forward_chunk, recompute_chunk
from ltsim.model import get_model
from ltsim.profile_checks import EAGER_OPS, OPTIMIZERS
from ltsim.profiler.shapes import ShardShape
from ltsim.profiler.tables import Point, make_point
from ltsim.profiler.timing import TORCH_DTYPES, Bench, Case

EAGER_KEY_FIELDS = ("model", "op", "layers", "num_tokens", "dtype", "stage", "context_tokens")
CONTEXT_OPS = ("F", "FB")  # with context; R and F_discard take F's rows (ltsim/costs/eager.py)
LAYERS = (1, 2)
OPTIMIZER_KEY_FIELDS = ("model", "optimizer", "layers", "dtype")
IMPLEMENTATION = "torch foreach=False, states in the parameter dtype"


def _models(shards: Sequence[ShardShape]) -> list[ShardShape]:
    """One unsharded shard per model: the executor runs whole layers (tp 1)."""
    seen: dict[str, ShardShape] = {}
    for shard in shards:
        if shard.tp == 1:
            seen.setdefault(shard.model, shard)
    return list(seen.values())


def eager_points(shards: Sequence[ShardShape], tokens: Sequence[int],
                 stages: Sequence[str] = ("middle",),
                 context: Sequence[tuple[int, int]] = ()) -> tuple[Point, ...]:
    """Every op of every stage at every token count without context; then, for each (query
    tokens, context tokens) of ``context``, F and F+B of a middle stage over a chunk that attends
    to that many earlier tokens of its sequence."""
    plain = tuple(make_point(EAGER_KEY_FIELDS, model=s.model, op=op, layers=layers,
                             num_tokens=num_tokens, dtype=s.dtype, stage=stage, context_tokens=0)
                  for s in _models(shards) for stage in stages for op in EAGER_OPS
                  for layers in LAYERS for num_tokens in tokens)
    return plain + tuple(make_point(EAGER_KEY_FIELDS, model=s.model, op=op, layers=layers,
                                    num_tokens=q, dtype=s.dtype, stage="middle", context_tokens=c)
                         for s in _models(shards) for op in CONTEXT_OPS for layers in LAYERS
                         for q, c in context)


def optimizer_points(shards: Sequence[ShardShape]) -> tuple[Point, ...]:
    return tuple(make_point(OPTIMIZER_KEY_FIELDS, model=s.model, optimizer=opt, layers=layers,
                            dtype=s.dtype)
                 for s in _models(shards) for opt in OPTIMIZERS for layers in LAYERS)


@lru_cache(maxsize=2)  # building a 7B layer draws its weights on the CPU: seconds per build
def _stage(model: str, layers: int, dtype: str, device: torch.device,
           stage: str = "middle") -> Transformer:
    """The executor's stage of ``layers`` layers of ``model``: a middle one (no embedding, no
    head), the first (with the embedding) or the last (with the final norm, LM head and loss)."""
    extra = 2 if stage == "middle" else 1
    spec = replace(get_model(model), num_layers=layers + extra, tied_embeddings=False)
    first = 0 if stage == "first" else 1
    return Transformer(spec, layers=(first, first + layers),
                       dtype=TORCH_DTYPES[dtype]).to(device)


def _op_run(op: str, stage: Transformer, num_tokens: int, device: torch.device,
            context: int = 0) -> Callable[[], object]:
    """The timed call: ``op`` over tokens [context, context + num_tokens) of one sequence. With
    context, the earlier tokens' K/V are forwarded once here, untimed, into a store every call
    reads (as the executor's chunk reads its predecessors'); a call's own K/V leave the store
    after it, so every call sees the same state."""
    spec = stage.spec
    gen = torch.Generator().manual_seed(0)
    tokens = {0: torch.randint(0, spec.vocab_size, (context + num_tokens,), generator=gen)}
    batch = pack_chunk([(0, context, context + num_tokens)], tokens).to(device)
    dtype = next(stage.parameters()).dtype

    def randn(n: int) -> torch.Tensor:
        return torch.randn(n, spec.hidden_size, generator=gen).to(device, dtype)

    hidden = None if stage.has_embedding else randn(num_tokens)
    grad = None if stage.has_head else randn(num_tokens)
    shared = None
    if context:
        shared = StateStore()
        forward_chunk(stage, pack_chunk([(0, 0, context)], tokens).to(device), shared,
                      keep_graph=False, chunk_id=-1,
                      hidden=None if stage.has_embedding else randn(context))
    calls = itertools.count()

    def run() -> object:
        store = StateStore() if shared is None else shared
        keep = op in ("F", "FB")
        handle = forward_chunk(stage, batch, store, keep_graph=keep, hidden=hidden,
                               chunk_id=next(calls))
        if op == "FdRB":
            recompute_chunk(stage, handle, store)
        if op in ("FB", "FdRB"):
            backward_chunk(handle, store, grad)
        if shared is not None:
            shared.release(handle.chunk_id)
            shared.forget(handle.chunk_id)
        return handle
    run.store = shared  # type: ignore[attr-defined]  # the context's store (tests look at it)
    return run


def prepare_eager(point: Point, bench: Bench) -> Case:
    """One eager.csv point: an executor op over one sequence, timed whole."""
    p = point.values
    stage = _stage(p["model"], p["layers"], p["dtype"], bench.device, p.get("stage", "middle"))
    for param in stage.parameters():
        param.requires_grad_(True)
    context = p.get("context_tokens", 0)
    return Case(run=_op_run(p["op"], stage, p["num_tokens"], bench.device, context),
                columns={"model": p["model"], "op": p["op"], "layers": p["layers"],
                         "num_tokens": p["num_tokens"], "hidden": stage.spec.hidden_size,
                         "dtype": p["dtype"], "stage": p.get("stage", "middle"),
                         "context_tokens": context},
                extras={"kernel": "executor", "method": "measured"})


def prepare_optimizer(point: Point, bench: Bench) -> Case:
    """One optimizer.csv point: the executor's optimizer step over 1 or 2 layers' parameters."""
    p = point.values
    stage = _stage(p["model"], p["layers"], p["dtype"], bench.device)
    params = list(stage.parameters())
    for param in params:  # the stage may be shared with other points: only its grads are set
        param.grad = torch.randn_like(param) * 1e-3
    cls = torch.optim.Adam if p["optimizer"] == "adam" else torch.optim.SGD
    optimizer = cls(params, lr=1e-4, foreach=False)
    optimizer.step()  # Adam's state is created on the first step, outside the timing
    return Case(run=optimizer.step,
                columns={"model": p["model"], "optimizer": p["optimizer"], "layers": p["layers"],
                         "num_params": sum(x.numel() for x in params), "dtype": p["dtype"]},
                extras={"implementation": IMPLEMENTATION, "method": "measured"})
