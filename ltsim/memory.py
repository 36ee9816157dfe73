"""Memory model: static memory (weights, gradients, optimizer state by ZeRO stage) of one GPU of a
pipeline stage, and the bytes per token that activations, logits and K/V state keep.

Conventions
-----------
- Everything is bytes on ONE GPU. "Per token" means per token of the micro-batch (the chunk) that
  the simulated device (tp x cp GPUs in lockstep) processes: the chunk's tokens are split over the
  cp GPUs (ring CP: sequence shards; Ulysses: heads after the all-to-all, same bytes), and, with
  sequence parallelism, over the tp GPUs. Multiply by the chunk's token count; do not divide by cp.
- Mixed-precision Adam as Megatron-LM runs it by default with bf16 (megatron/training/arguments.py
  forces accumulate_allreduce_grads_in_fp32 for bf16): weights in the model dtype (2 B), fp32 main
  gradients (4 B), fp32 master weights and two fp32 Adam moments (12 B): 18 B per parameter, the
  rule of Megatron-LM's megatron/training/theoretical_memory_usage.py.
- Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv 2205.05198), section 4 and Table 2, adapted to FlashAttention (no
  s x s score matrix is stored, only a fp32 log-sum-exp per head), GQA and SwiGLU; see
  ``activation_bytes_per_token``. fp32 per-token norm statistics (4-8 B per norm) and int64 labels
  are not counted (< 0.1% of a layer's activations at hidden >= 256).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ltsim.errors import ConfigError
from ltsim.model import (ModelSpec, embedding_parameters, head_parameters, layer_parameters,
                         lora_layer_parameters, vocab_parameters)
from ltsim.parallel import RECOMPUTE, ParallelConfig
from ltsim.units import GiB, dtype_bytes

FP32_BYTES = 4
TOKEN_ID_BYTES = 8  # int64 input ids (Megatron-LM theoretical_memory_usage: "8 * s * b")
DROPOUT_MASK_BYTES = 1  # one byte per element (Korthikanti et al. 2022, section 4.1)
LOSS_TILE_BYTES = GiB  # ALST's TiledFusedLogitsLoss: ceil(b s V 4 B / 1 GiB) shards (PAPERS.md 6.1)
#: The cross-entropy kernels a scenario names (hardware.loss_kernel): "torch", PyTorch's
#: cross_entropy on the logits cast to fp32 (ltsim's executor; Megatron-LM's vocab-parallel cross
#: entropy also works on fp32 logits), and "fused", flash-attn's CrossEntropyLoss (its xentropy
#: kernel; llm-foundry's default loss_fn for MPT), which reads the model-dtype logits and keeps
#: them, not an fp32 copy (``logits_bytes_per_token``, ``loss_working_bytes_per_token``).
LOSS_KERNELS = ("torch", "fused")


# ---------------------------------------------------------------------------------------------
# Static memory


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticMemory:
    """Model states resident on one GPU for the whole iteration, in bytes."""

    num_parameters: float  # parameters this GPU's TP shard trains (before ZeRO sharding): all of
    # them, or with LoRA the adapters
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    host_bytes: float = 0.0  # gradients and optimizer state offloaded to host memory (not in total)
    gathered_bytes: float = 0.0  # ZeRO-3: its largest module gathered whole, with its gradients
    gathered_grads_bytes: float = 0.0  # of which those gradients

    @property
    def total_bytes(self) -> float:
        """Bytes on the device."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.gathered_bytes


def _check_layers(model: ModelSpec, num_layers: int) -> None:
    if (isinstance(num_layers, bool) or not isinstance(num_layers, int)
            or not 0 <= num_layers <= model.num_layers):
        raise ConfigError("num_layers", f"an integer in [0, {model.num_layers}]", num_layers,
                          f"model {model.name} has {model.num_layers} layers")


def _kv_divisor(model: ModelSpec, parallel: ParallelConfig) -> int:
    """Split of K/V over one device's GPUs: by KV head, replicated past num_kv_heads."""
    if parallel.cp_kind == "ulysses":  # heads split over tp*cp after the all-to-all
        return min(parallel.tp * parallel.cp, model.num_kv_heads)
    return min(parallel.tp, model.num_kv_heads) * parallel.cp  # ring: heads over tp, tokens over cp


