"""memory.csv: activation bytes one transformer layer keeps for its backward, per token.

A one-layer forward of the model's per-rank shape (the executor's layer: norm, QKV, RoPE, causal
attention, output projection, residual, norm, MLP, residual; TP shards heads and ffn as Megatron
does, without sequence parallelism, so norm inputs are full width on every rank) is run at a few
token counts under three recompute policies:
- `none`: everything autograd saves;
- `selective`: the attention core (SDPA) wrapped in a reentrant checkpoint, keeping its q, k, v
  inputs (Korthikanti et al. 2022, "Reducing Activation Recomputation", section 4.2);
- `full`: the whole layer in a reentrant checkpoint, keeping only its input.
The layer's input counts (its graph holds it); its output does not (the next layer holds it).

Counting: on CPU, tensors handed to `torch.autograd.graph.saved_tensors_hooks` are summed by
storage size, deduplicated by storage `data_ptr`, parameters excluded (counter
"saved_tensors_hooks"). On CUDA, the growth of `torch.cuda.memory_allocated` over the forward,
minus the output plus the input (counter "cuda_allocator").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ltsim.executor import kernels
from ltsim.profiler.attention import sdpa_slice
from ltsim.profiler.shapes import ShardShape
from ltsim.profiler.tables import Point, Row, make_point
from ltsim.profiler.timing import TORCH_DTYPES

RECOMPUTE = ("none", "selective", "full")
KEY_FIELDS = ("model", "tp", "recompute", "num_tokens")

Layer = Callable[[torch.Tensor], torch.Tensor]


def memory_points(shards: Sequence[ShardShape], tokens: Sequence[int]) -> tuple[Point, ...]:
    return tuple(make_point(KEY_FIELDS, model=shard.model, tp=shard.tp, recompute=recompute,
                            num_tokens=num_tokens, shard=shard)
                 for shard in shards for recompute in RECOMPUTE for num_tokens in tokens)


def _params(shard: ShardShape, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    h, attn = shard.hidden_size, shard.num_heads * shard.head_dim
    shapes = {"norm1": (h,), "qkv": (shard.qkv_width, h), "proj": (h, attn), "norm2": (h,),
              "up": (shard.up_width, h), "down": (h, shard.ffn_hidden_size)}
    if shard.arch == "gpt":
        shapes |= {"norm1_b": (h,), "norm2_b": (h,), "qkv_b": (shard.qkv_width,), "proj_b": (h,),
                   "up_b": (shard.up_width,), "down_b": (h,)}
    gen = torch.Generator(device=device).manual_seed(0)
    return {name: (torch.randn(*shape, generator=gen, device=device, dtype=dtype) * 0.02
                   ).requires_grad_(True) for name, shape in shapes.items()}


def make_layer(shard: ShardShape, recompute: str, dtype: torch.dtype, device: torch.device
               ) -> tuple[Layer, dict[str, torch.Tensor]]:
    """A one-layer forward x (T, hidden) -> (T, hidden) under a recompute policy, and its parameters."""
    w = _params(shard, dtype, device)
    llama = shard.arch == "llama"
    h, heads, kv_heads, dim = shard.hidden_size, shard.num_heads, shard.num_kv_heads, shard.head_dim

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        if llama:
            return kernels.rms_norm(x, w[name], kernels.RMS_EPS)
        return F.layer_norm(x, (h,), w[name], w[f"{name}_b"])

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return sdpa_slice(q, k, v)

    def body(x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = F.linear(norm(x, "norm1"), w["qkv"], w.get("qkv_b")).split(
            [heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        q, k, v = (t.reshape(tokens, -1, dim) for t in (q, k, v))
        if llama:
            positions = torch.arange(tokens, device=x.device)
            q, k = kernels.rope(q, positions), kernels.rope(k, positions)
            v = v.contiguous()  # as the executor: no saved view pins the whole QKV output
        attn = (checkpoint(core, q, k, v, use_reentrant=True) if recompute == "selective"
                else core(q, k, v))
        x = x + F.linear(attn.reshape(tokens, -1), w["proj"], w.get("proj_b"))
        up = F.linear(norm(x, "norm2"), w["up"], w.get("up_b"))
        if llama:
            act = kernels.swiglu(up)
        else:
            act = F.gelu(up)
        return x + F.linear(act, w["down"], w.get("down_b"))

    if recompute == "full":
        return (lambda x: checkpoint(body, x, use_reentrant=True)), w
    return body, w


def saved_bytes(layer: Layer, x: torch.Tensor, params: Sequence[torch.Tensor]) -> int:
    """Bytes of the distinct storages autograd saves during layer(x), parameters excluded."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in param_ptrs:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = layer(x)
    del out
    return sum(saved.values())


def allocated_bytes(layer: Layer, x: torch.Tensor) -> int:
    """CUDA allocator growth over layer(x), minus its output, plus its input."""
    torch.cuda.synchronize(x.device)
    base = torch.cuda.memory_allocated(x.device)
    out = layer(x)
    torch.cuda.synchronize(x.device)
    grown = torch.cuda.memory_allocated(x.device) - base
    return grown - out.untyped_storage().nbytes() + x.untyped_storage().nbytes()


def measure_memory(point: Point, device: torch.device) -> Row:
    """One memory.csv row."""
    p = point.values
    shard: ShardShape = p["shard"]
    dtype = TORCH_DTYPES[shard.dtype]
    layer, params = make_layer(shard, p["recompute"], dtype, device)
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(p["num_tokens"], shard.hidden_size, generator=gen, device=device,
                    dtype=dtype).requires_grad_(True)
    if device.type == "cuda":
        num_bytes, counter = allocated_bytes(layer, x), "cuda_allocator"
    else:
        num_bytes, counter = saved_bytes(layer, x, list(params.values())), "saved_tensors_hooks"
    return {"point": point.key, "model": shard.model, "tp": shard.tp, "recompute": p["recompute"],
            "num_tokens": p["num_tokens"], "activation_bytes": num_bytes,
            "bytes_per_token": num_bytes / p["num_tokens"], "dtype": shard.dtype,
            "hidden_size": shard.hidden_size, "counter": counter, "method": "measured"}
