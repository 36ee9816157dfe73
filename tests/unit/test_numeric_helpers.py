"""Plain stand-ins for numpy calls on hot paths: lookup.interp_at is np.interp for one point, bit
for bit (the cost models' prices must not move by an ulp when they stop calling numpy), and
interned.sorted_unique is np.unique without importing numpy.ma."""

import subprocess
import sys

import numpy as np

from ltsim.interned import sorted_unique
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


def test_sorted_unique_is_numpy_unique():
    rng = np.random.default_rng(0)
    for size in (0, 1, 2, 7, 300):
        for _ in range(20):
            values = rng.integers(-3, 40, size=size)
            mine, theirs = sorted_unique(values), np.unique(values)
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)


def test_a_large_plan_is_built_and_checked_without_numpy_ma():
    """np.unique imports numpy.ma on first use (18 ms of every sweep worker)."""
    code = ("import sys\n"
            "from ltsim.costs import UnitCostModel\n"
            "from ltsim.model import get_model\n"
            "from ltsim.parallel import ParallelConfig\n"
            "from ltsim.strategies import get_strategy\n"
            "from ltsim.strategies.base import PlanContext\n"
            "ctx = PlanContext(model=get_model('qwen2.5-7b'), parallel=ParallelConfig(pp=4),"
            " cost=UnitCostModel())\n"
            "s = get_strategy('megatron-1f1b')\n"
            "s.plan((1,) * 512, ctx, s.parse({})).validate()\n"
            "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
