"""Memory of one ALST decoder layer, per local token, from its allocations on fake tensors (CPU).

ALST's runs (validation/papers/alst.md) use HF Transformers' Llama with Liger's kernels, DeepSpeed's
Ulysses attention (UlyssesSPAttentionHF), DeepSpeed's TiledMLP and FlashAttention-2. No GPU run of
that stack exists in shared/data, and none was available. This script rebuilds one such layer from
the allocations each part makes, read in its source, and counts them with PyTorch's MemTracker
(torch.distributed._tools.mem_tracker) under FakeTensorMode: shapes and dtypes are real, nothing
is computed, so Llama-3.1-8B's layer at 64K local tokens takes a second on a CPU.

The method is first checked against a real GPU: ``--calibrate`` runs Hugging Face's own
LlamaDecoderLayer (needs ``transformers``) the way validation/papers/alst_layer_memory.py ran it on
an H100 (``torch.cuda.max_memory_allocated``, alst_layer_memory-h100.json), and prints both.

The parts, each written here from what its source allocates and saves (not its code):
- RMSNorm as Liger's LigerRMSNormFunction (liger_kernel/ops/rms_norm.py, >= 0.6.1 as ArcticTraining
  requires): saves its input X and the fp32 1/rms per row; backward writes dX into dY's storage
  (``in_place``, LigerRMSNorm's default) and sums a per-SM fp32 dW;
- RoPE as Liger's LigerRopeFunction: rotates q and k in place, saves cos and sin;
- Ulysses as UlyssesSPAttentionHF (deepspeed/runtime/sequence_parallel/ulysses_sp.py): per q, k, v a
  contiguous [ws, s_l, b, h_l, d] copy, the all-to-all's output, then a contiguous [b, h_l, s, d]
  copy the attention reads; the output's all-to-all back and a contiguous [s_l, b, h] copy that
  o_proj saves. The all-to-all is a Function whose output (and gradient) is a new tensor of its
  input's size, as NCCL's is; K/V heads are repeated first when SP exceeds the K/V heads;
- attention as FlashAttention-2 (flash_attn_interface.py and csrc/flash_attn/flash_api.cpp,
  mha_fwd / mha_bwd): saves q, k, v, out and the fp32 log-sum-exp [b, h, s]; backward allocates
  dq, dk, dv, the fp32 dq accumulator [b, s, h, d], the fp32 softmax_d [b, h, s], and, when K/V
  heads are fewer than query heads, dk and dv expanded to every query head before the sum;
- the MLP as DeepSpeed's TiledMLP (ceil(s_l / hidden) shards; saves its input; backward re-runs
  each shard's forward with grad into a zero-filled dX) or, untiled, Liger's SwiGLU
  (LigerSiLUMulFunction: saves gate and up, backward writes their gradients into them);
- the layer under gradient checkpointing (HF's ``gradient_checkpointing``): the forward keeps the
  input, backward re-runs the layer then back-propagates.

    python validation/papers/alst_layer_emulation.py                 # ALST's layer at SP 1, 8, 32
    python validation/papers/alst_layer_emulation.py --calibrate     # HF's layer, beside the H100

Not a test, and torch-only (ltsim's simulator does not need it).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils.checkpoint import checkpoint

HERE = Path(__file__).resolve().parent
LLAMA_31_8B = dict(hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128)
H100_SMS = 132  # Liger's per-SM dW partial sums


class LigerLikeRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32)
        y = torch.empty_like(x)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        partial = torch.empty((H100_SMS, x.shape[-1]), dtype=torch.float32)
        dy.mul_(1.0)  # dX written over dY
        return dy, partial.sum(0).to(weight.dtype)


class LigerLikeRope(torch.autograd.Function):
    """One of q, k: rotated in place (no new tensor), cos and sin saved."""

    @staticmethod
    def forward(ctx, t, cos, sin):
        ctx.save_for_backward(cos, sin)
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(1.0), None, None


class AllToAll(torch.autograd.Function):
    """An all-to-all within the SP group: the output (and in backward the gradient) is a new
    tensor of the input's size."""

    @staticmethod
    def forward(ctx, x):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.empty_like(grad)


