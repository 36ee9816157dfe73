"""Prices shared between engines of one price scope (ltsim/sim/engine.py ``shared_prices``): the
points of a sweep price each shape once, and every run still warns as if it had priced alone."""

from __future__ import annotations

import pytest

from ltsim.grid import evaluate_point, expand_grid
from ltsim.profiles import PROFILES_DIR, Profile
from ltsim.runner import make_cost_model, simulate
from ltsim.scenario import load_scenario
from ltsim.sim import engine
from ltsim.strategies import chunkflow

QUICKSTART = "scenarios/quickstart.toml"


def _forget() -> None:
    engine._SHARED.clear()
    chunkflow._chunks.cache_clear()


def _scenario(repo, chunk_size: int, k: int):
    return load_scenario(repo / QUICKSTART, [f"strategy.chunk_size={chunk_size}", f"strategy.k={k}"])


def test_a_shared_price_warns_as_if_priced_alone(repo):
    _forget()
    alone = simulate(_scenario(repo, 2048, 2))
    assert alone.warnings  # a GEMM below the profile's rows: the note every price must carry
    _forget()
    simulate(_scenario(repo, 2048, 1))  # the same chunks: nearly every price of the next run
    prices = next(iter(engine._SHARED.values()))
    count = len(prices)
    after = simulate(_scenario(repo, 2048, 2))
    assert count <= len(prices) < 1.01 * count
    assert after.warnings == alone.warnings and after.batches == alone.batches
    count = len(prices)
    again = simulate(_scenario(repo, 2048, 2))
    assert len(prices) == count  # priced nothing anew ...
    assert again.warnings == alone.warnings  # ... and warned all the same
    assert again.batches == alone.batches


@pytest.mark.parametrize("order", [1, -1])
def test_sweep_rows_do_not_depend_on_what_ran_before(repo, order):
    scenario = load_scenario(repo / QUICKSTART, [])
    points = expand_grid(["strategy.chunk_size=2048,4096", "strategy.k=1,2"])
    alone = []
    for point in points:
        _forget()
        alone.append(evaluate_point(scenario.raw, scenario.source, point))
    _forget()
    together = {id(p): evaluate_point(scenario.raw, scenario.source, p) for p in points[::order]}
    assert [together[id(p)] for p in points] == alone
    assert any(row["warnings"] for row in alone) and not all(row["warnings"] for row in alone)


def test_scopes(repo):
    base = _scenario(repo, 2048, 1)
    cost = make_cost_model(base)
    assert make_cost_model(base).price_scope() == cost.price_scope()
    other = load_scenario(repo / QUICKSTART, ["parallel.grad_dtype=model"])
    assert make_cost_model(other).price_scope() != cost.price_scope()
    smaller = load_scenario(repo / QUICKSTART, ["model.preset=qwen2.5-0.5b", "parallel.tp=2"])
    assert make_cost_model(smaller).price_scope() != cost.price_scope()
    _forget()
    assert engine.shared_prices(cost) is engine.shared_prices(make_cost_model(base))
    assert engine.shared_prices(cost) is not engine.shared_prices(make_cost_model(other))


def test_memo_makes_its_notes_again_on_a_hit():
    profile = Profile(PROFILES_DIR / "cpu-ci").for_run()
    calls = []

    def lookup(m):
        calls.append(m)
        return profile.gemm_time_s(m, 64, 64, "fp32")

    memo = profile.memo(lookup, 8)
    _, first = profile.noted(memo, 1)  # below the table: a note
    (value, inner), second = profile.noted(profile.noted, memo, 1)  # calls nest
    assert calls == [1] and value == lookup(1)
    assert first and second == first and inner == first
    assert profile._recorders == []
    assert any("m=1" in text for text in profile.warnings())
