"""metrics.percentile gives numpy.percentile's value to the last bit (it stands in for it to
spare every sweep worker numpy.ma's import)."""

from __future__ import annotations

import numpy as np
import pytest

from ltsim.sim.metrics import percentile


@pytest.mark.parametrize("seed", range(20))
def test_percentile_is_numpys(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 4, 5, 7, 10, 16, 33):
        values = rng.lognormal(0.0, 1.0, n) * 10.0 ** rng.integers(-3, 3)
        for q in (0, 5, 25, 50, 75, 90, 95, 99, 100):
            assert percentile(values, q) == float(np.percentile(values, q)), (n, q)
            assert percentile(list(values), q) == float(np.percentile(values, q))


def test_an_mfu_above_one_is_said(tmp_path):
    """A fuzzing review: a CPU profile whose gemm.csv read 1000x slow (its fastest GEMM is the
    CPU's peak) printed MFU 32661.59% with no warning."""
    import shutil

    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario
    from tests.conftest import REPO

    profile = tmp_path / "slow"
    shutil.copytree(REPO / "profiles" / "cpu-ci", profile)
    lines = (profile / "gemm.csv").read_text().splitlines()
    column = lines[0].split(",").index("time_s")
    (profile / "gemm.csv").write_text("\n".join([lines[0]] + [
        ",".join(repr(float(v) * 1000) if i == column else v for i, v in enumerate(line.split(",")))
        for line in lines[1:]]) + "\n")
    path = REPO / "scenarios" / "examples" / "cpu-llama-tiny-chunkflow.toml"
    normal = simulate(load_scenario(path)).to_dict()
    assert 0 < normal["mfu"] < 1 and not [w for w in normal["warnings"] if "MFU" in w]
    slow = simulate(load_scenario(path, [f"hardware.profile={profile}"])).to_dict()
    assert slow["mfu"] > 1
    assert [w for w in slow["warnings"] if w.startswith("MFU") and "above 100%" in w]
