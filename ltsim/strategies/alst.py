"""ALST, Arctic Long Sequence Training (Snowflake; seeds/alst.md is the blog, PAPERS.md section 6
the mechanics from its code): Ulysses sequence parallelism, sequence tiling and activation
checkpoint offload on HF Transformers + DeepSpeed ZeRO-3.

Each DP replica trains its sequences one after another, one sequence per micro-step (ALST runs
micro-batch size 1 and accumulates gradients). A sequence is split over the ``parallel.cp`` ranks
of its Ulysses group (``ulysses = true``; attention switches to head parallelism through four
all-to-alls per layer and direction, K/V heads replicated when fewer than the ranks), and runs layer
by layer, as HF's per-layer gradient checkpointing does:

- forward: one op per layer, keeping the layer's input (``parallel.recompute = "full"``, HF
  gradient checkpointing) or its activations, then one op for the LM head and loss;
- backward: the head, then from the last layer down each layer's recompute (R) and backward (B);
- ``offload_checkpoints``: each layer's input is copied to host memory after its forward and back
  before its recompute, on the copy stream; synchronously (the next layer waits for the copy, as
  ALST's reference code does) unless ``offload_async``;
- ``tiled_mlp``: the MLP runs in shards of about ``hidden`` tokens under no-grad and re-runs each
  shard's forward in backward, so its activations are never kept (Work.tiling);
- ``tiled_loss``: the same for the logits and loss, in shards of about 1 GiB of fp32 logits;
- ZeRO (``parallel.zero_stage``; 3 in ALST's recipes) over all dp x cp ranks, with ZeRO-3 gathering
  each op's layers; ``offload_optimizer``: the optimizer state and fp32 gradients in host memory and
  the step on the CPU (DeepSpeed ZeRO-Offload).

Host memory is a real limit (the hardware preset's, per GPU): offloaded checkpoints and the
optimizer state count against it. ALST's runtime items (expandable segments, avoiding
``all_reduce_object`` and a PyTorch 2.6-2.7 barrier's ~3 GB) are outside the model: ltsim's
allocator allowance (memory.ALLOCATOR_OVERHEAD) stands for a runtime that has them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ltsim.errors import ConfigError
from ltsim.plan import Chunk, Keep, OpKind, Plan, Slice, Tiling
from ltsim.strategies.base import PlanContext, deal_replicas
from ltsim.strategies.deepspeed_cp import check_no_pipeline
from ltsim.strategies.lowering import DEFAULT_PASSES, lower
from ltsim.strategies.offload import offload
from ltsim.strategies.schedule import (Action, Layout, Mem, Schedule, check_chunk_count, keep_policy,
                                      ulysses_layout)

NAME = "alst"
CP_KIND = "ulysses"  # its sequence parallelism over parallel.cp splits heads, never ring
_ACT = Mem("act", keep=Keep.ALL)  # a layer's activations while its recompute's graph lives


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    ulysses: bool = True  # sequence parallelism over parallel.cp ranks (false: parallel.cp = 1)
    tiled_mlp: bool = True
    tiled_loss: bool = True
    offload_checkpoints: bool = True  # each layer's input to host memory (recompute "full")
    offload_async: bool = False  # copies beside compute (ALST's reference code copies in line)
    offload_optimizer: bool = True  # optimizer state and fp32 gradients in host memory

    ONLY_WITH = {"offload_async": ("offload_checkpoints", True)}


def layout(ctx: PlanContext, options: Options) -> Layout:
    """The lockstep layout with Ulysses over the cp ranks; refuses what ALST cannot run."""
    check_no_pipeline(ctx, NAME)
    par = ctx.parallel
    if not options.ulysses and par.cp > 1:
        raise ConfigError("parallel.cp", "1 when strategy.ulysses is false (without sequence "
                          "parallelism each GPU trains its own sequence)", par.cp,
                          "set parallel.cp = 1, or strategy.ulysses = true")
    grid = ulysses_layout(par, ctx.model.num_layers, ctx.model.num_attention_heads)
    if options.offload_checkpoints and par.recompute != "full":
        raise ConfigError("parallel.recompute", '"full" with strategy.offload_checkpoints (the '
                          "checkpoints offloaded are the layer inputs)", par.recompute,
                          'set parallel.recompute = "full", or strategy.offload_checkpoints = false')
    return grid


def sequence_actions(chunk: int, layers: tuple[int, int], keep: Keep, tiling: Tiling
                     ) -> list[Action]:
    """Forward layer by layer and the head, then backward of the head and, from the last layer
    down, each layer (preceded by its recompute when only its input was kept)."""
    full = keep is Keep.INPUT
    first, stop = layers
    out = [Action(OpKind.F, chunk, keep, allocs=(Mem("ckpt"),) if full else (Mem("act"),),
                  layers=(l, l + 1), head=False, name=f"L{l}", tiling=tiling)
           for l in range(first, stop)]
    head = (stop, stop)  # no layers: the final norm, the LM head and the loss
    out.append(Action(OpKind.F, chunk, Keep.ALL, allocs=(_ACT,), layers=head, name="head",
                      tiling=tiling))
    out.append(Action(OpKind.B, chunk, Keep.ALL, frees=(_ACT,), layers=head, name="head",
                      tiling=tiling))
    for l in reversed(range(first, stop)):
        one = (l, l + 1)
        if full:
            out.append(Action(OpKind.R, chunk, keep, allocs=(_ACT,), layers=one, head=False,
                              name=f"L{l}", tiling=tiling))
            out.append(Action(OpKind.B, chunk, keep, frees=(_ACT, Mem("ckpt")), layers=one,
                              head=False, name=f"L{l}", tiling=tiling))
        else:
            out.append(Action(OpKind.B, chunk, keep, frees=(Mem("act"),), layers=one, head=False,
                              name=f"L{l}", tiling=tiling))
    return out


def schedule(batch: tuple[int, ...], ctx: PlanContext, options: Options, grid: Layout
             ) -> Schedule:
    keep = keep_policy(ctx.parallel.recompute)
    tiling = Tiling(mlp=options.tiled_mlp, loss=options.tiled_loss)
    devices = tuple(replace(d, offload_optimizer=options.offload_optimizer) for d in grid.devices())
    chunks: list[Chunk] = []
    orders: dict[int, list[Action]] = {}
    # ArcticTraining deals the batch over every GPU (DistributedSampler) and each Ulysses group
    # runs its cp ranks' samples one after another: a replica gets cp consecutive sequences a turn
    for replica, seq_ids in enumerate(deal_replicas(batch, ctx.parallel.dp, ctx.parallel.cp)):
        device = devices[grid.device(replica, 0)]
        actions: list[Action] = []
        for seq in seq_ids:
            chunk = Chunk(len(chunks), (Slice(seq, 0, batch[seq]),), replica)
            chunks.append(chunk)
            actions += sequence_actions(chunk.index, device.layers, keep, tiling)
        orders[device.index] = actions
    return Schedule(strategy=NAME, options=asdict(options), seq_lengths=tuple(batch),
                    chunks=tuple(chunks), devices=devices, orders=orders)


def check_batch(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> None:
    """Raise ConfigError for a batch of more than MAX_CHUNKS layer steps: each layer of each
    sequence is its own ops (HF checkpointing, layer by layer)."""
    check_chunk_count(len(batch) * ctx.model.num_layers, "model.num_layers", ctx.model.num_layers,
                      what="layer steps (sequences x layers)",
                      fix="use fewer layers, or fewer sequences per global batch")


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    check_batch(batch, ctx, options)
    passes = DEFAULT_PASSES
    if options.offload_checkpoints:
        passes += (offload(("ckpt",), sync=not options.offload_async),)
    grid = layout(ctx, options)
    return lower(schedule(batch, ctx, options, grid), grid, passes)
