"""Predictions of a CPU validation's plans again, against the measurements it stored.

When the cost model changes, the executor measurements of ``cpu_validation.py`` (its results CSV)
still stand, but its predictions are those of the commit that ran it. This simulates every plan of
the CSV again with this checkout and a profile (no executor run, a few seconds) and prints the old
and new predictions, the errors, the Kendall tau-b and the OPT term:

    python validation/executor/repredict.py --csv validation/executor/cpu_results.csv \
        --profile profiles/cpu-ci
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cpu_validation import PLANS, SCENARIO, kendall_tau_b  # noqa: E402

from ltsim.runner import run  # noqa: E402
from ltsim.scenario import load_scenario  # noqa: E402
from ltsim.validate import bare_cost_model, kind_totals_s  # noqa: E402


def predict(label: str, profile: str) -> tuple[float, float]:
    """(iteration seconds, OPT busy seconds summed over devices) of one plan, as cpu_validation
    simulates it."""
    pp, strategy = PLANS[label]
    scenario = load_scenario(str(SCENARIO)).with_overrides({
        "hardware.profile": profile, "hardware.gpus_per_node": pp, "parallel.pp": pp,
        "strategy": dict(strategy), "workload.num_batches": 1})
    sim = run(scenario, cost=bare_cost_model(scenario))
    return sim.result.batches[0].iteration_time_s, kind_totals_s(sim.traces[0])["OPT"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--csv", required=True, help="a results CSV of cpu_validation.py")
    p.add_argument("--profile", required=True, help="the profile that validation used")
    args = p.parse_args(argv)
    with open(args.csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    print("| plan | measured ms | predicted ms, then | error | predicted ms, now | error | "
          "OPT ms then / now / measured |")
    print("|---|---:|---:|---:|---:|---:|---|")
    old, new, measured = [], [], []
    for row in rows:
        meas, before = float(row["meas_s"]), float(row["pred_s"])
        now, opt = predict(row["plan"], args.profile)
        old.append(before), new.append(now), measured.append(meas)
        print(f"| {row['plan']} | {meas * 1e3:.1f} | {before * 1e3:.1f} | "
              f"{100 * (meas - before) / meas:+.1f}% | {now * 1e3:.1f} | "
              f"{100 * (meas - now) / meas:+.1f}% | {float(row['pred_OPT']) * 1e3:.1f} / "
              f"{opt * 1e3:.1f} / {float(row['meas_OPT']) * 1e3:.1f} |")
    for name, pred in (("then", old), ("now", new)):
        errors = [abs(m - x) / m for m, x in zip(measured, pred)]
        print(f"\n{name}: median |time error| {100 * statistics.median(errors):.1f}% (max "
              f"{100 * max(errors):.1f}%), Kendall tau-b {kendall_tau_b(pred, measured):.3f} over "
              f"{len(pred)} plans", end="")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
