"""Derive the a800-40gb profile from the a100-sxm4-80gb one (InfiniPipe's testbed: 4 servers of
8 A800-40GB; no A800 measurements are public in shared/data; measure one with `ltsim profile` to
replace it).

    python profiles/build_a800.py

- GEMM and attention: the A100's rows unchanged. The A800 is the A100's export variant with the
  same GA100 compute (312 TFLOPS dense BF16, NVIDIA A800 datasheet); its 40 GB HBM2 runs at
  1,555 GB/s against the A100 80 GB's 2,039 GB/s, so rows bound by memory bandwidth (small
  shapes) are understated by up to 2039 / 1555 = 1.31x. Which rows are so bound is not measured.
- Collectives: the A100's intra-node rows (NVLink 600 GB/s bidirectional, 300 per direction)
  times 300 / 200, as the A800's NVLink carries 400 GB/s bidirectional (NVIDIA A800 datasheet;
  the InfiniPipe paper's "NVLink (400 GB/s bandwidth)"). Inter-node rows are the A100 profile's:
  a measured 2-node A100 cluster (bus bandwidth about 17.5 GB/s), below the nominal 50 GB/s of the
  paper's "400 Gb/s InfiniBand network" read as one 400 Gb/s link per node; nothing public
  measures that network, so the measured rows stay.
Every row keeps its A100 source with a "derived-a100/" prefix and method "derived".
"""

from __future__ import annotations

import sys

import pandas as pd

from build_rtx3090 import A100, derive, write

OUT = A100.parent / "a800-40gb"
LINK_RATIO = 300 / 200
SOURCES = {"a800-datasheet": "NVIDIA A800 40GB Active / A800 SXM4 datasheets: 312 TFLOPS BF16 "
           "dense, 40 GB HBM2 at 1,555 GB/s, NVLink 400 GB/s bidirectional",
           "infinipipe-5.1": "Wang et al. 2025 (seeds/infinipipe.md) section 5.1: 4 servers x 8 "
           "A800-40GB, NVLink 400 GB/s, 400 Gb/s InfiniBand"}


def main() -> int:
    gemm = derive(pd.read_csv(A100 / "gemm.csv"), 1.0)
    attention = derive(pd.read_csv(A100 / "attention.csv"), 1.0)
    collectives = pd.read_csv(A100 / "collectives.csv")
    collectives = derive(collectives, LINK_RATIO, collectives["scope"] == "intra")
    write(OUT, "python profiles/build_a800.py", __doc__,
          "NVIDIA A800-SXM4-40GB (NVLink 400 GB/s), derived from a100-sxm4-80gb", 40 * 2**30,
          SOURCES,
          (("gemm", gemm, "a100 rows x 1 (same GA100 compute)"),
           ("attention", attention, "a100 rows x 1 (same GA100 compute)"),
           ("collectives", collectives, f"a100 intra rows x {LINK_RATIO:.3f} (NVLink 300 / 200 "
            "GB/s per direction); inter rows as measured on A100")))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
