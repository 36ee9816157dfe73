"""Analytic fills for the gaps in the public data, each fitted to the published points of its device.

- Attention (per kernel, pass, causal, head_dim): time = c * work / (P * e(L)), with
  work = query-key pairs (ltsim.lookup.attention_work), c = 4 head_dim num_heads FLOPs per pair
  (x 2.5 for bwd, FA2 paper section 4.1), L = work / q the mean keys per query row,
  e(L) = 1 / (1 + (L0 / L)^a) the efficiency of a kernel whose inner loop runs over L keys (short
  loops pay the tile prologue/epilogue). Tiles have 128 rows and 128 keys, so work and L are
  computed for q and kv padded up to multiples of 128 (causal: kv at least the padded q): a 1-token
  sequence costs a whole tile.
  P, L0, a are fitted in log space to the group's published points.
  Below the published range of L the overhead becomes a fixed cost per query tile (see the class).
- GEMM: a roofline with a fixed cost (Williams et al. 2009, "Roofline"):
  time = t0 + max(2 m n k / (P s(m) s(n) s(k)), bytes / BW), s(x) = x / (x + x0_x), bytes =
  2 (m k + k n + m n) (bf16 reads and write). t0, the three x0, P and BW are fitted in log space
  to all Vidur points of the device, with P capped at the ml-engineering MAMF value (the best
  matmul throughput measured on that GPU over a brute-force shape sweep) and BW at the datasheet
  HBM bandwidth: P = MAMF / (1 + exp(-z_P)), BW = HBM / (1 + exp(-z_BW)).
- Collectives: below the smallest published message the time stays at the smallest one's (latency
  floor, Skrull eq. 16's T_fixed); above the largest it grows at the last point's bandwidth, or
  along the bus-bandwidth curve of a larger published sweep of the same interconnect.
"""

from __future__ import annotations

import math

import numpy as np

Q_TILE = 128  # query rows per FlashAttention-2/3 thread block (FA2 paper section 3.3; FA3 uses 128)


