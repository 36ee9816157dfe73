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
