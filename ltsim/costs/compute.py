"""Compute time of one op's work on one GPU, from profile tables (Megatron-LM's layer layout).

Per layer, for T = the work's tokens on this GPU (tokens / cp; the GEMMs see all of them, with
sequence parallelism after the all-gather):

  GEMMs (column/row-parallel; each at least the time to stream its weight from device memory):
    QKV (T, h) @ (h, (h + 2 kv_h)/tp); out (T, h/tp) @ (h/tp, h); MLP up (T, h) @ (h, g ffn/tp),
    g = 2 for SwiGLU else 1; down (T, ffn/tp) @ (ffn/tp, h)
  attention: per slice, q = its tokens, kv = context + q, heads/tp, from attention.csv; ring CP
    runs cp kernels of (q/cp, kv/cp) blocks on each rank; Ulysses runs heads/(tp*cp) on each
    whole slice
  elementwise: from the profile's elementwise.csv when it has the model's widths, else bytes moved /
    HBM bandwidth, an unvalidated estimate of (10 h + 3 g ffn/tp) x dtype bytes per token per layer:
    two norms (read + write h) and two residual adds (read 2h, write h), plus the MLP activation
    (an upper bound: SwiGLU reads 2 ffn and writes ffn, counted as 6 ffn)
  TP: with SP 2 all-gathers + 2 reduce-scatters of T h e bytes per layer, else 2 all-reduces
backward = 2 x forward GEMMs + attention backward (table) + elementwise backward + the same TP traffic;
  with LoRA (``model.lora_rank`` > 0) the frozen weights need no weight-gradient GEMM, so 1 x forward
  GEMMs (the adapters' rank-r GEMMs, r/h of a layer's, are not counted)
W (weight gradient split from B) = the forward GEMMs again
LM head and loss (a work with ``head``): (T, h) @ (h, V/tp), plus reading and writing fp32 logits
  three times (softmax, loss, gradient) through HBM; doubled GEMM in backward.
Sequence tiling (``work.tiling``, ALST): a tiled MLP runs its up and down GEMMs per shard of
  memory.mlp_tile_tokens tokens, and its backward re-runs each shard's forward first (GEMMs and the
  activation), so B adds one MLP forward per layer; a tiled loss likewise runs the head per shard
  of memory.loss_tile_tokens tokens and re-runs its forward in backward.

``part`` "attn" is the attention term alone (the part ring CP overlaps), "dense" the rest.
Eager overhead: an F, R or B op takes at least the profile's measured floor for its kind and
layer count (eager.py; none when the profile has no eager.csv). On a synchronous device (the cpu
preset: kernels run on the host thread, so host work cannot hide behind them) it takes its kernels
plus the residual the profile's whole-op rows measure at its size (``_residual_s``).
CP communication, ZeRO gathers and the DP reduction are comm ops of their own (comm.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from functools import lru_cache
from operator import sub

import numpy as np

import ltsim.memory as mem
from ltsim.costs.comm import cards_s, group_spread
from ltsim.costs.eager import eager_costs
from ltsim.hardware import ClusterSpec
from ltsim.lookup import interp_at
from ltsim.model import ModelSpec
from ltsim.parallel import ParallelConfig
from ltsim.plan import Keep, OpKind, Slice, Split, Work
from ltsim.profiles import Profile, read_optional_rows, stand_in
from ltsim.units import dtype_bytes
from ltsim.work import SLICE_START, SLICE_STOP

FP32_BYTES = 4
_KNOWN_MAX = 65536  # slices' attention times kept per pass and split (as the memo's bound)


class ComputeCosts:
    """Seconds of the compute ops of one model on one device type."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, profile: Profile, *,
                 accumulate_grads: bool = False) -> None:
        self.model, self.cluster, self.profile = model, cluster, profile
        self.e = dtype_bytes(model.dtype)
        # gradients in the model dtype (parallel.grad_dtype = "model") are summed by autograd into
        # the gradient buffer with an add kernel per weight in every backward (the executor's flat
        # buffer, torch's .grad); fp32 main gradients are taken to be accumulated inside the wgrad
        # GEMM (Megatron-LM's gradient_accumulation_fusion, its default)
        self.accumulate_grads = accumulate_grads
        # a table's rows of the model's dtype, else of its 16-bit stand-in (bf16 for fp16, as
        # GEMM rows are read), else of none; another dtype's are said
        by_dtype = _elementwise_curves(str(profile.path), profile.tables)
        use = stand_in(model.dtype, tuple(by_dtype))
        self._elementwise = by_dtype.get(use) or by_dtype.get("", {})
        if by_dtype and use not in by_dtype:
            profile.note(f"elementwise.csv has no {model.dtype} rows: norms, residual adds, RoPE "
                         "and the activation are priced "
                         + ("from its rows of no dtype" if "" in by_dtype
                            else "as their bytes through device memory"))
        attention = profile.attention_dtypes
        if attention and stand_in(model.dtype, tuple(attention)) not in attention:
            profile.note(f"attention.csv times {' and '.join(sorted(attention))} attention; the "
                         f"model is {model.dtype}: its attention is priced at "
                         + ("those times" if len(attention) == 1 else
                            f"{sorted(attention)[0]}'s"))
        self._floor, _, borrowed = eager_costs(str(profile.path), model, profile.tables)
        for note in borrowed:  # rows of another model: reported once per run
            profile.note(note)
        # memos that make their values' lookup notes again on every hit (Profile.memo): what an
        # op's price noted must not depend on which op looked a piece up first (the engine keeps
        # the notes with each price it shares between runs)
        self.layer_s = profile.memo(self._layer_s, 4096)
        self.attention_s = profile.memo(self._attention_s, 65536)
        self._attention_known: dict[tuple[str, Split], dict[tuple[int, int], float]] = {}
        self.head_s = profile.memo(self._head_s, 4096)
        self._residual_s = profile.memo(self._residual_s, 4096)
        self._context_residual_s = profile.memo(self._context_residual_s, 4096)
        # the residuals at the measured points, read by every token count (and context) asked
        self._residual_grid = profile.memo(self._residual_grid, 1024)
        self._context_grid = profile.memo(self._context_grid, 1024)

    def time_s(self, kind: OpKind, work: Work, part: str, keep: Keep = Keep.ALL) -> float:
        """Kernel time of the op, and at least the profile's eager floor (eager.py) for the op
        kind and layer count. Of a CP-split op, the ``dense`` part is its kernels and the ``attn``
        part takes what the floor leaves beyond them, so the parts add to the whole: the floor is
        host time over the whole op, which a ring exchange (started with the attention part, the
        dense part waiting for it) overlaps as it overlaps the attention kernels. The op then
        takes max(floor, max(attention, exchange) + dense kernels); with the floor's slack on the
        dense part instead, an exposed exchange came on top of it, and a longer attention
        shortened the op. On a synchronous device (a CPU) with the model's whole-op rows, the
        op's kernels plus the measured residual instead (``_residual_s``; the attention part
        kernels only)."""
        kernels = self._kernels_s(kind, work, part)
        if self._floor is None:
            return kernels
        if self.cluster.device.synchronous and work.num_layers > 0:
            tokens = max(1, -(-work.num_tokens // work.split.cp))
            extra = self._residual_s(kind, tokens, work.num_layers, keep, work.split)
            if extra is not None:
                if part == "attn":  # the residual rides on the rest of the op
                    return kernels
                middle = extra
                for stage, has in (("first", work.embed), ("last", work.head)):
                    own = self._residual_s(kind, tokens, work.num_layers, keep, work.split,
                                           stage) if has else None
                    if own is not None:  # what the embedding, or the head and loss, add
                        extra += own - middle
                for piece in work.slices:  # reading earlier K/V, and their gradients in B
                    if piece.start > 0:
                        extra += self._context_residual_s(
                            kind, max(1, -(-piece.num_tokens // work.split.cp)), piece.start,
                            work.num_layers, keep, work.split)
                return max(0.0, kernels + extra)
        if part == "dense":  # the attn part takes the floor's slack
            return kernels
        floor = self._floor.floor_s(kind, work.num_layers, keep)
        if part == "attn":  # what the floor leaves beyond the dense part's kernels
            floor -= self._kernels_s(kind, work, "dense")
        return max(kernels, floor)

    def _residual_s(self, kind: OpKind, tokens: int, layers: int, keep: Keep, split: Split,
                    stage: str = "middle") -> float | None:
        """What an op of ``kind`` over ``layers`` layers and ``tokens`` tokens costs beyond the
        kernels priced here, on a device whose kernels run on the host thread: at every token
        count of the profile's whole-op rows (eager.csv: the executor's op over one sequence on a
        middle stage, at 1 and 2 layers), the measured time less this model's kernels for the same
        work (dispatch, and the kernels running slower inside a layer than timed alone), linear in
        the layers through the 1- and 2-layer points; between token counts linear in tokens, outside
        them the nearest one's (no extrapolation). None without such rows (for ``kind``, or of
        this model). ``stage`` "first" or "last": the rows of a stage with the embedding, or with
        the head and loss, against the same work with them (``time_s`` adds their difference
        from the middle's to an op that has them)."""
        grid = self._residual_grid(kind, layers, keep, split, stage)
        return interp_at(tokens, *grid) if grid is not None else None

    def _residual_grid(self, kind: OpKind, layers: int, keep: Keep, split: Split, stage: str
                       ) -> tuple[list[int], list[float]] | None:
        """``_residual_s``'s points: the token counts of the whole-op rows and the residual at
        each (None without rows)."""
        points = self._floor.whole_points(kind, keep, stage)
        if not points:
            return None
        grid = [(size, self._measured_residual_s(kind, one, two, layers, lambda n: Work(
            chunk=0, slices=(Slice(0, 0, size),), layers=(1, 1 + n), split=split,
            embed=stage == "first", head=stage == "last"))) for size, one, two in points]
        return [g[0] for g in grid], [g[1] for g in grid]

    def _context_residual_s(self, kind: OpKind, tokens: int, context: int, layers: int,
                            keep: Keep, split: Split) -> float:
        """What a slice of ``tokens`` query tokens after ``context`` tokens of its sequence adds
        to an op's residual, beyond the attention kernels with context priced here (the state
        store's reads and concatenations, dK/dV accumulated in B): at each (query, context)
        point of the whole-op rows with context, their residual less the plain rows' residual at
        the same query tokens; linear in the layers, then in query tokens at each measured
        context, then in context tokens from 0 (nothing added) through the measured
        ones, held beyond both ranges. 0 without such rows."""
        grid = self._context_grid(kind, layers, keep, split)
        if grid is None:
            return 0.0
        contexts, curves = grid
        at = [interp_at(tokens, qs, rs) for qs, rs in curves]
        return interp_at(context, [0, *contexts], [0.0, *at])

    def _context_grid(self, kind: OpKind, layers: int, keep: Keep, split: Split
                      ) -> tuple[list[int], list[tuple[list[int], list[float]]]] | None:
        """``_context_residual_s``'s points: the measured contexts, and at each its query token
        counts and what the rows' residual adds there (None without rows with context)."""
        points = self._floor.context_points(kind, keep)
        if not points:
            return None
        by_context: dict[int, list[tuple[int, float]]] = {}
        for q, c, one, two in points:
            # against the plain residual of the op the rows time: F's for F_discard too
            plain = self._residual_s(kind, q, layers, Keep.ALL if kind is OpKind.F else keep,
                                     split) or 0.0
            residual = self._measured_residual_s(kind, one, two, layers, lambda n: Work(
                chunk=0, slices=(Slice(0, c, c + q),), layers=(1, 1 + n), split=split))
            by_context.setdefault(c, []).append((q, residual - plain))
        contexts = sorted(by_context)
        curves = [sorted(by_context[c]) for c in contexts]
        return contexts, [([q for q, _ in curve], [r for _, r in curve]) for curve in curves]

    def _measured_residual_s(self, kind: OpKind, one: float, two: float, layers: int,
                             work_of: Callable[[int], Work]) -> float:
        """Whole-op seconds measured at 1 and 2 layers (``one``, ``two``) less this model's
        kernels for the same work (``work_of(layers)``), linear in layers to ``layers``."""
        r1, r2 = (t - self._kernels_s(kind, work_of(n), "") for t, n in ((one, 1), (two, 2)))
        return r1 + (r2 - r1) * (layers - 1)

    def _kernels_s(self, kind: OpKind, work: Work, part: str) -> float:
        split = work.split
        backward = kind is OpKind.B
        layers = work.num_layers
        attn = 0.0
        if part != "dense" and kind is not OpKind.W:
            attn_pass = "bwd" if backward else "fwd"
            attn = layers * sum(self._slices_attention_s(work.slices, attn_pass, split))
        if part == "attn":
            return attn
        tokens = max(1, -(-work.num_tokens // split.cp))
        tiling = work.tiling
        (gemm, dgrad, wgrad), elem_fwd, elem_bwd, tp_comm, mlp_fwd = self.layer_s(
            tokens, split.tp, split.sp, tiling.mlp)
        if kind is OpKind.W:
            return layers * wgrad
        if self.model.lora_rank:  # frozen weights: no weight-gradient GEMMs
            wgrad = 0.0
        dense = (dgrad + wgrad + elem_bwd + mlp_fwd) if backward else (gemm + elem_fwd)
        total = attn + layers * (dense + tp_comm)
        if work.head:
            total += self.head_s(tokens, split.tp, backward, tiling.loss)
        if backward and self.accumulate_grads:
            total += self._accumulate_s(work)
        return total

    def _slices_attention_s(self, slices, attn_pass: str, split: Split) -> list[float]:
        """``attention_s`` of each slice, in order. The values a lookup made no note for are
        also kept here by (query tokens, keys) per pass and split, and read back without the
        memo's call: a chunk of hundreds of short sequences (InfiniPipe's, priced again as each
        joins) asks for every one of them each time. A value with notes goes through the memo,
        which makes its notes again."""
        known = self._attention_known.get((attn_pass, split))
        if known is None or len(known) > _KNOWN_MAX:
            known = self._attention_known[(attn_pass, split)] = {}
        stops = list(map(SLICE_STOP, slices))
        keys = list(zip(map(sub, stops, map(SLICE_START, slices)), stops))  # (query tokens, keys)
        times = list(map(known.get, keys))  # (C loops: a chunk may hold hundreds of slices)
        if None in times:
            for at, key in enumerate(keys):
                if times[at] is None:
                    value, notes = self.profile.noted(self.attention_s, *key, attn_pass, split)
                    if not notes:
                        known[key] = value
                    times[at] = value
        return times

    def _accumulate_s(self, work: Work) -> float:
        """Adding the op's weight gradients into the gradient buffer: read both, write one, in
        the model dtype, at the device's memory bandwidth (validation/executor/gpu_notes.md:
        1.69 ms measured for a 4-layer Llama-2-7B stage on the H100, 1.45 ms by this count)."""
        params = mem.trainable_parameters_per_gpu(
            self.model, work.split.tp, num_layers=work.num_layers, has_embedding=work.embed,
            has_head=work.head)
        return 3 * params * self.e / self.cluster.device.hbm_bytes_per_s

    # -- pieces ---------------------------------------------------------------------------------
    def _gemm(self, m: int, n: float, k: float) -> float:
        """Table time, but never less than streaming the (k, n) weight from device memory once:
        microbenchmarks reuse one weight that stays in cache, a model's layers do not
        (validation/executor/cpu_notes.md measured +0.15 ms per small GEMM on the CPU)."""
        n, k = max(1, int(n)), max(1, int(k))
        return max(self.profile.gemm_time_s(m, n, k, self.model.dtype), self._weight_s(n, k))

    def _weight_s(self, n: int, k: int) -> float:
        """Streaming one (k, n) weight (or its gradient) through device memory once."""
        return k * n * self.e / self.cluster.device.hbm_bytes_per_s

    def _gemm_passes(self, m: int, n: float, k: float) -> tuple[float, float, float]:
        """(forward, dgrad, wgrad) seconds of the forward GEMM Y[m,n] = X[m,k] W^T and its
        backward: gemm_bwd.csv's measured dgrad and wgrad when the profile has it (each at least
        streaming the weight, or its gradient, once), else two forwards' time split evenly."""
        forward = self._gemm(m, n, k)
        n, k = max(1, int(n)), max(1, int(k))
        backward = self.profile.gemm_backward_time_s(m, n, k, self.model.dtype)
        if backward is None:
            return forward, forward, forward
        weight_s = self._weight_s(n, k)
        return forward, max(backward[0], weight_s), max(backward[1], weight_s)

    def _layer_s(self, tokens: int, tp: int, sp: bool, tiled_mlp: bool = False
                 ) -> tuple[tuple[float, float, float], float, float, float, float]:
        """((GEMM forward, dgrad, wgrad), elementwise forward, elementwise backward, TP
        collective, tiled MLP's forward re-run in backward) seconds of one layer."""
        m, h = self.model, self.model.hidden_size
        g = 2 if m.arch == "llama" else 1
        tile = mem.mlp_tile_tokens(m, tokens) if tiled_mlp else tokens
        shards = -(-tokens // tile)
        mlp = [tuple(shards * t for t in self._gemm_passes(tile, g * m.ffn_hidden_size / tp, h)),
               tuple(shards * t for t in self._gemm_passes(tile, h, m.ffn_hidden_size / tp))]
        passes = [self._gemm_passes(tokens, (h + 2 * m.kv_hidden_size) / tp, h),
                  self._gemm_passes(tokens, h, h / tp), *mlp]
        gemm = (sum(p[0] for p in passes), sum(p[1] for p in passes),
                sum(p[2] for p in passes))
        elem_fwd, elem_bwd = self._elementwise_s(tokens, tp)
        rerun = mlp[0][0] + mlp[1][0] + self._activation_s(tokens, tp) if tiled_mlp else 0.0
        if tp == 1:
            return gemm, elem_fwd, elem_bwd, 0.0, rerun
        act_bytes = int(tokens * h * self.e)
        if sp:
            comm = 2 * (self._tp_call_s("all_gather", tp, act_bytes)
                        + self._tp_call_s("reduce_scatter", tp, act_bytes))
        else:
            comm = 2 * self._tp_call_s("all_reduce", tp, act_bytes)
        return gemm, elem_fwd, elem_bwd, comm, rerun

    def _tp_call_s(self, op: str, tp: int, nbytes: int) -> float:
        """One tensor-parallel collective of a layer: the intra-node rows when every TP group
        is inside a node, else the inter-node rows, never faster than the ranks' network cards
        allow (costs/comm.py), for the group that spreads worst (``group_spread``: the most
        nodes, the fewest ranks and so cards on one of them)."""
        nodes, fewest = group_spread(tp, self.cluster)
        gpn = self.cluster.gpus_per_node
        if fewest < min(tp, gpn):
            self.profile.note(f"parallel.tp = {tp} and hardware.gpus_per_node = {gpn} do not "
                              f"divide one another: a TP group spreads over {nodes} nodes with "
                              f"{fewest} of its ranks on one, and every layer's TP collectives "
                              "are priced as that group's")
        if nodes == 1:
            return self.profile.collective_time_s(op, group_size=tp, scope="intra",
                                                  num_bytes=nbytes)
        return max(self.profile.collective_time_s(op, group_size=tp, scope="inter",
                                                  num_bytes=nbytes),
                   cards_s(self.profile, op, tp, nodes, nbytes, fewest))

    def _elementwise_s(self, tokens: int, tp: int) -> tuple[float, float]:
        """Norms, residual adds, RoPE and the MLP activation of one layer (forward, backward):
        from the profile's elementwise.csv where it has this model's widths, else bytes / HBM."""
        m = self.model
        ops = (("rmsnorm", m.hidden_size, 2), ("residual_add", m.hidden_size, 2),
               ("swiglu", m.ffn_hidden_size // tp, 1),
               ("rope", (m.num_attention_heads + m.num_kv_heads) // tp * m.head_dim, 1))
        if m.arch == "llama" and all((op, w, "fwd") in self._elementwise for op, w, _ in ops):
            fwd, bwd = (sum(n * _interp(self._elementwise[(op, w, p)], tokens) for op, w, n in ops)
                        for p in ("fwd", "bwd"))
            return fwd, bwd
        g = 2 if m.arch == "llama" else 1
        moved = tokens * (10 * m.hidden_size + 3 * g * m.ffn_hidden_size / tp) * self.e
        fwd = moved / self.cluster.device.hbm_bytes_per_s
        return fwd, 2 * fwd

    def _activation_s(self, tokens: int, tp: int) -> float:
        """The MLP activation's forward (SwiGLU from elementwise.csv, else its bytes / HBM)."""
        m = self.model
        curve = self._elementwise.get(("swiglu", m.ffn_hidden_size // tp, "fwd"))
        if curve is not None:
            return _interp(curve, tokens)
        g = 2 if m.arch == "llama" else 1
        return tokens * 3 * g * m.ffn_hidden_size / tp * self.e / self.cluster.device.hbm_bytes_per_s

    def _attention_s(self, q: int, kv: int, pass_: str, split: Split) -> float:
        """One layer's attention kernel over one slice on one GPU (CP splits the work or heads)."""
        m = self.model
        heads = max(1, m.num_attention_heads // split.tp)
        kv_heads = max(1, m.num_kv_heads // split.tp)
        if split.cp > 1 and split.cp_kind == "ulysses":
            return self.profile.attention_time_s(q, kv, num_heads=max(1, heads // split.cp),
                                                 num_kv_heads=max(1, kv_heads // split.cp),
                                                 head_dim=m.head_dim, pass_=pass_,
                                                 dtype=m.dtype)
        if split.cp == 1:
            return self.profile.attention_time_s(q, kv, num_heads=heads, num_kv_heads=kv_heads,
                                                 head_dim=m.head_dim, pass_=pass_, dtype=m.dtype)
        # Ring CP (Megatron's load-balanced zig-zag): each rank runs cp steps, each a kernel over its
        # q/cp queries and one kv/cp block, 1/cp of the work in cp small kernels. Pricing the
        # blocks, not the whole slice / cp, keeps the small-kernel inefficiency that makes CP slow
        # for short sequences (Skrull Fig. 1b); the work, q (ctx + q/2) / cp, is the same.
        # (each rank's context rounded up, not its keys: kv rounded alone could come out equal
        # to q's block, a slice with context then priced as one without, a review)
        q_block = -(-q // split.cp)
        kv_block = q_block + -(-(kv - q) // split.cp)
        return split.cp * self.profile.attention_time_s(q_block, kv_block, num_heads=heads,
                                                        num_kv_heads=kv_heads, head_dim=m.head_dim,
                                                        pass_=pass_, dtype=m.dtype)

    def _head_s(self, tokens: int, tp: int, backward: bool, tiled: bool = False) -> float:
        m = self.model
        tile = mem.loss_tile_tokens(m, ParallelConfig(tp=tp), tokens) if tiled else tokens
        shards = -(-tokens // tile)
        gemm, dgrad, wgrad = (shards * t for t in self._gemm_passes(tile, m.vocab_size / tp,
                                                                    m.hidden_size))
        entries, hbm = tokens * m.vocab_size / tp, self.cluster.device.hbm_bytes_per_s
        if self.cluster.loss_kernel == "fused":  # reads the model-dtype logits, and in backward
            logits = entries * self.e * (2 if backward else 1) / hbm  # writes their gradient
            rerun = entries * self.e / hbm  # (memory.LOSS_KERNELS)
        else:  # fp32 logits, read and written three times a pass
            logits = entries * FP32_BYTES * 3 / hbm
            rerun = logits / 3
        if self.model.lora_rank > 0:  # the LM head is frozen under LoRA: input gradient only
            wgrad = 0.0
        total = (dgrad + wgrad if backward else gemm) + logits
        if tiled and backward:  # each shard's logits are computed again before their gradient
            total += gemm + rerun
        return total


@lru_cache(maxsize=16)  # per profile, as load_profile caches the profile (a sweep builds many models)
def _elementwise_curves(directory: str, tables: object
                        ) -> dict[str, dict[tuple[str, int, str], tuple]]:
    """Per dtype ("" for rows of none), (op, width, pass) -> (log tokens, log seconds,
    non-decreasing) from elementwise.csv, if the profile has one (``tables``: the Profile's, a
    key only, as ``eager_costs``'s). By dtype: fp32 rows ten times slower beside a bf16
    model's moved its time 2.4x (a fuzzing review)."""
    table = read_optional_rows(directory, "elementwise")
    if table is None:
        return {}
    dtypes = table["dtype"] if "dtype" in table.columns else [""] * len(table)
    samples: dict[tuple[str, str, int, str], dict[int, list[float]]] = {}
    for dtype, (op, width, pass_, tokens, time_s) in zip(dtypes, table.rows(
            "op", "hidden", "pass", "num_tokens", "time_s")):
        samples.setdefault((dtype or "", op, int(width), pass_), {}).setdefault(
            int(tokens), []).append(float(time_s))
    curves: dict[str, dict[tuple[str, int, str], tuple]] = {}
    for (dtype, *key), by_tokens in samples.items():
        tokens = sorted(by_tokens)
        # more tokens never take less time: a measured dip at small counts (launch-bound rows
        # are noisy) is lifted to the running maximum, as lookup.py's curves do for GEMMs
        # (statistics.median: numpy's imports numpy.ma on first use, 17 ms of every start-up)
        times = np.maximum.accumulate([float(statistics.median(by_tokens[t])) for t in tokens])
        curves.setdefault(dtype, {})[tuple(key)] = (
            np.log(np.asarray(tokens, dtype=float)).tolist(), np.log(times).tolist())
    return curves


def _interp(curve: tuple, tokens: int) -> float:
    """Log-log interpolation; beyond the table, the end segment's throughput (time ~ tokens)."""
    log_tokens, log_times = curve
    x = math.log(max(tokens, 1))
    if x > log_tokens[-1]:
        return math.exp(log_times[-1] + x - log_tokens[-1])
    return math.exp(interp_at(x, log_tokens, log_times))
