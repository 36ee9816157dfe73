"""Rebuild the shipped profiles a100-sxm4-80gb, h100-sxm5-80gb-public and h200-public from public measurements.

    python profiles/build_public.py [--data DIR] [--only a100|h100|h200]

Reads shared/data (SOURCES.md there; override with --data or LTSIM_PUBLIC_DATA) and writes
meta.json, gemm.csv, attention.csv and collectives.csv into profiles/<name>/. Published rows keep
their numbers (converted to seconds per sequence / per GEMM / per collective); gaps are filled by
the fitted models of analytic.py, one row per grid point, marked method=analytic. meta.json cites
every source key used in the ``source`` column and states each fit.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import public_data as pub  # noqa: E402
import tables as tb  # noqa: E402
from analytic import GemmModel, log_errors  # noqa: E402

from ltsim.collectives import bus_factor  # noqa: E402
from ltsim.profiles import ProfileMeta, write_meta, write_table  # noqa: E402
from ltsim.units import GB, GiB  # noqa: E402

DATE = "2026-11-21"
M_QUANTUM = 64  # cuBLAS tile quantum in m seen in Vidur's A100/H100 profiles (ltsim.lookup)
ANALYTIC = {
    "analytic:fa-fit": "attention model of profiles/analytic.py fitted per group to that group's "
                       "published (or derived) points",
    "analytic:causal-bwd": "causal bwd = non-causal bwd x (causal fwd / non-causal fwd), same "
                           "paper, head_dim and seqlen (tables.derive_causal_bwd)",
    "analytic:gemm-roofline-grid": "GEMM roofline of profiles/analytic.py fitted to all Vidur "
                                   "points of the device, P capped at MAMF",
    "analytic:gemm-roofline-extension": "the same roofline above a published shape's largest m, "
                                        "scaled to meet its largest published point",
    "analytic:latency-floor": "time below the smallest published message = its time",
    "analytic:constant-bw": "above the largest published message: that point's bandwidth",
    "analytic:busbw-shape": "above 64 MiB: bus bandwidth follows the 8-rank ml-engineering sweep "
                            "of the same interconnect, scaled to meet the last published point",
    "analytic:half-all-reduce": "all_gather / reduce_scatter / all_to_all = 0.5 x all_reduce at "
                                "equal bytes (equal nccl-tests bus bandwidth)",
    "analytic:bus-factor": "another group size of the same inter-node sweep, scaled by the "
                           "nccl-tests bus factor (constant bus bandwidth)",
}


def _sources(frame: pd.DataFrame) -> dict[str, str]:
    """Citation of every source key in the table (the part of ``source`` before the first ':',
    or the whole key for analytic rows; a "borrowed-h100/" prefix is kept)."""
    cite = {**pub.SOURCES, **ANALYTIC}
    out = {}
    for source in sorted(set(frame.source)):
        prefix = "borrowed-h100/" if source.startswith("borrowed-h100/") else ""
        rest = source.removeprefix(prefix)
        key = rest if rest.startswith("analytic:") else rest.split(":")[0]
        out[prefix + key] = cite[key]
    return out


def _provenance(frame: pd.DataFrame, **extra) -> dict:
    counts = frame.method.value_counts().to_dict()
    return {"rows": len(frame), "rows_by_method": {k: int(v) for k, v in counts.items()},
            "sources": _sources(frame), **extra}


# -- attention -------------------------------------------------------------------------------
def attention_for(gpu: str, implementation: str, source: str, kernel: str
                  ) -> tuple[pd.DataFrame, dict[str, str]]:
    """Published fwd/bwd points of one kernel, derived causal bwd where missing, model fill."""
    anchors = pub.fa_points(gpu, implementation, source)
    anchors = anchors[anchors["pass"].isin(["fwd", "bwd"])]
    if not ((anchors["pass"] == "bwd") & anchors.causal).any():
        anchors = pd.concat([anchors, tb.derive_causal_bwd(anchors, "analytic:causal-bwd")],
                            ignore_index=True)
    return tb.attention_table(anchors, kernel=kernel, fit_note="analytic:fa-fit")


# -- GEMM (HBM: A100 SXM4 80GB 2.039 TB/s, H100 SXM5 3.35 TB/s, NVIDIA datasheets) -----------
def gemm_for(points: pd.DataFrame, accelerator: str, hbm_bytes_per_s: float
             ) -> tuple[pd.DataFrame, dict]:
    m, n, k, t = pub.mamf_point(accelerator)
    model = GemmModel.fit(points.m, points.n, points.k, points.time_s,
                          ceiling=2.0 * m * n * k / t, hbm_bytes_per_s=hbm_bytes_per_s)
    frame = tb.gemm_table(points, model, note="analytic:gemm-roofline")
    fit = {"model": model.describe(), "fit_error_on_published": log_errors(
        model.time_s(points.m, points.n, points.k), points.time_s),
        "mamf_best_shape": f"{m}x{n}x{k} at {2 * m * n * k / t / 1e12:.1f} TFLOP/s"}
    return frame, fit


# -- collectives -----------------------------------------------------------------------------
def _extended(points: pd.DataFrame, *, shape=None, note="analytic:constant-bw") -> pd.DataFrame:
    parts = []
    for _, curve in points.groupby(["op", "group_size", "scope"]):
        use_shape = shape if curve.bytes.max() < tb.TOP_BYTES and shape is not None else None
        parts += [curve[tb.COLL_COLUMNS],
                  tb.extend_collective(curve, shape=use_shape,
                                       note="analytic:busbw-shape" if use_shape else note)]
    return pd.concat(parts, ignore_index=True)


def _half(all_reduce: pd.DataFrame, scale: dict[str, float] | None = None,
          ops: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_to_all")) -> pd.DataFrame:
    factor = {op: 0.5 * (scale or {}).get(op, 1.0) for op in ops}
    return tb.derive_ops(all_reduce, factor=factor, note="analytic:half-all-reduce")


def _rescaled_groups(frame: pd.DataFrame, groups: tuple[int, ...]) -> pd.DataFrame:
    parts = [frame.assign(group_size=g, source="analytic:bus-factor", method="analytic",
                          time_s=[t * bus_factor(op, g) / bus_factor(op, int(g0))
                                  for op, g0, t in zip(frame.op, frame.group_size, frame.time_s)])
             for g in groups]
    return pd.concat(parts, ignore_index=True)


def a100_collectives() -> pd.DataFrame:
    ar = pub.vidur_net_points("a100", "all_reduce")
    sr = pub.vidur_net_points("a100", "send_recv")
    sweep = pub.mleng_points("8x A100")  # nccl-tests, 8 ranks, 32 KiB .. 16 GiB
    intra8 = (ar.scope == "intra") & (ar.group_size == 8)
    big = sweep[sweep.bytes > ar.bytes.max()]
    full8 = pd.concat([ar[intra8], big], ignore_index=True)
    intra_small = ar[(ar.scope == "intra") & ~intra8]
    all_reduce = pd.concat([_extended(full8), _extended(intra_small, shape=tb.busbw_curve(sweep)),
                            _extended(ar[ar.scope == "inter"])], ignore_index=True)
    inter = all_reduce[all_reduce.scope == "inter"]
    a2a = _extended(pub.galvatron_sp_points("all2all"))  # measured all_to_all, not 0.5 x all_reduce
    return pd.concat([all_reduce, _half(all_reduce, ops=("all_gather", "reduce_scatter")),
                      a2a, _half(inter, ops=("all_to_all",)), _extended(sr)], ignore_index=True)


def h100_collectives() -> pd.DataFrame:
    ar = pub.vidur_net_points("h100", "all_reduce")
    sr = pub.vidur_net_points("h100", "send_recv")
    nvlink4 = pub.mleng_points("8x H200 (NVLink 4, NVSwitch)", algo_note="default (NVLS from 2MiB)")
    all_reduce = _extended(ar, shape=tb.busbw_curve(nvlink4))
    skrull = _extended(pub.skrull_points())
    # 8 ranks in a node: all_gather / reduce_scatter / all_to_all meet the published 16 GiB
    # ring points of the same NVLink 4 switch (ml-engineering's 8 x H200, as the h200 profile):
    # half the NVLS all_reduce would read up to 508 GB/s of bus bandwidth, above NVLink 4's 450
    derived = _half(all_reduce)
    at8 = (derived.scope == "intra") & (derived.group_size == 8)
    scale = _nvlink4_ring_scale(all_reduce[(all_reduce.scope == "intra")
                                           & (all_reduce.group_size == 8)])
    derived.loc[at8, "time_s"] = derived.time_s[at8] * derived.op[at8].map(scale)
    return pd.concat([all_reduce, derived, _extended(sr), skrull,
                      _rescaled_groups(skrull, (16, 64))], ignore_index=True)


def _nvlink4_ring_scale(all_reduce8: pd.DataFrame) -> dict[str, float]:
    """Per op, the published 8-rank NVLink 4 ring time at 16 GiB over half the 8-rank
    all_reduce's there (all_to_all: the mean of the two), which ``_half`` multiplies by."""
    ag_rs = pub.mleng_points("8x H200 (NVLink 4), single node")
    ag_rs = ag_rs[ag_rs.op != "all_reduce"]
    top = all_reduce8[all_reduce8.bytes == ag_rs.bytes.max()].time_s.iloc[0]
    scale = {op: float(ag_rs[ag_rs.op == op].time_s.iloc[0]) / (0.5 * top) for op in ag_rs.op}
    scale["all_to_all"] = sum(scale.values()) / len(scale)
    return scale