def layer_parameters_per_gpu(model: ModelSpec, tp: int) -> float:
    """Parameters of one layer on one GPU of a tp group (Megatron-LM's TP layout)."""
    params = layer_parameters(model)
    sharded = params.num_q + params.num_out + params.num_mlp
    return sharded / tp + params.num_kv / min(tp, model.num_kv_heads) + params.num_replicated


def stage_parameters_per_gpu(model: ModelSpec, tp: int, *, num_layers: int, has_embedding: bool,
                             has_head: bool) -> float:
    """Parameters one GPU holds for a pipeline stage of ``num_layers`` layers.

    Vocab tables are vocab-parallel (split by tp); learned positions and the final norm are
    replicated. A tied LM head on a stage without the embedding keeps its own copy of the vocab
    matrix, synchronised with the first stage (Megatron-LM's shared embedding for pp > 1).
    """
    _check_layers(model, num_layers)
    vocab = vocab_parameters(model)
    total = num_layers * layer_parameters_per_gpu(model, tp)
    if has_embedding:
        positions = embedding_parameters(model) - vocab
        total += vocab / tp + positions
    if has_head:
        head = head_parameters(model)
        final_norm = model.norm_size * model.hidden_size
        total += final_norm + (head - final_norm) / tp
        if model.tied_embeddings and not has_embedding:
            total += vocab / tp
    return total


def trainable_parameters_per_gpu(model: ModelSpec, tp: int, *, num_layers: int, has_embedding: bool,
                                 has_head: bool) -> float:
    """Parameters one GPU trains for a stage: all of them, or with LoRA (``model.lora_rank`` > 0)
    the layers' adapters only, split over tp like the matrices they adapt."""
    if not model.lora_rank:
        return stage_parameters_per_gpu(model, tp, num_layers=num_layers,
                                        has_embedding=has_embedding, has_head=has_head)
    _check_layers(model, num_layers)
    return num_layers * lora_layer_parameters(model) / tp


def optimizer_bytes_per_param(model: ModelSpec, optimizer_dtype: str = "fp32") -> int:
    """Adam's state: with "fp32" (mixed precision) an fp32 master copy (only when the model dtype
    is narrower) and two fp32 moments; with "model" two moments in the model dtype and no master
    (torch's Adam on model-dtype parameters, what ltsim's executor ran at 1acdf9d: 8 B/param in all
    with bf16 weights and gradients)."""
    if optimizer_dtype == "model":
        return 2 * dtype_bytes(model.dtype)
    width = max(FP32_BYTES, dtype_bytes(model.dtype))
    master = FP32_BYTES if dtype_bytes(model.dtype) < FP32_BYTES else 0
    return master + 2 * width


