"""Rebuild the packaged length data in ltsim/data/ from the public data in shared/data/.

Usage: python scripts/build_workload_data.py [--source ../shared/data] [--out ltsim/data]
(the default source is shared/data beside the repository: <repo>/../shared/data)

Writes compressed copies of the raw per-sequence lengths (not histograms), in their original order:
  wikipedia_seqlens.npz          FlexSP's 1,000,000 Wikipedia lengths (flexsp_wikipedia_seqlens.txt)
  azure_conv_lengths.npz         prompt + output tokens per row of vidur_splitwise_conv_trace_lengths.csv
  magiattention_doc_length_histogram.csv   copied as is (the source is itself a histogram)
Each .npz holds one int32 array named ``num_tokens``. Provenance: shared/data/SOURCES.md and ltsim/data/README.md.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()  # the public data, beside the repository


def _save(path: Path, num_tokens: np.ndarray) -> None:
    if num_tokens.min() < 1 or num_tokens.max() > np.iinfo(np.int32).max:
        raise SystemExit(f"{path.name}: lengths outside [1, int32 max]")
    np.savez_compressed(path, num_tokens=num_tokens.astype(np.int32))
    print(f"wrote {path} ({path.stat().st_size:,} bytes, {num_tokens.size:,} lengths)")


def build(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wiki = np.loadtxt(source / "flexsp_wikipedia_seqlens.txt", dtype=np.int64)
    _save(out / "wikipedia_seqlens.npz", wiki)
    conv = pd.read_csv(source / "vidur_splitwise_conv_trace_lengths.csv")
    # Vidur's splitwise_conv trace: a training sequence is the whole exchange, prompt plus output.
    summed = (conv["num_prefill_tokens"] + conv["num_decode_tokens"]).to_numpy(dtype=np.int64)
    _save(out / "azure_conv_lengths.npz", summed)
    hist = "magiattention_doc_length_histogram.csv"
    shutil.copyfile(source / hist, out / hist)
    print(f"copied {out / hist}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SHARED_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "ltsim" / "data")
    args = parser.parse_args()
    build(args.source, args.out)


if __name__ == "__main__":
    main()
