"""lookup.interp_at is np.interp for one point, bit for bit (the cost models' prices must not
move by an ulp when they stop calling numpy)."""

import numpy as np

from ltsim.lookup import interp_at


def test_interp_at_is_numpy_interp_bit_for_bit():
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(2000):
        source = (rng.normal(size=30) * 5 if trial % 2
                  else np.log(rng.integers(1, 1 << 20, size=30).astype(float)))
        xp = np.unique(source)[:int(rng.integers(1, 12))]
        fp = rng.normal(size=len(xp)) * 3
        # between, on, below and above the knots, and midway between neighbours
        points = [*rng.normal(size=4) * 6, *xp, *((xp[:-1] + xp[1:]) / 2), xp[0] - 1.0,
                  xp[-1] + 1.0]
        for x in points:
            assert interp_at(float(x), xp.tolist(), fp.tolist()) == float(np.interp(x, xp, fp))
            checked += 1
    assert checked > 20000


def test_interp_at_takes_integer_knots_as_numpy_does():
    xp, fp = [0, 4096, 16384], [0.0, 1.5e-3, 2.25e-3]
    for x in (0, 1, 100, 4096, 5000, 16383, 16384, 20000):
        assert interp_at(x, xp, fp) == float(np.interp(x, xp, fp))
