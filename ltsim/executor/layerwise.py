"""Per-layer ops and host copies on one device: ALST's schedule (HF's per-layer gradient
checkpointing, each layer's checkpoint offloaded to host memory).

A per-layer op runs layers [first, stop) of the device's stage (``Work.layers``), or, with
``Work.head`` and no layers, the final norm, the LM head and the loss. Within one chunk the ops
hand their tensors on in program order: a forward's output is the next forward's input (the first
op of the first stage takes the embedding's output), a backward's input grad is the backward of
the layer below's output grad, and the first layer's backward ends in the embedding's backward
(the embedding, a gather, is run again for it rather than held: its graph would pin its output).

A forward that keeps only its input (``Keep.INPUT``, recompute "full") runs without autograd and
keeps that input as the layer's checkpoint; its R op rebuilds the graph from it. A COPY op
``d2h`` moves a layer's checkpoint to host memory (the handle lets go of the device copy) and its
``h2d`` brings it back before the R; the copies run synchronously when their dependencies are
done, as ALST's reference code does. Host bytes are counted apart from device bytes.

Only whole sequences: per-layer ops over slices with context (K/V state across chunks) and tiled
works are simulated only (runtime.check_supported refuses them).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ltsim.errors import PlanError
from ltsim.executor.comm import Async
from ltsim.executor.memtrack import storage_bytes
from ltsim.executor.state import backward_chunk, forward_span, recompute_chunk
from ltsim.plan import Keep, Op, OpKind


def is_layerwise(plan, device: int) -> bool:
    """Whether a device's compute ops run over parts of its stage (per-layer ops)."""
    stage = plan.devices[device].layers
    return any(op.work is not None and op.work.layers != stage
               for op in plan.program(device, "compute").ops)


def _key(op: Op) -> tuple[int, int, bool]:
    first, stop = op.work.layers
    return op.chunk, first, op.work.head and first == stop


def run_compute(run: Any, it: Any, op: Op, received: torch.Tensor | None) -> None:
    """F, R or B of one per-layer op (``run``: the DeviceRun, ``it``: its iteration state)."""
    key = _key(op)
    chunk, first, head = key
    batch = run.batches[chunk]
    stage_first, stage_stop = run.plan.stage_layers[run.stage]
    if op.kind is OpKind.F:
        if op.work.embed:
            with torch.no_grad():
                hidden = run.model.embed_tokens(batch)
        elif received is not None:
            hidden = received
        else:
            hidden = it.hidden.pop(chunk)
        keep = op.keep in (Keep.ALL, Keep.SELECTIVE)
        stop = op.work.layers[1]
        handle = forward_span(run.model, batch, it.store, span=(first, stop, head), hidden=hidden,
                              keep_graph=keep, chunk_id=chunk)
        if head:
            it.loss += handle.loss
        elif stop == stage_stop and not run.is_last:  # the next stage's input
            it.outbox[(OpKind.F, chunk)] = handle.output
            handle.output = None
        else:
            it.hidden[chunk] = handle.output
            handle.output = None
        it.handles[key] = handle
    elif op.kind is OpKind.R:
        handle = it.handles.get(key)
        if handle is None or handle.input is None:
            raise PlanError(f"{op.key}: no checkpoint on the device (its copy back to the device "
                            f"must come first)\n{run.plan.grid(mark=op.key)}")
        recompute_chunk(run.model, handle, it.store)
        if not head:
            handle.output = None
    elif op.kind is OpKind.B:
        handle = it.handles.pop(key)
        output_grad = None if head else (received if received is not None
                                         else it.grad.pop(chunk))
        grad = backward_chunk(handle, it.store, output_grad=output_grad)
        handle.input_grad = handle.input = None
        if op.work.embed:  # the embedding's backward, from its gather run again
            with torch.enable_grad():
                torch.autograd.backward(run.model.embed_tokens(batch), grad)
        elif first == stage_first and not head and run.stage > 0:
            it.outbox[(OpKind.B, chunk)] = grad
        else:
            it.grad[chunk] = grad
    else:
        raise PlanError(f"the executor cannot run {op.kind.value} ops ({op.key})")


def run_copy(run: Any, it: Any, op: Op) -> Async:
    """A layer's checkpoint to host memory (d2h) or back (h2d), synchronously."""
    start = time.perf_counter()
    low = op.comm.work.layers[0]
    key = (op.chunk, low, False)
    handle = it.handles.get(key)
    if handle is None:
        raise PlanError(f"{op.key}: no forward of layer {low} holds chunk {op.chunk}'s checkpoint"
                        f"\n{run.plan.grid(mark=op.key)}")
    if op.comm.collective == "d2h":
        it.host[key] = handle.input.to("cpu", copy=True)
        handle.input = None
    else:
        handle.input = it.host.pop(key).to(run.device, copy=True)
    done = Async(None, start)
    done.end_s = time.perf_counter()
    return done


def host_bytes(it: Any) -> int:
    return sum(storage_bytes(t) for t in it.host.values())
