"""Memory-lean layer functions: the executor saves for backward what the memory model assumes.

ltsim/memory.py counts a Llama layer's activations as Megatron-LM's fused kernels keep them
(Korthikanti et al. 2022 section 4 adapted; see ``layer_activation_parts``): a norm keeps its input,
SwiGLU keeps its input (``bias_swiglu``), RoPE keeps nothing of size T x h (TransformerEngine's
fused RoPE recomputes its tables). Written as plain autograd, the same layers keep more per token
and layer: RMSNorm also keeps ``x * rsqrt(.)`` (e*h per norm), SwiGLU also keeps ``silu(gate)``
(e*ffn), RoPE its cos/sin tables. These functions keep exactly the modelled tensors and compute
the same values and gradients (the executor's float64 tests check 1e-10).

Sources: RMSNorm, Zhang & Sennrich 2019, eq. 4 (its gradient in closed form); SwiGLU, Shazeer 2020
(silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)); RoPE in the rotate-half convention (HF Llama), whose
rotation's adjoint is (u1, u2) -> (u2, -u1).

Attention with context (``context_attention``): on CUDA torch's lower-right causal bias (flash
kernel, no mask tensor). On CPU (a dependent chunk: q_tokens < kv_tokens, causal mask aligned
bottom-right): torch's SDPA front end turns the boolean mask into a q x kv float mask and the CPU
flash kernel's autograd node keeps it, 4 * q * kv bytes per layer, which FlashAttention (causal
flag, no mask) never holds. ``bottom_right_attention`` calls the same CPU flash kernel and its
backward directly, keeping q, k, v, out and the log-sum-exp and building the mask again in
backward.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

ROPE_THETA = 10000.0  # Llama-2's base; the executor compares schedules, not checkpoints
RMS_EPS = 1e-6  # RMSNorm's epsilon (Llama's)


class _RMSNorm(torch.autograd.Function):
    """y = x * rstd * w, rstd = (mean(x^2) + eps)^-1/2; keeps x and rstd (T x 1)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return x * rstd * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, rstd, weight = ctx.saved_tensors
        xhat = x * rstd
        grad_w = (grad * xhat).reshape(-1, x.shape[-1]).sum(0)
        gw = grad * weight
        grad_x = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
        return grad_x, grad_w, None


class _SwiGLU(torch.autograd.Function):
    """silu(gate) * up of x = [gate | up]; keeps only x."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        ctx.save_for_backward(x)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        grad_gate = grad * up * sig * (1 + gate * (1 - sig))
        return torch.cat([grad_gate, grad * gate * sig], dim=-1)


# RoPE tables per positions tensor (a chunk's), shared by its layers, its recompute and its
# backward, as HF Llama and Megatron compute them once per forward; freed with the positions.
_TABLES: dict[int, dict] = {}  # id(positions) -> {(dim, dtype): (cos, sin)}


def rope_tables(positions: torch.Tensor, dim: int, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, 1, dim) at absolute ``positions`` (computed in float64, cached)."""
    per_positions = _TABLES.get(id(positions))
    if per_positions is None:  # dropped when the positions tensor dies, before its id is reused
        per_positions = _TABLES[id(positions)] = {}
        weakref.finalize(positions, _TABLES.pop, id(positions), None)
    key = (dim, dtype)
    if key not in per_positions:
        per_positions[key] = _compute_tables(positions, dim, dtype)
    return per_positions[key]


def _compute_tables(positions: torch.Tensor, dim: int, dtype: torch.dtype
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = ROPE_THETA ** (-torch.arange(0, dim, 2, dtype=torch.float64,
                                            device=positions.device) / dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos()] * 2, dim=-1).to(dtype)[:, None, :]
    sin = torch.cat([angles.sin()] * 2, dim=-1).to(dtype)[:, None, :]
    return cos, sin


def _rotate(x: torch.Tensor, sign: int) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([-x2, x1], dim=-1) if sign > 0 else torch.cat([x2, -x1], dim=-1)


class _Rope(torch.autograd.Function):
    """Rotate-half RoPE of x (T, H, D); keeps only the positions (int64, T)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = rope_tables(positions, x.shape[-1], x.dtype)
        ctx.save_for_backward(positions)
        return x * cos + _rotate(x, 1) * sin

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (positions,) = ctx.saved_tensors
        cos, sin = rope_tables(positions, grad.shape[-1], grad.dtype)
        return grad * cos + _rotate(grad * sin, -1), None


def _bottom_right_mask(num_q: int, num_k: int, like: torch.Tensor) -> torch.Tensor:
    """Additive mask: query j sees keys [0, num_k - num_q + j]."""
    keep = torch.ones(num_q, num_k, dtype=torch.bool, device=like.device).tril(num_k - num_q)
    return torch.zeros(num_q, num_k, dtype=like.dtype, device=like.device).masked_fill_(
        ~keep, float("-inf"))


class _BottomRightAttention(torch.autograd.Function):
    """CPU flash attention of q (1, Hq, T, D) over k, v (1, Hkv, L, D), L >= T, bottom-right causal;
    keeps q, k, v, out, lse (GQA handled by the kernel)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = _bottom_right_mask(q.shape[-2], k.shape[-2], q)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        mask = _bottom_right_mask(q.shape[-2], k.shape[-2], q)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad.contiguous(), q, k, v, out, lse, 0.0, False, attn_mask=mask)


def bottom_right_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of the last T of L positions (see the module docstring); CPU tensors."""
    return _BottomRightAttention.apply(q, k, v)


# How `context_attention` applies the mask, per device type (the profiler's ``mask`` column)
CONTEXT_MASK = {"cpu": "cpu_flash_bottom_right", "cuda": "causal_lower_right"}


def context_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of q (1, Hq, T, D), the last T of L positions, over k, v (1, Hkv, L, D).

    CPU: ``bottom_right_attention``. CUDA: SDPA with torch's ``causal_lower_right`` bias, which
    runs the flash kernel with its causal flag (bottom-right aligned when L > T) and no mask
    tensor, falling back to the memory-efficient kernel's lower-right mode; K/V are expanded to
    the query heads first when Hkv < Hq, since that path takes no ``enable_gqa``. The profiler
    times this same function for attention.csv's rows with context.
    """
    if q.device.type == "cpu":
        return bottom_right_attention(q, k, v)
    from torch.nn.attention.bias import causal_lower_right

    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v,
                                          attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps)


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for x = [gate | up] along the last dimension."""
    return _SwiGLU.apply(x)


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (HF Llama convention) of x (T, H, D) at absolute positions (T,)."""
    return _Rope.apply(x, positions)
