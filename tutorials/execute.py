"""Execute every tutorial notebook top to bottom and store it with its outputs (figures included),
as readers open them:

    python tutorials/execute.py            # all notebooks
    python tutorials/execute.py NAME.ipynb  # some

Runs in a scratch folder, so files a notebook writes stay out of the repository; progress bars
are off (not a terminal) and warnings, which would print this machine's paths, fail the run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def execute(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        NotebookClient(
            notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": scratch}}
        ).execute()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.output_type == "stream" else ""
            if output.output_type == "error" or "Warning" in text or output.get("name") == "stderr":
                raise RuntimeError(f"{path.name}: a cell printed an error or warning:\n{text}")
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)
    print(f"{path.name}: stored with outputs")


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.name for p in HERE.glob("*.ipynb"))
    for name in names:
        execute(HERE / name)
