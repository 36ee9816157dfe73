"""Architecture rules of DESIGN.md section 3: import direction, a fast torch-free core, module sizes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "ltsim"

# Lower numbers sit lower; a module may import only modules of a lower or equal level.
LEVELS = {
    "errors": 0, "units": 0,
    "model": 1, "workload": 1, "datasets": 1, "hardware": 1, "parallel": 1, "plan": 1,
    "plan_check": 1,
    "profiles": 2, "lookup": 2,
    "memory": 3, "costs": 3, "costs_table": 3, "costs_comm": 3,
    "strategies": 4, "sim": 5,
    "scenario": 6, "planner": 6, "runner": 6, "sweepstore": 6, "check": 6,
    "report": 7, "viz": 7, "validate": 7,
    "cli": 8, "__main__": 8, "__init__": 8,
}
SIDE = {"profiler", "executor"}  # may import anything below strategies; nothing imports them


def _top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _module_level_imports(path: Path) -> list[str]:
    """ltsim imports at module level (not inside functions, not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("ltsim"):
                out.append(sub.module)
            elif isinstance(sub, ast.Import):
                out += [a.name for a in sub.names if a.name.startswith("ltsim")]
    return out


def _name(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


MODULES = sorted(p for p in PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_import_direction(path):
    me = _name(path)
    for module in _module_level_imports(path):
        target = _top(module) or "__init__"
        if target in SIDE:
            assert me in SIDE, f"{path.name} imports {module}: the core must not import {target}/"
            continue
        if me in SIDE:
            assert LEVELS[target] < LEVELS["strategies"], f"{me}/ may not import {module}"
            continue
        assert target in LEVELS, f"{module} imported by {path.name} has no level in this test"
        assert LEVELS[target] <= LEVELS[me], (
            f"{path.relative_to(PKG)} (level {LEVELS[me]}) imports {module} (level {LEVELS[target]})")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path):
    assert len(path.read_text().splitlines()) <= 600, f"{path.name} passes 600 lines; split it"


def test_import_is_light():
    code = ("import sys, ltsim, ltsim.runner, ltsim.cli, ltsim.viz\n"
            "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
