"""``ltsim validate`` says where its executor holds other than the memory model charges."""

from __future__ import annotations

from ltsim.strategies import get_strategy
from ltsim.validate import _convention_gaps
from tests.conftest import unit_ctx


def _plan(recompute: str, pp: int = 1):
    megatron = get_strategy("megatron-1f1b")
    return megatron.plan((64, 64), unit_ctx(pp=pp, recompute=recompute), megatron.parse({}))


def test_a_whole_stage_full_recompute_is_flagged():
    # the executor's R rebuilds every layer of the stage at once; the model (Megatron) one layer
    # at a time: measured peaks 20-23% over predicted on CPU (a review), without a word
    gaps = _convention_gaps(_plan("full"))
    assert len(gaps) == 1 and "recomputes 28 layers at once" in gaps[0]
    assert _convention_gaps(_plan("selective")) == ()