def static_memory_bytes(model: ModelSpec, parallel: ParallelConfig, *, num_layers: int,
                        has_embedding: bool, has_head: bool, distributed_optimizer: bool = True,
                        fp32_grads: bool = True, offload_optimizer: bool = False) -> StaticMemory:
    """Weights, gradients and optimizer state on one GPU of a stage holding ``num_layers`` layers.

    ZeRO shards over the dp * cp ranks that hold the same parameters (Megatron's distributed
    optimizer and DeepSpeed both shard over data x context/sequence parallel ranks): stage 1 the
    optimizer state, stage 2 also the gradients, stage 3 also the weights (Rajbhandari et al. 2020,
    ZeRO, section 5). With zero_stage 1 and fp32 gradients this is Megatron's 6 + 12/dp bytes per
    parameter. ``distributed_optimizer=False`` ignores ``parallel.zero_stage`` and replicates
    everything (Megatron without --use-distributed-optimizer: 18 B/param). ``fp32_grads=False``
    keeps gradients in the model dtype (DeepSpeed / FlexSP's 16 B/param). ``offload_optimizer``
    (DeepSpeed ZeRO-Offload, Ren et al. 2021, as ALST's recipes run it): the optimizer state and
    the fp32 gradient partitions live in host memory (``host_bytes``), the device keeps the weights
    (the gradient buckets in flight to the host are transient and not counted).
    ZeRO-3 over several shards also holds, throughout, the largest module it gathers (``gathered_
    bytes``: ``largest_module_parameters_per_gpu``, its weights and gradients in the model dtype,
    the weights only with LoRA): DeepSpeed's own estimate of a GPU's model states under ZeRO-3
    (``estimate_zero3_model_states_mem_needs``: 4 bytes per parameter of the largest layer, bf16,
    beside 18 per sharded parameter), which its prefetch and live-parameter limits bound.
    Raises ConfigError when num_layers is outside [0, model.num_layers].
    """
    num_params = stage_parameters_per_gpu(model, parallel.tp, num_layers=num_layers,
                                          has_embedding=has_embedding, has_head=has_head)
    trained = trainable_parameters_per_gpu(model, parallel.tp, num_layers=num_layers,
                                           has_embedding=has_embedding, has_head=has_head)
    stage = parallel.zero_stage if distributed_optimizer else 0
    num_shards = parallel.dp * parallel.cp
    weight_bytes = dtype_bytes(model.dtype)
    fp32_grads = fp32_grads and parallel.grad_dtype == "fp32"
    grad_bytes = max(FP32_BYTES, weight_bytes) if fp32_grads else weight_bytes

    def sharded(params: float, bytes_per_param: float, from_stage: int) -> float:
        return params * bytes_per_param / (num_shards if stage >= from_stage else 1)

    adapters = trained if model.lora_rank else 0.0  # LoRA adds its adapters to the frozen weights
    grads = sharded(trained, grad_bytes, 2)
    optimizer = sharded(trained, optimizer_bytes_per_param(model, parallel.optimizer_dtype), 1)
    weights = sharded(num_params + adapters, weight_bytes, 3)
    gathered = gathered_grads = 0.0
    if stage >= 3 and num_shards > 1:
        largest = largest_module_parameters_per_gpu(model, parallel.tp, num_layers=num_layers,
                                                    has_embedding=has_embedding, has_head=has_head)
        gathered_grads = 0.0 if model.lora_rank else largest * weight_bytes
        gathered = largest * weight_bytes + gathered_grads
    if offload_optimizer:
        host = sharded(trained, max(FP32_BYTES, weight_bytes), 1) + optimizer  # fp32 partitions
        return StaticMemory(num_parameters=trained, weights_bytes=weights, grads_bytes=0.0,
                            optimizer_bytes=0.0, host_bytes=host, gathered_bytes=gathered,
                            gathered_grads_bytes=gathered_grads)
    return StaticMemory(num_parameters=trained, weights_bytes=weights, grads_bytes=grads,
                        optimizer_bytes=optimizer, gathered_bytes=gathered,
                        gathered_grads_bytes=gathered_grads)


def largest_module_parameters_per_gpu(model: ModelSpec, tp: int, *, num_layers: int,
                                      has_embedding: bool, has_head: bool) -> float:
    """Parameters of the largest module (one weight matrix with its bias) one GPU of a stage holds,
    in Megatron-LM's TP layout: a vocab table (embedding, or LM head) where the stage has one,
    else a layer's fused QKV, output projection, MLP up (with gate) or MLP down projection (an HF
    model keeps gate and up apart, half that). What ZeRO-3 gathers whole at once (DeepSpeed's
    ``largest_layer_params``: the most parameters any one module holds itself)."""
    _check_layers(model, num_layers)
    largest = 0.0
    if num_layers:
        params = layer_parameters(model)
        down = model.hidden_size * model.ffn_hidden_size
        largest = max(params.num_q / tp + params.num_kv / min(tp, model.num_kv_heads),
                      params.num_out / tp, (params.num_mlp - down) / tp, down / tp)
    if has_embedding or has_head:  # a head stage holds the head, or a tied head's copy
        largest = max(largest, vocab_parameters(model) / tp)
    return largest


# ---------------------------------------------------------------------------------------------
# Activations


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ConfigError("parallel.recompute", f"one of {', '.join(RECOMPUTE)}", recompute)


def _sp_divisor(parallel: ParallelConfig) -> int:
    """Sequence parallelism shards the tensors TP would otherwise replicate (Korthikanti 4.2.2)."""
    return parallel.tp if parallel.sequence_parallel else 1


