"""Sphinx configuration of pyro_cl's documentation site: ``make docs`` (warnings are errors)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyro_cl  # noqa: E402

project = "pyro_cl"
author = "the pyro_cl developers"
copyright = "2026, the pyro_cl developers"
release = pyro_cl.__version__
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_nb",
]
# Links into torch's, Pyro's, Python's and NumPy's own docs. Offline (a machine without those
# sites) the build falls back to an empty inventory: the names stay plain text, no warning.
_OFFLINE = "_inventories/offline.inv"
intersphinx_mapping = {
    name: (url, (None, _OFFLINE))
    for name, url in {
        "python": "https://docs.python.org/3",
        "torch": "https://docs.pytorch.org/docs/stable",
        "pyro": "https://docs.pyro.ai/en/stable",
        "numpy": "https://numpy.org/doc/stable",
    }.items()
}
intersphinx_timeout = 10
html_theme = "furo"
html_title = f"pyro_cl {release}"
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_inventories", "tutorials/execute.py", "**/.ipynb_checkpoints"]
nb_execution_mode = "off"  # the notebooks are stored with their outputs (tutorials/execute.py)
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False  # torch.autograd.Function's own docs link into torch's
# ref.python: a class is found under its module and its package
suppress_warnings = ["myst.header", "ref.python"]
