"""ltsim against public training runs: llm-foundry's MPT throughput benchmarks (mosaicml/llm-foundry
at 8c8dd48f, scripts/train/benchmarking/README.md; transcribed verbatim, every table row, into
llmfoundry-runs.csv). The single-node BF16 rows of MPT-7B/13B/30B on 8 A100-80GB and 8 H100-80GB
become ltsim scenarios (the assumptions are in public-runs.md) and ltsim's throughput per GPU is
set beside the measured one.

    python validation/costs/public_runs.py > validation/costs/public-runs-results.md
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from ltsim.runner import run
from ltsim.scenario import build_scenario

HERE = Path(__file__).resolve().parent
TABLES = {"A100 80GB with 1600 Gbps node-node interconnect (RoCE)": "a100-sxm4-80gb",
          "H100 80GB BF16": "h100-sxm5-80gb"}
#: MPT shapes (scripts/train/yamls/pretrain/mpt-*.yaml): d_model, n_heads, n_layers; expansion 4,
#: vocabulary 50368, tied embeddings; the benchmarked models have biases and learned positions
#: (their NumParams is 12Ld^2 + 13Ld + 50368d + seq d + 2d exactly), ltsim's "gpt" architecture.
SHAPES = {"7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48)}


def scenario(row: dict) -> object:
    d, heads, layers = SHAPES[row["model"]]
    gpus = int(row["num_gpus"])
    raw = {
        "name": f"llmfoundry-mpt-{row['model']}-{row['seq_len']}-{TABLES[row['table_title']]}",
        "seed": 0,
        "model": {"preset": "gpt-7b", "hidden_size": d, "num_attention_heads": heads,
                  "num_kv_heads": heads, "num_layers": layers, "ffn_hidden_size": 4 * d,
                  "vocab_size": 50368, "tied_embeddings": True},
        # llm-foundry's MPT loss is flash-attn's CrossEntropyLoss unless a yaml says otherwise
        # (modeling_mpt.py at b2a43a147, the benchmarks' commit: loss_fn 'fused_crossentropy')
        "hardware": {"preset": TABLES[row["table_title"]], "num_nodes": 1,
                     "gpus_per_node": gpus, "loss_kernel": "fused"},
        "parallel": {"dp": gpus, "zero_stage": 3,
                     "recompute": "full" if row["activation_checkpointing"] == "true" else "none"},
        "workload": {"fixed_length": int(row["seq_len"]),
                     "global_batch_size": int(row["global_batch_size"]), "num_batches": 1},
        "strategy": {"name": "deepspeed-cp", "micro_batch_size": int(row["micro_batch_size"])},
    }
    return build_scenario(raw, source="validation/costs/public_runs.py")


def kendall_tau(a: list[float], b: list[float]) -> float:
    pairs = concordant = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            s = (a[i] - a[j]) * (b[i] - b[j])
            if s:
                pairs += 1
                concordant += s > 0
    return (2 * concordant - pairs) / pairs if pairs else 0.0


def main() -> int:
    with open(HERE / "llmfoundry-runs.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["table_title"] in TABLES
                and r["model"] in SHAPES and r["num_gpus"] == "8"]
    print("| GPU | model | seq len | micro-batch | grad accum | act. ckpt | measured tok/s/GPU | "
          "ltsim tok/s/GPU | ltsim error | measured MFU | ltsim peak / limit (GiB) |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|")
    errors, measured, predicted = {}, [], []
    for row in rows:
        sim = run(scenario(row))
        result = sim.result.to_dict()
        per_gpu = result["tokens_per_s"] / int(row["num_gpus"])
        real = float(row["throughput_tok_per_s_per_gpu"])
        error = per_gpu / real - 1
        gpu = TABLES[row["table_title"]].split("-")[0].upper()
        errors.setdefault(gpu, []).append(error)
        measured.append(real)
        predicted.append(per_gpu)
        peak = result["peak_memory_bytes"] / 2**30
        limit = result["memory_limit_bytes"] / 2**30
        print(f"| {gpu} | MPT-{row['model'].upper()} | {row['seq_len']} | {row['micro_batch_size']} "
              f"| {row['grad_accum']} | {row['activation_checkpointing']} | {real:,.0f} | "
              f"{per_gpu:,.0f} | {error:+.0%} | {row['mfu']}% | {peak:.1f} / {limit:.1f} |")
    print()
    for gpu, errs in errors.items():
        absolute = [abs(e) for e in errs]
        print(f"- {gpu}: {len(errs)} runs, median error {statistics.median(errs):+.1%}, "
              f"median |error| {statistics.median(absolute):.1%}, worst {max(absolute):.1%}")
    print(f"- Kendall tau between measured and predicted throughput over all {len(measured)} runs:"
          f" {kendall_tau(measured, predicted):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