class FlashAttention2Like(torch.autograd.Function):
    """q [b, s, h, d], k and v [b, s, h_kv, d] -> out [b, s, h, d]."""

    @staticmethod
    def forward(ctx, q, k, v):
        b, s, h, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty((b, h, s), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        b, s, h, d = q.shape
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        rounded = 128 * math.ceil(s / 128)
        dq_accum = torch.empty((b, rounded, h, d), dtype=torch.float32)
        softmax_d = torch.empty((b, h, rounded), dtype=torch.float32)
        if k.shape[2] != h:  # GQA: gradients per query head, then summed per K/V head
            dk_expanded = torch.empty((b, k.shape[1], h, d), dtype=k.dtype)
            dv_expanded = torch.empty((b, v.shape[1], h, d), dtype=v.dtype)
            dk.copy_(dk_expanded.view(b, k.shape[1], k.shape[2], -1, d).sum(3))
            dv.copy_(dv_expanded.view(b, v.shape[1], v.shape[2], -1, d).sum(3))
            del dk_expanded, dv_expanded
        dq.copy_(dq_accum)
        del dq_accum, softmax_d
        return dq, dk, dv


class SwiGLULike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return torch.empty_like(gate)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return gate.mul_(1.0), up.mul_(1.0)  # written over the saved inputs


def mlp(layer, x):
    # F.linear rather than the modules: MemTracker's module hooks cannot follow a forward run
    # inside an autograd Function (TiledMLP's shards)
    gate, up = F.linear(x, layer.gate.weight), F.linear(x, layer.up.weight)
    return F.linear(SwiGLULike.apply(gate, up), layer.down.weight)


class TiledMLPLike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, x, shards, *weights):
        ctx.layer, ctx.shards = layer, shards
        ctx.save_for_backward(x)
        with torch.no_grad():
            outs = [mlp(layer, part) for part in torch.chunk(x, shards, dim=-2)]
        return torch.cat(outs, dim=-2)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        hidden = x.shape[-1]
        flat = x.detach().reshape(-1, hidden)
        incoming = grad.reshape(-1, hidden)
        x_grad = torch.zeros_like(flat)
        step = math.ceil(flat.shape[0] / ctx.shards)
        for i, part in enumerate(torch.chunk(flat, ctx.shards, dim=0)):
            part.requires_grad_(True)
            part.grad = x_grad.narrow(0, i * step, part.shape[0])
            with torch.enable_grad():
                out = mlp(ctx.layer, part)
            torch.autograd.backward(out, incoming.narrow(0, i * step, part.shape[0]))
        return (None, x_grad.view(x.shape), None) + (None,) * len(ctx.needs_input_grad[3:])


