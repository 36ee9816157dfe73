"""TableCostModel: durations and bytes for real hardware, from profile tables plus the memory model.

A simulated device is one pipeline stage of one DP replica; its tp x cp GPUs run in lockstep, so
every number here is for one GPU of the device. Per chunk and stage (``layers`` = the stage's):

forward  = layers x (GEMMs + attention + elementwise + TP collectives) [+ LM head and loss last stage]
  GEMMs (Megatron's column/row-parallel layers; with SP the GEMM sees all T/cp tokens of the chunk;
    each at least the time to stream its weight from device memory):
    QKV (T, h) @ (h, (h + 2 kv_h)/tp); out (T, h/tp) @ (h/tp, h); MLP up (T, h) @ (h, g ffn/tp),
    g = 2 for SwiGLU else 1; down (T, ffn/tp) @ (ffn/tp, h)
  attention: per slice, q = its tokens, kv = context + q, heads/tp, from attention.csv; ring CP
    splits the work over cp ranks and overlaps the chunk's K/V ring exchange (cp - 1 P2P steps,
    twice in backward) with it (time = max of the two); Ulysses runs heads/(tp*cp) on each slice
    plus four all-to-alls of the chunk per layer
  elementwise: from the profile's elementwise.csv when it has the model's widths, else bytes moved /
    HBM bandwidth, an unvalidated estimate of (10 h + 3 g ffn/tp) x dtype bytes per token per layer:
    two norms (read + write h) and two residual adds (read 2h, write h), plus the MLP activation
    (an upper bound: SwiGLU reads 2 ffn and writes ffn, counted as 6 ffn)
  TP: with SP 2 all-gathers + 2 reduce-scatters of T h e bytes per layer, else 2 all-reduces
backward = 2 x forward GEMMs + attention backward (table) + elementwise x 2 + the same TP traffic
recompute (R) = forward without the LM head
SEND = P2P of the stage output (T/cp x h x e, /tp with SP); COLL[dp-grad] = gradient all-reduce
  (ZeRO 0) or reduce-scatter + all-gather (ZeRO >= 1, distributed optimizer) over dp x cp ranks,
  overlapped with the device's last backward (Megatron's overlap_grad_reduce): only the excess shows
ZeRO-3 adds a parameter all-gather per F/B/R of the stage, overlapped with compute (prefetch).
OPT = optimizer step: ~28 bytes per local parameter shard through HBM (Adam, fp32 master + moments).

Memory: static = weights + grads + optimizer state (memory.py) + the allocator's fixed allowance;
buffers from memory.py's per-token formulas; ``memory_limit_bytes`` is the device memory less the
allocator allowance (memory.ALLOCATOR_OVERHEAD), so a plan fits when its peak is below it.
"""

from __future__ import annotations

from functools import lru_cache

import ltsim.memory as mem
from ltsim.hardware import ClusterSpec
from ltsim.model import ModelSpec, training_flops
from ltsim.parallel import ParallelConfig
from ltsim.plan import Buffer, Chunk, Op, OpKind, Plan
from ltsim.profiles import load_profile
from ltsim.units import dtype_bytes

# Adam over fp32 master weights: read param, grad, m, v (16 B), write param, m, v (12 B).
OPT_BYTES_PER_PARAM = 28.0


