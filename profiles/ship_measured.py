"""Ship a profile measured on one H100 as profiles/h100-sxm5-80gb (the preset's default).

    python profiles/ship_measured.py MEASURED_DIR [--out profiles/h100-sxm5-80gb]

MEASURED_DIR is what `ltsim profile --device cuda` wrote on a one-GPU machine. Its tables are
copied unedited; added, and marked in meta.json:
- collectives.csv from profiles/h100-sxm5-80gb-public (published data: one GPU cannot measure
  collectives);
- the published fa2 and fa3 attention rows of h100-sxm5-80gb-public appended to attention.csv as
  kernels of their own (``hardware.attention_kernel``); the measured kernel stays the default;
- kernel ``torch_sdpa_boolmask``, SDPA with a boolean mask for slices with context (ltsim's
  executor up to 1acdf9d, which ran the H100 development set): its context rows measured on
  2026-11-22 (validation/profiles/h100-2026-11-22, ``--bool-mask``), its diagonal the measured
  kernel's is_causal rows (the same call).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from ltsim.profiles import SDPA_BOOL_MASK_KERNEL, SDPA_KERNEL  # noqa: E402

PUBLIC = ROOT / "profiles" / "h100-sxm5-80gb-public"
BOOL_MASK = ROOT / "validation" / "profiles" / "h100-2026-11-22"


def bool_mask_rows(attention: pd.DataFrame, older: Path) -> pd.DataFrame:
    """Kernel SDPA_BOOL_MASK_KERNEL: the diagonal (is_causal) rows of the measured SDPA kernel,
    and the boolean-mask context rows of the profile in ``older``."""
    diagonal = attention[(attention["kernel"] == SDPA_KERNEL) & (attention["mask"] == "is_causal")]
    masked = pd.read_csv(older / "attention.csv")
    masked = masked[(masked["kernel"] == SDPA_KERNEL) & (masked["mask"] == "bool_bottom_right")]
    date = json.loads((older / "meta.json").read_text())["date"][:10]
    return pd.concat([diagonal.assign(source=f"the {SDPA_KERNEL} is_causal row (the same call)"),
                      masked.assign(source=f"measured {date}: {older.relative_to(ROOT)}")],
                     ignore_index=True).assign(kernel=SDPA_BOOL_MASK_KERNEL)


def ship(measured: Path, out: Path, bool_mask: Path = BOOL_MASK) -> Path:
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
    masked = bool_mask_rows(attention, bool_mask)
    pd.concat([attention, published, masked], ignore_index=True).to_csv(out / "attention.csv",
                                                                        index=False)

    tables = meta["tables"]
    measured_kernel = tables["attention"]["kernel"]
    tables["attention"] |= {
        "method": "mixed", "rows": len(attention) + len(published) + len(masked),
        "kernels": {measured_kernel: "measured (default): what ltsim's executor runs; rows with "
                    "context (q < kv) ran kernels.context_attention (mask column) and are looked "
                    "up as their own kernel, '+context'",
                    "fa3": "published, copied from profiles/h100-sxm5-80gb-public (FlashAttention-3 "
                    "paper Figs 5-6)",
                    "fa2": "published, copied from profiles/h100-sxm5-80gb-public (FlashAttention-2 "
                    "bars of the FA3 paper)",
                    SDPA_BOOL_MASK_KERNEL: "SDPA with a boolean bottom-right mask for slices with "
                    "context (ltsim's executor up to 1acdf9d; the H100 development set): context "
                    f"rows measured by ltsim's profiler at 1acdf9d ({bool_mask.relative_to(ROOT)}, "
                    "launches timed with the kernel, mask built and K/V copied in the call), "
                    f"diagonal rows the {SDPA_KERNEL} is_causal rows"}}
    tables["collectives"] = {**public_meta["tables"]["collectives"], "copied_from":
                             "profiles/h100-sxm5-80gb-public/collectives.csv (not measured on this "
                             "machine)"}
    meta["method"] = "mixed"
    meta["notes"] = (f"Measured on one {meta['device']} by `{meta['command']}` on {meta['date'][:10]}"
                     f"; shipped by profiles/ship_measured.py. collectives.csv is NOT measured (one "
                     "GPU): copied from profiles/h100-sxm5-80gb-public (published data), marked in "
                     "tables.collectives. attention.csv also holds the published fa2/fa3 rows of "
                     "that profile as kernels of their own, and the boolean-mask SDPA kernel "
                     f"{SDPA_BOOL_MASK_KERNEL} (tables.attention.kernels). The profiler's own note: "
                     + meta["notes"])
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "profiles" / "h100-sxm5-80gb")
    parser.add_argument("--bool-mask", type=Path, default=BOOL_MASK,
                        help="a profile whose attention.csv has bool_bottom_right rows")
    args = parser.parse_args(argv)
    print(ship(args.measured, args.out, args.bool_mask.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
