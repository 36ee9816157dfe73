"""InfiniPipe's mesh (Alg. 1 line 1) placed by `first_reaching` against the bisection it replaced:
every boundary of every N from 1 to 64 on the quickstart's own cost model, and the prefix-time
calls each search makes (validation/perf/README.md). Not a test.

    python validation/perf/mesh_search.py [LENGTH ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ltsim.plan import Slice  # noqa: E402
from ltsim.runner import make_cost_model  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.strategies.base import PlanContext  # noqa: E402
from ltsim.strategies.epp_chunking import mesh  # noqa: E402
from ltsim.strategies.epp_costs import StageCosts  # noqa: E402
from ltsim.strategies.infinipipe import NAME, ulysses_layout, uncheckpointed_keep  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def bisection_mesh(length: int, num_slices: int, time_of) -> tuple[int, ...]:
    """The mesh's slices as ltsim placed them before 2026-11-24: bisection per boundary."""
    num_slices = max(1, min(num_slices, length))
    whole = time_of((Slice(0, 0, length),))
    bounds = [0]
    for i in range(1, num_slices):
        target = whole * i / num_slices
        lo, hi = bounds[-1] + 1, length - (num_slices - i)
        while lo < hi:
            mid = (lo + hi) // 2
            if time_of((Slice(0, 0, mid),)) >= target:
                hi = mid
            else:
                lo = mid + 1
        bounds.append(lo)
    bounds.append(length)
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


def main() -> None:
    lengths = [int(x) for x in sys.argv[1:]] or [1000, 4096, 65536, 300_000, 2_097_152]
    text = (ROOT / "scenarios" / "quickstart.toml").read_text()
    with tempfile.TemporaryDirectory() as tmp:  # the quickstart with InfiniPipe's default options
        path = Path(tmp) / "infinipipe.toml"
        path.write_text("\n".join(line for line in text.replace(
            'name = "chunkflow"', 'name = "infinipipe"').splitlines()
            if not line.startswith(("chunk_size", "k = ", "packing", "order"))))
        scenario = load_scenario(path)
    ctx = PlanContext(model=scenario.model, parallel=scenario.parallel,
                      cost=make_cost_model(scenario))
    costs = StageCosts(ctx.cost, ulysses_layout(ctx), uncheckpointed_keep(ctx, NAME, "milp"))
    calls = [0]

    def counted(slices):
        calls[0] += 1
        return costs.chunk_time(slices)

    print("| tokens | boundaries | differ | calls, bisection | calls, first_reaching |")
    print("|---:|---:|---:|---:|---:|")
    for length in lengths:
        differ, boundaries, made = 0, 0, [0, 0]
        for n in range(1, 65):
            calls[0] = 0
            before = bisection_mesh(length, n, counted)
            made[0] += calls[0]
            calls[0] = 0
            after = mesh(length, n, counted).slices
            made[1] += calls[0]
            differ += before != after
            boundaries += len(after) - 1
        print(f"| {length:,} | {boundaries:,} | {differ} | {made[0]:,} | {made[1]:,} |", flush=True)


if __name__ == "__main__":
    main()
