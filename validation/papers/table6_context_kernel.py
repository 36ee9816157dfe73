"""Does FlashAttention-2's speed on short query chunks with long context decide ChunkFlow's Table 6?

    python validation/papers/table6_context_kernel.py

The Table 6 scenario prices attention with the H100 preset's ``fa2`` rows: published
FlashAttention-2 figures (FA3 paper, square shapes, 16K tokens per batch), which give a query chunk
after earlier context the same throughput at any chunk size. The preset also holds measured rows of
torch's flash kernel (FlashAttention-2 code) with a lower-right causal mask, the call ltsim's
executor makes for a chunk with context (``kernels.context_attention``), at 2K-32K query tokens
after up to 128K of context. This script prices the three (ChunkSize, K) settings on Table 5's
reading of the batch (256 sampled sequences, the first replaced by one of the full 256K context)
with three attention tables for slices with context:

- ``published``: the shipped ``fa2`` rows (what the scenario uses);
- ``measured, all heads``: the measured lower-right rows as ``fa2``'s rows with context. For a GQA
  model the executor's call first expands K/V to the query heads (``repeat_interleave``: 7x for
  Qwen2.5-7B at tp 4), a copy the measured time includes and flash-attn's own GQA call does not
  make; it grows with the context, so it weighs most on small chunks;
- ``measured, MHA rows``: only the rows with as many K/V heads as query heads (no copy), looked
  up by query heads as every attention row is.

It also prints those rows' throughput at 2K and 8K query tokens after 128K of context. Nothing
here is shipped: it is the check recorded in validation/papers/chunkflow.md (Table 6).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import ltsim  # noqa: E402

SCENARIO = ROOT / "scenarios/chunkflow/qwen2.5-7b-256k-chunkflow.toml"
PROFILE = ROOT / "profiles/h100-sxm5-80gb"
CASES = [(2048, 16), (8192, 4), (32768, 1)]


def profile_with_context_rows(out: Path, mha_only: bool) -> Path:
    """A copy of the H100 preset whose ``fa2`` kernel gets the measured lower-right rows."""
    shutil.copytree(PROFILE, out)
    table = pd.read_csv(PROFILE / "attention.csv")
    rows = table[(table["kernel"] == "torch_sdpa") & (table["mask"] == "causal_lower_right")]
    if mha_only:
        rows = rows[rows["num_heads"] == rows["num_kv_heads"]]
    pd.concat([table, rows.assign(kernel="fa2")], ignore_index=True).to_csv(
        out / "attention.csv", index=False)
    return out


def throughput() -> list[str]:
    table = pd.read_csv(PROFILE / "attention.csv")
    rows = table[(table["kernel"] == "torch_sdpa") & (table["mask"] == "causal_lower_right")
                 & (table["kv_tokens"] == 131072) & table["q_tokens"].isin([2048, 8192])]
    out = ["| heads / K/V heads | pass | 2K after 128K (TFLOP/s) | 8K after 128K (TFLOP/s) |",
           "|---|---|---:|---:|"]
    for (heads, kv_heads, pass_), group in rows.groupby(["num_heads", "num_kv_heads", "pass"]):
        cells = []
        for q in (2048, 8192):
            row = group[group["q_tokens"] == q].iloc[0]
            flops = 4 * q * (131072 - q / 2) * row["head_dim"] * heads * (2.5 if pass_ == "bwd" else 1)
            cells.append(f"{flops / row['time_s'] / 1e12:.0f}")
        out.append(f"| {heads} / {kv_heads} | {pass_} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    base = ltsim.load_scenario(SCENARIO)
    batch = list(base.workload.sample(0)[0])
    batch[0] = 262144
    print("Measured lower-right rows (torch's flash kernel, H100), 2.5x the forward's FLOPs for "
          "the backward:\n")
    print("\n".join(throughput()))
    print("\nTable 5's reading of the batch (seed 0), iteration time in ms (bubble):\n")
    print("| fa2 rows with context | (2K, 16) | (8K, 4) | (32K, 1) |\n|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, mha_only in (("published", None), ("measured, all heads", False),
                                ("measured, MHA rows", True)):
            sets = [f"workload.lengths={batch}"]
            if mha_only is not None:
                path = profile_with_context_rows(Path(tmp) / label.replace(" ", "_").replace(",", ""),
                                                 mha_only)
                sets.append(f"hardware.profile={path}")
            cells = []
            for size, k in CASES:
                d = ltsim.simulate(ltsim.load_scenario(
                    SCENARIO, [*sets, f"strategy.chunk_size={size}", f"strategy.k={k}"])).to_dict()
                cells.append(f"{1e3 * d['iteration_time_s']:.0f} ({100 * d['bubble_ratio']:.1f}%)")
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