def h200_collectives(h100: pd.DataFrame) -> pd.DataFrame:
    sweep = pub.mleng_points("8x H200 (NVLink 4, NVSwitch)", algo_note="default (NVLS from 2MiB)")
    ag_rs = pub.mleng_points("8x H200 (NVLink 4), single node")
    ag_rs = ag_rs[ag_rs.op != "all_reduce"]
    ring4 = pub.mleng_points("H200 node (NVLink 4)", algo_note="NCCL picks Ring")
    borrowed = h100[(h100.op == "all_reduce") & (h100.scope == "intra") & (h100.group_size < 8)
                    & (h100.method == "published")]
    borrowed = borrowed.assign(source="borrowed-h100/" + borrowed.source)
    g4 = pd.concat([borrowed[borrowed.group_size == 4], ring4], ignore_index=True)
    all_reduce8 = _extended(sweep)
    all_reduce = pd.concat([all_reduce8, _extended(g4),
                            _extended(borrowed[borrowed.group_size == 2], shape=tb.busbw_curve(sweep))],
                           ignore_index=True)
    derived8 = _half(all_reduce8, _nvlink4_ring_scale(all_reduce8))
    derived8 = derived8[~(derived8.op.isin(ag_rs.op) & (derived8.bytes == ag_rs.bytes.max()))]
    rest = h100[(h100.op == "send_recv") | (h100.scope == "inter")]
    rest = rest.assign(source="borrowed-h100/" + rest.source)
    return pd.concat([all_reduce, ag_rs[tb.COLL_COLUMNS], derived8,
                      _half(all_reduce[all_reduce.group_size < 8]), rest], ignore_index=True)