def layer_activation_parts(model: ModelSpec, recompute: str) -> tuple[float, float, float]:
    """Bytes per token one layer stores, split as (tp-replicated, tp-sharded, K/V) before division.

    Korthikanti et al. 2022 section 4.1 per token, e = dtype bytes, h hidden, f ffn, a heads:
      replicated without SP: two norm inputs 2eh, QKV input eh, MLP input eh, and for gpt two
        dropout masks 2h (10h in the paper's 2-byte units);
      sharded by TP: Q eh, attention output eh (saved by FlashAttention and by the output
        projection: one tensor), the MLP: gpt GELU input and output 2ef (the paper's 16h at f = 4h),
        llama SwiGLU input 2ef and down-projection input ef (Megatron-LM's fused bias_swiglu saves
        only its input); recompute "none" adds FlashAttention's fp32 log-sum-exp, 4a, which
        selective recompute of core attention drops (Q, K, V are its checkpoint; the output
        projection keeps the output), so with FlashAttention "none" and "selective" differ only
        by that;
      K and V: 2 * e * kv_hidden (h for MHA: the paper's 4h of Q, K, V is 2h + this).
    The paper's 5as/h term (scores, softmax, dropout) is what FlashAttention does not store; see
    ``attention_scores_bytes_per_token`` for the non-flash path.
    Full recompute keeps only the layer input, e*h, returned as replicated.
    """
    _check_recompute(recompute)
    e, h, f = dtype_bytes(model.dtype), model.hidden_size, model.ffn_hidden_size
    if recompute == "full":
        return float(e * h), 0.0, 0.0
    dropout = 2 * DROPOUT_MASK_BYTES * h if model.has_dropout else 0
    replicated = 4 * e * h + dropout
    mlp = 3 * e * f if model.gated_mlp else 2 * e * f
    lse = FP32_BYTES * model.num_attention_heads if recompute == "none" else 0
    sharded = 2 * e * h + mlp + lse
    return float(replicated), float(sharded), float(2 * e * model.kv_hidden_size)


def activation_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *, num_layers: int,
                               recompute: str, tiled_mlp: bool = False,
                               sdpa_output_copy: bool = False) -> float:
    """Bytes per chunk token kept from forward to backward for ``num_layers`` layers on one GPU.

    Per layer (see ``layer_activation_parts``), with FlashAttention:
      "none" / "selective": (replicated / sp + sharded / tp + kv / kv_split) / cp, where sp = tp
        with sequence parallelism (Korthikanti Table 2: 34sbh/t with SP, sbh(10 + 24/t) without);
      "full": the layer input, e*h / sp / cp (Table 2's 2sbh, sharded along the sequence by SP).
    Ulysses (cp_kind "ulysses", cp > 1) keeps the attention output in both layouts, and
    ``sdpa_output_copy`` (the executor's per-slice SDPA) keeps a concatenated copy of it: each adds
    ``attention_output_copy_bytes_per_token`` unless recompute is "full".
    ``tiled_mlp``: the MLP keeps only its input (ALST's TiledMLP re-runs each shard's forward in
    backward), so its intermediates (``mlp_activation_bytes_per_token``) are not kept.
    The embedding input and the logits are separate: ``embedding_bytes_per_token``,
    ``logits_bytes_per_token``. Raises ConfigError on a bad recompute or num_layers.
    """
    _check_layers(model, num_layers)
    replicated, sharded, kv = layer_activation_parts(model, recompute)
    per_layer = (replicated / _sp_divisor(parallel) + sharded / parallel.tp) / parallel.cp
    per_layer += kv / _kv_divisor(model, parallel)
    if tiled_mlp and recompute != "full":
        per_layer -= mlp_activation_bytes_per_token(model, parallel)
    if recompute != "full":
        copies = (parallel.cp > 1 and parallel.cp_kind == "ulysses") + sdpa_output_copy
        per_layer += copies * attention_output_copy_bytes_per_token(model, parallel)
    return num_layers * per_layer


