"""The quickstart notebook runs top to bottom, as a user would run it."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

pytestmark = pytest.mark.spark


def test_quickstart_runs_top_to_bottom(tmp_path):
    notebook = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "1000 rows" in printed
    assert "'ACKED'" in printed
    assert "10 dead letters: ['invalid JSON']" in printed
    assert "worker 200 + query 400 records, 600 distinct" in printed
    assert "payments lag: {0: 150, 1: 150}" in printed