class TableCostModel:
    """Durations from a profile directory, bytes from the memory model (module docstring)."""

    def __init__(self, model: ModelSpec, parallel: ParallelConfig, cluster: ClusterSpec, *,
                 overhead: mem.AllocatorOverhead = mem.ALLOCATOR_OVERHEAD) -> None:
        self.model, self.parallel, self.cluster = model, parallel, cluster
        self.profile = load_profile(cluster.profile_dir)
        self.overhead = overhead
        self.memory_limit_bytes = int((cluster.limit_bytes - overhead.fixed_bytes)
                                      / (1 + overhead.fragmentation_fraction))
        self.peak_flops_per_s = cluster.device.peak_flops_per_s
        self.gpus_per_sim_device = parallel.tp * parallel.cp
        self.e = dtype_bytes(model.dtype)
        self._notes: set[str] = set()
        self._elementwise = _elementwise_curves(self.profile.path)
        self._layer_fwd = lru_cache(maxsize=None)(self._layer_forward_s)
        self._attn = lru_cache(maxsize=None)(self._attention_s)
        self._chunk_cache: dict[tuple, float] = {}
        self._plan: Plan | None = None

    # -- scopes: Megatron's rank order puts tp fastest, then cp, then dp, then pp ---------------
    def _scope(self, span: int) -> str:
        return "intra" if span <= self.cluster.gpus_per_node else "inter"

    def _pp_scope(self, stage: int) -> str:
        per_stage = self.parallel.tp * self.parallel.cp * self.parallel.dp
        gpn = self.cluster.gpus_per_node
        return "intra" if (stage * per_stage) // gpn == ((stage + 1) * per_stage) // gpn else "inter"

    def _coll(self, op: str, group: int, span: int, num_bytes: float) -> float:
        return self.profile.collective_time_s(op, group_size=group, scope=self._scope(span),
                                              num_bytes=int(num_bytes))

    # -- per-layer pieces -------------------------------------------------------------------------
    def _gemm(self, m: int, n: float, k: float) -> float:
        """Table time, but never less than streaming the (k, n) weight from device memory once:
        microbenchmarks reuse one weight that stays in cache, a model's layers do not
        (validation/executor/cpu_notes.md measured +0.15 ms per small GEMM on the CPU)."""
        n, k = max(1, int(n)), max(1, int(k))
        table = self.profile.gemm_time_s(m, n, k, self.model.dtype)
        return max(table, k * n * self.e / self.cluster.device.hbm_bytes_per_s)

    def _layer_forward_s(self, tokens: int) -> tuple[float, float, float, float]:
        """(GEMM, elementwise forward, elementwise backward, TP collective) seconds of one layer."""
        m, tp, h = self.model, self.parallel.tp, self.model.hidden_size
        g = 2 if m.arch == "llama" else 1
        gemm = (self._gemm(tokens, (h + 2 * m.kv_hidden_size) / tp, h)
                + self._gemm(tokens, h, h / tp)
                + self._gemm(tokens, g * m.ffn_hidden_size / tp, h)
                + self._gemm(tokens, h, m.ffn_hidden_size / tp))
        elem_fwd, elem_bwd = self._elementwise_s(tokens)
        if tp == 1:
            return gemm, elem_fwd, elem_bwd, 0.0
        act_bytes = tokens * h * self.e
        if self.parallel.sequence_parallel:
            comm = 2 * (self._coll("all_gather", tp, tp, act_bytes)
                        + self._coll("reduce_scatter", tp, tp, act_bytes))
        else:
            comm = 2 * self._coll("all_reduce", tp, tp, act_bytes)
        return gemm, elem_fwd, elem_bwd, comm

    def _elementwise_s(self, tokens: int) -> tuple[float, float]:
        """Norms, residual adds, RoPE and the MLP activation of one layer (forward, backward):
        from the profile's elementwise.csv where it has this model's widths, else bytes / HBM."""
        m, tp = self.model, self.parallel.tp
        ops = (("rmsnorm", m.hidden_size, 2), ("residual_add", m.hidden_size, 2),
               ("swiglu", m.ffn_hidden_size // tp, 1),
               ("rope", (m.num_attention_heads + m.num_kv_heads) // tp * m.head_dim, 1))
        if m.arch == "llama" and all((op, w, "fwd") in self._elementwise for op, w, _ in ops):
            return tuple(sum(n * _interp(self._elementwise[(op, w, p)], tokens) for op, w, n in ops)
                         for p in ("fwd", "bwd"))
        g = 2 if m.arch == "llama" else 1
        moved = tokens * (10 * m.hidden_size + 3 * g * m.ffn_hidden_size / tp) * self.e
        fwd = moved / self.cluster.device.hbm_bytes_per_s
        return fwd, 2 * fwd

    def _attention_s(self, q: int, kv: int, pass_: str) -> float:
        """One layer's attention kernel over one slice on one GPU (CP splits the work or heads)."""
        m, par = self.model, self.parallel
        heads = max(1, m.num_attention_heads // par.tp)
        kv_heads = max(1, m.num_kv_heads // par.tp)
        if par.cp > 1 and par.cp_kind == "ulysses":
            return self.profile.attention_time_s(q, kv, num_heads=max(1, heads // par.cp),
                                                 num_kv_heads=max(1, kv_heads // par.cp),
                                                 head_dim=m.head_dim, pass_=pass_)
        # Ring (Megatron CP with load-balanced zig-zag chunks): each rank does 1/cp of the work.
        return self.profile.attention_time_s(q, kv, num_heads=heads, num_kv_heads=kv_heads,
                                             head_dim=m.head_dim, pass_=pass_) / par.cp

    def _cp_comm_s(self, chunk: Chunk, pass_: str) -> float:
        """One layer's CP traffic for a whole packed chunk (one ring pass or one set of all-to-alls,
        not one per sequence: packed THD batches exchange all their K/V together)."""
        m, par = self.model, self.parallel
        if par.cp == 1:
            return 0.0
        span, tokens = par.tp * par.cp, chunk.num_tokens / par.cp
        if par.cp_kind == "ulysses":  # q, k, v in and the output back: four all-to-alls
            a2a_bytes = tokens * (2 * m.hidden_size + 2 * m.kv_hidden_size) / par.tp * self.e
            return self._coll("all_to_all", par.cp, span, a2a_bytes)
        kv_bytes = tokens * 2 * m.kv_hidden_size / par.tp * self.e
        factor = 2 if pass_ == "bwd" else 1  # backward also returns dK/dV around the ring
        return (par.cp - 1) * factor * self._coll("send_recv", 2, span, kv_bytes)

    # -- ops ----------------------------------------------------------------------------------------
    def _chunk_s(self, chunk: Chunk, stage: int, plan: Plan, kind: OpKind) -> float:
        first, stop = plan.stage_layers[stage]
        layers = stop - first
        tokens = max(1, -(-chunk.num_tokens // self.parallel.cp))
        gemm, elem_fwd, elem_bwd, tp_comm = self._layer_fwd(tokens)
        attn_pass = "bwd" if kind is OpKind.B else "fwd"
        attn = sum(self._attn(s.num_tokens, s.stop, attn_pass) for s in chunk.slices)
        cp_comm = self._cp_comm_s(chunk, attn_pass)
        if self.parallel.cp_kind == "ring":
            attn = max(attn, cp_comm)  # the ring exchange overlaps the attention blocks
        else:
            attn += cp_comm
        scale = 2.0 if kind is OpKind.B else 1.0
        dense = scale * gemm + (elem_bwd if kind is OpKind.B else elem_fwd)
        total = layers * (dense + attn + tp_comm)
        # A recompute rebuilds the logits too, except under Megatron's full recompute, whose
        # checkpoints cover the transformer layers only.
        head_too = kind is not OpKind.R or self.parallel.recompute != "full"
        if stage == plan.num_stages - 1 and head_too:
            m = self.model
            head = self._gemm(tokens, m.vocab_size / self.parallel.tp, m.hidden_size)
            loss = tokens * m.vocab_size / self.parallel.tp * 4 * 3 / self.cluster.device.hbm_bytes_per_s
            total += scale * head + loss
        if self.parallel.zero_stage == 3 and self.parallel.dp * self.parallel.cp > 1:
            total = max(total, self._zero3_gather_s(stage, plan))
        return total

    def _static(self, stage: int, plan: Plan) -> mem.StaticMemory:
        first, stop = plan.stage_layers[stage]
        return mem.static_memory_bytes(self.model, self.parallel, num_layers=stop - first,
                                       has_embedding=stage == 0,
                                       has_head=stage == plan.num_stages - 1)

    def _zero3_gather_s(self, stage: int, plan: Plan) -> float:
        shards = self.parallel.dp * self.parallel.cp
        params = self._static(stage, plan).num_parameters
        return self._coll("all_gather", shards, shards * self.parallel.tp, params * self.e)

    def _dp_grad_s(self, op: Op, plan: Plan) -> float:
        par = self.parallel
        shards = par.dp * par.cp
        if shards == 1:
            return 0.0
        static = self._static(op.stage, plan)
        span = shards * par.tp
        grad_bytes = static.num_parameters * 4
        if par.zero_stage == 0:
            comm = self._coll("all_reduce", shards, span, grad_bytes)
        else:
            comm = (self._coll("reduce_scatter", shards, span, grad_bytes)
                    + self._coll("all_gather", shards, span, static.num_parameters * self.e))
        last_b = [o for o in plan.program(op.device).ops if o.kind is OpKind.B]
        window = self.duration_s(last_b[-1], plan) if last_b else 0.0
        return max(comm - window, 0.0)

    def _use_plan(self, plan: Plan) -> None:
        """Per-plan caches (chunk lookup, per-op durations) are rebuilt when the plan changes."""
        if self._plan is not plan:  # holding the plan keeps its id from being reused
            self._plan, self._chunk_cache = plan, {}
            self._chunks = {c.index: c for c in plan.chunks}

    def duration_s(self, op: Op, plan: Plan) -> float:
        self._use_plan(plan)
        if op.kind in (OpKind.F, OpKind.B, OpKind.R):
            key = (op.kind, op.chunk, op.stage)
            value = self._chunk_cache.get(key)
            if value is None:
                value = self._chunk_cache[key] = self._chunk_s(self._chunks[op.chunk], op.stage,
                                                               plan, op.kind)
            return value
        if op.kind in (OpKind.SEND_F, OpKind.SEND_B):
            chunk = self._chunks[op.chunk]
            nbytes = chunk.num_tokens / self.parallel.cp * self.model.hidden_size * self.e
            if self.parallel.sequence_parallel and self.parallel.tp > 1:
                nbytes /= self.parallel.tp
            stage = op.stage if op.kind is OpKind.SEND_F else op.stage - 1
            return self.profile.collective_time_s("send_recv", group_size=2,
                                                  scope=self._pp_scope(stage), num_bytes=int(nbytes))
        if op.kind is OpKind.COLL:
            return self._dp_grad_s(op, plan)
        if op.kind is OpKind.OPT:
            static = self._static(op.stage, plan)
            shards = self.parallel.dp * self.parallel.cp if self.parallel.zero_stage >= 1 else 1
            return static.num_parameters / shards * OPT_BYTES_PER_PARAM / self.cluster.device.hbm_bytes_per_s
        self._notes.add(f"no cost for op kind {op.kind.value}; counted as 0 s")
        return 0.0

    # -- memory ---------------------------------------------------------------------------------------
    def buffer_bytes(self, buffer: Buffer, plan: Plan) -> int:
        self._use_plan(plan)
        chunk = self._chunks[buffer.chunk]
        per_token = self._buffer_per_token(buffer.kind, buffer.stage, plan)
        return int(per_token * chunk.num_tokens * (1 + self.overhead.fragmentation_fraction))

    def _buffer_per_token(self, kind: str, stage: int, plan: Plan) -> float:
        key = ("buf", kind, stage)
        cached = self._chunk_cache.get(key)
        if cached is not None:
            return cached
        first, stop = plan.stage_layers[stage]
        layers, m, par = stop - first, self.model, self.parallel
        if kind == "act":
            value = (mem.recompute_working_bytes_per_token(m, par, recompute="full")
                     if par.recompute == "full" else
                     mem.activation_bytes_per_token(m, par, num_layers=layers, recompute=par.recompute))
            if stage == 0:
                value += mem.embedding_bytes_per_token(m, par)
            if stage == plan.num_stages - 1:
                value += mem.logits_bytes_per_token(m, par)
        elif kind == "ckpt":
            value = (mem.activation_bytes_per_token(m, par, num_layers=layers, recompute="full")
                     if par.recompute == "full" else
                     m.hidden_size * self.e / (par.tp if par.sequence_parallel else 1) / par.cp)
        elif kind == "kv":
            value = mem.kv_state_bytes_per_token(m, par, num_layers=layers)
        elif kind == "kv_grad":
            value = mem.kv_grad_bytes_per_token(m, par, num_layers=layers)
        else:
            raise ValueError(f"unknown buffer kind {kind!r}")
        self._chunk_cache[key] = value
        return value

    def static_memory_bytes(self, device: int, plan: Plan) -> int:
        stage = plan.device_stage[device]
        return int(self._static(stage, plan).total_bytes)

    def model_flops(self, chunk: Chunk, plan: Plan) -> float:
        """Training FLOPs of the chunk on the whole model, counted once per TP x CP group."""
        return sum(training_flops(self.model, q_tokens=s.num_tokens, context_tokens=s.start)
                   for s in chunk.slices)

    def warnings(self) -> list[str]:
        return sorted(set(self.profile.warnings()) | self._notes)


def _elementwise_curves(directory) -> dict[tuple[str, int, str], tuple]:
    """(op, width, pass) -> (log tokens, log seconds) from elementwise.csv, if the profile has one."""
    import numpy as np

    from ltsim.errors import ProfileError
    from ltsim.profiles import read_table

    try:
        frame = read_table(directory, "elementwise")
    except ProfileError:
        return {}
    curves = {}
    for (op, width, pass_), rows in frame.groupby(["op", "hidden", "pass"]):
        rows = rows.groupby("num_tokens").time_s.median()
        curves[(op, int(width), pass_)] = (np.log(rows.index.to_numpy(float)),
                                           np.log(rows.to_numpy(float)))
    return curves


def _interp(curve: tuple, tokens: int) -> float:
    """Log-log interpolation; beyond the table, the end segment's throughput (time ~ tokens)."""
    import math

    import numpy as np

    log_tokens, log_times = curve
    x = math.log(max(tokens, 1))
    if x > log_tokens[-1]:
        return math.exp(log_times[-1] + x - log_tokens[-1])
    return math.exp(float(np.interp(x, log_tokens, log_times)))
