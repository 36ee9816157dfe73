"""Readers for the public measurements in shared/data (see its SOURCES.md), turned into table rows.

Every reader returns plain rows in ltsim's units (seconds, bytes) plus a short ``source`` key;
``SOURCES`` maps each key to its full citation for meta.json. Nothing here models or fills gaps;
that is analytic.py's job.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

DATA_DIR = Path(os.environ.get("LTSIM_PUBLIC_DATA",
                              Path(__file__).resolve().parents[2] / "shared" / "data"))
MiB = 1024**2

SOURCES = {
    "fa2-paper": "FlashAttention-2 paper (Dao 2023, arXiv 2307.08691) Figs 4-6, A100-SXM4-80GB; via "
                 "shared/data/fa_paper_figures_attention_tflops.csv",
    "fa3-paper": "FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608) Figs 5-6, H100-SXM5-80GB, "
                 "CUDA 12.3, FlashAttention 2.5.8, clocks 1830 MHz; via "
                 "shared/data/fa_paper_figures_attention_tflops.csv",
    "fa2-readme-h100": "Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png (commit "
                       "0251105a, values read by eye); via fa_paper_figures_attention_tflops.csv",
    "vidur-a100-mlp": "microsoft/vidur data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv "
                      "(commit 7d475133, MIT), median per-op forward times",
    "vidur-h100-mlp": "microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv "
                      "(commit 7d475133, MIT), median per-op forward times",
    "mamf": "stas00/ml-engineering compute/accelerator/README.md (commit 744d01e1, CC-BY-SA-4.0), "
            "maximum achievable matmul TFLOP/s",
    "vidur-a100-net": "microsoft/vidur data/profiling/network/a100_dgx/{all_reduce,send_recv}.csv "
                      "(commit 7d475133, MIT), torch.distributed median times",
    "vidur-h100-net": "microsoft/vidur data/profiling/network/h100_dgx/{all_reduce,send_recv}.csv "
                      "(commit 7d475133, MIT), torch.distributed median times",
    "mleng-nccl": "stas00/ml-engineering network/README.md (commit 744d01e1, CC-BY-SA-4.0); via "
                  "shared/data/mleng_nccl_collective_busbw.csv",
    "galvatron-sp": "PKU-DAIR/Hetu-Galvatron galvatron/profile_hardware/hardware_configs/"
                    "sp_time_1nodes_8gpus_per_node.json (commit cea12ffb, Apache-2.0): all2all ms "
                    "for 2/4/8 GPUs in one node, 1-1024 MB (read as MiB). Hardware not stated; "
                    "its all_reduce times match ml-engineering's 8xA100 within 10% above 32 MiB",
    "skrull-t5": "Skrull (seeds/skrull.md) Appendix C.3 Table 5: collective latency on 4 nodes x 8 "
                 "H100 with InfiniBand; sizes read as MiB; group size not stated, taken as 32",
}

# Skrull Table 5 (seeds/skrull.md, Appendix C.3): size (MB) -> latency (us) of
# all_gather, all_to_all, reduce_scatter, all_reduce.
SKRULL_TABLE5 = {
    2: (53.29, 80.62, 59.48, 84.65), 4: (72.52, 78.63, 79.26, 113.3),
    8: (97.86, 110.9, 104.7, 168.4), 16: (199.3, 163.2, 177.4, 312.2),
    32: (286.2, 277.5, 269.5, 479.2), 64: (488.6, 502.4, 458.8, 859.7),
    128: (910.6, 939.2, 864.3, 1642.9), 256: (1758.4, 1803.9, 1663.9, 3197.9),
    512: (3416.4, 3411.2, 3239.5, 6181.2), 1024: (6467.9, 6629.6, 6294.3, 12126.0),
}
SKRULL_OPS = ("all_gather", "all_to_all", "reduce_scatter", "all_reduce")
SKRULL_GROUP = 32


def read_csv(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA_DIR / name, comment="#")


# -- attention --------------------------------------------------------------------------------
FA_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}  # the file's stated convention


def fa_points(gpu: str, implementation: str, source: str) -> pd.DataFrame:
    """Per-sequence kernel times from the FA papers' figures (bf16/fp16, not fp8).

    The figures run batch = 16384 / seqlen sequences of ``num_heads`` = 2048 / head_dim heads and
    report TFLOP/s with fwd FLOPs = 4 seqlen^2 head_dim num_heads batch (/2 causal), bwd = 2.5 fwd,
    fwd+bwd = 3.5 fwd. Time per sequence = FLOPs per sequence / throughput: the time a packed
    (varlen) kernel spends on each sequence when the GPU is full.
    """
    frame = read_csv("fa_paper_figures_attention_tflops.csv")
    frame = frame[(frame.gpu == gpu) & (frame.implementation == implementation)
                  & (frame.dtype == "fp16/bf16") & frame.tflops.notna()]
    if source != "fa2-readme-h100":
        frame = frame[~frame.figure.str.startswith("README")]
    else:
        frame = frame[frame.figure.str.startswith("README")]
    s = frame.seqlen.astype(float)
    flops = 4.0 * s * s * frame.head_dim * frame.num_heads / np.where(frame.causal, 2.0, 1.0)
    flops = flops * frame.pass_.map(FA_FLOP_FACTOR)
    return pd.DataFrame({
        "q_tokens": frame.seqlen.astype(int), "kv_tokens": frame.seqlen.astype(int),
        "num_heads": frame.num_heads.astype(int), "num_kv_heads": frame.num_heads.astype(int),
        "head_dim": frame.head_dim.astype(int), "causal": frame.causal.astype(bool),
        "pass": frame.pass_.astype(str), "time_s": flops / (frame.tflops * 1e12),
        "source": source + ":" + frame.figure.astype(str), "method": "published",
    }).reset_index(drop=True)


# -- GEMM ------------------------------------------------------------------------------------
def llama_gemm_shapes(hidden: int, heads: int, kv_heads: int, ffn: int, tp: int
                      ) -> dict[str, tuple[int, int]]:
    """(n, k) of each Vidur op at tensor-parallel degree tp (Megatron column/row split).

    attn_pre_proj is the fused QKV (k = hidden, n = (heads + 2 kv_heads) head_dim / tp);
    attn_post_proj the output projection (k = hidden / tp); mlp_up_proj the fused gate+up of the
    gated MLP (n = 2 ffn / tp); mlp_down_proj k = ffn / tp. The fused up+gate width follows from the
    measured times: up_proj takes twice down_proj at every token count.
    """
    head_dim = hidden // heads
    return {"attn_pre_proj": ((heads + 2 * kv_heads) * head_dim // tp, hidden),
            "attn_post_proj": (hidden, hidden // tp),
            "mlp_up_proj": (2 * ffn // tp, hidden),
            "mlp_down_proj": (hidden, ffn // tp)}


def vidur_gemm_points(name: str, source: str, *, hidden: int, heads: int, kv_heads: int,
                      ffn: int) -> pd.DataFrame:
    """Every (m, n, k) point of Vidur's per-op profile; duplicates take the median."""
    frame = read_csv(name)
    rows = []
    for tp, by_tp in frame.groupby("num_tensor_parallel_workers"):
        for op, (n, k) in llama_gemm_shapes(hidden, heads, kv_heads, ffn, int(tp)).items():
            times = by_tp.groupby("num_tokens")[f"time_stats.{op}.median"].median()
            for m, t_ms in times.items():
                rows.append((int(m), n, k, "bf16", t_ms * 1e-3, f"{source}:{op}:tp{int(tp)}"))
    out = pd.DataFrame(rows, columns=["m", "n", "k", "dtype", "time_s", "source"])
    return out.assign(method="published")


