"""Every bundled scenario's Result, one batch each, for a before/after check of a speed change (issue
13: "simulation results identical to before"). Not a test.

    python validation/perf/same_results.py OUT.json                 # in each checkout
    python validation/perf/same_results.py --compare BEFORE.json AFTER.json [--rel 1e-12]

It runs against the ltsim of the checkout it sits in (as bench_engine.py). The comparison ignores
``planner_s`` (the planners' own wall time) and prints every other field that differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def results(out: Path) -> None:
    from ltsim.errors import LtsimError
    from ltsim.runner import simulate
    from ltsim.scenario import load_scenario

    found = {}
    for path in sorted((ROOT / "scenarios").rglob("*.toml")):
        name = str(path.relative_to(ROOT))
        try:
            result = simulate(load_scenario(path, ["workload.num_batches=1"])).to_dict()
        except LtsimError as error:
            found[name] = f"{type(error).__name__}: {error}"
            continue
        result.get("strategy_options", {}).pop("planner_s", None)
        found[name] = result
    out.write_text(json.dumps(found, indent=1, sort_keys=True, default=str))
    print(f"{len(found)} scenarios -> {out}")


def _close(x, y, rel: float) -> bool:
    """Equal, or floats within ``rel`` of each other (relative)."""
    if isinstance(x, float) and isinstance(y, float):
        return abs(x - y) <= rel * max(abs(x), abs(y))
    return x == y


def compare(before: Path, after: Path, rel: float = 0.0) -> None:
    """Print every scenario whose Result differs; with ``rel`` > 0, top-level float fields within
    that relative difference count as equal (and the largest such difference is printed)."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    same = 0
    largest = 0.0
    for name in sorted(a.keys() | b.keys()):
        x, y = a.get(name), b.get(name)
        if x == y:
            same += 1
        elif isinstance(x, dict) and isinstance(y, dict):
            differ = {k: (x.get(k), y.get(k)) for k in x.keys() | y.keys()
                      if not _close(x.get(k), y.get(k), rel)}
            for k in x.keys() & y.keys():
                u, v = x[k], y[k]
                if isinstance(u, float) and isinstance(v, float) and u != v:
                    largest = max(largest, abs(u - v) / max(abs(u), abs(v)))
            if differ:
                print(name, differ)
            else:
                same += 1
        else:
            print(name, x, "->", y)
    print(f"identical{f' (floats within {rel:g} relative)' if rel else ''}: {same} of "
          f"{len(a.keys() | b.keys())}" + (f"; largest float difference {largest:.1e} relative"
                                           if rel else ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--rel", type=float, default=0.0,
                        help="with --compare: floats within this relative difference are equal")
    args = parser.parse_args()
    if args.compare:
        compare(*args.paths[:2], rel=args.rel)
    else:
        results(args.paths[0])


if __name__ == "__main__":
    main()
