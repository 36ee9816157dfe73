"""The tutorial notebooks under notebooks/ run top to bottom without an error, on bundled data only.

Each notebook is executed with nbclient in a fresh ``python3`` kernel (ipykernel's, which
jupyter_client starts with this interpreter), from the repository root so that relative paths like
``scenarios/...`` resolve. A notebook whose metadata lists ``ltsim.needs`` (modules such as torch)
is skipped where one is missing, as the executor's own tests are. Notebooks are stored without
outputs; ``test_notebook_is_saved_without_outputs`` keeps them so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3, f"expected at least 3 notebooks in {ROOT / 'notebooks'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_saved_without_outputs(path: Path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown", "the first cell says what the notebook shows"
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"cells {dirty} have outputs: clear them before saving"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    needs = nb.metadata.get("ltsim", {}).get("needs", [])
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{path.name} needs {', '.join(missing)}")
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    errors = [o for cell in nb.cells for o in cell.get("outputs", []) if o.output_type == "error"]
    assert not errors