def mlp_activation_bytes_per_token(model: ModelSpec, parallel: ParallelConfig) -> float:
    """The MLP intermediates one layer keeps per chunk token (the 3ef of SwiGLU, 2ef of GELU in
    ``layer_activation_parts``), split over tp and cp."""
    e, f = dtype_bytes(model.dtype), model.ffn_hidden_size
    return (3 if model.gated_mlp else 2) * e * f / parallel.tp / parallel.cp


def attention_output_copy_bytes_per_token(model: ModelSpec, parallel: ParallelConfig) -> float:
    """A second copy of one layer's attention output, per chunk token: e * heads * head_dim / tp,
    over cp. ``layer_activation_parts`` counts the output once (FlashAttention keeps it and the
    output projection saves the same tensor). Two implementations keep it twice:
    - Ulysses (``cp_kind = "ulysses"``, cp > 1): the
      attention kernel keeps its head-parallel output for its backward, and the all-to-all back
      to sequence parallel makes the tensor the output projection saves (read in DeepSpeed's
      UlyssesSPAttentionHF, deepspeed/runtime/sequence_parallel/ulysses_sp.py);
    - the executor's SDPA path (attention kernel ``torch_sdpa``, costs/buffers.py): one
      SDPA call per slice, the outputs concatenated (``torch.cat`` copies even one slice) before
      the output projection (counted on CPU: validation/executor/cpu_notes.md).
    FlashAttention's varlen call without Ulysses writes the packed output once.
    ``activation_bytes_per_token`` adds it for each."""
    e = dtype_bytes(model.dtype)
    return e * model.num_attention_heads * model.head_dim / parallel.tp / parallel.cp


def mlp_tile_tokens(model: ModelSpec, local_tokens: int) -> int:
    """Tokens of one TiledMLP shard: ALST splits a rank's s_local tokens into ceil(s_local / hidden)
    shards (arctic_training's TiledMLP, PAPERS.md 6.1 [code]): about ``hidden`` tokens each."""
    shards = max(1, math.ceil(local_tokens / model.hidden_size))
    return math.ceil(local_tokens / shards)


def loss_tile_tokens(model: ModelSpec, parallel: ParallelConfig, local_tokens: int) -> int:
    """Tokens of one tiled logits+loss shard: ceil(s_local V 4 B / 1 GiB) shards (ALST's
    TiledFusedLogitsLoss), so each shard's fp32 logits are about 1 GiB."""
    logits = local_tokens * model.vocab_size / parallel.tp * FP32_BYTES
    return math.ceil(local_tokens / max(1, math.ceil(logits / LOSS_TILE_BYTES)))


def tiled_mlp_working_bytes(model: ModelSpec, parallel: ParallelConfig, *, tokens: int,
                            backward: bool) -> float:
    """Transient bytes of a tiled MLP on one GPU: one shard's intermediates, and in backward also
    their gradients (the shard's forward is re-run with grad, then back-propagated)."""
    tile = mlp_tile_tokens(model, math.ceil(tokens / parallel.cp))
    per_token = mlp_activation_bytes_per_token(model, ParallelConfig(tp=parallel.tp))
    return tile * per_token * (2 if backward else 1)


def tiled_loss_working_bytes(model: ModelSpec, parallel: ParallelConfig, *, tokens: int,
                             backward: bool, loss_kernel: str = "torch") -> float:
    """Transient bytes of a tiled logits+loss on one GPU: one shard's logits as the loss kernel
    keeps them (fp32, or the model dtype with ``"fused"``) plus the loss's working set on them
    (``loss_working_bytes_per_token``); backward re-runs the shard's forward."""
    tile = loss_tile_tokens(model, parallel, math.ceil(tokens / parallel.cp))
    per_token = (_kept_logits_bytes(model, loss_kernel) * model.vocab_size / parallel.tp
                 + loss_working_bytes_per_token(model, ParallelConfig(tp=parallel.tp),
                                                backward=backward, loss_kernel=loss_kernel))
    return tile * per_token


def attention_scores_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                                     num_layers: int, kv_tokens: float) -> float:
    """Extra bytes per chunk token WITHOUT FlashAttention (recompute "none"): per head and key, the
    softmax output (2 B) and, with dropout, its mask (1 B) and the dropout output (2 B): Korthikanti
    et al. 2022 Table 2's 5as/h term for gpt, 2as/h for llama. Split over tp and cp."""
    _check_layers(model, num_layers)
    per_key = 5 if model.has_dropout else 2
    per_layer = per_key * model.num_attention_heads * kv_tokens / (parallel.tp * parallel.cp)
    return num_layers * per_layer


