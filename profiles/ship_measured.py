"""Ship a profile measured on one H100 as profiles/h100-sxm5-80gb (the preset's default).

    python profiles/ship_measured.py MEASURED_DIR [--out profiles/h100-sxm5-80gb]

MEASURED_DIR is what `ltsim profile --device cuda` wrote on a one-GPU machine. Its tables are
copied unedited; added, and marked in meta.json:
- collectives.csv from profiles/h100-sxm5-80gb-public (published data: one GPU cannot measure
  collectives);
- the published fa2 and fa3 attention rows of h100-sxm5-80gb-public appended to attention.csv as
  kernels of their own (``hardware.attention_kernel``); the measured kernel stays the default.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "profiles" / "h100-sxm5-80gb-public"


def ship(measured: Path, out: Path) -> Path:
    meta = json.loads((measured / "meta.json").read_text())
    if "collectives" in {p.stem for p in measured.glob("*.csv")}:
        raise SystemExit(f"{measured} has measured collectives; ship it as it is")
    out.mkdir(parents=True, exist_ok=True)
    for old in (*out.glob("*.csv"), out / "meta.json"):  # README.md stays
        old.unlink(missing_ok=True)
    for table in sorted(measured.glob("*.csv")):
        if not table.name.endswith(".partial.csv"):
            shutil.copy2(table, out / table.name)
    shutil.copy2(PUBLIC / "collectives.csv", out / "collectives.csv")
    public_meta = json.loads((PUBLIC / "meta.json").read_text())
    attention = pd.read_csv(measured / "attention.csv")
    published = pd.read_csv(PUBLIC / "attention.csv")
    published = published[published["kernel"].isin(["fa2", "fa3"])]
    pd.concat([attention, published], ignore_index=True).to_csv(out / "attention.csv", index=False)

    tables = meta["tables"]
    measured_kernel = tables["attention"]["kernel"]
    tables["attention"] |= {
        "method": "mixed", "rows": len(attention) + len(published),
        "kernels": {measured_kernel: "measured (default): what ltsim's executor runs; rows with "
                    "context (q < kv) ran kernels.context_attention (mask column) and are looked "
                    "up as their own kernel, '+context'",
                    "fa3": "published, copied from profiles/h100-sxm5-80gb-public (FlashAttention-3 "
                    "paper Figs 5-6)",
                    "fa2": "published, copied from profiles/h100-sxm5-80gb-public (FlashAttention-2 "
                    "bars of the FA3 paper)"}}
    tables["collectives"] = {**public_meta["tables"]["collectives"], "copied_from":
                             "profiles/h100-sxm5-80gb-public/collectives.csv (not measured on this "
                             "machine)"}
    meta["method"] = "mixed"
    meta["notes"] = (f"Measured on one {meta['device']} by `{meta['command']}` on {meta['date'][:10]}"
                     f"; shipped by profiles/ship_measured.py. collectives.csv is NOT measured (one "
                     "GPU): copied from profiles/h100-sxm5-80gb-public (published data), marked in "
                     "tables.collectives. attention.csv also holds the published fa2/fa3 rows of "
                     "that profile as kernels of their own. The profiler's own note: "
                     + meta["notes"])
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "profiles" / "h100-sxm5-80gb")
    args = parser.parse_args(argv)
    print(ship(args.measured, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
