"""DeepSpeed-Ulysses (Jacobs et al. 2023): InfiniPipe's DeepSpeed baseline (seeds/infinipipe.md 5.1,
PAPERS.md section 7): ZeRO (``parallel.zero_stage``, 3 in the paper: parameters gathered per op,
gradients reduce-scattered) over the whole cluster, and Ulysses sequence parallelism over
``parallel.cp`` ranks (16 or 32 in the paper, so across nodes): four all-to-alls around each
layer's attention in forward and in backward.

Micro-batches are deepspeed-cp's (sequences packed in batch order up to ``bucket_size`` tokens per
rank, or ``micro_batch_size`` sequences each), always sharded the Ulysses way; the heads must divide
over tp x cp. No pipeline.
"""

from __future__ import annotations

from dataclasses import replace

from ltsim.plan import Plan
from ltsim.strategies.base import PlanContext
from ltsim.strategies.deepspeed_cp import Options, schedule
from ltsim.strategies.infinipipe import ulysses_layout
from ltsim.strategies.lowering import lower

NAME = "deepspeed-ulysses"
CP_KIND = "ulysses"  # its sequence parallelism over parallel.cp splits heads, never ring
__all__ = ["NAME", "Options", "plan"]


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    layout = ulysses_layout(ctx)
    ctx = replace(ctx, parallel=layout.parallel)
    return lower(schedule(batch, ctx, options, NAME), layout)
