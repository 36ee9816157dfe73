"""Every `ltsim ...` command in README.md's ```bash blocks runs and exits 0 (in-process, cwd = repo).

Output files the commands name (out/gantt.png, out/trace.json, out/sweep.sqlite, ...) are
redirected into tmp_path by their file name, so the tour leaves nothing in the checkout (a
stored out/sweep.sqlite would also make the next run resume from it).

Skipped, and why:
- ``ltsim profile ...``: measures this machine's kernels for minutes (tests/integration/
  test_profiler.py covers the profiler with a tiny run);
- ``ltsim validate ...``: runs the executor on CPU for a minute or more (tests/integration/
  test_executor.py covers it).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ltsim.cli import main

REPO = Path(__file__).resolve().parents[2]
SKIP = {"profile": "measures kernels for minutes (test_profiler.py covers it)",
        "validate": "runs the executor for a minute or more (test_executor.py covers it)"}
OUTPUT = re.compile(r"^[\w./-]+\.(png|json|sqlite|csv)$")  # an output file the README names


def readme_commands() -> list[list[str]]:
    """argv of every `ltsim` command in the README's bash blocks (continuations joined, comments
    dropped, `a && b && ltsim ...` reduced to its ltsim part)."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while "&&" in words:
                words = words[words.index("&&") + 1:]
            if words[:1] == ["ltsim"]:
                commands.append(words[1:])
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_a_tour():
    assert len(COMMANDS) >= 10
    assert {argv[0] for argv in COMMANDS} >= {"simulate", "compare", "sweep", "workload", "check"}


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a)[:70])
def test_readme_command_runs(argv, tmp_path, monkeypatch, capsys):
    if argv[0] in SKIP:
        pytest.skip(f"ltsim {argv[0]}: {SKIP[argv[0]]}")
    monkeypatch.chdir(REPO)
    argv = [str(tmp_path / Path(a).name) if OUTPUT.match(a) else a for a in argv]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    for a in argv:
        if a.startswith(str(tmp_path)) and not a.endswith(".sqlite"):
            assert Path(a).stat().st_size > 0
