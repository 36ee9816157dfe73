"""Leave-one-out check of the profile lookups (DESIGN.md section 8: per-op lookups within 5%).

    python validation/profiles/loo.py     # fills interpolation.md.in -> interpolation.md, and
                                          # writes every GEMM point to loo_gemm_points.csv

For each published point: rebuild its table group without it, exactly as profiles/build_public.py
builds it (attention: refit the group's model on the other points and refill the grid; GEMM: the
shape's other points plus its extension above the largest m), load that into the same lookup
classes ltsim.profiles.Profile uses, and predict the held-out point. Error = predicted / published - 1.

Sets: the FlashAttention-3 H100 bf16 points (FA3 paper Figs 5-6; 48 points), and every published
GEMM point of the A100 and H100 profiles (Vidur per-op times). The GEMM device fit (used only above a
shape's largest m) is not refit per held-out point.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "profiles")]

import build_public as bp  # noqa: E402
import public_data as pub  # noqa: E402
import tables as tb  # noqa: E402
from analytic import GemmModel  # noqa: E402

from ltsim import lookup  # noqa: E402
from ltsim.lookup import AttentionLookup, GemmLookup  # noqa: E402
from ltsim.profiles import load_profile  # noqa: E402

OUT = Path(__file__).resolve().parent
GEMM_DEVICES = {  # name: (Vidur file, source key, Llama shape, MAMF accelerator, HBM bytes/s)
    "a100": ("vidur_a100_llama3_8b_mlp_ops.csv", "vidur-a100-mlp",
             dict(hidden=4096, heads=32, kv_heads=8, ffn=14336), "NVIDIA A100 SXM", 2.039e12),
    "h100": ("vidur_h100_llama2_7b_mlp_ops.csv", "vidur-h100-mlp",
             dict(hidden=4096, heads=32, kv_heads=32, ffn=11008), "NVIDIA H100 SXM", 3.35e12),
}


def attention_loo() -> pd.DataFrame:
    points = pub.fa_points("H100-SXM5-80GB", "FlashAttention-3", "fa3-paper")
    points = points[points["pass"].isin(["fwd", "bwd"])].reset_index(drop=True)
    rows = []
    for i, held in points.iterrows():
        same = ((points["pass"] == held["pass"]) & (points.causal == held.causal)
                & (points.head_dim == held.head_dim))
        rest = points[same & (points.index != i)]
        table, _ = tb.attention_group_rows(rest, kernel="fa3", fit_note="analytic:fa-fit")
        look = AttentionLookup(list(table[["kernel", "pass", "causal", "head_dim", "num_heads",
                                           "q_tokens", "kv_tokens", "time_s"]].itertuples(
                                               index=False, name=None)))
        pred = look.time_s(held.q_tokens, held.kv_tokens, num_heads=held.num_heads,
                           head_dim=held.head_dim, causal=bool(held.causal), pass_=held["pass"],
                           kernel="fa3", notes=[])
        rows.append({"figure": held.source.split(":")[1], "pass": held["pass"],
                     "causal": bool(held.causal), "head_dim": int(held.head_dim),
                     "seqlen": int(held.q_tokens), "published_ms": held.time_s * 1e3,
                     "predicted_ms": pred * 1e3, "error": pred / held.time_s - 1.0})
    return pd.DataFrame(rows)


def gemm_model(device: str, points: pd.DataFrame) -> GemmModel:
    _, _, _, accelerator, hbm = GEMM_DEVICES[device]
    m, n, k, t = pub.mamf_point(accelerator)
    return GemmModel.fit(points.m, points.n, points.k, points.time_s, ceiling=2.0 * m * n * k / t,
                         hbm_bytes_per_s=hbm)


def gemm_loo(device: str, *, quantum: int = bp.M_QUANTUM) -> pd.DataFrame:
    name, source, shape, _, _ = GEMM_DEVICES[device]
    points = pub.vidur_gemm_points(name, source, **shape)
    model = gemm_model(device, points)
    rows = []
    for (n, k), grp in points.groupby(["n", "k"]):
        grp = grp.sort_values("m").reset_index(drop=True)
        for i, held in grp.iterrows():
            table = tb.gemm_shape_rows(grp.drop(index=i), model, note="analytic")
            look = GemmLookup(list(table[["dtype", "m", "n", "k", "time_s"]].itertuples(
                index=False, name=None)), quantum=quantum)
            pred = look.time_s(held.m, n, k, "bf16", [])
            rows.append({"device": device, "op": held.source.split(":", 1)[1], "m": int(held.m),
                         "n": int(n), "k": int(k), "published_ms": held.time_s * 1e3,
                         "predicted_ms": pred * 1e3, "error": pred / held.time_s - 1.0})
    return pd.DataFrame(rows)


def summary(errors: pd.Series) -> dict[str, float]:
    e = errors.abs()
    return {"points": len(e), "median_pct": 100 * e.median(), "p95_pct": 100 * e.quantile(0.95),
            "p99_pct": 100 * e.quantile(0.99), "worst_pct": 100 * e.max(),
            "over_15pct": int((e > 0.15).sum())}


def ablation() -> pd.DataFrame:
    """GEMM LOO under other interpolation choices: no tile plateaus, other monotone rules."""
    shipped = lookup._monotone

    def running_max(log_y: list[float]) -> list[float]:
        return list(np.maximum.accumulate(log_y))

    def running_min_from_right(log_y: list[float]) -> list[float]:
        return list(np.minimum.accumulate(log_y[::-1])[::-1])

    rows = []
    for label, quantum, rule in (("plain log-log, isotonic", 0, shipped),
                                 ("tile plateaus (64), running max", 64, running_max),
                                 ("tile plateaus (64), running min from the right", 64,
                                  running_min_from_right),
                                 ("tile plateaus (64), isotonic (shipped)", 64, shipped)):
        lookup._monotone = rule
        try:
            errs = pd.concat([gemm_loo(d, quantum=quantum) for d in GEMM_DEVICES]).error
        finally:
            lookup._monotone = shipped
        rows.append({"variant": label, **summary(errs)})
    return pd.DataFrame(rows)


def projection(device: str) -> pd.DataFrame:
    """In-sample: each shape's curve from all its points, evaluated at them. Non-zero only where
    the published times are not monotone in m, so it bounds what any monotone lookup can reach."""
    name, source, shape, _, _ = GEMM_DEVICES[device]
    points = pub.vidur_gemm_points(name, source, **shape)
    rows = []
    for (n, k), grp in points.groupby(["n", "k"]):
        look = GemmLookup(list(grp[["dtype", "m", "n", "k", "time_s"]].itertuples(
            index=False, name=None)), quantum=bp.M_QUANTUM)
        rows += [{"device": device, "m": m, "error": look.time_s(m, n, k, "bf16", []) / t - 1.0}
                 for m, t in zip(grp.m, grp.time_s)]
    return pd.DataFrame(rows)


def fa2_readme_check() -> pd.DataFrame:
    """h100 profile's fa2 rows (FA3 paper bars) against the FlashAttention README's H100 figure
    (fwd+bwd, read by eye; not used to build the profile): table fwd + bwd vs the README time."""
    profile = load_profile("h100-sxm5-80gb", attention_kernel="fa2")
    readme = pub.fa_points("H100-SXM5-80GB", "FlashAttention-2", "fa2-readme-h100")
    rows = []
    for r in readme.itertuples(index=False):
        args = dict(num_heads=r.num_heads, num_kv_heads=r.num_heads, head_dim=r.head_dim,
                    causal=bool(r.causal))
        pred = sum(profile.attention_time_s(r.q_tokens, r.kv_tokens, pass_=p, **args)
                   for p in ("fwd", "bwd"))
        rows.append({"causal": bool(r.causal), "head_dim": r.head_dim, "seqlen": r.q_tokens,
                     "readme_ms": r.time_s * 1e3, "table_ms": pred * 1e3,
                     "error_pct": 100 * (pred / r.time_s - 1.0)})
    return pd.DataFrame(rows)


def galvatron_check() -> pd.DataFrame:
    """Galvatron's one-node all_reduce times (A100-class, not used to build) against the a100
    profile's all_reduce; its all2all times (used in the a100 profile) against the rule
    all_to_all = 0.5 x all_reduce that the h100 and h200 intra-node rows rely on."""
    import json
    data = json.loads((pub.DATA_DIR / "galvatron_sp_time_1nodes_8gpus_per_node.json").read_text())
    profile = load_profile("a100-sxm4-80gb")
    rows = []
    for key, ms in data.items():
        kind, _, group, size, _ = key.split("_")
        num_bytes = int(size.removesuffix("MB")) * pub.MiB
        op = "all_reduce" if kind == "allreduce" else "all_to_all = 0.5 x all_reduce"
        pred = profile.collective_time_s("all_reduce", group_size=int(group), scope="intra",
                                         num_bytes=num_bytes) * (1.0 if kind == "allreduce" else 0.5)
        rows.append({"op": op, "group_size": int(group), "MiB": num_bytes // pub.MiB,
                     "galvatron_ms": ms, "table_ms": pred * 1e3,
                     "error_pct": 100 * (pred / (ms * 1e-3) - 1.0)})
    return pd.DataFrame(rows)


def by_tokens(frame: pd.DataFrame) -> pd.DataFrame:
    bins = [0, 64, 1024, 4096, 10**9]
    labels = ["m < 64", "64 <= m < 1024", "1024 <= m < 4096", "m >= 4096"]
    cut = pd.cut(frame.m, bins, right=False, labels=labels)
    return pd.DataFrame([{"tokens": label, **summary(frame.error[cut == label])}
                         for label in labels])


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub markdown table (no tabulate dependency)."""
    def cell(v) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False, name=None)]
    return "\n".join(lines)


