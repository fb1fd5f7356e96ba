"""The notebooks shipped in notebooks/ run from top to bottom in a real Jupyter kernel.

Each notebook is executed by nbclient in a fresh working directory (what it writes stays
there), with matplotlib on the Agg backend and a time limit per cell. The notebooks are kept
in git without outputs.
"""

import json
import os
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
#: seconds a single cell may take (the whole of every notebook takes well under a minute)
CELL_TIMEOUT = 180


def prepend(monkeypatch, variable: str, entry: str) -> None:
    monkeypatch.setenv(variable, os.pathsep.join(filter(None, [entry, os.environ.get(variable)])))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    # the kernel inherits this environment: no windows, and this interpreter's packages
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the "python3" kernel of this environment first, ahead of any user-wide one
    prepend(monkeypatch, "JUPYTER_PATH", os.path.join(sys.prefix, "share", "jupyter"))
    prepend(monkeypatch, "PYTHONPATH", str(path.parent.parent))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        startup_timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError naming the cell and its traceback
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                assert cell.get("outputs") == [] and cell.get("execution_count") is None, (
                    f"{path.name}: clear the outputs before committing (Kernel > Restart & Clear Output)"
                )


def test_the_four_notebooks_are_there():
    names = {path.stem for path in NOTEBOOKS}
    assert {"quickstart", "xarray-weather", "dask-parallel", "sharding"} <= names, names
