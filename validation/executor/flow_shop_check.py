"""Host/GPU overlap models against whole executor ops measured on the H100 (gpu_notes.md, "Left").
Not a test: prints a markdown table.

    python validation/executor/flow_shop_check.py

For the ops of `op_kernels-h100.json` (a middle stage of 4 Llama-2-7B layers, one sequence of
256-8192 tokens; B = FB - F), it sets the measured wall time beside three models, each from the
`h100-sxm5-80gb` profile alone (kernels K from its tables, host floor a + L b from its eager.csv):

- ``max``: ltsim's rule, max(K, a + L b): the host hides behind long kernels;
- ``flow-shop``: a two-stage flow shop at layer granularity: the host issues layer l by
  a + l b, the GPU runs it (K / L) after the host has issued it and after layer l - 1:
  a + max(b + K, L b + K / L);
- ``lead-in``: a + K, the GPU idle while the host does the op's own part.

Nothing here is fitted: every term is a profile row.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ltsim.costs.table import TableCostModel  # noqa: E402
from ltsim.hardware import ClusterSpec, get_device  # noqa: E402
from ltsim.model import get_model  # noqa: E402
from ltsim.plan import OpKind, Slice, Split, Work  # noqa: E402

LAYERS = 4


def main() -> None:
    data = json.loads((Path(__file__).with_name("op_kernels-h100.json")).read_text())
    spec = dataclasses.replace(get_model(data["meta"]["model"]), num_layers=LAYERS + 2)
    cluster = ClusterSpec(device=get_device("h100-sxm5-80gb"), num_nodes=1, gpus_per_node=1)
    compute = TableCostModel(spec, cluster, grad_dtype="model")._compute
    measured = {(r["op"], r["tokens"]): (r["wall_s"], r["kernels_s"]) for r in data["rows"]}
    print("| op | tokens | wall (ms) | kernels alone (ms) | K (ms) | floor a + L b (ms) | max | "
          "flow-shop | lead-in |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, name in ((OpKind.F, "F"), (OpKind.B, "B")):
        a, b = compute._floor.parts[name]
        for tokens in sorted({t for _, t in measured}):
            wall, kernels = measured[("F", tokens)]
            if name == "B":
                fb_wall, fb_kernels = measured[("FB", tokens)]
                wall, kernels = fb_wall - wall, fb_kernels - kernels
            work = Work(chunk=0, slices=(Slice(0, 0, tokens),), layers=(1, 1 + LAYERS),
                        split=Split())
            k = compute._kernels_s(kind, work, "")
            models = (max(k, a + LAYERS * b),
                      a + max(b + k, LAYERS * b + k / LAYERS),
                      a + k)
            cells = " | ".join(f"{1e3 * m:.2f} ({100 * (m / wall - 1):+.0f}%)" for m in models)
            print(f"| {name} | {tokens} | {1e3 * wall:.2f} | {1e3 * kernels:.2f} | {1e3 * k:.2f} | "
                  f"{1e3 * (a + LAYERS * b):.2f} | {cells} |")


if __name__ == "__main__":
    main()
