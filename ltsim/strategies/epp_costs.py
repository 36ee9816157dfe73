"""What InfiniPipe's chunker and solver ask ltsim's cost model (ltsim/strategies/epp.py): a
chunk's stage times, and per stage its memory coefficients for the checkpointing MILP (Eq. 5,
9-10: what a chunk holds, what one checkpointed layer saves, its largest working set), all from
the buffers the plan allocates, so the simulated peak stays within the limit the MILP used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ltsim.plan import Buffer, Comm, Keep, OpKind, Slice, Split, Work
from ltsim.strategies.schedule import Layout, one_layer_work
from ltsim.units import NO_LIMIT_BYTES
from ltsim.work import SLICE_BOUNDS


def unlimited(budgets: list[float]) -> bool:
    """Whether stages of these activation budgets have no memory limit (the unit preset's): no
    checkpointing window can overflow them."""
    return min(budgets) >= NO_LIMIT_BYTES


@dataclass(frozen=True, slots=True)
class ChunkCost:
    """One chunk's stage time and, per stage, its memory coefficients (bytes)."""

    fwd_s: float  # forward of one stage's layers (all-to-alls included)
    bwd_s: float
    layer_fwd_s: float  # one layer's forward
    base: tuple[int, ...]  # I_pk per stage
    saved: tuple[float, ...]  # F_pk per stage: bytes one checkpointed layer saves
    transient: tuple[int, ...]  # its largest working set (forward, recompute, backward), per stage


class StageCosts:
    """ltsim's cost model asked the questions the chunker and the solver ask, cached."""

    def __init__(self, cost, layout: Layout, keep: Keep) -> None:
        self.cost, self.layout, self.keep = cost, layout, keep
        self.split: Split = layout.split
        self.devices = [d for d in layout.devices() if d.replica == 0]
        self.stage_layers = layout.stage_layers
        self.layers = self.stage_layers[0]
        self._gpus = layout.gpus_of(self.devices[0])
        self._times: dict = {}
        self._coll = self._zero3_colls()
        # no memory limit (the unit preset's): no window can overflow, and the MILP is never
        # built (epp.solve_pipeline), so a chunk's memory coefficients are not asked
        self.unlimited = unlimited([self.budget(s) for s in range(self.num_stages)])

    @property
    def num_stages(self) -> int:
        return len(self.stage_layers)

    @property
    def max_ckpt_layers(self) -> int:
        return min(b - a for a, b in self.stage_layers)

    def _work(self, slices, layers=None, **flags) -> Work:
        return Work(chunk=0, slices=tuple(slices), layers=layers or self.layers, split=self.split,
                    **flags)

    def time(self, kind: OpKind, slices) -> float:
        """A stage's ``kind`` pass over ``slices`` (one of the first stage's layer count, without
        embedding or head), with Ulysses' all-to-alls. Cached on the slices' token ranges: the
        sequence a slice comes from does not change its cost, and the N search re-prices the
        same shapes."""
        key = (kind, tuple(map(SLICE_BOUNDS, slices)))
        value = self._times.get(key)
        if value is None:
            work = self._work(slices)
            value = self.cost.compute_s(kind, work, keep=self.keep)
            if self.split.cp > 1:
                value += self.cost.comm_s(Comm("all_to_all", "qkvo", work,
                                               group_size=self.split.cp, gpus=self._gpus))
            self._times[key] = value
        return value

    def _zero3_colls(self) -> tuple[float, float]:
        """Under ZeRO-3 (add_zero3_gathers, add_dp_reduction): the all-gather of the first
        stage's parameters before each of its compute ops, and the gradients' reduce-scatter
        after each backward, on the stage's collective stream (0, 0 otherwise)."""
        device = self.devices[0]
        if device.zero_stage < 3 or device.num_shards <= 1:
            return 0.0, 0.0
        ranks = [r for d in self.layout.devices() if d.stage == device.stage
                 for r in self.layout.gpus_of(d)]
        gpus = (min(ranks), max(ranks))
        params = Work(chunk=-1, slices=(), layers=self.layers, split=Split(tp=device.tp))
        gather = Comm("all_gather", "params", params, group_size=device.num_shards, gpus=gpus)
        grads = Comm("reduce_scatter", "grads" if device.grad_dtype == "fp32" else "model_grads",
                     params, group_size=device.num_shards, gpus=gpus)
        return self.cost.comm_s(gather), self.cost.comm_s(grads)

    def chunk_time(self, slices: tuple[Slice, ...]) -> float:
        """What Alg. 1 balances: a chunk's backward time (Eq. 4)."""
        return self.time(OpKind.B, slices)

    def budget(self, stage: int) -> int:
        """Device memory for activations on ``stage``: the limit less its static memory."""
        return self.cost.memory_limit_bytes - self.cost.static_memory_bytes(self.devices[stage])

    def chunk(self, slices, nontail: bool, *, timed: bool = True) -> ChunkCost:
        """The chunk's times (0 unless ``timed``: a probe of memory alone prices no kernels, whose
        lookups would warn of token counts no plan has) and memory per stage. Under ZeRO-3 a
        pass takes at least the parameter all-gather it waits for, and the backward at least that
        and the reduce-scatter after it: the collective stream runs them one after another, so
        a chunk too short to hide them waits for them (one op ahead, as the lowering prefetches)."""
        fwd, bwd = (self.time(OpKind.F, slices), self.time(OpKind.B, slices)) if timed else (0, 0)
        if timed:
            gather, reduce = self._coll
            fwd, bwd = max(fwd, gather), max(bwd, gather + reduce)
        num_layers = self.layers[1] - self.layers[0]
        if self.unlimited:
            none = (0,) * len(self.devices)
            return ChunkCost(fwd, bwd, fwd / max(1, num_layers), none, none, none)
        base, saved, transient = [], [], []
        for stage, device in enumerate(self.devices):
            first, stop = device.layers
            whole = self._work(slices, device.layers, embed=device.embed, head=device.head)
            plain = self._work(slices, device.layers)
            act = self.cost.buffer_bytes(Buffer("act", whole, self.keep))
            rest = (self.cost.buffer_bytes(Buffer("act", replace(whole, layers=(stop, stop),
                                                                 embed=False), self.keep))
                    if device.head else 0)
            kept = self.cost.buffer_bytes(Buffer("ckpt", plain))
            kv = self.cost.buffer_bytes(Buffer("kv", plain)) if nontail else 0
            grads = self.cost.buffer_bytes(Buffer("kv_grad", plain)) if nontail else 0
            one = self.cost.buffer_bytes(Buffer("act", one_layer_work(
                whole, embed=device.embed, head=device.head), Keep.ALL))
            # a part checkpointed: R rebuilds its first layer, without the logits
            # (infinipipe.chunk_actions), and the backward's loss meets it
            part = self.cost.buffer_bytes(Buffer("act", one_layer_work(
                whole, embed=device.embed, head=False), Keep.ALL))
            base.append(act + grads)
            saved.append(max(0.0, (act - rest - kept - kv) / max(1, stop - first)))
            # beyond base - C x saved: a forward's working set; with every layer checkpointed
            # (C = L: the layer inputs, no logits, which ``rest`` counts) the one-layer set R
            # rebuilds, beside R's or the backward's (which runs the loss before any layer); with
            # a part, that part's first layer beside R's or the backward's
            working = self.cost.working_bytes
            rebuilt = working(OpKind.R, whole)
            transient.append(max(working(OpKind.F, whole),
                                 one - rest + max(rebuilt, working(OpKind.B, whole,
                                                                  keep=Keep.INPUT)),
                                 part + max(rebuilt, working(OpKind.B, whole))))
        return ChunkCost(fwd, bwd, fwd / max(1, num_layers), tuple(base), tuple(saved),
                         tuple(transient))
