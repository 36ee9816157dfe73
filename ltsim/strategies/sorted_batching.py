"""LongAlign's sorted batching (Bai et al. 2024; PAPERS.md section 7), Skrull's second baseline:
"sort the dataset by sequence length and select random consecutive groups for each batch".

It is a workload transform, not a schedule: the registry samples this strategy's global batches
with ``workload.batching = "sorted-groups"`` (``BATCHING`` below; workload.py sorts a pool of
draws standing in for the dataset, cuts consecutive groups of the global batch size and picks
groups at random), and each batch then runs on the DeepSpeed ZeRO + CP engine exactly as
``deepspeed-cp`` does (options included), dealt over the DP ranks as LongAlign's trainer deals it
(accelerate hands each rank a per-device batch in turn, ``micro_batch_size`` sequences, one when
bucketing): rank r gets blocks r, r + dp, ... of that many sequences
(``strategies/base.deal_replicas``), so the ranks' i-th micro-steps hold neighbouring lengths.
"""

from __future__ import annotations

from ltsim.plan import Plan
from ltsim.strategies.base import PlanContext
from ltsim.strategies.deepspeed_cp import Options, schedule
from ltsim.strategies.lowering import lower
from ltsim.strategies.schedule import Layout

NAME = "sorted-batching"
BATCHING = "sorted-groups"
__all__ = ["BATCHING", "NAME", "Options", "plan"]


def plan(batch: tuple[int, ...], ctx: PlanContext, options: Options) -> Plan:
    return lower(schedule(batch, ctx, options, NAME, block=options.micro_batch_size or 1),
                 Layout.of(ctx.parallel, ctx.model.num_layers))
