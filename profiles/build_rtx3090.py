"""Derive the rtx-3090 profile from the a100-sxm4-80gb one by datasheet ratios (no RTX 3090
measurements are public in shared/data; measure one with `ltsim profile` to replace it).

    python profiles/build_rtx3090.py

- GEMM and attention times: the A100's rows times 312 / 71, the ratio of dense BF16 tensor-core
  throughput with FP32 accumulation: A100 312 TFLOPS (NVIDIA A100 datasheet) against RTX 3090 71
  TFLOPS (NVIDIA Ampere GA102 GPU architecture whitepaper, Table 9 "Peak FP16 Tensor TFLOPS with
  FP32 Accumulate"; the 142 TFLOPS figure accumulates in FP16). Rows that are bound by memory
  bandwidth (2039 vs 936 GB/s, ratio 2.18) or launch latency would scale less, so such rows (small
  shapes) are overstated by up to 4.39 / 2.18 = 2x. Which rows are bound by what is not measured.
- Collectives: the A100's intra-node rows (NVLink, 300 GB/s per direction) times 300 / 32, the
  ratio to PCIe 4.0 x16 (32 GB/s per direction, PCI-SIG), as an 8 x RTX 3090 server has no NVLink
  switch; latency floors are scaled too (an overstatement for tiny messages). Inter-node rows are
  the A100's (a server's network is not the GPU's).
Every row keeps its A100 source with a "derived-a100/" prefix and method "derived".
"""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
A100, OUT = HERE / "a100-sxm4-80gb", HERE / "rtx-3090"
COMPUTE_RATIO = 312 / 71
LINK_RATIO = 300 / 32
SOURCES = {"a100-datasheet": "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOPS BF16 dense, "
           "2039 GB/s (80 GB SXM), NVLink 600 GB/s bidirectional",
           "ga102-whitepaper": "NVIDIA Ampere GA102 GPU Architecture whitepaper (2021), Table 9: "
           "GeForce RTX 3090 peak FP16/BF16 tensor 71 TFLOPS with FP32 accumulate, 936 GB/s "
           "GDDR6X, 24 GB",
           "pcie4": "PCI-SIG PCI Express 4.0: 16 GT/s per lane, x16 about 32 GB/s per direction"}


def derive(frame: pd.DataFrame, ratio: float, mask=None) -> pd.DataFrame:
    frame = frame.copy()
    rows = slice(None) if mask is None else mask
    frame.loc[rows, "time_s"] = frame.loc[rows, "time_s"] * ratio
    frame["source"] = "derived-a100/" + frame["source"].astype(str)
    frame["method"] = "derived"
    return frame


def write(out: Path, command: str, doc: str, device: str, memory_bytes: int, sources: dict,
          tables) -> None:
    """A derived profile's tables and meta.json; ``tables``: (name, frame, how it was derived);
    ``doc``: the build script's docstring, whose third paragraph on is the notes."""
    out.mkdir(exist_ok=True)
    for name, frame, _ in tables:
        frame.to_csv(out / f"{name}.csv", index=False)
    base = json.loads((A100 / "meta.json").read_text())
    meta = {
        "command": command, "date": date.today().isoformat(), "device": device,
        "memory_bytes": memory_bytes, "method": "derived",
        "notes": doc.split("\n\n", 2)[2].strip(),
        "software": base.get("software", {}),
        "tables": {name: {"derived": desc, "rows": len(frame), "sources": sources,
                          **({"default_kernel": base["tables"]["attention"].get("default_kernel")}
                             if name == "attention" else {})}
                   for name, frame, desc in tables},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> int:
    gemm = derive(pd.read_csv(A100 / "gemm.csv"), COMPUTE_RATIO)
    attention = derive(pd.read_csv(A100 / "attention.csv"), COMPUTE_RATIO)
    collectives = pd.read_csv(A100 / "collectives.csv")
    collectives = derive(collectives, LINK_RATIO, collectives["scope"] == "intra")
    write(OUT, "python profiles/build_rtx3090.py", __doc__,
          "NVIDIA GeForce RTX 3090 (24 GB GDDR6X, PCIe 4.0), derived from a100-sxm4-80gb",
          24 * 2**30, SOURCES,
          (("gemm", gemm, f"a100 rows x {COMPUTE_RATIO:.3f} (312/71 TFLOPS)"),
           ("attention", attention, f"a100 rows x {COMPUTE_RATIO:.3f} (312/71 TFLOPS)"),
           ("collectives", collectives,
            f"a100 intra rows x {LINK_RATIO:.3f} (NVLink 300 / PCIe 4.0 32 GB/s)")))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
