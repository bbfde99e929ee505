"""Every tutorial notebook runs top to bottom, with its schedules shrunk as the executed docs'
are (:func:`tests.helpers.with_tiny_settings`; the stored outputs are the full run's)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers import with_tiny_settings

NOTEBOOKS = sorted((Path(__file__).parent.parent / "tutorials").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = with_tiny_settings(cell.source)
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]


def test_there_is_a_tutorial():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_with_its_outputs_and_figures(path):
    """Readers open the stored notebook (python tutorials/execute.py writes it): outputs and
    figures are there, and they carry no machine's paths and no warnings."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [output for cell in code for output in cell.outputs]
    assert outputs and all(cell.execution_count for cell in code), "not executed"
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, "no figure stored"
    text = str(outputs)
    for leak in ("/root/", "/tmp/", "/work/", "/home/", "Warning", "Traceback"):
        assert leak not in text, leak
