"""SpaCO, sparse chunk-wise optimization (Li et al., ACL Findings 2025; seeds/seco-spaco.md,
PAPERS.md section 5): SeCO's schedule (seco.py) with only ``budget`` (t) of a sequence's k chunks
back-propagated.

Algorithm 2: forward every chunk without autograd, keeping its K/V; pick t distinct chunks at
random; re-forward and back-propagate only those, in descending order (reading H1: ascending
order would back-propagate a chunk before the later chunks' dK/dV reached it), each scaling the
K/V gradient it received by the compensation factor k/t before passing it on (m_i.grad <- (k/t)
m'_i.grad). Time is about k no-grad forwards plus t (F + B): F (1 + 3t/k) against SeCO's 4F.

Choices where the paper is silent or ambiguous (PAPERS.md 5.1 H2, H3), all options:

- ``compensation = "paper"``: the K/V-gradient factor k/t per relay, capped at ``cap`` (the
  paper's §6.4 caps it at 2; ``cap = inf`` leaves it uncapped), and each selected chunk's loss
  scaled by k/t, uncapped (the paper's draw_curve code scales the loss; without it the direct
  terms of the unselected chunks would be missing from the expectation). ``"none"``: no scaling.
- ``sampling = "fixed"``: exactly t distinct chunks, as Algorithm 2 prints. Its factor is exact for
  the direct terms, but a gradient path through p relays survives with probability
  t(t-1).../(k(k-1)...), not (t/k)^(p+1), so k/t per relay only approximates it (the paper's Eq.
  8-10 assume independent survival). ``"bernoulli"``: each chunk independently with probability
  t/k, for which the uncapped factors make the estimate exactly unbiased (the executor's tests
  enumerate every subset of a small case and check both statements). ``"worst"``: a bound on
  the memory peak of any draw, the t latest chunks, at least two (the latest chunk
  back-propagated gives every earlier chunk its K/V gradients, held until that chunk's own turn,
  so the backward of the second latest holds them all beside a whole chunk's activations; with
  t = 1 a single draw of the last, partial chunk can peak higher or lower than one of the chunk
  before it, and the two together bound both, a little above either: 146.5 GiB against 138.7 and
  144.5 for Llama-3.1-8B at 16,385 tokens in 1K chunks): not an estimate, but what ``ltsim maxlen``
  searches with (``maxlen_options``), since a run draws anew every step and the longest length
  it can train is one that every draw fits. With several sequences per device and pipeline
  stages a draw also moves the 1F1B interleaving, and a review found draws up to 0.6% above it.

Per sequence, k is its chunk count and t = min(budget, k). The choice is seeded per sequence
(``seed`` and the sequence id), so a plan is reproducible; it is the same on every stage.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, replace

from ltsim.errors import ConfigError
from ltsim.plan import Plan
from ltsim.strategies.base import PlanContext, positive
from ltsim.strategies.lowering import lower
from ltsim.strategies.schedule import Layout

__all__ = ["NAME", "Options", "check_batch", "maxlen_options", "maxlen_period", "plan"]
from ltsim.strategies.seco import check_batch, chunked_schedule

NAME = "spaco"
COMPENSATIONS = ("paper", "none")
SAMPLINGS = ("fixed", "bernoulli", "worst")
EVERY_CHUNK = 1 << 30  # a budget no sequence's chunk count reaches: t = k


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    chunk_size: int = 1024  # tokens per chunk
    budget: int = 8  # t: chunks back-propagated per sequence
    seed: int = 0
    compensation: str = "paper"
    cap: float = 2.0  # most the per-relay K/V-gradient factor may be (the paper's 2; inf: none)
    sampling: str = "fixed"

    def validate(self) -> None:
        positive("chunk_size", self.chunk_size)
        positive("budget", self.budget)
        positive("seed", self.seed, allow_zero=True)
        if self.compensation not in COMPENSATIONS:
            raise ConfigError("strategy.compensation", f"one of {', '.join(COMPENSATIONS)}",
                              self.compensation)
        if self.sampling not in SAMPLINGS:
            raise ConfigError("strategy.sampling", f"one of {', '.join(SAMPLINGS)}", self.sampling)
        if not (self.cap >= 1):  # also refuses nan
            raise ConfigError("strategy.cap", "a number >= 1 (inf: uncapped)", self.cap,
                              "the paper caps the factor at 2")


def select(ids: list[int], seq: int, options: Options) -> list[int]:
    """The chunks of one sequence (ids, in order) that back-propagate, ascending."""
    rng = random.Random(options.seed * 1_000_003 + seq)
    k = len(ids)
    if options.sampling == "bernoulli":
        p = min(1.0, options.budget / k)
        return [c for c in ids if rng.random() < p]
    if options.sampling == "worst":
        return ids[k - max(min(options.budget, k), min(2, k)):]
    return sorted(rng.sample(ids, min(options.budget, k)))


def maxlen_options(options: Options) -> tuple[dict, str]:
    """What ``ltsim maxlen`` searches with, and those options in words ("" when the search runs
    as the user's would): a draw whose peak bounds every draw's. Fixed sampling draws t chunks,
    bounded by the t latest (``"worst"``, at least two); Bernoulli sampling may draw any subset,
    every chunk too (SeCO's backward, with SpaCO's forward). The options that change neither time
    nor memory (the seed the worst draw does not read; the gradient compensation, a loss scale)
    are set to their defaults too, unsaid, so that searches differing only in them are one."""
    unread = Options()
    worst = {"sampling": "worst", "seed": unread.seed, "compensation": unread.compensation,
             "cap": unread.cap}
    if options.sampling == "bernoulli":
        return ({**worst, "budget": EVERY_CHUNK},
                'strategy.sampling = "worst" over every chunk (a Bernoulli draw can take them all)')
    # the worst draw takes at least two chunks: budgets 1 and 2 search alike (so --strategies
    # refuses the second as a repeat, rather than printing the same row twice: a fuzzing review)
    worst["budget"] = max(options.budget, 2)
    return worst, "" if options.sampling == "worst" else 'strategy.sampling = "worst"'


def maxlen_period(options: Options) -> int:
    """A sequence is cut into chunks of ``chunk_size`` tokens (``Strategy.maxlen_period``)."""
    return options.chunk_size


def factor(k: int, options: Options) -> float:
    """1 / P(a chunk is selected): k/t for either sampling (t = min(budget, k))."""
    return k / min(options.budget, k)


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    schedule = chunked_schedule(batch, ctx, options.chunk_size, NAME, asdict(options),
                                lambda ids, seq: select(ids, seq, options))
    scales = []
    if options.compensation == "paper":
        counts = Counter(c.slices[0].seq for c in schedule.chunks)  # k of each sequence
        for c in sorted(schedule.grad_chunks):
            f = factor(counts[schedule.chunks[c].slices[0].seq], options)
            if f != 1.0:
                scales.append((c, f, min(f, options.cap)))
    return lower(replace(schedule, grad_scales=tuple(scales)),
                 Layout.of(ctx.parallel, ctx.model.num_layers))