def mamf_point(accelerator: str) -> tuple[int, int, int, float]:
    """(m, n, k, time_s) of the best-shape bf16 matmul in the MAMF table."""
    frame = read_csv("mleng_mamf_matmul_tflops.csv")
    row = frame[(frame.dtype == "bf16") & (frame.accelerator == accelerator)].iloc[0]
    m, n, k = (int(v) for v in row.best_shape_MxNxK.split("x"))
    return m, n, k, 2.0 * m * n * k / (row.mamf_tflops * 1e12)


# -- collectives -------------------------------------------------------------------------------
def vidur_net_points(device: str, op: str, *, per_octave: int = 4) -> pd.DataFrame:
    """Vidur's collective times, thinned to ``per_octave`` sizes per doubling (they are smooth).

    Rows with devices_per_node == num_workers ran inside one node (scope intra); fewer devices per
    node than workers spans nodes (scope inter). send_recv is one message between 2 ranks.
    """
    frame = read_csv(f"vidur_{device}_dgx_{op}.csv")
    col = f"time_stats.{op}.median"
    rows = []
    for (workers, per_node), grp in frame.groupby(["num_workers", "devices_per_node"]):
        times = grp.groupby("size")[col].median()
        sizes = times.index.to_numpy(dtype=float)
        targets = sizes[0] * 2.0 ** (np.arange(0, np.log2(sizes[-1] / sizes[0]) * per_octave + 1)
                                     / per_octave)
        keep = sorted({float(sizes[np.abs(np.log(sizes / t)).argmin()]) for t in targets}
                      | {sizes[-1]})
        scope = "intra" if per_node == workers else "inter"
        for size in keep:
            rows.append((op, int(workers), scope, int(size), times.loc[size] * 1e-3,
                         f"vidur-{device}-net:{op}:{int(workers)}r/{int(per_node)}pn"))
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_s", "source"]
                        ).assign(method="published")