def recompute_working_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                                      recompute: str) -> float:
    """Transient bytes per chunk token while one layer is rematerialised in backward.

    With full recompute the backward of each layer first recomputes that layer's activations
    with grad enabled, storing what recompute "none" stores for that one layer (Korthikanti et
    al. 2022 section 5); 0 otherwise.
    """
    _check_recompute(recompute)
    if recompute != "full":
        return 0.0
    return activation_bytes_per_token(model, parallel, num_layers=1, recompute="none")


def backward_working_bytes_per_token(model: ModelSpec, parallel: ParallelConfig) -> float:
    """Transient bytes per chunk token while one layer runs backward (layers go one at a time, so
    this does not grow with their number): the gradient arriving at the layer's output and the one
    it produces for its input (2 e h, SP-sharded), attention's dQ, dK, dV (e (h + 2 kv_h)) and
    FlashAttention-2's fp32 dQ accumulator (4 h: flash_attn's mha_bwd allocates dq_accum in fp32
    for the whole query length), split over tp and cp like the activations they mirror."""
    e, h = dtype_bytes(model.dtype), model.hidden_size
    grads = 2 * e * h / _sp_divisor(parallel) / parallel.cp
    attention = (e + FP32_BYTES) * h / parallel.tp / parallel.cp
    kv = 2 * e * model.kv_hidden_size / _kv_divisor(model, parallel)
    return grads + attention + kv


def embedding_bytes_per_token(model: ModelSpec, parallel: ParallelConfig) -> float:
    """First stage: int64 input ids, plus gpt's embedding dropout mask (h bytes, SP-sharded).

    Megatron-LM theoretical_memory_usage.py: "Input to embedding" 8sb and "Dropout in embedding
    layer" sbh.
    """
    dropout = DROPOUT_MASK_BYTES * model.hidden_size / _sp_divisor(parallel)
    return (TOKEN_ID_BYTES + (dropout if model.has_dropout else 0.0)) / parallel.cp


def logits_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                           tiled: bool = False, loss_kernel: str = "torch") -> float:
    """Last stage: final-norm input and LM-head input (e*h each, SP-sharded), fp32 logits kept for
    the cross-entropy backward (4 * vocab / tp: Megatron's vocab-parallel cross entropy saves the
    fp32 softmax) and the fp32 per-token loss. Megatron-LM theoretical_memory_usage.py counts
    "Inputs to output layer and CE loss" as 4sbh(1 + V/h) / t, the same bytes less the loss.
    ``tiled`` (ALST's tiled logits+loss): the logits are recomputed shard by shard in backward,
    so only the inputs and the loss are kept. ``loss_kernel`` "fused" (flash-attn's
    CrossEntropyLoss, flash_attn/losses/cross_entropy.py at v1.0.3): the kernel saves its input,
    the model-dtype logits (e * vocab / tp), and the fp32 log-sum-exp of each token beside the loss.
    """
    e, h = dtype_bytes(model.dtype), model.hidden_size
    inputs = 2 * e * h / _sp_divisor(parallel)
    logits = (0.0 if tiled else
              _kept_logits_bytes(model, loss_kernel) * model.vocab_size / parallel.tp)
    per_token = FP32_BYTES * (2 if loss_kernel == "fused" else 1)  # the loss (and the LSE)
    return (inputs + logits + per_token) / parallel.cp


def _kept_logits_bytes(model: ModelSpec, loss_kernel: str) -> int:
    """Bytes per vocabulary entry of the logits the loss keeps for its backward: fp32 (torch's
    log-softmax output), or the model dtype (the fused kernel's saved input)."""
    return dtype_bytes(model.dtype) if loss_kernel == "fused" else FP32_BYTES


