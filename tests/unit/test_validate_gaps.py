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


def test_each_executor_process_counts_against_the_host(monkeypatch):
    """A fuzzing review: 1,024 simulated devices started one torch process each on a 23 GiB
    machine, past a minute; each process's own torch (WORKER_BASE_BYTES) is now counted."""
    import pytest

    import ltsim.profiler.environment as environment
    from ltsim.errors import ConfigError
    from ltsim.validate import WORKER_BASE_BYTES, _fits_this_host

    monkeypatch.setattr(environment, "host_memory_bytes", lambda: 100 * WORKER_BASE_BYTES)
    _fits_this_host(10 * WORKER_BASE_BYTES, 90)
    with pytest.raises(ConfigError, match="for 91 devices"):
        _fits_this_host(10 * WORKER_BASE_BYTES, 91)