def nelder_mead(f, x0: np.ndarray, *, step: float = 0.5, iters: int = 4000, tol: float = 1e-12
                ) -> np.ndarray:
    """Minimise f from x0 (Nelder and Mead 1965, standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    simplex = [np.asarray(x0, float)] + [np.asarray(x0, float) + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - worst)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex]
                values = [f(s) for s in simplex]
    return simplex[int(np.argmin(values))]


# -- attention ---------------------------------------------------------------------------------
def attention_work(q: np.ndarray, kv: np.ndarray, causal: bool) -> np.ndarray:
    """Vectorised ltsim.lookup.attention_work."""
    q = np.asarray(q, float)
    kv = np.asarray(kv, float)
    if not causal:
        return q * kv
    return np.where(kv >= q, q * kv - q * q / 2.0, kv * kv / 2.0)


class AttentionModel:
    """time = c work / (P e(L)), fitted per (kernel, pass, causal, head_dim) group.

    Below the smallest fitted L (L_lo) the overhead 1/e - 1 = (L0/L)^a continues as
    (L0/L_lo)^a L_lo/L: a fixed cost per query tile (prologue and epilogue), so a short sequence
    costs a bounded time instead of the power law's runaway.
    """

    def __init__(self, *, flops_per_pair: float, causal: bool, params: np.ndarray,
                 mean_keys_min: float) -> None:
        self.flops_per_pair = flops_per_pair
        self.causal = causal
        self.params = params  # log P, log L0, log a
        self.mean_keys_min = mean_keys_min

    @classmethod
    def fit(cls, q, kv, time_s, *, flops_per_pair: float, causal: bool) -> "AttentionModel":
        q, kv, log_t = np.asarray(q, float), np.asarray(kv, float), np.log(np.asarray(time_s))
        l_lo = float(np.min(attention_work(q, kv, causal) / q))

        def loss(p: np.ndarray) -> float:
            model = cls(flops_per_pair=flops_per_pair, causal=causal, params=p, mean_keys_min=l_lo)
            with np.errstate(over="ignore"):
                return float(np.sum((np.log(model.time_s(q, kv)) - log_t) ** 2))

        start = np.array([math.log(float(np.max(flops_per_pair * attention_work(q, kv, causal)
                                                 / np.exp(log_t)))), math.log(256.0), 0.0])
        return cls(flops_per_pair=flops_per_pair, causal=causal, params=nelder_mead(loss, start),
                   mean_keys_min=l_lo)

    def time_s(self, q, kv) -> np.ndarray:
        q, kv = np.asarray(q, float), np.asarray(kv, float)
        log_p, log_l0, log_a = self.params
        l0, a, l_lo = math.exp(log_l0), math.exp(log_a), self.mean_keys_min
        q_pad = Q_TILE * np.ceil(q / Q_TILE)
        kv_pad = Q_TILE * np.ceil(kv / Q_TILE)
        work = attention_work(q_pad, np.maximum(kv_pad, q_pad) if self.causal else kv_pad,
                              self.causal)
        mean_keys = work / q_pad
        overhead = np.where(mean_keys >= l_lo, (l0 / np.maximum(mean_keys, l_lo)) ** a,
                            (l0 / l_lo) ** a * l_lo / mean_keys)
        return self.flops_per_pair * work * (1.0 + overhead) / math.exp(log_p)

    def describe(self) -> str:
        log_p, log_l0, log_a = self.params
        return (f"P={math.exp(log_p) / 1e12:.1f} TFLOP/s, L0={math.exp(log_l0):.0f} keys, "
                f"a={math.exp(log_a):.3f}, fixed cost per query tile below L={self.mean_keys_min:.0f}")


# -- GEMM ----------------------------------------------------------------------------------------
class GemmModel:
    """Roofline with fixed cost and per-dimension efficiency; see the module docstring."""

    def __init__(self, params: np.ndarray, *, ceiling: float, hbm_bytes_per_s: float) -> None:
        # z_P, z_BW (P = ceiling sigmoid(z_P), BW = hbm sigmoid(z_BW)), log t0, log x0_m, x0_n, x0_k
        self.params = params
        self.ceiling = ceiling
        self.hbm_bytes_per_s = hbm_bytes_per_s

    @classmethod
    def fit(cls, m, n, k, time_s, *, ceiling: float, hbm_bytes_per_s: float) -> "GemmModel":
        m, n, k = (np.asarray(v, float) for v in (m, n, k))
        log_t = np.log(np.asarray(time_s, float))

        def loss(p: np.ndarray) -> float:
            model = cls(p, ceiling=ceiling, hbm_bytes_per_s=hbm_bytes_per_s)
            with np.errstate(over="ignore"):
                return float(np.sum((np.log(model.time_s(m, n, k)) - log_t) ** 2))

        start = np.r_[1.0, 1.0, np.log([5e-6, 64.0, 64.0, 64.0])]
        best = nelder_mead(loss, start, step=0.3, iters=6000)
        best = nelder_mead(loss, best, step=0.1, iters=6000)
        return cls(best, ceiling=ceiling, hbm_bytes_per_s=hbm_bytes_per_s)

    @property
    def peak(self) -> float:
        return self.ceiling / (1.0 + math.exp(-self.params[0]))

    @property
    def bandwidth(self) -> float:
        return self.hbm_bytes_per_s / (1.0 + math.exp(-self.params[1]))

    def time_s(self, m, n, k) -> np.ndarray:
        m, n, k = (np.asarray(v, float) for v in (m, n, k))
        t0, x0m, x0n, x0k = np.exp(self.params[2:])
        eff = (m / (m + x0m)) * (n / (n + x0n)) * (k / (k + x0k))
        compute = 2.0 * m * n * k / (self.peak * eff)
        memory = 2.0 * (m * k + k * n + m * n) / self.bandwidth
        return t0 + np.maximum(compute, memory)

    def describe(self) -> str:
        t0, x0m, x0n, x0k = np.exp(self.params[2:])
        return (f"P={self.peak / 1e12:.1f} TFLOP/s (ceiling {self.ceiling / 1e12:.1f}), "
                f"BW={self.bandwidth / 1e12:.2f} TB/s (ceiling {self.hbm_bytes_per_s / 1e12:.2f}), "
                f"t0={t0 * 1e6:.1f} us, x0_m={x0m:.0f}, x0_n={x0n:.0f}, "
                f"x0_k={x0k:.0f}")


def log_errors(predicted, measured) -> dict[str, float]:
    """Median and worst |predicted / measured - 1|."""
    err = np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)
    return {"median": float(np.median(err)), "worst": float(np.max(err))}
