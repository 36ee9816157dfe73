"""Build profiles/h200, the h200 preset's default: the measured H100 tables with H200 collectives.

    python profiles/build_h200.py

The H200 is the H100's GH100 compute (the same SMs and clocks; ml-engineering's MAMF table: "H200
is the same") with 141 GB of HBM3e at 4.8 TB/s, and the same hosts (DGX H200). So its kernels,
host/dispatch floors and optimizer step are priced with the tables measured on an H100
(profiles/h100-sxm5-80gb, the h100 preset's default: ``ltsim profile --device cuda``), copied
unedited, and its collectives are h200-public's (ml-engineering's 8 x H200 measurements, built by
``python profiles/build_public.py --only h200``). Until 2026-11-25 the h200 preset read only
public-data tables (published FlashAttention-3 kernels, no eager floors) while the h100 preset
read measured ones, so comparing the two presets compared the two kinds of table: 0.78 s on H200
against 1.04 s on H100 for the quickstart. The faster HBM3e is ignored: memory-bound kernels
(elementwise, small GEMMs) are priced at H100 speed, so they are pessimistic here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "profiles" / "h100-sxm5-80gb"
PUBLIC = ROOT / "profiles" / "h200-public"
OUT = ROOT / "profiles" / "h200"


def build(measured: Path = MEASURED, public: Path = PUBLIC, out: Path = OUT) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for old in (*out.glob("*.csv"), out / "meta.json"):
        old.unlink(missing_ok=True)
    for table in sorted(measured.glob("*.csv")):
        if table.name != "collectives.csv":
            shutil.copy2(table, out / table.name)
    shutil.copy2(public / "collectives.csv", out / "collectives.csv")
    meta = json.loads((measured / "meta.json").read_text())
    h200 = json.loads((public / "meta.json").read_text())
    tables = {name: {**info, "borrowed": f"all rows from profiles/{measured.name} (measured on an "
                     "H100: the same GH100 compute and host; the faster HBM3e is ignored)"}
              for name, info in meta["tables"].items() if name != "collectives"}
    tables["collectives"] = {**h200["tables"]["collectives"],
                             "copied_from": f"profiles/{public.name}/collectives.csv"}
    meta.update(
        device=h200["device"], memory_bytes=h200["memory_bytes"], tables=tables,
        command="python profiles/build_h200.py",
        notes=(f"The h200 preset's default. Every table but collectives.csv is profiles/"
               f"{measured.name}'s, measured on one H100 ({meta['date'][:10]}: {meta['command']}), "
               "copied unedited: the H200 has the H100's compute and hosts. collectives.csv is "
               f"profiles/{public.name}'s (ml-engineering's 8 x H200 collectives). HBM3e's 4.8 "
               "TB/s (3.35 on H100) is ignored: memory-bound kernels are priced at H100 speed. "
               f"Public data only: profiles/{public.name}."))
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    print(f"wrote {build()}")