def loss_working_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                                 backward: bool, loss_kernel: str = "torch") -> float:
    """Transient bytes per token while the LM head's loss runs, beyond what ``logits_bytes_per_token``
    keeps (the fp32 log-softmax output). Counted from the code path of ltsim/executor/model.py
    (logits = head(norm(x)); logits.float(); F.cross_entropy) and torch's log_softmax / nll_loss:
    forward holds the fp32 logits beside their log-softmax (4 B per vocab entry; the model-dtype
    logits, 2 B, are freed when the cast returns and never coexist with both); backward holds the
    gradient of the log-softmax output and the gradient of its input, both fp32 (8 B). So the loss
    peaks at 12 B per token per vocab entry (/tp), the executor's measured peak (issue 14).

    ``loss_kernel`` "fused" (flash-attn's CrossEntropyLoss): its forward writes only the per-token
    loss and log-sum-exp, never a per-entry tensor; its backward returns the logits' gradient in
    their dtype, a new tensor (llm-foundry makes the loss without ``inplace_backward``) beside the
    saved logits: e B per entry in backward, nothing in forward (2e at the peak with what
    ``logits_bytes_per_token`` keeps: 4 B in bf16, against 12)."""
    if loss_kernel == "fused":
        per_vocab = dtype_bytes(model.dtype) if backward else 0
    else:
        per_vocab = 2 * FP32_BYTES if backward else FP32_BYTES
    return per_vocab * model.vocab_size / parallel.tp / parallel.cp


def kv_state_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                             num_layers: int) -> float:
    """K and V of a chunk, 2 * e * kv_hidden per layer, split by KV head over tp (and cp).

    Dependent chunks (later pieces of the same sequence) read them, so they stay until the last
    dependent chunk's backward even when the chunk itself is fully recomputed (InfiniPipe 3.1.4,
    eq. 9's 2eD term). ``activation_bytes_per_token`` with recompute "none"/"selective" already
    includes them; add this only on top of recompute "full".
    """
    _check_layers(model, num_layers)
    return num_layers * 2 * dtype_bytes(model.dtype) * model.kv_hidden_size / _kv_divisor(
        model, parallel)


def kv_grad_bytes_per_token(model: ModelSpec, parallel: ParallelConfig, *,
                            num_layers: int) -> float:
    """Gradients of the K and V of earlier chunks, accumulated while the chunks that attend to them
    run backward (InfiniPipe 3.1.3, eq. 5's M_dkv = 2eLD/N per token); same size as the K/V."""
    return kv_state_bytes_per_token(model, parallel, num_layers=num_layers)


# ---------------------------------------------------------------------------------------------
# Allocator overhead


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatorOverhead:
    """What a device needs beyond the bytes the model tensors occupy.

    fragmentation_fraction: share of the tensor peak lost to the caching allocator's fragmentation
      and temporaries. 5% is Megatron-LM's own allowance (theoretical_memory_usage.py,
      compute_activation_memory_without_sp: "buffer for ... temporaries (5% overhead)");
      ALST (seeds/alst.md) reports fragmentation at long lengths and enables expandable segments.
    fixed_bytes: CUDA context with lazy module loading (~0.5 GiB, outside the caching allocator)
      plus NCCL communicators' buffers (NCCL_BUFFSIZE 4 MiB per channel and peer: ~0.5 GiB for a
      few communicators). ALST saw ~3 GB more from a PyTorch 2.6-2.7 barrier issue; not included.
    """

    fragmentation_fraction: float
    fixed_bytes: float

    def apply(self, peak_bytes: float) -> float:
        """Device memory needed for a tensor peak of ``peak_bytes``."""
        return peak_bytes * (1.0 + self.fragmentation_fraction) + self.fixed_bytes


ALLOCATOR_OVERHEAD = AllocatorOverhead(fragmentation_fraction=0.05, fixed_bytes=1.0 * GiB)
NO_ALLOCATOR_OVERHEAD = AllocatorOverhead(fragmentation_fraction=0.0, fixed_bytes=0.0)


def with_allocator_overhead(peak_bytes: float,
                            overhead: AllocatorOverhead = ALLOCATOR_OVERHEAD) -> float:
    """Device memory needed to hold a tensor peak: compare THIS with the device capacity (fits),
    and the bare peak with torch.cuda.max_memory_allocated (which excludes both terms)."""
    return overhead.apply(peak_bytes)
