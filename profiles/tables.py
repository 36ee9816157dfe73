"""Generic table builders: published anchor rows in, complete profile tables out.

Shared by build_public.py (the shipped profiles) and validation/profiles/loo.py (which rebuilds a
table without one published point to predict it). Every output row carries ``source`` and
``method`` (published | analytic); analytic rows never replace a published row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analytic import AttentionModel, GemmModel, attention_work  # noqa: F401  (re-exported)

TOKEN_GRID = [2**i for i in range(20)]  # 1 .. 524288 tokens, for attention q and kv and GEMM m
GEMM_DIM_GRID = [2**i for i in range(7, 18)]  # 128 .. 131072 for GEMM n and k
TOP_BYTES = 2**34  # collectives are extended up to 16 GiB
ATTN_COLUMNS = ["q_tokens", "kv_tokens", "num_heads", "num_kv_heads", "head_dim", "causal", "pass",
                "time_s", "kernel", "source", "method"]
GEMM_COLUMNS = ["m", "n", "k", "dtype", "time_s", "source", "method"]
COLL_COLUMNS = ["op", "group_size", "scope", "bytes", "time_s", "source", "method"]


# -- attention ---------------------------------------------------------------------------------
def flops_per_pair(pass_: str, head_dim: int, num_heads: int) -> float:
    """Forward: QK^T and PV, 2 matmuls x 2 FLOPs per multiply-add; backward 2.5 x (FA2 paper 4.1)."""
    return 4.0 * head_dim * num_heads * (2.5 if pass_ == "bwd" else 1.0)


def derive_causal_bwd(anchors: pd.DataFrame, note: str) -> pd.DataFrame:
    """Causal backward where a paper shows only non-causal backward:
    t_bwd,causal(s) = t_bwd,full(s) x t_fwd,causal(s) / t_fwd,full(s) (same head_dim, same s),
    i.e. the causal mask costs the backward what it costs the forward."""
    key = ["head_dim", "q_tokens"]
    fwd = anchors[anchors["pass"] == "fwd"].set_index(key + ["causal"])["time_s"]
    rows = []
    for _, row in anchors[(anchors["pass"] == "bwd") & ~anchors.causal].iterrows():
        full, causal = (row.head_dim, row.q_tokens, False), (row.head_dim, row.q_tokens, True)
        if full in fwd.index and causal in fwd.index:
            rows.append({**row.to_dict(), "causal": True, "method": "analytic", "source": note,
                         "time_s": row.time_s * fwd[causal] / fwd[full]})
    return pd.DataFrame(rows, columns=anchors.columns)


def attention_group_rows(anchors: pd.DataFrame, *, kernel: str, fit_note: str
                         ) -> tuple[pd.DataFrame, AttentionModel]:
    """One (pass, causal, head_dim) group: the anchors plus model rows on TOKEN_GRID^2 (causal:
    the q <= kv half)."""
    first = anchors.iloc[0]
    pass_, causal = first["pass"], bool(first["causal"])
    hd, heads = int(first["head_dim"]), int(first["num_heads"])
    model = AttentionModel.fit(anchors.q_tokens, anchors.kv_tokens, anchors.time_s,
                               flops_per_pair=flops_per_pair(pass_, hd, heads), causal=causal)
    have = set(zip(anchors.q_tokens, anchors.kv_tokens))
    q, kv = (g.ravel() for g in np.meshgrid(TOKEN_GRID, TOKEN_GRID, indexing="ij"))
    # causal: only q <= kv (the lookup fills the rest, ltsim.lookup.LogGrid2D)
    mask = np.array([(a, b) not in have and (b >= a or not causal) for a, b in zip(q, kv)])
    fill = pd.DataFrame({"q_tokens": q[mask], "kv_tokens": kv[mask], "num_heads": heads,
                         "num_kv_heads": heads, "head_dim": hd, "causal": causal, "pass": pass_,
                         "time_s": model.time_s(q[mask], kv[mask]), "source": fit_note,
                         "method": "analytic"})
    fill["time_s"] = _sandwich(fill, anchors)
    out = pd.concat([anchors.assign(kernel=kernel), fill.assign(kernel=kernel)], ignore_index=True)
    return out[ATTN_COLUMNS], model


def _sandwich(fill: pd.DataFrame, anchors: pd.DataFrame) -> np.ndarray:
    """Clip model nodes between the anchors they dominate and the anchors that dominate them, so
    the grid stays monotone in q and kv where model and anchors meet (the model is monotone and so
    are the anchors; the clip bounds are monotone too)."""
    aq, akv, at = (anchors[c].to_numpy(float) for c in ("q_tokens", "kv_tokens", "time_s"))
    out = fill.time_s.to_numpy(float).copy()
    for i, (q, kv) in enumerate(zip(fill.q_tokens, fill.kv_tokens)):
        below = at[(aq <= q) & (akv <= kv)]
        above = at[(aq >= q) & (akv >= kv)]
        if below.size:
            out[i] = max(out[i], below.max())
        if above.size:
            out[i] = min(out[i], above.min())
    return out


def attention_table(anchors: pd.DataFrame, *, kernel: str, fit_note: str
                    ) -> tuple[pd.DataFrame, dict[str, str]]:
    """All groups of one kernel; returns the rows and a description of each group's fit."""
    parts, fits = [], {}
    for (pass_, causal, hd), grp in anchors.groupby(["pass", "causal", "head_dim"]):
        rows, model = attention_group_rows(grp, kernel=kernel, fit_note=fit_note)
        parts.append(rows)
        fits[f"{kernel} {pass_} causal={causal} head_dim={hd}"] = model.describe()
    return pd.concat(parts, ignore_index=True), fits


