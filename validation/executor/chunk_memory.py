"""Where a dependent-chunk plan's memory peaks: per phase, and per layer inside each backward.

    python validation/executor/chunk_memory.py --out chunk_memory.json            # one CUDA GPU
    python validation/executor/chunk_memory.py --device cpu --model llama-tiny --seq 256 --chunk 128

Runs ChunkFlow with K = 1 on one sequence of ``--seq`` tokens in chunks of ``--chunk`` with the
executor's state API (forward chunk 0 without a graph, forward chunk 1 keeping it, B1, R0, B0), for
each attention backend named, on a 4-layer slice of ``--model`` in bf16 (fp32 on a CPU). After
every phase, and at the start of every layer's backward (a hook on the layer's output gradient),
it records the bytes allocated and the allocator's peak since the previous mark, relative to the
bytes allocated before the first forward (weights). On CUDA these are
``torch.cuda.memory_allocated`` and ``max_memory_allocated``; on a CPU there is no allocator peak,
only the level at each mark (a check that the script runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measure(model_name: str, backend: str, seq: int, chunk: int, device: str) -> list[dict]:
    import torch

    from ltsim.executor.model import Transformer, pack_chunk
    from ltsim.executor.state import (StateStore, backward_chunk, forward_chunk,
                                      recompute_chunk)
    from ltsim.model import get_model

    cuda = device == "cuda"
    spec = replace(get_model(model_name), num_layers=4)
    dtype = torch.bfloat16 if cuda else torch.float32
    model = Transformer(spec, dtype=dtype, attention_backend=backend).to(device)
    gen = torch.Generator().manual_seed(0)
    tokens = {0: torch.randint(0, spec.vocab_size, (seq,), generator=gen).to(device)}
    log: list[dict] = []

    def level() -> int:
        if cuda:
            return torch.cuda.memory_allocated()
        return 0

    def mark(name: str) -> None:
        if cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            peak = 0
        log.append({"at": name, "allocated": level() - base, "peak_since_last": peak - base})

    def on_output(module, inputs, output, index: int) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if torch.is_grad_enabled() and isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda grad: mark(f"backward of layer {index} starts"))

    for index, block in enumerate(model.blocks):
        block.register_forward_hook(lambda m, i, o, index=index: on_output(m, i, o, index))
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = level()
    store = StateStore()
    first = forward_chunk(model, pack_chunk([(0, 0, chunk)], tokens), store, keep_graph=False,
                          chunk_id=0)
    mark("F0 (no graph) done")
    second = forward_chunk(model, pack_chunk([(0, chunk, seq)], tokens), store, keep_graph=True,
                           chunk_id=1)
    mark("F1 (kept) done")
    backward_chunk(second, store)
    mark("B1 done")
    recompute_chunk(model, first, store)
    mark("R0 done")
    backward_chunk(first, store)
    mark("B0 done")
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--backends", default="sdpa_boolmask,sdpa")
    parser.add_argument("--plans", default="16384:8192,8192:4096,16384:4096",
                        help="SEQ:CHUNK pairs")
    args = parser.parse_args()
    results = []
    for pair in args.plans.split(","):
        seq, chunk = map(int, pair.split(":"))
        for backend in args.backends.split(","):
            log = measure(args.model, backend, seq, chunk, args.device)
            results.append({"seq": seq, "chunk": chunk, "backend": backend, "marks": log})
            print(f"seq {seq} chunk {chunk} {backend}")
            for row in log:
                print(f"  {row['at']:34s} level {row['allocated'] / 2**30:7.3f} GiB  "
                      f"peak since last {row['peak_since_last'] / 2**30:7.3f} GiB")
    if args.out:
        args.out.write_text(json.dumps({"model": args.model, "device": args.device,
                                        "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
