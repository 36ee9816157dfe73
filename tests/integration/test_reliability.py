"""First contact: every bad input answered with one clear line and exit 2, and a plain install works.

The bad inputs are the declarative cases of validation/reliability/run_bad_inputs.py (the script
that writes validation/reliability.md); here each runs in-process through ``ltsim.cli.main``.
Time is asserted only as a hang guard (20 s); the 5 s answer time is measured in the .md table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from ltsim.cli import main

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "run_bad_inputs", REPO / "validation" / "reliability" / "run_bad_inputs.py")
bad = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("run_bad_inputs", bad)  # dataclasses look their module up there
_spec.loader.exec_module(bad)


def test_the_table_covers_every_category():
    assert len(bad.CASES) >= 60
    categories = {c.category for c in bad.CASES}
    assert categories >= {
        "parallel degrees", "seed", "scenario file", "profile tables", "--db", "--grid",
        "size guard", "ltsim check", "layout", "strategy", "wrong type", "--set syntax",
        "length file", "--executor", "workload describe", "needs torch"}


@pytest.mark.parametrize("case", bad.CASES, ids=lambda c: f"{c.category}: {c.command[:60]}")
def test_bad_input_gets_one_line_and_exit_2(case, tmp_path, capsys):
    bad.prepare(case, tmp_path)
    started = time.perf_counter()
    code = bad.run_in_process(case, tmp_path)
    seconds = time.perf_counter() - started
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert case.names in lines[0], lines[0]
    assert "Fix:" in lines[0], lines[0]  # the rule, the value, and what to do about it
    assert bad.SECRET not in out + err  # never the content of a file it was pointed at
    assert seconds < 20  # a hang guard only


def test_one_bad_grid_point_is_a_failed_row(capsys):
    argv = ["sweep", "scenarios/quickstart.toml", "--grid", "parallel.pp=1,2,0", "--json"]
    assert main(argv) == 0
    rows = {r["parallel.pp"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[1]["iteration_time_s"] > 0 and rows[2]["iteration_time_s"] > 0
    assert "parallel.pp must be a positive integer (got 0)" in rows[0]["error"]


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages (to map profiles/ and scenarios/ into the wheel); a new
    subpackage must be added there, or `pip install .` would leave it out."""
    import tomllib

    from setuptools import find_namespace_packages

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set(find_namespace_packages(str(REPO), include=["ltsim*"]))
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == {"ltsim._profiles", "ltsim._scenarios"}


def test_a_plain_wheel_ships_the_profiles_and_scenarios(tmp_path):
    """`pip wheel .` (not editable) holds every bundled profile's meta.json and the scenarios.

    Built from a copy of the sources, so the checkout gets no build/ folder."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.partial.csv", "*.csv.tmp")
    for name in ("ltsim", "profiles", "scenarios"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("ltsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    profiles = sorted(p.parent.name for p in (REPO / "profiles").glob("*/meta.json"))
    assert profiles and all(f"ltsim/_profiles/{p}/meta.json" in names for p in profiles)
    assert all(f"ltsim/_profiles/{p}/gemm.csv" in names for p in profiles)
    assert "ltsim/_scenarios/quickstart.toml" in names
    assert "ltsim/_scenarios/examples/chunkflow-fig2-baseline.toml" in names
    assert "ltsim/data/wikipedia_seqlens.npz" in names


def test_bundled_scenarios_are_found_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "scenarios/examples/chunkflow-fig2-baseline.toml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > 0


def test_a_path_with_a_newline_stays_on_one_line(tmp_path, capsys):
    (tmp_path / "f.txt\n").write_text("x\n")
    fig6 = str(REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml")
    assert main(["simulate", fig6, "--trace", f"{tmp_path}/f.txt\n/t.json"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "--trace" in lines[0] and "Fix:" in lines[0]


@pytest.mark.skipif(bool(shutil.which("xelatex")), reason="xelatex installed: .pgf can be written")
def test_a_pgf_plot_without_tex_is_refused_before_the_work(tmp_path, capsys):
    fig6 = str(REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml")
    assert main(["simulate", fig6, "--plot", str(tmp_path / "g.pgf")]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "xelatex" in err and "Fix:" in err


def test_an_unknown_mplbackend_is_a_message_not_a_traceback(tmp_path):
    fig6 = str(REPO / "scenarios/examples/chunkflow-fig6-cs2-k1.toml")
    proc = subprocess.run([sys.executable, "-m", "ltsim", "simulate", fig6, "--plot",
                           str(tmp_path / "g.png")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "nosuchbackend"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "MPLBACKEND" in proc.stderr and "Fix:" in proc.stderr