# -- GEMM --------------------------------------------------------------------------------------
def gemm_shape_rows(points: pd.DataFrame, model: GemmModel, *, note: str) -> pd.DataFrame:
    """One published (n, k) shape: its points, plus m = 2^j above its largest m up to 2^19 from the
    model scaled to meet the largest published point (so the curve stays continuous)."""
    points = points.sort_values("m")
    m, n, k, dtype, time_s = points.iloc[-1][["m", "n", "k", "dtype", "time_s"]]
    top_m = [v for v in TOKEN_GRID if v > m]
    scale = time_s / float(model.time_s(m, n, k))
    ext = pd.DataFrame({"m": top_m, "n": int(n), "k": int(k), "dtype": dtype,
                        "time_s": scale * model.time_s(top_m, n, k), "source": note,
                        "method": "analytic"})
    return pd.concat([points[GEMM_COLUMNS], ext], ignore_index=True)


def gemm_table(published: pd.DataFrame, model: GemmModel, *, note: str) -> pd.DataFrame:
    """Published shapes (extended in m) plus a model grid of (n, k) in GEMM_DIM_GRID^2 x TOKEN_GRID."""
    parts = [gemm_shape_rows(grp, model, note=note + "-extension")
             for _, grp in published.groupby(["n", "k"])]
    shapes = set(zip(published.n, published.k))
    m, n, k = (g.ravel() for g in np.meshgrid(TOKEN_GRID, GEMM_DIM_GRID, GEMM_DIM_GRID, indexing="ij"))
    mask = np.array([(a, b) not in shapes for a, b in zip(n, k)])
    parts.append(pd.DataFrame({"m": m[mask], "n": n[mask], "k": k[mask], "dtype": "bf16",
                               "time_s": model.time_s(m[mask], n[mask], k[mask]),
                               "source": note + "-grid", "method": "analytic"}))
    return pd.concat(parts, ignore_index=True)[GEMM_COLUMNS]


# -- collectives -------------------------------------------------------------------------------
def busbw_curve(points: pd.DataFrame):
    """Bus-bandwidth ratio busbw(size) / busbw(ref) of one published sweep, log-log interpolated."""
    pts = points.sort_values("bytes")
    log_s = np.log(pts.bytes.to_numpy(float))
    log_bw = np.log(pts.bytes.to_numpy(float) / pts.time_s.to_numpy(float))

    def ratio(size: float, ref: float) -> float:
        at = np.interp(np.log([size, ref]), log_s, log_bw)
        return float(np.exp(at[0] - at[1]))
    return ratio


def extend_collective(curve: pd.DataFrame, *, note: str, shape=None, top: int = TOP_BYTES
                      ) -> pd.DataFrame:
    """Analytic rows for one (op, group_size, scope) curve: a latency floor at 1 byte, and powers of
    two above its largest size up to ``top`` at the last point's bandwidth, or following ``shape``
    (a busbw_curve of a longer sweep on the same interconnect)."""
    curve = curve.sort_values("bytes")
    first, last = curve.iloc[0], curve.iloc[-1]
    last_bytes, last_time = float(last["bytes"]), float(last["time_s"])
    sizes = [2**j for j in range(1, 35) if last_bytes < 2**j <= top]
    times = [last_time * s / last_bytes / (shape(s, last_bytes) if shape else 1.0) for s in sizes]
    rows = [{**first.to_dict(), "bytes": 1, "source": "analytic:latency-floor", "method": "analytic"}]
    rows += [{**last.to_dict(), "bytes": s, "time_s": t, "source": note, "method": "analytic"}
             for s, t in zip(sizes, times)]
    return pd.DataFrame(rows)[COLL_COLUMNS]


def derive_ops(all_reduce: pd.DataFrame, *, factor: dict[str, float], note: str) -> pd.DataFrame:
    """all_gather / reduce_scatter / all_to_all from all_reduce rows: t = factor[op] x t_all_reduce
    at the same bytes (0.5 at equal bus bandwidth, collectives.CollectiveLookup)."""
    parts = [all_reduce.assign(op=op, time_s=all_reduce.time_s * f, source=note, method="analytic")
             for op, f in factor.items()]
    return pd.concat(parts, ignore_index=True)[COLL_COLUMNS]


def round_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Six significant digits: the data are not better than that, and the files stay small."""
    return frame.assign(time_s=[float(f"{t:.6g}") for t in frame.time_s])
