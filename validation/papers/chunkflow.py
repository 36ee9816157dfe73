"""ChunkFlow (Yuan et al., ICML 2025) predictions beside the paper's numbers.

    python validation/papers/chunkflow.py > validation/papers/chunkflow-results.md

Prints markdown tables: the unit-cost examples of Figures 2, 6 and 7; the end-to-end speedups of
section 6.2 (Table 3 configurations, Table 4 settings); the memory pattern of Table 5; the
ChunkSize / K ranking of Table 6. Every number comes from the scenario files named in the tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim  # noqa: E402
from ltsim.runner import run  # noqa: E402

GiB = 2**30


def result(path: str, *sets: str) -> dict:
    return ltsim.simulate(ltsim.load_scenario(ROOT / path, list(sets))).to_dict()


def unit_examples() -> list[str]:
    rows = ["## Unit-cost examples (Figures 2, 6, 7)", "",
            "| example | scenario | paper bubble | ltsim bubble | ltsim makespan (units) |",
            "|---|---|---:|---:|---:|"]
    cases = [("Fig. 2(b) 1F1B baseline", "chunkflow-fig2-baseline", "57.14%", ()),
             ("4 equal sequences", "chunkflow-fig2-equal", "42.8%", ()),
             ("Fig. 6(a) ChunkSize 2, K 1", "chunkflow-fig6-cs2-k1", "54.1%", ()),
             ("Fig. 6(b) ChunkSize 2, K 2", "chunkflow-fig6-cs2-k2", "47.8%", ()),
             ("Fig. 7 ChunkSize 4, K 1", "chunkflow-cs4-k1", "60%", ()),
             ("Fig. 6(b), dependent group first", "chunkflow-fig6-cs2-k2", "-",
              ('strategy.order="dependent-first"',))]
    for label, name, paper, sets in cases:
        sim = run(ltsim.load_scenario(ROOT / "scenarios" / "examples" / f"{name}.toml", list(sets)))
        d = sim.result.to_dict()
        sets_text = " " + " ".join(f"--set {s}" for s in sets) if sets else ""
        rows.append(f"| {label} | `{name}.toml`{sets_text} | {paper} | "
                    f"{100 * d['bubble_ratio']:.2f}% | {sim.traces[0].makespan_s:g} |")
    return rows + [""]


def end_to_end() -> list[str]:
    rows = ["## End-to-end (section 6.2, Figure 8: up to 4.53x)", "",
            "| model | context | Megatron 1F1B | fits | ChunkFlow | fits | speedup | "
            "Megatron peak | ChunkFlow peak |", "|---|---|---:|---|---:|---|---:|---:|---:|"]
    for model in ("7b", "14b", "32b", "72b"):
        for ctx in ("32k", "256k"):
            base = result(f"scenarios/chunkflow/qwen2.5-{model}-{ctx}-megatron.toml")
            cf = result(f"scenarios/chunkflow/qwen2.5-{model}-{ctx}-chunkflow.toml")
            rows.append(
                f"| Qwen2.5-{model.upper()} | {ctx.upper()} | {base['iteration_time_s']:.3f} s | "
                f"{'yes' if base['fits'] else 'no'} | {cf['iteration_time_s']:.3f} s | "
                f"{'yes' if cf['fits'] else 'no'} | "
                f"{base['iteration_time_s'] / cf['iteration_time_s']:.2f}x | "
                f"{base['peak_memory_bytes'] / GiB:.1f} GiB | {cf['peak_memory_bytes'] / GiB:.1f} GiB |")
    return rows + [""]


def table5() -> list[str]:
    paper = {("32K", 2048): 41.6, ("256K", 2048): 45.6, ("32K", 4096): 47.5, ("256K", 4096): 50.8,
             ("32K", 8192): 59.3, ("256K", 8192): 63.8}
    rows = ["## Table 5: peak memory, Qwen2.5-7B, <4, 4, 1, selective>, K = 1", "",
            "One sampled chunkflow-eval batch of 256 whose first sequence is replaced by one of the "
            "full context length, so that the batch holds the longest sequence a training run meets "
            "(eight sampled batches rarely contain a sequence over 128K: 0.02% of sequences).", "",
            "| context | ChunkSize | paper | ltsim |", "|---|---:|---:|---:|"]
    base = ltsim.load_scenario(ROOT / "scenarios/chunkflow/qwen2.5-7b-32k-chunkflow.toml")
    for (ctx, size), gib in paper.items():
        length = 32768 if ctx == "32K" else 262144
        batch = list(base.with_overrides([f"workload.max_length={length}"]).workload.sample(0)[0])
        batch[0] = length
        d = result("scenarios/chunkflow/qwen2.5-7b-32k-chunkflow.toml",
                   f"workload.lengths={batch}", f"workload.max_length={length}",
                   f"strategy.chunk_size={size}", "strategy.k=1")
        rows.append(f"| {ctx} | {size} | {gib} GiB | {d['peak_memory_bytes'] / GiB:.1f} GiB |")
    return rows + [""]


def table6() -> list[str]:
    paper = {(2048, 16): 29810, (8192, 4): 23774, (32768, 1): 28942}
    rows = ["## Table 6: ChunkSize and K, Qwen2.5-7B, 256K, <4, 4, 4, selective>", "",
            "| (ChunkSize, K) | paper (ms) | ltsim (ms) | ltsim bubble | ltsim peak |",
            "|---|---:|---:|---:|---:|"]
    for (size, k), ms in paper.items():
        d = result("scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml",
                   f"strategy.chunk_size={size}", f"strategy.k={k}", "workload.num_batches=8")
        rows.append(f"| ({size}, {k}) | {ms} | {1e3 * d['iteration_time_s']:.0f} | "
                    f"{100 * d['bubble_ratio']:.1f}% | {d['peak_memory_bytes'] / GiB:.1f} GiB |")
    # The paper's 24-30 s iterations hold far more tokens than 256 sequences of its Table 2
    # (about 50K): the same three settings at larger batches, median of 8 sampled batches each
    rows += ["", "Larger batches of the same distribution (iteration time in ms, bubble):", "",
             "| sequences per batch | (2K, 16) | (8K, 4) | (32K, 1) |", "|---:|---:|---:|---:|"]
    for batch in (1024, 2048, 4096, 8192):
        cells = []
        for size, k in paper:
            d = result("scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml",
                       f"strategy.chunk_size={size}", f"strategy.k={k}", "workload.num_batches=8",
                       f"workload.global_batch_size={batch}")
            cells.append(f"{1e3 * d['iteration_time_s']:.0f} ({100 * d['bubble_ratio']:.1f}%)")
        rows.append(f"| {batch} | " + " | ".join(cells) + " |")
    # Table 5's reading: a sampled batch of 256 whose first sequence is one of the full 256K
    # context (the paper's absolute times fit a batch holding such a sequence: PAPERS.md, G2)
    rows += ["", "Table 5's reading: a sampled batch of 256 whose first sequence is replaced by "
             "one of the full 256K context (seeds 0-2; iteration time in ms, bubble):", "",
             "| seed | (2K, 16) | (8K, 4) | (32K, 1) |", "|---:|---:|---:|---:|"]
    path = "scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml"
    base = ltsim.load_scenario(ROOT / path)
    for seed in range(3):
        batch = list(base.workload.sample(seed)[0])
        batch[0] = 262144
        cells = []
        for size, k in paper:
            d = result(path, f"workload.lengths={batch}", f"strategy.chunk_size={size}",
                       f"strategy.k={k}")
            cells.append(f"{1e3 * d['iteration_time_s']:.0f} ({100 * d['bubble_ratio']:.1f}%)")
        rows.append(f"| {seed} | " + " | ".join(cells) + " |")
    return rows + [""]


def main() -> None:
    out = ["# ChunkFlow: ltsim's predictions beside the paper", "",
           "Made by `python validation/papers/chunkflow.py > validation/papers/chunkflow-results.md`; "
           "the analysis is in `chunkflow.md`.", ""]
    for part in (unit_examples, end_to_end, table5, table6):
        out += part()
    print("\n".join(out))


if __name__ == "__main__":
    main()
