"""Memory of one Hugging Face Llama-3.1-8B decoder layer on a GPU, per token: what ALST's layers hold.

ALST (validation/papers/alst.md) runs HF Transformers' LlamaDecoderLayer under gradient
checkpointing. This measures that layer's CUDA allocations (torch.cuda.max_memory_allocated) over
one sequence of s tokens, in bf16, attention "sdpa", on one GPU, three ways:

- ``plain``: forward with autograd, then backward: ``saved`` is what autograd keeps for backward
  (allocated after the forward, less the input and output), ``fwd_peak`` / ``bwd_peak`` the peaks
  above what was allocated before each pass;
- ``checkpointed``: the same under ``torch.utils.checkpoint`` (use_reentrant=False), as HF's
  gradient checkpointing runs it: the forward keeps only the input; the backward re-runs the
  forward and back-propagates, and ``bwd_peak`` is its peak above what was allocated before it.

Everything is reported in bytes and in bytes per token (divided by s), with the layer's weights
and the input/output sizes, so ltsim's per-layer terms (ltsim/memory.py) can be compared.

    python validation/papers/alst_layer_memory.py --out alst_layer_memory.json

Needs CUDA and `transformers`. The device tool's H100 image has both (2026-11-23).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from torch.utils.checkpoint import checkpoint

LLAMA_31_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                   max_position_embeddings=131072, vocab_size=128256, hidden_act="silu")


def _layer_and_rope(seq: int) -> tuple[torch.nn.Module, object, torch.Tensor]:
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama as ml

    config = LlamaConfig(**LLAMA_31_8B, num_hidden_layers=1, torch_dtype="bfloat16")
    config._attn_implementation = "sdpa"
    layer = ml.LlamaDecoderLayer(config, layer_idx=0).to("cuda", torch.bfloat16)
    positions = torch.arange(seq, device="cuda")[None]
    rotary = ml.LlamaRotaryEmbedding(config=config).to("cuda")
    probe = torch.zeros(1, 1, config.hidden_size, device="cuda", dtype=torch.bfloat16)
    cos_sin = rotary(probe, positions)
    return layer, cos_sin, positions


def _call(layer: torch.nn.Module, x: torch.Tensor, cos_sin: object,
          positions: torch.Tensor) -> torch.Tensor:
    out = layer(x, position_ids=positions, position_embeddings=cos_sin)
    return out[0] if isinstance(out, tuple) else out


def measure(seq: int, mode: str) -> dict[str, float]:
    layer, cos_sin, positions = _layer_and_rope(seq)
    weights = sum(p.numel() * p.element_size() for p in layer.parameters())
    x = torch.randn(1, seq, LLAMA_31_8B["hidden_size"], device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    io_bytes = x.numel() * x.element_size()
    torch.cuda.synchronize()
    before_fwd = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    if mode == "checkpointed":
        y = checkpoint(_call, layer, x, cos_sin, positions, use_reentrant=False)
    else:
        y = _call(layer, x, cos_sin, positions)
    torch.cuda.synchronize()
    fwd_peak = torch.cuda.max_memory_allocated() - before_fwd
    after_fwd = torch.cuda.memory_allocated()
    saved = after_fwd - before_fwd - io_bytes  # less the output
    grad = torch.randn_like(y)
    torch.cuda.synchronize()
    before_bwd = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y.backward(grad)
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - before_bwd
    row = {"seq": seq, "mode": mode, "weights_bytes": weights, "io_bytes": io_bytes,
           "saved_bytes": saved, "fwd_peak_bytes": fwd_peak, "bwd_peak_bytes": bwd_peak}
    row.update({f"{key[:-6]}_per_token": value / seq for key, value in list(row.items())
                if key in ("saved_bytes", "fwd_peak_bytes", "bwd_peak_bytes")})
    del layer, x, y, grad
    torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seq", default="8192,16384,32768,65536")
    args = parser.parse_args()
    import transformers

    rows = []
    for seq in (int(s) for s in args.seq.split(",")):
        for mode in ("plain", "checkpointed"):
            try:
                rows.append(measure(seq, mode))
            except torch.OutOfMemoryError as exc:  # a size the GPU cannot take is a result too
                rows.append({"seq": seq, "mode": mode, "error": str(exc).splitlines()[0]})
                torch.cuda.empty_cache()
            print(json.dumps(rows[-1]), flush=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "model": "Llama-3.1-8B, one decoder layer",
            "attn_implementation": "sdpa", "dtype": "bf16", "command": " ".join(sys.argv)}
    with open(args.out, "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