# -- profiles ------------------------------------------------------------------------------------
def _write(name: str, meta: ProfileMeta, tables: dict[str, pd.DataFrame]) -> Path:
    out = HERE / name
    for table, frame in tables.items():
        write_table(out, table, tb.round_times(frame))
    write_meta(out, meta)
    return out


def build_a100() -> dict[str, pd.DataFrame]:
    attention, fits = attention_for("A100-SXM4-80GB", "FlashAttention-2", "fa2-paper", "fa2")
    points = pub.vidur_gemm_points("vidur_a100_llama3_8b_mlp_ops.csv", "vidur-a100-mlp",
                                   hidden=4096, heads=32, kv_heads=8, ffn=14336)
    gemm, gemm_fit = gemm_for(points, "NVIDIA A100 SXM", 2.039e12)
    tables = {"gemm": gemm, "attention": attention, "collectives": a100_collectives()}
    meta = ProfileMeta(
        device="NVIDIA A100-SXM4-80GB", memory_bytes=80 * GiB, method="mixed", date=DATE,
        software={"attention": "FlashAttention-2 (FA2 paper, PyTorch/CUDA as stated there)",
                  "gemm": "torch linear layers via Vidur (fp16/bf16; versions not stated)",
                  "collectives": "torch.distributed/NCCL via Vidur; nccl-tests via ml-engineering"},
        tables={"gemm": _provenance(gemm, m_quantum=M_QUANTUM, **gemm_fit,
                                    shapes="Llama-3-8B layer at TP 1/2/4/8: QKV, out, up+gate, down"),
                "attention": _provenance(attention, default_kernel="fa2", fits=fits,
                                         time="per sequence at full-GPU (packed) throughput"),
                "collectives": _provenance(tables["collectives"], scope_inter=(
                    "Vidur a100_dgx rows with fewer devices per node than workers (2 nodes)"),
                    cross_check=_a100_cross_check())},
        command="python profiles/build_public.py --only a100",
        notes="Published numbers from the FA2 paper, Vidur, ml-engineering and Galvatron (all2all); "
              "analytic rows fill the gaps (see tables.*.sources). head_dim 256 is not tabulated: "
              "lookups scale head_dim 128 in proportion.")
    return {"meta": meta, **tables}


