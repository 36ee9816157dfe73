"""Every scenario under scenarios/ simulated by two checkouts of ltsim, one batch each, side by side.

Used to record what moved when the core v2 IR landed (validation/core-v2/README.md):

    git worktree add /tmp/ltsim-before 1acdf9d
    python validation/core-v2/compare_scenarios.py /tmp/ltsim-before . > /tmp/table.md

Each checkout runs in its own process (`python -c` with that checkout first on sys.path), so the
two versions of the package never mix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_RUN = r"""
import glob, json, os, sys
root = sys.argv[1]
sys.path.insert(0, root)
os.chdir(root)
import ltsim
out = {}
for path in sorted(glob.glob("scenarios/**/*.toml", recursive=True)):
    try:
        r = ltsim.simulate(ltsim.load_scenario(path, overrides=["workload.num_batches=1"])).to_dict()
        out[path] = [r["iteration_time_s"], r["peak_memory_bytes"], r["bubble_ratio"]]
    except Exception as exc:  # a scenario one version cannot run is reported, not fatal
        out[path] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
print(json.dumps(out))
"""


def results(root: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _RUN, str(Path(root).resolve())], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    before, after = results(sys.argv[1]), results(sys.argv[2])
    print("| scenario | iteration time (s) before -> after | peak memory | bubble ratio |")
    print("|---|---|---:|---|")
    for path, old in before.items():
        new = after.get(path)
        if isinstance(old, str) or isinstance(new, str):
            print(f"| `{path}` | {old if isinstance(old, str) else 'ok'} -> "
                  f"{new if isinstance(new, str) else 'ok'} | | |")
            continue
        dt = (new[0] - old[0]) / old[0] if old[0] else 0.0
        dm = (new[1] - old[1]) / old[1] if old[1] else 0.0
        print(f"| `{path}` | {old[0]:.4g} -> {new[0]:.4g} ({dt:+.2%}) | {dm:+.2%} | "
              f"{old[2]:.3f} -> {new[2]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