def mleng_points(hardware_prefix: str, *, algo_note: str | None = None) -> pd.DataFrame:
    """all_reduce (and all_gather/reduce_scatter) rows of the ml-engineering busbw table."""
    frame = read_csv("mleng_nccl_collective_busbw.csv")
    frame = frame[frame.hardware.str.startswith(hardware_prefix)]
    if algo_note is not None:
        frame = frame[frame.algo_note == algo_note]
    n = frame.ranks.astype(float)
    factor = np.where(frame.collective == "all_reduce", 2.0 * (n - 1) / n, (n - 1) / n)
    from_busbw = frame.payload_bytes * factor / (frame.busbw_GBps * 1e9)
    time_s = np.where(frame.time_us.notna(), frame.time_us * 1e-6,
                      np.where(frame.algbw_GBps.notna(),
                               frame.payload_bytes / (frame.algbw_GBps * 1e9), from_busbw))
    return pd.DataFrame({
        "op": frame.collective.astype(str), "group_size": frame.ranks.astype(int), "scope": "intra",
        "bytes": frame.payload_bytes.astype(np.int64), "time_s": time_s,
        "source": "mleng-nccl:" + frame.tool.str.split(" ").str[0].astype(str),
        "method": "published"}).reset_index(drop=True)


def skrull_points() -> pd.DataFrame:
    """Skrull Table 5 as inter-node rows (group of 32 = their 4 x 8 H100 testbed)."""
    rows = [(op, SKRULL_GROUP, "inter", size_mb * MiB, lat[i] * 1e-6, "skrull-t5")
            for size_mb, lat in SKRULL_TABLE5.items() for i, op in enumerate(SKRULL_OPS)]
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_s", "source"]
                        ).assign(method="published")


def galvatron_sp_points(kind: str = "all2all") -> pd.DataFrame:
    """Galvatron's profiled all2all (or allreduce) times inside one node, as intra rows."""
    import json
    data = json.loads((DATA_DIR / "galvatron_sp_time_1nodes_8gpus_per_node.json").read_text())
    op = {"all2all": "all_to_all", "allreduce": "all_reduce"}[kind]
    rows = []
    for key, ms in data.items():
        name, _, group, size, _ = key.split("_")
        if name == kind:
            rows.append((op, int(group), "intra", int(size.removesuffix("MB")) * MiB, ms * 1e-3,
                         f"galvatron-sp:{name}:{group}"))
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_s", "source"]
                        ).assign(method="published")


def galvatron_busbw() -> dict[str, float]:
    """Galvatron's nccl-tests busbw (GB/s) on 1 and 2 nodes of 8 GPUs, for cross-checks."""
    import json
    out = {}
    for nodes in (1, 2):
        for kind in ("allreduce", "p2p"):
            path = DATA_DIR / f"galvatron_{kind}_bandwidth_{nodes}nodes_8gpus_per_node.json"
            out.update({f"{nodes}node:{k}": float(v) for k, v in json.loads(path.read_text()).items()})
    return out
