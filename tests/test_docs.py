"""The architecture page's examples run as written, in order, in one namespace."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_architecture_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    namespace = {"__name__": "docs_architecture"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 (our own documentation)


def test_every_public_name_has_its_place_in_the_api_pages():
    """A page per subpackage under the names users import, and every top-level name on the
    top-level page (linked or documented there)."""
    import pyro_cl

    api = DOC.parent / "api"
    for package in ("nn", "data", "learner", "fitters", "transitions", "memory", "guides"):
        assert f".. automodule:: pyro_cl.{package}\n" in (api / f"{package}.rst").read_text()
    top = (api / "top_level.rst").read_text()
    for name in pyro_cl.__all__:
        if not isinstance(getattr(pyro_cl, name), type(pyro_cl)):  # subpackages have pages
            assert f"pyro_cl.{name}" in top, name
