"""Architecture rules of DESIGN.md section 3: import direction, a fast torch-free core, module sizes;
only the command line prints (STYLE.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "ltsim"

# Lower numbers sit lower; a module may import only modules of a lower or equal level.
LEVELS = {
    "errors": 0, "units": 0, "gcpause": 0, "files": 0,
    "model": 1, "workload": 1, "datasets": 1, "length_files": 1, "hardware": 1, "parallel": 1,
    "plan": 1, "work": 1, "plan_check": 1, "chunk_check": 1, "trace": 1, "mirrors": 1,
    "optable": 1, "interned": 1,
    "profiles": 2, "profile_files": 2, "profile_checks": 2, "profile_paths": 2, "lookup": 2, "collectives": 2,
    "profile_cache": 2,
    "memory": 3, "costs": 3,
    "strategies": 4, "sim": 5,
    "scenario": 6, "overrides": 6, "planner": 6, "grid": 6, "maxlen": 6, "runner": 6,
    "sweepstore": 6,
    "check": 6,
    "report": 7, "viz": 7, "viz_sweep": 7, "viz_maxlen": 7, "validate": 7, "export": 7,
    "cli": 8, "cli_parser": 8, "cli_paths": 8, "cli_progress": 8, "cli_strategies": 8,
    "cli_sweep": 8, "cli_device": 8,
    "__main__": 8, "__init__": 8,
}
# They may import anything below strategies; the core imports them never at module level, and
# inside functions only from above strategies (DESIGN.md: "nothing in the core imports them ...
# at module top"; validate runs the executor, cli the profiler).
SIDE = {"profiler", "executor"}


# The only modules that print or write to sys.stdout / sys.stderr: the command line.
PRINTERS = {"cli.py", "cli_progress.py", "cli_sweep.py", "cli_device.py"}
# Functions that are command-line entry points without being in cli.py; each may import the
# command line (ltsim.cli and its cli_* modules).
# ltsim/profiler/__main__.py is `python -m ltsim.profiler`: the front end's profile command.
ENTRY_POINTS = {("profiler/__main__.py", "")}


def _top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    function: str  # the enclosing function's name; "" at module level (a class body included)


def _imports(path: Path) -> list[Import]:
    """Every ltsim import, at module level or inside functions (lazy); not under TYPE_CHECKING."""
    out: list[Import] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub, function)
                continue
            if isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path.name}:{child.lineno}: use absolute ltsim imports"
                if child.module and child.module.startswith("ltsim"):
                    out.append(Import(child.module, child.lineno, function))
            elif isinstance(child, ast.Import):
                out.extend(Import(a.name, child.lineno, function) for a in child.names
                           if a.name.startswith("ltsim"))
            inner = (child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                     else "<lambda>" if isinstance(child, ast.Lambda) else function)
            visit(child, inner)

    visit(ast.parse(path.read_text()), "")
    return out


def _name(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


MODULES = sorted(p for p in PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_import_direction(path):
    """LEVELS for every import, lazy ones included. profiler/ and executor/ (SIDE) sit beside
    strategies: they import only below it, and the core imports them only inside functions from
    above it (the command line, validate)."""
    me, rel = _name(path), str(path.relative_to(PKG))
    assert me in LEVELS or me in SIDE, f"{rel} has no level in this test"
    problems = []
    for imp in _imports(path):
        where = f"{rel}:{imp.line} imports {imp.module}" + (
            f" (in {imp.function})" if imp.function else "")
        target = _top(imp.module) or "__init__"
        if target.startswith("cli") and (rel, imp.function) in ENTRY_POINTS:
            continue
        if target in SIDE:
            if me in SIDE:
                continue
            if not imp.function:
                problems.append(f"{where}: the core must not import {target}/ at module level")
            elif LEVELS[me] <= LEVELS["strategies"]:
                problems.append(f"{where}: only modules above strategies may import {target}/")
            continue
        if target not in LEVELS:
            problems.append(f"{where}: {target} has no level in this test")
        elif me in SIDE:
            if LEVELS[target] >= LEVELS["strategies"]:
                problems.append(f"{where}: {me}/ may import only modules below strategies")
        elif LEVELS[target] > LEVELS[me]:
            problems.append(f"{where}: level {LEVELS[me]} imports level {LEVELS[target]}")
    assert not problems, "\n".join(problems)


STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}


def _writes_output(path: Path) -> list[str]:
    """Calls to print and uses of sys.stdout / sys.stderr (also via ``from sys import ...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{node.lineno}: print(...)")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "sys" and node.attr in STREAMS):
            found.append(f"{node.lineno}: sys.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            found += [f"{node.lineno}: from sys import {a.name}" for a in node.names
                      if a.name in STREAMS]
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if str(p.relative_to(PKG)) not in PRINTERS],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_only_the_command_line_prints(path):
    """Library modules return values and strings; ltsim/cli.py prints them (STYLE.md)."""
    found = _writes_output(path)
    assert not found, f"{path.relative_to(PKG)} writes output: " + "; ".join(found)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path):
    assert len(path.read_text().splitlines()) <= 600, f"{path.name} passes 600 lines; split it"


def test_import_is_light():
    code = ("import sys, ltsim, ltsim.runner, ltsim.cli, ltsim.viz\n"
            "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_simulating_with_a_profile_does_not_import_pandas():
    """pandas costs a third of a command's start-up; profile tables are read without it."""
    code = ("import sys\n"
            "from ltsim.runner import simulate\n"
            "from ltsim.scenario import load_scenario\n"
            "assert simulate(load_scenario('scenarios/quickstart.toml')).batches\n"
            "assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PKG.parent)