class Layer(torch.nn.Module):
    """One Llama decoder layer on one SP rank: s_l local tokens, heads split over ``sp``."""

    def __init__(self, shape: dict, sp: int, tiled_mlp: bool) -> None:
        super().__init__()
        h, f, d = shape["hidden"], shape["ffn"], shape["head_dim"]
        self.shape, self.sp, self.tiled_mlp = shape, sp, tiled_mlp
        self.norm1 = torch.nn.Parameter(torch.empty(h))
        self.norm2 = torch.nn.Parameter(torch.empty(h))
        self.q = torch.nn.Linear(h, shape["heads"] * d, bias=False)
        self.k = torch.nn.Linear(h, shape["kv_heads"] * d, bias=False)
        self.v = torch.nn.Linear(h, shape["kv_heads"] * d, bias=False)
        self.o = torch.nn.Linear(shape["heads"] * d, h, bias=False)
        self.gate = torch.nn.Linear(h, f, bias=False)
        self.up = torch.nn.Linear(h, f, bias=False)
        self.down = torch.nn.Linear(f, h, bias=False)

    def _to_heads(self, t, heads):
        """[b, s_l, heads, d] -> [b, heads / sp, s_l * sp, d] as UlyssesSPAttentionHF does."""
        b, s_l, _, d = t.shape
        sp = self.sp
        if sp == 1:
            return t.transpose(1, 2)
        if heads < sp:  # K/V heads repeated up to SP
            t = t.repeat_interleave(sp // heads, dim=2)
            heads = sp
        t = t.transpose(0, 1)  # [s_l, b, heads, d] (a view for b = 1)
        t = t.reshape(s_l, b, sp, heads // sp, d).permute(2, 0, 1, 3, 4).contiguous()
        t = AllToAll.apply(t).reshape(sp * s_l, b, heads // sp, d).contiguous()
        return t.permute(1, 2, 0, 3).contiguous()  # [b, h_l, s, d]

    def _from_heads(self, out):
        """[b, s, h_l, d] -> [b, s_l, h]."""
        if self.sp == 1:
            return out.reshape(out.shape[0], out.shape[1], -1)
        b, s, h_l, d = out.shape
        sp, s_l = self.sp, s // self.sp
        t = out.transpose(0, 1).reshape(s, b, h_l * d)
        t = AllToAll.apply(t.reshape(sp, s_l, b, h_l * d).contiguous())
        t = t.permute(1, 2, 0, 3).reshape(s_l, b, sp * h_l * d).contiguous()
        return t.transpose(0, 1)

    def forward(self, x, cos, sin):
        shape = self.shape
        b, s_l, h = x.shape
        d = shape["head_dim"]
        normed = LigerLikeRMSNorm.apply(x, self.norm1)
        q = self.q(normed).view(b, s_l, shape["heads"], d)
        k = self.k(normed).view(b, s_l, shape["kv_heads"], d)
        v = self.v(normed).view(b, s_l, shape["kv_heads"], d)
        q, k = LigerLikeRope.apply(q, cos, sin), LigerLikeRope.apply(k, cos, sin)
        q, k, v = (self._to_heads(q, shape["heads"]), self._to_heads(k, shape["kv_heads"]),
                   self._to_heads(v, shape["kv_heads"]))
        out = FlashAttention2Like.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.o(self._from_heads(out))
        normed = LigerLikeRMSNorm.apply(x, self.norm2)
        if self.tiled_mlp:
            shards = math.ceil(s_l / h)
            y = TiledMLPLike.apply(self, normed, shards, self.gate.weight, self.up.weight,
                                   self.down.weight)
        else:
            y = mlp(self, normed)
        return x + y


def _total(tracker: MemTracker, which: str) -> int:
    return sum(v["Total"] for v in tracker.get_tracker_snapshot(which).values())


def measure_layer(make, local_tokens: int, hidden: int) -> dict[str, int]:
    """One checkpointed layer, forward then backward, on fake tensors: the backward's peak above
    what was held before it (``bwd_peak``, the recompute with it), in bytes. The checkpointed
    forward keeps only its input, so there is nothing else to report."""
    with FakeTensorMode(), warnings.catch_warnings():
        # MemTracker warns on the None gradients an autograd Function returns for non-tensors
        warnings.filterwarnings("ignore", message="Expected a tensor or a traceable")
        torch.set_default_dtype(torch.bfloat16)
        try:
            layer, args = make(local_tokens)
            x = torch.empty(1, local_tokens, hidden, requires_grad=True)
            tracker = MemTracker()
            tracker.track_external(layer)
            with tracker:
                x = x * 1  # tracked from here: the checkpoint (layer input)
                y = checkpoint(layer, x, *args, use_reentrant=False)
                grad = torch.empty_like(y)
                before_bwd = _total(tracker, "current")
                y.backward(grad)
                peak = _total(tracker, "peak")
        finally:
            torch.set_default_dtype(torch.float32)
    return {"bwd_peak": peak - before_bwd}


def alst_layer(sp: int, tiled_mlp: bool, shape: dict = LLAMA_31_8B):
    def make(local_tokens: int):
        layer = Layer(shape, sp, tiled_mlp)
        cos = torch.empty(1, local_tokens, shape["head_dim"])
        return layer, (cos, torch.empty_like(cos))
    return make


def hf_layer(shape: dict = LLAMA_31_8B):
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama as ml

    config = LlamaConfig(hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
                         num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                         head_dim=shape["head_dim"], num_hidden_layers=1)
    config._attn_implementation = "sdpa"

    def make(local_tokens: int):
        layer = ml.LlamaDecoderLayer(config, layer_idx=0)
        positions = torch.arange(local_tokens)[None]
        cos_sin = ml.LlamaRotaryEmbedding(config=config)(torch.empty(1, 1, shape["hidden"]),
                                                          positions)

        class Call(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layer = layer

            def forward(self, x):
                out = self.layer(x, position_ids=positions, position_embeddings=cos_sin)
                return out[0] if isinstance(out, tuple) else out
        return Call(), ()
    return make


def per_token(make, hidden: int, tokens: tuple[int, int]) -> dict[str, float]:
    """Bytes per local token: the slope between two lengths (so weights, their gradients and
    per-shard buffers, which do not grow with tokens, drop out), and the intercept."""
    low, high = (measure_layer(make, t, hidden) for t in tokens)
    out = {}
    for key in low:
        slope = (high[key] - low[key]) / (tokens[1] - tokens[0])
        out[key + "_per_token"] = slope
        out[key + "_fixed"] = low[key] - slope * tokens[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true",
                        help="HF's LlamaDecoderLayer beside the H100 measurement")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    hidden = LLAMA_31_8B["hidden"]
    rows = []
    if args.calibrate:
        h100 = json.loads((HERE / "alst_layer_memory-h100.json").read_text())["rows"]
        print("| local tokens | H100 bwd peak / token (checkpointed) | fake, CPU |")
        print("|---:|---:|---:|")
        for row in h100:
            if row.get("mode") != "checkpointed":
                continue
            got = measure_layer(hf_layer(), row["seq"], hidden)
            rows.append({"layer": "hf", "tokens": row["seq"], **got})
            print(f"| {row['seq']:,} | {row['bwd_peak_per_token']:,.0f} | "
                  f"{got['bwd_peak'] / row['seq']:,.0f} |")
    else:
        print("| layer | SP | recompute + backward peak / local token |")
        print("|---|---:|---:|")
        for tiled in (True, False):
            for sp in (1, 8, 32):
                got = per_token(alst_layer(sp, tiled), hidden, (32768, 65536))
                rows.append({"layer": "alst", "sp": sp, "tiled_mlp": tiled, **got})
                name = "Liger, Ulysses, FA2, " + ("tiled MLP" if tiled else "Liger SwiGLU")
                print(f"| {name} | {sp} | {got['bwd_peak_per_token']:,.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