def _a100_cross_check() -> str:
    cross = pub.galvatron_busbw()
    return (f"Galvatron 2 nodes x 8 (A100-class) all_reduce busbw "
            f"{cross['2node:allreduce_size_16_consec_1']:.1f} GB/s vs Vidur's 16-rank 2-node "
            "all_reduce here (about 17.5 GB/s at 64 MiB): inter-node speed is cluster-specific; "
            "profile your own cluster for multi-node A100 runs")


def build_h100() -> dict[str, pd.DataFrame]:
    fa3, fits3 = attention_for("H100-SXM5-80GB", "FlashAttention-3", "fa3-paper", "fa3")
    fa2, fits2 = attention_for("H100-SXM5-80GB", "FlashAttention-2", "fa3-paper", "fa2")
    attention = pd.concat([fa3, fa2], ignore_index=True)
    points = pub.vidur_gemm_points("vidur_h100_llama2_7b_mlp_ops.csv", "vidur-h100-mlp",
                                   hidden=4096, heads=32, kv_heads=32, ffn=11008)
    gemm, gemm_fit = gemm_for(points, "NVIDIA H100 SXM", 3.35e12)
    tables = {"gemm": gemm, "attention": attention, "collectives": h100_collectives()}
    cross = pub.galvatron_busbw()
    meta = ProfileMeta(
        device="NVIDIA H100-SXM5-80GB", memory_bytes=80 * GiB, method="mixed", date=DATE,
        software={"attention": "fa3 = FlashAttention-3, fa2 = FlashAttention 2.5.8 (FA3 paper: CUDA "
                               "12.3, cuDNN 9.1.1.17, PyTorch 2.3, clocks fixed at 1830 MHz)",
                  "gemm": "torch linear layers via Vidur (versions not stated)",
                  "collectives": "torch.distributed/NCCL via Vidur; Skrull's profiling (DeepSpeed)"},
        tables={"gemm": _provenance(gemm, m_quantum=M_QUANTUM, **gemm_fit,
                                    shapes="Llama-2-7B layer at TP 1/2/4/8: QKV, out, up+gate, down"),
                "attention": _provenance(attention, default_kernel="fa3", fits={**fits3, **fits2},
                                         kernels="kernel column: fa3 (default) or fa2; choose with "
                                                 "load_profile(..., attention_kernel='fa2')",
                                         time="per sequence at full-GPU (packed) throughput"),
                "collectives": _provenance(tables["collectives"], scope_inter=(
                    "Skrull Table 5 (group of 32 assumed) plus 16 and 64 by bus factor; send_recv "
                    "from Vidur's 1-device-per-node rows"), cross_check=(
                    "Skrull all_reduce 1 GiB on 32 GPUs -> busbw "
                    f"{2 * 31 / 32 * 2**30 / 12126e-6 / GB:.0f} GB/s; Galvatron 2 nodes x 8 "
                    f"(A100-class) all_reduce busbw {cross['2node:allreduce_size_16_consec_1']:.1f}"
                    f" GB/s, p2p {cross['2node:pp_size_2']:.1f} GB/s"), calibration=(
                    "all_gather/reduce_scatter/all_to_all at 8 ranks = 0.5 x NVLS all_reduce x "
                    f"{ {k: round(v, 3) for k, v in _scale_at_8(tables['collectives']).items()} } "
                    "to meet ml-engineering's published 16 GiB ring points of 8 x H200, the same "
                    "NVLink 4 switch (all_to_all: their mean)"))},
        command="python profiles/build_public.py --only h100",
        notes="Public-data-only H100 profile (the h100-sxm5-80gb preset's default until "
              "2026-11-23; select it with hardware.profile = \"h100-sxm5-80gb-public\"). "
              "fa3 is the default attention kernel; fa2 rows are the FA3 paper's FlashAttention-2 "
              "bars. Causal backward is not in the FA3 paper: derived (analytic:causal-bwd). "
              "head_dim 256 backward is not tabulated: lookups scale head_dim 128 in proportion. "
              "Intra-node all_gather/reduce_scatter/all_to_all use 0.5 x all_reduce, at 8 ranks "
              "scaled to the published NVLink 4 ring points (tables.collectives.calibration); on "
              "A100 Galvatron measured all2all 7-27% slower than that rule at >= 64 MiB "
              "(validation/profiles/interpolation.md).")
    return {"meta": meta, **tables}