def results() -> dict[str, str]:
    attn = attention_loo()
    gemm = pd.concat([gemm_loo(d) for d in GEMM_DEVICES], ignore_index=True)
    gemm.to_csv(OUT / "loo_gemm_points.csv", index=False, float_format="%.6g")
    proj = pd.concat([projection(d) for d in GEMM_DEVICES], ignore_index=True)
    shapes = pd.DataFrame([{"device": d, "op": op, "n": int(g.n.iloc[0]), "k": int(g.k.iloc[0]),
                            **summary(g.error)} for (d, op), g in gemm.groupby(["device", "op"])])
    worst = gemm.loc[gemm.error.abs().sort_values(ascending=False).index].head(15)
    stats = pd.DataFrame([{"set": "attention FA3 H100", **summary(attn.error)}]
                         + [{"set": f"gemm {d}", **summary(g.error)} for d, g in gemm.groupby("device")]
                         + [{"set": "gemm both", **summary(gemm.error)},
                            {"set": "gemm both, in-sample (monotone projection only)",
                             **summary(proj.error)}])
    attn = attn.assign(error_pct=100 * attn.error).drop(columns="error")
    worst = worst.assign(error_pct=100 * worst.error).drop(columns="error")
    fa2, galv = fa2_readme_check(), galvatron_check()
    cross = pd.DataFrame([{"check": "h100 fa2 fwd+bwd vs FA README figure",
                           **summary(fa2.error_pct / 100)},
                          *[{"check": f"a100 {op} vs Galvatron (1 node)",
                             **summary(g.error_pct / 100)}
                            for op, g in galv.groupby("op")]])
    return {"stats": markdown(stats), "attention": markdown(attn), "tokens": markdown(by_tokens(gemm)),
            "shapes": markdown(shapes), "worst": markdown(worst), "ablation": markdown(ablation()),
            "cross": markdown(cross), "fa2_readme": markdown(fa2), "galvatron": markdown(galv)}


def main() -> None:
    parts = results()
    text = (OUT / "interpolation.md.in").read_text()
    for key, table in parts.items():
        text = text.replace("{{" + key + "}}", table)
    (OUT / "interpolation.md").write_text(text)
    print(parts["stats"])


if __name__ == "__main__":
    main()
