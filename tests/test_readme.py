"""Every Python block of README.md and of the guide's pages (docs/guide/*.md) runs as written:
each in a fresh interpreter, in a folder holding small stand-in data sets in the standard layouts
(MNIST, UCI energy, NOAA weather), with the long schedules shrunk by the substitutions below (and
nothing else changed). The README's first example promises a run of under a minute: its
settings are checked to stay that small."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import write_fake_mnist

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]
#: The tiny-settings override: every schedule and sample count becomes small.
TINY = [
    (r"\b(\w*epochs)=[\d_]+", r"\1=1"),
    (r"\bnum_particles=[\d_]+", "num_particles=2"),
    (r"\bnum_term_samples=[\d_]+", "num_term_samples=10"),
    (r"\bnum_predictive_samples=[\d_]+", "num_predictive_samples=5"),
    (r"\bnum_samples=[\d_]+", "num_samples=5"),
    (r"\brange\(100\)", "range(3)"),
]


def python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


#: (page, its block) for every page, in order.
BLOCKS = [(page, block) for page in PAGES for block in python_blocks(page)]


def tiny(code: str) -> str:
    for pattern, replacement in TINY:
        code = re.sub(pattern, replacement, code)
    return code


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory) -> Path:
    """``data/``: 200 MNIST stand-ins, UCI energy's files (150 rows), 1,300 days of weather."""
    folder = tmp_path_factory.mktemp("readme")
    root = folder / "data"
    root.mkdir()
    write_fake_mnist(root, num_train=200, num_test=50)
    rng = np.random.default_rng(0)
    energy = root / "uci" / "UCI_Datasets" / "energy" / "data"
    energy.mkdir(parents=True)
    np.savetxt(energy / "data.txt", rng.normal(size=(150, 10)))
    np.savetxt(energy / "index_features.txt", np.arange(8), fmt="%d")
    np.savetxt(energy / "index_target.txt", [8], fmt="%d")
    weather = root / "weather"
    weather.mkdir()
    np.savetxt(weather / "NEweather_data.csv", rng.normal(size=(1300, 8)), delimiter=",")
    np.savetxt(weather / "NEweather_class.csv", rng.integers(0, 2, 1300), fmt="%d")
    return folder


def test_the_first_example_is_small_and_the_guide_has_its_blocks():
    first = python_blocks()[0]
    assert "split_digits()" in first and "make_bayesian" in first
    assert [int(e) for e in re.findall(r"epochs=(\d+)", first)] == [20]
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize(
    "index", range(len(BLOCKS)), ids=lambda i: f"{BLOCKS[i][0].stem}-block{i + 1}"
)
def test_a_block_runs_as_written(index, data_folder):
    page, block = BLOCKS[index]
    code = tiny(block)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=data_folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, f"{page.name}: a block failed:\n{code}\n{done.stderr[-3000:]}"
