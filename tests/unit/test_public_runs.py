"""llm-foundry's MPT runs (validation/costs/public_runs.py): every one ran on its GPUs, so ltsim
must find that each fits. A check that can fail on memory: sixteen did not before the runs' fused
cross entropy was modelled (validation/costs/public-runs.md)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from ltsim.runner import run

HERE = Path(__file__).resolve().parents[2] / "validation" / "costs"
_SPEC = importlib.util.spec_from_file_location("public_runs", HERE / "public_runs.py")
public_runs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(public_runs)


def test_every_public_run_fits():
    with open(HERE / "llmfoundry-runs.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["table_title"] in public_runs.TABLES
                and r["model"] in public_runs.SHAPES and r["num_gpus"] == "8"]
    assert len(rows) == 33
    over = []
    for row in rows:
        result = run(public_runs.scenario(row)).result.to_dict()
        if not result["fits"]:
            over.append((row["table_title"][:4], row["model"], row["seq_len"],
                         row["micro_batch_size"], round(result["peak_memory_bytes"] / 2**30, 1)))
    assert over == []
