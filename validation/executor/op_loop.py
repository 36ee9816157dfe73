"""The executor's own F and B ops of the whole llama-tiny (fp32, one thread), run in the order a
pp = 1 Megatron iteration runs them (F then B of each sequence): median ms per op over 5 loops.
A quick check of how fast this machine runs the executor right now (cpu_notes.md uses it to tell
a quiet machine from a loaded one), and, with ``--hooks``, of what the memory accounting's
saved-tensor hooks cost. Not a test.

    python validation/executor/op_loop.py --tokens 1024,256,128,64 [--hooks]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from contextlib import nullcontext

import torch

from ltsim.executor.memtrack import MemoryTracker
from ltsim.executor.model import Transformer, pack_chunk
from ltsim.executor.state import StateStore, backward_chunk, forward_chunk
from ltsim.model import get_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1024,256,128,64")
    parser.add_argument("--hooks", action="store_true", help="inside the executor's memory hooks")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = get_model("llama-tiny")
    stage = Transformer(spec, layers=(0, spec.num_layers), dtype=torch.float32)
    tracker = MemoryTracker()
    tracker.set_static(list(stage.parameters()))
    gen = torch.Generator().manual_seed(0)
    sizes = [int(t) for t in args.tokens.split(",")]
    batches = [pack_chunk([(0, 0, n)], {0: torch.randint(0, spec.vocab_size, (n,), generator=gen)})
               for n in sizes]
    times: dict[int, dict[str, list[float]]] = {n: {"F": [], "B": []} for n in sizes}
    for loop in range(6):  # the first is a warm-up
        gc.collect()
        gc.disable()
        with tracker.hooks() if args.hooks else nullcontext():
            for n, batch in zip(sizes, batches):
                store = StateStore()
                start = time.perf_counter()
                handle = forward_chunk(stage, batch, store, keep_graph=True)
                middle = time.perf_counter()
                backward_chunk(handle, store, None)
                if loop:
                    times[n]["F"].append(middle - start)
                    times[n]["B"].append(time.perf_counter() - middle)
        gc.enable()
    total = {k: 0.0 for k in "FB"}
    for n in sizes:
        row = {k: statistics.median(v) * 1e3 for k, v in times[n].items()}
        total = {k: total[k] + row[k] for k in total}
        print(f"{n:6d} tokens: F {row['F']:7.1f} ms  B {row['B']:7.1f} ms")
    print(f" total: F {total['F']:7.1f} ms  B {total['B']:7.1f} ms")


if __name__ == "__main__":
    main()
