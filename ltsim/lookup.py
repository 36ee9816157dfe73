"""Interpolation behind ``Profile`` (profiles.py): monotone log-log curves, 2-D log grids, and the
GEMM and attention table lookups built on them (DESIGN.md section 7: interpolate in log-log space).

- ``MonotoneCurve``: y(x) piecewise linear in (log x, log y), non-decreasing; GEMM time over m and
  collective time over bytes.
  * Monotone ("more work never costs less"): log times are replaced by their isotonic regression
    (pool adjacent violators), the closest non-decreasing sequence in least squares. Measured
    tables are not always monotone (cuBLAS picks a faster kernel for some larger m); pooling splits
    the difference instead of moving whole plateaus, which validation/profiles/ (leave-one-out)
    prefers. Monotone tables are reproduced exactly.
  * Quantum (GEMM tiles): cuBLAS time is a staircase in m (Vidur's A100/H100 profiles plateau on
    (64j, 64j+64]; NVIDIA "Matrix Multiplication Background User's Guide": tile quantization).
    Where a quantum bin holds two or more points the curve stays flat from the bin's first point
    back to its left edge and from its last point to its right edge; sparser tables are unchanged.
  * Outside the points: below the smallest x, the smallest point's time (a latency floor); above
    the largest, time grows with x (constant throughput). Callers report both as warnings.
- ``LogGrid2D``: log v over (log x, log y). A full grid is made monotone (each node lowered to the
  smallest node above and right of it) and interpolates bilinearly, which stays monotone along
  both axes; scattered points use inverse-distance weighting (Shepard 1968, power 2), exact at the
  points. Coordinates outside the points are clamped.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

BELOW, INSIDE, ABOVE = -1, 0, 1


def _dedupe_mean(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """Sorted unique xs, averaging ys (already logs) of equal xs."""
    acc: dict[float, list[float]] = {}
    for x, y in zip(xs, ys):
        acc.setdefault(x, []).append(y)
    return sorted(acc), [sum(acc[k]) / len(acc[k]) for k in sorted(acc)]


def _monotone(log_y: list[float]) -> list[float]:
    """Isotonic regression by pool-adjacent-violators (Ayer et al. 1955): the non-decreasing
    sequence closest to ``log_y`` in least squares. A non-decreasing input comes back unchanged."""
    blocks: list[list[float]] = []  # [sum, count] of pooled runs
    for value in log_y:
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out += [total / count] * int(count)
    return out


def _plateau_knots(x: list[float], log_y: list[float], quantum: int
                   ) -> tuple[list[float], list[float]]:
    """Add flat knots at the edges of quantum bins that hold two or more points."""
    bins = [math.ceil(v / quantum) for v in x]
    kx: list[float] = []
    ky: list[float] = []
    n = len(x)
    for i in range(n):
        first = i == 0 or bins[i - 1] != bins[i]
        last = i == n - 1 or bins[i + 1] != bins[i]
        crowded = not (first and last)
        left, right = (bins[i] - 1) * quantum + 1, bins[i] * quantum
        if crowded and first and left < x[i]:
            kx.append(left)
            ky.append(log_y[i])
        kx.append(x[i])
        ky.append(log_y[i])
        if crowded and last and i < n - 1 and right > x[i]:
            kx.append(right)
            ky.append(log_y[i])
    return kx, ky


def interp_at(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """``float(np.interp(x, xp, fp))`` for one point (``xp`` increasing, no NaN), bit for bit:
    numpy's own formula, slope * (x - xp[j]) + fp[j], without a numpy call (microseconds
    each, and the cost models ask thousands of these per plan)."""
    if x <= xp[0]:
        return fp[0]
    if x >= xp[-1]:
        return fp[-1]
    j = bisect_right(xp, x) - 1
    x0 = xp[j]
    if x0 == x:
        return fp[j]
    y0 = fp[j]
    return (fp[j + 1] - y0) / (xp[j + 1] - x0) * (x - x0) + y0


@dataclass(frozen=True, slots=True, kw_only=True)
class MonotoneCurve:
    """Non-decreasing y(x) > 0 for x > 0, piecewise linear in log-log space."""

    log_x: tuple[float, ...]
    log_y: tuple[float, ...]
    x_min: float  # smallest and largest tabulated x (before plateau knots)
    x_max: float

    @classmethod
    def fit(cls, x: list[float], y: list[float], *, quantum: int = 0) -> "MonotoneCurve":
        """Build from points (x > 0, y > 0); duplicate x are averaged in log space.

        ``quantum`` > 1 turns on the tile plateaus described in the module docstring.
        """
        if not x:
            raise ValueError("MonotoneCurve needs at least one point")
        xs, log_y = _dedupe_mean([float(v) for v in x], [math.log(v) for v in y])
        log_y = _monotone(log_y)
        if quantum > 1 and len(xs) > 1:
            kx, ky = _plateau_knots(xs, log_y, quantum)
        else:
            kx, ky = xs, log_y
        return cls(log_x=tuple(math.log(v) for v in kx), log_y=tuple(ky), x_min=xs[0], x_max=xs[-1])

    def __call__(self, x: float) -> tuple[float, int]:
        """(y, where) with where BELOW, INSIDE or ABOVE the tabulated range."""
        if x > self.x_max:
            return math.exp(self.log_y[-1]) * x / self.x_max, ABOVE
        if x < self.x_min:
            return math.exp(self.log_y[0]), BELOW
        return math.exp(self.log_at(math.log(x))), INSIDE

    def log_at(self, lx: float) -> float:
        """log y at log x, clamped to the knots (no extrapolation)."""
        xs, ys = self.log_x, self.log_y
        if lx <= xs[0]:
            return ys[0]
        if lx >= xs[-1]:
            return ys[-1]
        i = bisect_right(xs, lx)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (lx - x0) / (x1 - x0)


def _segment(axis: tuple[float, ...], v: float) -> tuple[int, float]:
    """Cell index and fraction of ``v`` on a sorted axis, clamped to its ends."""
    if len(axis) == 1 or v <= axis[0]:
        return 0, 0.0
    if v >= axis[-1]:
        return len(axis) - 2, 1.0
    i = bisect_right(axis, v) - 1
    return i, (v - axis[i]) / (axis[i + 1] - axis[i])


def _fill_lower(rows: list[list[float]]) -> list[list[float]]:
    """Fill rows[i][j], i > j, from the upper triangle with zero-twist cells (see LogGrid2D.fit)."""
    for i in range(1, len(rows)):
        for j in range(i - 1, -1, -1):
            rows[i][j] = rows[i - 1][j] + rows[i][j + 1] - rows[i - 1][j + 1]
    return rows


def _index_triangle(xs: tuple[float, ...], ys: tuple[float, ...], points: dict) -> bool:
    """Whether ``points`` (keyed (x, y)) are exactly the nodes (xs[i], ys[j]) with i <= j."""
    n = len(xs)
    return (n == len(ys) and len(points) == n * (n + 1) // 2
            and all((xs[i], ys[j]) in points for i in range(n) for j in range(i, n)))


def _suffix_min(rows: list[list[float]]) -> tuple[tuple[float, ...], ...]:
    """g[i][j] = min(g[i'][j'] for i' >= i, j' >= j): each node lowered to the fastest node that
    has at least its q and kv (monotone grids come back unchanged)."""
    for i in range(len(rows) - 1, -1, -1):
        for j in range(len(rows[i]) - 1, -1, -1):
            if j + 1 < len(rows[i]):
                rows[i][j] = min(rows[i][j], rows[i][j + 1])
            if i + 1 < len(rows):
                rows[i][j] = min(rows[i][j], rows[i + 1][j])
    return tuple(tuple(r) for r in rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogGrid2D:
    """log v over (log x, log y): bilinear on a full grid, inverse-distance weighting otherwise."""

    xs: tuple[float, ...]  # sorted unique log x
    ys: tuple[float, ...]  # sorted unique log y
    grid: tuple[tuple[float, ...], ...]  # grid[i][j] = log v at (xs[i], ys[j]); empty if scattered
    points: tuple[tuple[float, float, float], ...]  # (log x, log y, log v), duplicates averaged
    ranges: tuple[float, float, float, float]  # x min, x max, y min, y max of the points used

    @classmethod
    def fit(cls, x: list[float], y: list[float], v: list[float], *, upper: bool = False
            ) -> "LogGrid2D":
        """Build from points with x, y, v > 0.

        ``upper``: only points with x <= y count (causal attention, q <= kv). If they cover the
        upper triangle of a square grid (by index: row i holds columns i.., as q = kv does, or
        a context table's q < kv pairs, whose kv axis runs a step ahead of q's), the nodes below
        it are filled so that every cell there has zero twist (log v[i][j] = v[i-1][j] +
        v[i][j+1] - v[i-1][j+1]): bilinear interpolation across the triangle's edge is then
        log-linear along it, and stays monotone. (Until 2026-11-29 only q = kv triangles were
        taken as grids; a context table fell back to inverse-distance weighting, which was not
        monotone: a slice with more context or more queries could cost less, a review.)
        """
        acc: dict[tuple[float, float], list[float]] = {}
        used = [(a, b, c) for a, b, c in zip(x, y, v) if not upper or a <= b]
        for a, b, c in used:
            acc.setdefault((math.log(a), math.log(b)), []).append(math.log(c))
        ranges = (min(u[0] for u in used), max(u[0] for u in used),
                  min(u[1] for u in used), max(u[1] for u in used))
        pts = tuple((a, b, sum(c) / len(c)) for (a, b), c in sorted(acc.items()))
        lookup = {(p[0], p[1]): p[2] for p in pts}
        xs = tuple(sorted({p[0] for p in pts}))
        ys = tuple(sorted({p[1] for p in pts}))
        grid: tuple[tuple[float, ...], ...] = ()
        if upper and _index_triangle(xs, ys, lookup):
            grid = _suffix_min(_fill_lower([[lookup.get((a, b), math.nan) for b in ys] for a in xs]))
        elif len(pts) == len(xs) * len(ys):
            grid = _suffix_min([[lookup[(a, b)] for b in ys] for a in xs])
        return cls(xs=xs, ys=ys, grid=grid, points=pts, ranges=ranges)

    def log_at(self, lx: float, ly: float) -> float:
        """log v at (log x, log y), coordinates clamped to the tabulated box."""
        lx = min(max(lx, self.xs[0]), self.xs[-1])
        ly = min(max(ly, self.ys[0]), self.ys[-1])
        if self.grid:
            return self._bilinear(lx, ly)
        return self._shepard(lx, ly)

    def _bilinear(self, lx: float, ly: float) -> float:
        i, fx = _segment(self.xs, lx)
        j, fy = _segment(self.ys, ly)
        g = self.grid
        i1 = min(i + 1, len(self.xs) - 1)
        j1 = min(j + 1, len(self.ys) - 1)
        low = g[i][j] + (g[i1][j] - g[i][j]) * fx
        high = g[i][j1] + (g[i1][j1] - g[i][j1]) * fx
        return low + (high - low) * fy

    def _shepard(self, lx: float, ly: float) -> float:
        num = den = 0.0
        for px, py, pv in self.points:
            d2 = (lx - px) ** 2 + (ly - py) ** 2
            if d2 < 1e-18:
                return pv
            w = 1.0 / d2
            num += w * pv
            den += w
        return num / den


# Table lookups append warning records to a ``notes`` list: ("range", table, dim, value, bound,
# where) for a lookup outside the table, ("text", message) for an approximation.
Notes = list[tuple]
BWD_OVER_FWD = 2.5  # FlashAttention's FLOPs convention (FA2 paper section 4.1)


def _clamp_note(notes: Notes, table: str, dim: str, value: float, lo: float, hi: float) -> float:
    if value > hi:
        notes.append(("range", table, dim, value, hi, ABOVE))
        return hi
    if value < lo:
        notes.append(("range", table, dim, value, lo, BELOW))
        return lo
    return value


# a GEMM of at least this many FLOPs (4096 x 4096 x 3072 is 1.03e11) is compute-bound on any GPU
# ltsim knows (the bundled GPU profiles' reach 80-92% of their presets' peaks: costs/table.py)
LARGE_GEMM_FLOPS = 1e11


class GemmLookup:
    """Time of C[m,n] = A[m,k] @ B[k,n] from (m, n, k) points.

    Each (dtype, n, k) shape is a ``MonotoneCurve`` over m. A shape not in the table blends the
    shapes around it by inverse-distance weighting in (log n, log k) (power 4, so the nearest shape
    dominates) of their time scaled by FLOPs: log t = log(n k) + sum_i w_i (log t_i(m) - log(n_i k_i)).
    The blend is exact on tabulated shapes and stays non-decreasing in m (a positive mix of
    non-decreasing curves). Shapes outside the tabulated n or k range are clamped, then scaled up by
    FLOPs (constant throughput), never down.
    """

    __slots__ = ("_shapes", "_weights", "_ranges", "best_flops_per_s", "best_large_flops_per_s",
                 "dtypes")

    def __init__(self, rows: list[tuple[str, int, int, int, float]], *, quantum: int = 0) -> None:
        points: dict[tuple[str, int, int], tuple[list[float], list[float]]] = {}
        #: dtype -> the most FLOP/s any row measured (2 m n k / time)
        self.best_flops_per_s: dict[str, float] = {}
        #: the same over the rows of at least LARGE_GEMM_FLOPS, which run near a device's peak
        self.best_large_flops_per_s: dict[str, float] = {}
        for dtype, m, n, k, t in rows:
            if t > 0:
                flops = 2.0 * float(m) * float(n) * float(k)
                rate = flops / float(t)
                self.best_flops_per_s[dtype] = max(self.best_flops_per_s.get(dtype, 0.0), rate)
                if flops >= LARGE_GEMM_FLOPS:
                    self.best_large_flops_per_s[dtype] = max(
                        self.best_large_flops_per_s.get(dtype, 0.0), rate)
            xs, ys = points.setdefault((dtype, int(n), int(k)), ([], []))
            xs.append(float(m))
            ys.append(float(t))
        self._shapes: dict[str, list[tuple[float, float, MonotoneCurve]]] = {}
        for (dtype, n, k), (xs, ys) in sorted(points.items()):
            curve = MonotoneCurve.fit(xs, ys, quantum=quantum)
            self._shapes.setdefault(dtype, []).append((math.log(n), math.log(k), curve))
        self._weights: dict[tuple[str, float, float], list[tuple[float, float, MonotoneCurve]]] = {}
        self._ranges = {d: [(min(key[i] for key in points if key[0] == d),
                             max(key[i] for key in points if key[0] == d)) for i in (1, 2)]
                        for d in self._shapes}
        self.dtypes: tuple[str, ...] = tuple(sorted(self._shapes))

    def _blend(self, dtype: str, ln: float, lk: float) -> list[tuple[float, float, MonotoneCurve]]:
        key = (dtype, ln, lk)
        if key not in self._weights:
            raw = []
            for sn, sk, curve in self._shapes[dtype]:
                d2 = (ln - sn) ** 2 + (lk - sk) ** 2
                if d2 < 1e-12:
                    raw = [(1.0, sn + sk, curve)]
                    break
                raw.append((1.0 / d2**2, sn + sk, curve))
            top = max(w for w, _, _ in raw)
            kept = [r for r in raw if r[0] >= 1e-3 * top]
            total = sum(w for w, _, _ in kept)
            self._weights[key] = [(w / total, lnk, c) for w, lnk, c in kept]
        return self._weights[key]

    def time_s(self, m: float, n: float, k: float, dtype: str, notes: Notes) -> float:
        (n_lo, n_hi), (k_lo, k_hi) = self._ranges[dtype]
        nc = _clamp_note(notes, "gemm", "n", n, n_lo, n_hi)
        kc = _clamp_note(notes, "gemm", "k", k, k_lo, k_hi)
        log_t = math.log(nc) + math.log(kc)
        lm = math.log(m) if m > 0 else math.nan  # read only inside a curve's range, where m > 0
        for w, lnk, curve in self._blend(dtype, math.log(nc), math.log(kc)):
            # MonotoneCurve.__call__, inline (a blend reads up to dozens of curves per lookup)
            if m > curve.x_max:
                t = math.exp(curve.log_y[-1]) * m / curve.x_max
                if w > 0.05:
                    notes.append(("range", "gemm", "m", m, curve.x_max, ABOVE))
            elif m < curve.x_min:
                t = math.exp(curve.log_y[0])
                if w > 0.05:
                    notes.append(("range", "gemm", "m", m, curve.x_min, BELOW))
            else:
                t = math.exp(curve.log_at(lm))
            log_t += w * (math.log(t) - lnk)
        return math.exp(log_t) * max(1.0, (n * k) / (nc * kc))


def attention_work(q: float, kv: float, causal: bool) -> float:
    """Query-key pairs computed (FLOPs / (4 * head_dim * num_heads) for the forward pass).

    Causal masks are bottom-right aligned (FlashAttention >= 2.1): the q queries are the last q of
    the kv keys, so a chunk after ``kv - q`` context tokens computes q*kv - q^2/2 pairs; q = kv = s
    gives the FA papers' s^2/2.
    """
    if not causal:
        return q * kv
    if kv >= q:
        return q * kv - q * q / 2.0
    return kv * kv / 2.0


class AttentionLookup:
    """Attention kernel time per sequence from (kernel, pass, causal, head_dim, num_heads) groups.

    Inside a group the table is a ``LogGrid2D`` of log time over (log q_tokens, log kv_tokens).
    Bilinear interpolation of log time is monotone in q and kv whenever the grid's points are (each
    cell edge mixes two ordered values), which interpolating time per unit of work is not: causal
    work q kv - q^2/2 is no power law near the diagonal. Causal groups use only q <= kv points and
    fill the rest so the diagonal q = kv (a whole sequence) interpolates log-linearly along itself.
    The price is a small error between grid lines next to the causal diagonal (about -5% at
    kv = 1.5 q on a grid of powers of two). A group whose points form no such grid (a profiler's
    scattered pairs) interpolates log(time / work) by inverse distance instead. Heads scale time linearly (num_kv_heads is ignored:
    GQA does not change FLOPs; but a kernel that copies K/V up to the query heads, the executor's
    SDPA with context, runs slower per head on grouped rows, which a model of other grouping
    then does not see: a review, 2026-11-29, up to 4.5x per head at 128 queries after 128K keys). Head dims between two tabulated ones interpolate time / head_dim in
    log space; outside them time is proportional to head_dim (an approximation: larger heads
    usually run a little more efficiently). Outside the (q, kv) box the time is the box edge's,
    scaled up by work (constant throughput).
    """

    __slots__ = ("_groups",)

    def __init__(self, rows: list[tuple[str, str, bool, int, int, int, int, float]]) -> None:
        points: dict[tuple, tuple[list[float], list[float], list[float]]] = {}
        for kernel, pass_, causal, head_dim, heads, q, kv, t in rows:
            key = (kernel, pass_, bool(causal), int(head_dim), int(heads))
            xs, ys, ts = points.setdefault(key, ([], [], []))
            xs.append(float(q))
            ys.append(float(kv))
            ts.append(float(t))
        self._groups: dict[tuple[str, str, bool], dict[int, list[tuple[int, LogGrid2D]]]] = {}
        for (kernel, pass_, causal, hd, heads), (xs, ys, ts) in sorted(points.items()):
            grid = LogGrid2D.fit(xs, ys, ts, upper=causal)
            if not grid.grid:  # scattered: interpolate time per unit of work, which varies less
                grid = LogGrid2D.fit(xs, ys, [t / attention_work(a, b, causal)
                                              for a, b, t in zip(xs, ys, ts)])
            by_hd = self._groups.setdefault((kernel, pass_, causal), {})
            by_hd.setdefault(hd, []).append((heads, grid))

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(sorted({k[0] for k in self._groups}))

    def _group(self, kernel: str, pass_: str, causal: bool, notes: Notes
               ) -> tuple[dict[int, list[tuple[int, LogGrid2D]]], float, bool]:
        """The group to use, the time factor and the causal flag of its rows (with fallbacks)."""
        for p, factor in ((pass_, 1.0), ("fwd" if pass_ == "bwd" else "bwd",
                                          BWD_OVER_FWD if pass_ == "bwd" else 1 / BWD_OVER_FWD)):
            for c in (causal, not causal):
                if (kernel, p, c) in self._groups:
                    if p != pass_:
                        notes.append(("text", f"attention: kernel {kernel} has no {pass_} rows; "
                                      f"using {p} x {factor:g} (FlashAttention FLOPs convention)"))
                    if c != causal:
                        notes.append(("text", f"attention: kernel {kernel} has no causal={causal} "
                                      f"rows; using causal={c} rows scaled by work"))
                    return self._groups[(kernel, p, c)], factor, c
        raise KeyError(kernel)

    def time_s(self, q: float, kv: float, *, num_heads: int, head_dim: int, causal: bool,
               pass_: str, kernel: str, notes: Notes) -> float:
        by_hd, factor, rows_causal = self._group(kernel, pass_, causal, notes)
        if rows_causal != causal:
            factor *= attention_work(q, kv, causal) / attention_work(q, kv, rows_causal)
        dims = sorted(by_hd)
        lo = max([d for d in dims if d <= head_dim], default=dims[0])
        hi = min([d for d in dims if d >= head_dim], default=dims[-1])
        if head_dim < dims[0] or head_dim > dims[-1]:
            notes.append(("text", f"attention: head_dim={head_dim} outside measured {dims[0]}.."
                          f"{dims[-1]} (time scaled in proportion to head_dim)"))
        per = [math.log(self._grid_time(g, q, kv, rows_causal, notes) / (h * d))
               for d in (lo, hi)
               for h, g in [min(by_hd[d], key=lambda hg: abs(math.log(hg[0] / num_heads)))]]
        frac = 0.0 if hi == lo else math.log(head_dim / lo) / math.log(hi / lo)
        return factor * num_heads * head_dim * math.exp(per[0] + (per[1] - per[0]) * frac)

    @staticmethod
    def _grid_time(grid: LogGrid2D, q: float, kv: float, causal: bool, notes: Notes) -> float:
        q_lo, q_hi, kv_lo, kv_hi = grid.ranges
        qc = _clamp_note(notes, "attention", "q_tokens", q, q_lo, q_hi)
        kc = _clamp_note(notes, "attention", "kv_tokens", kv, kv_lo, kv_hi)
        t_c = math.exp(grid.log_at(math.log(qc), math.log(kc)))
        if not grid.grid:
            t_c *= attention_work(qc, kc, causal)
        if qc == q and kc == kv:
            return t_c
        return t_c * max(1.0, attention_work(q, kv, causal) / attention_work(qc, kc, causal))