def build_h200(h100: dict) -> dict[str, pd.DataFrame]:
    borrow = {name: h100[name].assign(source="borrowed-h100/" + h100[name].source)
              for name in ("gemm", "attention")}
    collectives = h200_collectives(h100["collectives"])
    base = h100["meta"]
    tables = {**borrow, "collectives": collectives}
    meta = ProfileMeta(
        device="NVIDIA H200 (SXM, 141 GB HBM3e)", memory_bytes=141 * GB, method="mixed", date=DATE,
        software={**base.software, "collectives": "ml-engineering all_reduce_bench (torch 2.9.1, "
                                                  "nccl 2.27.7) and nccl-tests"},
        tables={"gemm": {**base.tables["gemm"], "borrowed": "all rows from h100-sxm5-80gb-public: same "
                         "GH100 compute (MAMF table: 'H200 is the same'); H200's faster HBM3e "
                         "(4.8 vs 3.35 TB/s) is ignored, so memory-bound GEMMs are pessimistic"},
                "attention": {**base.tables["attention"], "borrowed": "all rows from "
                              "h100-sxm5-80gb-public (FA3 and FA2 on H100)"},
                "collectives": _provenance(collectives, borrowed=(
                    "from h100-sxm5-80gb-public: all_reduce groups 2 and 4 up to 64 MiB, send_recv, and "
                    "every inter-node row"), calibration=(
                    "all_gather/reduce_scatter at 8 ranks = 0.5 x NVLS all_reduce x "
                    f"{ {k: round(v, 3) for k, v in _scale_at_8(collectives).items()} } "
                    "to meet the published 16 GiB ring points"))},
        command="python profiles/build_public.py --only h200",
        notes="Compute tables are H100's (see tables.*.borrowed); memory 141 GB (hardware.py). "
              "Intra-node all_to_all uses the 0.5 x all_reduce rule (see the h100 profile's notes). "
              "Public data only: the h200 preset's default is profiles/h200 (the measured H100 "
              "tables with these collectives, profiles/build_h200.py).")
    return {"meta": meta, **tables}


def _scale_at_8(collectives: pd.DataFrame) -> dict[str, float]:
    pts = collectives[(collectives.group_size == 8) & (collectives.bytes == 2**34)]
    ar = float(pts[pts.op == "all_reduce"].time_s.iloc[0])
    return {op: float(pts[pts.op == op].time_s.iloc[0]) / (0.5 * ar)
            for op in ("all_gather", "reduce_scatter")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="directory of the public data (default shared/data)")
    parser.add_argument("--only", choices=("a100", "h100", "h200"))
    args = parser.parse_args(argv)
    if args.data:
        pub.DATA_DIR = Path(args.data)
    names = {"a100": "a100-sxm4-80gb", "h100": "h100-sxm5-80gb-public", "h200": "h200-public"}
    built = {}
    if args.only in (None, "a100"):
        built["a100"] = build_a100()
    if args.only in (None, "h100", "h200"):
        built["h100"] = build_h100()
    if args.only in (None, "h200"):
        built["h200"] = build_h200(built["h100"])
    for key, result in built.items():
        if args.only in (None, key):
            out = _write(names[key], result.pop("meta"), result)
            print(f"wrote {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
