"""The protocol scripts' grids (benchmarks/*_protocol.py): every setting is a run the harness
accepts, and no two settings of a row are the same run (a choice between them means something)."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from pyro_cl.app.benchmark_run import BenchmarkRun
from tests.helpers import load_benchmark_script

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@pytest.fixture(scope="module", autouse=True)
def benchmarks_importable():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize(
    ("name", "preset", "training"),
    [
        ("demo_protocol", "permuted-digits", {}),
        ("cifar_protocol", "split-cifar10", {"epochs": 5}),
        ("split_mnist_protocol", "split-mnist", {"epochs": 20, "batch_size": 128}),
    ],
)
def test_every_setting_is_an_accepted_run_and_settings_differ(name, preset, training):
    script = load_benchmark_script(name)
    base = BenchmarkRun(preset, progress=False)
    for row, grid in script.rows(training).items():
        runs = [json.dumps(fields, sort_keys=True, default=repr) for fields in grid.values()]
        assert len(set(runs)) == len(runs), f"{name}: row {row!r} has two settings alike"
        for setting, fields in grid.items():
            run = dataclasses.replace(base, **fields)
            assert len(run.methods) == 1, (row, setting)
