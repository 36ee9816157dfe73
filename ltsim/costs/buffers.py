"""Bytes of buffers and static memory, from the memory model (ltsim/memory.py), per GPU.

A buffer's bytes come from its kind, its work (tokens, layers, split, embedding / head) and, for
activations, what the forward keeps (Keep.ALL = Megatron recompute "none", SELECTIVE = "selective").
These are tensor bytes: the allocator's allowance (fragmentation, CUDA context) is applied once, to
the device limit (TableCostModel.memory_limit_bytes), never to buffers.
"""

from __future__ import annotations

from functools import lru_cache

import ltsim.memory as mem
from ltsim.model import ModelSpec
from ltsim.parallel import ParallelConfig
from ltsim.plan import NO_TILING, Buffer, Device, Keep, OpKind, Split, Tiling
from ltsim.units import dtype_bytes

_RECOMPUTE = {Keep.ALL: "none", Keep.SELECTIVE: "selective", Keep.INPUT: "full"}


@lru_cache(maxsize=256)  # frozen, and asked for every op's working set
def as_parallel(split: Split) -> ParallelConfig:
    """The degrees memory.py reads (tp, cp, cp_kind, sequence parallelism) of one split."""
    return ParallelConfig(tp=split.tp, cp=split.cp, cp_kind=split.cp_kind, sequence_parallel=split.sp)


class BufferCosts:
    """``sdpa_output_copy``: attention runs as the executor's per-slice SDPA, whose concatenated
    output is a second copy of the attention output in a layer's activations
    (memory.attention_output_copy_bytes_per_token). ``context_mask_bias``: a slice with context
    runs SDPA with a boolean mask (profiles.SDPA_BOOL_MASK_KERNEL), which torch turns into an
    additive bias of the query dtype, q x kv elements broadcast over the heads, that the
    attention backward keeps (its saved ``attn_bias``): model-dtype bytes per query and key, per
    layer, beside the layer's activations. ``loss_kernel``: the cross entropy's kernel
    (memory.LOSS_KERNELS), which sets what the LM head's loss keeps and holds."""

    def __init__(self, model: ModelSpec, *, sdpa_output_copy: bool = False,
                 context_mask_bias: bool = False, loss_kernel: str = "torch") -> None:
        self.model, self.sdpa_output_copy = model, sdpa_output_copy
        self.context_mask_bias, self.loss_kernel = context_mask_bias, loss_kernel
        self.e = dtype_bytes(model.dtype)
        self.per_token = lru_cache(maxsize=4096)(self._per_token)
        # per device: every plan's compile asks it of every device (a sweep: thousands of times)
        self.static_bytes = lru_cache(maxsize=4096)(self._static_bytes)

    def bytes(self, buffer: Buffer) -> int:
        work = buffer.work
        per_token = self.per_token(buffer.kind, buffer.keep, work.num_layers, work.split,
                                   work.embed, work.head, work.tiling)
        total = per_token * work.num_tokens
        if buffer.kind == "act" and buffer.keep in (Keep.ALL, Keep.SELECTIVE):
            # A slice with context attends to K/V concatenated from its earlier chunks and its own;
            # autograd saves that concatenation per layer for the attention backward (the executor's
            # torch.cat before SDPA, ChunkFlow's and flash-attn's K/V-cache calls alike), a copy of
            # the context's K/V beside the sequence's kv state.
            context = sum(s.start for s in work.slices)
            if context:
                total += context * self.per_token("kv", Keep.ALL, work.num_layers, work.split,
                                                  False, False, NO_TILING)
                if self.context_mask_bias:  # queries x keys of each slice with context, over cp
                    total += (self.e * work.num_layers / work.split.cp
                              * sum((s.stop - s.start) * s.stop for s in work.slices if s.start))
        return int(total)

    def _per_token(self, kind: str, keep: Keep, layers: int, split: Split, embed: bool,
                   head: bool, tiling: Tiling) -> float:
        """Bytes per token of the work (the work's tokens, split over cp as memory.py counts)."""
        m, par = self.model, as_parallel(split)
        if kind == "act":
            value = mem.activation_bytes_per_token(m, par, num_layers=layers,
                                                   recompute=_RECOMPUTE.get(keep, "none"),
                                                   tiled_mlp=tiling.mlp,
                                                   sdpa_output_copy=self.sdpa_output_copy)
            if embed:
                value += mem.embedding_bytes_per_token(m, par)
            if head:
                value += mem.logits_bytes_per_token(m, par, tiled=tiling.loss,
                                                    loss_kernel=self.loss_kernel)
            return value
        if kind == "ckpt":
            return mem.activation_bytes_per_token(m, par, num_layers=layers, recompute="full")
        if kind == "input":
            return m.hidden_size * self.e / (split.tp if split.sp else 1) / split.cp
        if kind == "kv":
            return mem.kv_state_bytes_per_token(m, par, num_layers=layers)
        if kind == "kv_grad":
            return mem.kv_grad_bytes_per_token(m, par, num_layers=layers)
        raise ValueError(f"unknown buffer kind {kind!r}")

    def working_bytes(self, kind, work, keep: Keep | None = None) -> int:
        """Transient bytes of one op beyond its buffers (memory.py): the LM head's loss over the
        whole work, or over one tile when the loss is tiled; a tiled MLP's one shard (its layers
        run one at a time, so one shard whatever their number); in backward, one layer's
        gradients (memory.backward_working_bytes_per_token) beside that shard. The larger of the
        layers' and the head's: the head's loss is done before the layers' backward starts.

        A backward after a full recompute (``keep`` Keep.INPUT) holds the one-layer working set
        its R op allocated (pipeline.kept_actions: a layer's activations, with the logits) from
        the R's start to its own end. Megatron runs the loss's backward before it rebuilds any
        layer, so the loss never meets that layer's activations: the loss's part is counted
        less them (beside the layers' gradients, which do meet them)."""
        if kind is not OpKind.F and kind is not OpKind.B and kind is not OpKind.R:
            return 0
        backward = kind is OpKind.B
        par, tiling, tokens = as_parallel(work.split), work.tiling, work.num_tokens
        mlp = loss = 0.0
        if tiling.mlp and work.num_layers:
            mlp = mem.tiled_mlp_working_bytes(self.model, par, tokens=tokens, backward=backward)
        if backward and work.num_layers:
            mlp += tokens * mem.backward_working_bytes_per_token(self.model, par)
        if work.head and tiling.loss:
            loss = mem.tiled_loss_working_bytes(self.model, par, tokens=tokens, backward=backward,
                                                loss_kernel=self.loss_kernel)
        elif work.head:
            loss = tokens * mem.loss_working_bytes_per_token(self.model, par, backward=backward,
                                                             loss_kernel=self.loss_kernel)
        if loss and backward and keep is Keep.INPUT and work.num_layers:
            first = work.layers[0]
            loss -= self.bytes(Buffer("act", work.evolve(layers=(first, first + 1), embed=False,
                                                         head=False), Keep.ALL))
        return int(max(mlp, loss))

    def _static_bytes(self, device: Device) -> mem.StaticMemory:
        par = ParallelConfig(tp=device.tp, dp=device.num_shards, zero_stage=device.zero_stage,
                             grad_dtype=device.grad_dtype, optimizer_dtype=device.optimizer_dtype)
        return mem.static_memory_bytes(self.model, par, num_layers=device.num_layers,
                                       has_embedding=device.embed, has_head=device.head,
                                       offload_optimizer=device.offload_optimizer)
