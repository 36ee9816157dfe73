"""Seq1F1B (Sun et al. 2024; PAPERS.md section 7): token-level pipeline parallelism, InfiniPipe's
baseline, on InfiniPipe's layout (Ulysses SP inside a stage over ``parallel.cp``, PP across stages).

- ``variant = "original"``: every sequence is cut into ``num_splits`` segments, ``split =
  "uniform_comp"`` (segments of equal compute: the boundaries where a prefix's time reaches i/k of
  the whole, Seq1F1B's uniform_comp without sympy) or ``"average"`` (equal tokens); one sequence
  per micro-batch.
- ``variant = "enhanced"`` (InfiniPipe's section 5.1): long sequences cut into ``chunk_size``-token
  slices and short ones packed first-fit-decreasing into chunks of at most ``chunk_size`` tokens.

Both run one 1F1B pipeline: segments of a sequence forward in order and backward last to first
(each passes its K/V gradients back), with a warm-up of d_p - p + k - 1 forwards on stage p (k the
most segments of a sequence), so the steady phase has no bubble (InfiniPipe's Eq. 7 windows).
``checkpointing = "uniform"`` recomputes the same number of layers of every chunk on every stage:
the fewest that fit the batch (Seq1F1B checkpoints uniformly for the longest sequence); "none" and
"full" as InfiniPipe's. The plan machinery is InfiniPipe's (infinipipe.build, epp).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ltsim.errors import ConfigError
from ltsim.plan import Plan, Slice
from ltsim.strategies.base import PlanContext, check_time_limit, positive
from ltsim.strategies.epp_chunking import Unit, chunk_fixed, mesh
from ltsim.strategies.epp_costs import StageCosts
from ltsim.strategies.infinipipe import build, uncheckpointed_keep
from ltsim.strategies.schedule import check_chunk_count

NAME = "seq1f1b"
VARIANTS = ("original", "enhanced")
SPLITS = ("uniform_comp", "average")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    variant: str = "enhanced"
    num_splits: int = 4  # original: segments per sequence
    split: str = "uniform_comp"  # original: how the segments are cut
    chunk_size: int = 16384  # enhanced: tokens per chunk
    checkpointing: str = "uniform"
    milp_time_limit_s: float = 0.25

    ONLY_WITH = {"num_splits": ("variant", "original"), "split": ("variant", "original")}
    # a warning, not an error: the bundled scenarios set it, and a --set of the variant would fail
    IGNORED_UNLESS = {"chunk_size": ("variant", "enhanced")}

    def validate(self) -> None:
        positive("num_splits", self.num_splits)
        positive("chunk_size", self.chunk_size)
        for key, allowed in (("variant", VARIANTS), ("split", SPLITS),
                             ("checkpointing", ("uniform", "none", "full"))):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"strategy.{key}", f"one of {', '.join(allowed)}",
                                  getattr(self, key))
        check_time_limit(self.milp_time_limit_s)


def segments(seq: int, length: int, options: Options, costs: StageCosts) -> tuple:
    """The original variant's segments of one sequence."""
    k = min(options.num_splits, length)
    if options.split == "average":
        bounds = [length * i // k for i in range(k + 1)]
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    else:
        sizes = list(mesh(length, k, costs.chunk_time).slices)
    out, start = [], 0
    for size in sizes:
        out.append((Slice(seq, start, start + size),))
        start += size
    return tuple(out)


def check_batch(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> None:
    """Raise ConfigError for a batch cut into more than MAX_CHUNKS pieces (before any planning)."""
    if options.variant == "enhanced":  # at least a chunk per chunk_size tokens
        check_chunk_count(-(-sum(batch) // options.chunk_size), "strategy.chunk_size",
                          options.chunk_size, stages=ctx.parallel.pp)
    else:  # a segment per split of every sequence (at most its tokens)
        check_chunk_count(sum(min(options.num_splits, n) for n in batch), "strategy.num_splits",
                          options.num_splits, stages=ctx.parallel.pp)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    keep = uncheckpointed_keep(ctx, NAME, options.checkpointing)
    check_batch(batch, ctx, options)

    def make_units(costs: StageCosts, capacity: int, lengths: dict[int, int], n: int
                   ) -> list[Unit]:
        if options.variant == "enhanced":
            return chunk_fixed(lengths, options.chunk_size)
        return [Unit(segments(seq, length, options, costs), split=True)
                for seq, length in sorted(lengths.items(), key=lambda kv: (-kv[1], kv[0]))]

    knob = (("strategy.chunk_size", "use larger chunks, or fewer tokens per DP replica")
            if options.variant == "enhanced" else
            ("strategy.num_splits", "split each sequence fewer times"))
    return build(batch, ctx, name=NAME, options=asdict(options), keep=keep, make_units=make_units,
                 num_slices=1, mode=options.checkpointing, warmup="prefill", grouping=False,
                 time_limit_s=options.milp_time_limit_s, knob=knob)
