"""Every Python block of README.md and of the guide's pages (docs/guide/*.md) runs as written:
each in a process of its own with nothing of the others' state, in a folder holding small
stand-in data sets in the standard layouts (MNIST, UCI energy, NOAA weather), with the long
schedules shrunk (:func:`tests.helpers.with_tiny_settings`, nothing else changed). The processes
are forked from a server that has imported torch, Pyro and pyro_cl once (and run nothing), so a
block pays its own work and not the imports. The README's first example promises a run of under a
minute: its settings are checked to stay that small."""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import with_tiny_settings, write_fake_mnist

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


#: (page, its block) for every page, in order.
BLOCKS = [(page, block) for page in PAGES for block in python_blocks(page)]


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
def test_a_block_runs_as_written(index, data_folder, block_processes, tmp_path):
    page, block = BLOCKS[index]
    code = with_tiny_settings(block)
    errors = tmp_path / "stderr.txt"
    process = block_processes.Process(target=_run_block, args=(code, data_folder, errors))
    process.start()
    process.join(timeout=300)
    if process.is_alive():
        process.kill()
    stderr = errors.read_text() if errors.exists() else ""
    assert process.exitcode == 0, f"{page.name}: a block failed:\n{code}\n{stderr[-3000:]}"


@pytest.fixture(scope="module")
def block_processes():
    """A forkserver context whose server has imported the libraries the blocks use, and
    ``torch._dynamo``, which torch imports at a process's first optimiser (about 3 s a block)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._dynamo", "pyro", "pyro_cl", "matplotlib"])
    return context


def _run_block(code: str, folder: Path, errors: Path) -> None:
    """A block's process: run ``code`` as a script in ``folder``, its traceback to ``errors``."""
    os.chdir(folder)
    sys.argv = ["-c"]
    torch.set_num_threads(1)
    try:
        exec(compile(code, "<block>", "exec"), {"__name__": "__main__"})
    except BaseException:
        errors.write_text(traceback.format_exc())
        raise
