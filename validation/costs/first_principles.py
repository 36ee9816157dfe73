"""Sanity-check two end-to-end predictions against first principles (issue: real costs).

    python validation/costs/first_principles.py > validation/costs/first-principles.md

For each scenario this recomputes, with formulas written out here and independent of ltsim's cost
model: (1) the model FLOPs of the simulated batches, 6 N s + 6 L h s^2 (causal attention, forward
4 L h s^2 / 2, times 3 for training) + the LM head 6 h V s; (2) the pure-compute lower bound on the
iteration time at peak throughput and the time at 50% of peak; (3) a latency floor: per micro-batch
and layer, the count of collectives times the smallest measured message latency in the profile,
plus 12 GEMM calls at the smallest measured GEMM time;
(4) static memory, params / (tp pp) x (2 + 4 + 12 / (dp cp)) bytes (bf16 weights, fp32 grads,
Adam sharded by the distributed optimizer), and activations of the largest micro-batch with
Korthikanti et al.'s selective-recompute 34 s h / t bytes per layer (SP), / cp, on stage 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim  # noqa: E402
from ltsim.runner import run  # noqa: E402

GiB = 2**30
CASES = ["scenarios/examples/qwen2.5-7b-32k-tp4-cp4.toml", "scenarios/examples/gpt-13b-pp4.toml"]


def params(m) -> float:
    """Written out: attention + MLP weights per layer, embeddings and head."""
    h, kv, f = m.hidden_size, m.kv_hidden_size, m.ffn_hidden_size
    mlp = (3 if m.arch == "llama" else 2) * h * f
    layer = h * (h + 2 * kv) + h * h + mlp
    head = 0 if m.tied_embeddings else h * m.vocab_size
    return m.num_layers * layer + h * m.vocab_size + head


def check(path: str) -> list[str]:
    sc = ltsim.load_scenario(ROOT / path)
    sim = run(sc)
    res = sim.result.to_dict()
    m, par = sc.model, sc.parallel
    seqs = [s for p in sim.plans for s in p.seq_lengths]
    dense = params(m) - m.hidden_size * m.vocab_size * (1 if m.tied_embeddings else 2)
    flops = sum(6 * dense * s + 6 * m.num_layers * m.hidden_size * s * s + 6 * m.hidden_size
                * m.vocab_size * s for s in seqs)
    gpus = par.world_size
    peak = sc.cluster.device.peak_flops_per_s
    compute_s = flops / (gpus * peak) / len(sim.plans)
    coll = pd.read_csv(ROOT / "profiles" / sc.cluster.profile_dir / "collectives.csv", comment="#")
    lat = coll[(coll.scope == "intra")].groupby("op").time_s.min()
    micro = sum(len(p.chunks) for p in sim.plans) / len(sim.plans) / par.dp
    per_layer = 0.0
    if par.tp > 1:  # SP: all-gather + reduce-scatter twice in forward, twice in backward
        per_layer += 4 * (lat["all_gather"] if "all_gather" in lat else lat["all_reduce"])
    if par.cp > 1:  # ring: cp-1 steps forward, 2(cp-1) backward
        per_layer += 3 * (par.cp - 1) * lat["send_recv"]
    gemm = pd.read_csv(ROOT / "profiles" / sc.cluster.profile_dir / "gemm.csv", comment="#")
    per_layer += 12 * gemm.time_s.min()  # 4 GEMMs forward, 8 backward, each at least one launch
    latency_s = micro * (m.num_layers / par.pp) * per_layer
    static = params(m) / (par.tp * par.pp) * (2 + 4 + 12 / (par.dp * par.cp))
    largest = max(sum(s.num_tokens for s in c.slices) for p in sim.plans for c in p.chunks)
    in_flight = min(par.pp, micro)  # stage 0 holds pp micro-batches under 1F1B
    act = 34 * m.hidden_size / par.tp * (m.num_layers / par.pp) * largest / par.cp * in_flight
    rows = [
        f"## {sc.name}", "", f"`ltsim simulate {path}`", "",
        "| quantity | first principles | ltsim | ratio |", "|---|---:|---:|---:|",
        f"| model TFLOPs per batch | {flops / len(sim.plans) / 1e12:.1f} | "
        f"{res['mfu'] * res['iteration_time_s'] * gpus * peak / 1e12:.1f} | "
        f"{res['mfu'] * res['iteration_time_s'] * gpus * peak / (flops / len(sim.plans)):.3f} |",
        f"| compute-bound time at peak (s) | {compute_s:.3f} | {res['iteration_time_s']:.3f} | "
        f"{res['iteration_time_s'] / compute_s:.1f}x |",
        f"| time at 50% of peak (s) | {2 * compute_s:.3f} | | |",
        f"| latency floor: {micro:.0f} micro-batches x {m.num_layers // par.pp} layers x "
        f"{per_layer * 1e6:.0f} us (s) | {latency_s:.3f} | | |",
        f"| static memory (GiB) | {static / GiB:.2f} | "
        f"{max(b.static_memory_bytes_per_device[0] for b in sim.result.batches) / GiB:.2f} | |",
        f"| static + activations of {in_flight} x the largest micro-batch ({largest} tokens) (GiB) | "
        f"{(static + act) / GiB:.2f} | {res['peak_memory_bytes'] / GiB:.2f} | "
        f"{res['peak_memory_bytes'] / (static + act):.2f} |",
        f"| bubble ratio | | {100 * res['bubble_ratio']:.1f}% | |",
        f"| MFU | | {100 * res['mfu']:.1f}% | |", "",
    ]
    return rows


def main() -> None:
    out = ["# First-principles checks of two end-to-end predictions", "",
           "Made by `python validation/costs/first_principles.py > validation/costs/first-principles.md`."
           " Formulas in the script's docstring.", ""]
    for path in CASES:
        out += check(path)
    print("\n".join(out))


if __name__ == "__main__":
    main()
