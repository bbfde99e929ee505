"""benchmarks/gradual_protocol.py: the validation stream that chooses the transition is made of
the labelled source alone, in the real stream's geometry."""

import numpy as np
import pytest
import torch

from tests.helpers import importable_benchmark_script


@pytest.fixture(scope="module")
def script():
    yield from importable_benchmark_script("gradual_protocol")


def labelled_source(count: int = 60):
    """Upright images each marked by its index (a block at the centre), labels and 0° angles."""
    images = np.zeros((count, 28, 28), dtype=np.float32)
    images[:, 12:16, 12:16] = np.arange(count)[:, None, None] + 1.0  # survives any rotation
    labels = np.arange(count) % 10
    angles = np.zeros(count)
    return images, labels, angles


def which(x: torch.Tensor) -> set[int]:
    """The source indices of rotated images (their marked centre pixel)."""
    centre = x.reshape(-1, 28, 28)[:, 13, 13]
    return {int(round(v)) - 1 for v in centre.tolist()}


def test_validation_stream_splits_the_labelled_source_in_the_real_geometry(script):
    images, labels, angles = labelled_source()
    parts = script.validation_protocol(images, labels, angles, seed=0, sizes=(20, 10, 5))
    fitted, scored = which(parts["source"][0]), which(parts["target"][0])
    drawn = set().union(*(which(w) for w in parts["windows"]))
    assert len(fitted) == 20 and len(scored) == 10
    assert not fitted & scored and not drawn & (fitted | scored)  # three disjoint parts
    assert drawn == set(range(60)) - fitted - scored  # the pool is all the rest
    assert len(parts["windows"]) == script.WINDOWS == 21
    assert all(len(w) == 5 for w in parts["windows"])
    index = sorted(which(parts["target"][0]))  # labels go with their images
    assert sorted(parts["target"][1].tolist()) == sorted(i % 10 for i in index)


def test_validation_windows_rotate_as_the_real_ones(script):
    """The windows' angles grow from 5° to 60°: a bar's tilt grows window by window."""
    count = 40
    images = np.zeros((count, 28, 28), dtype=np.float32)
    images[:, 4:24, 14] = 1.0  # a vertical bar
    parts = script.validation_protocol(
        images, np.zeros(count, int), np.zeros(count), seed=1, sizes=(10, 10, 4)
    )
    upright = script.rotated(images[:1], np.zeros(1))
    moved = [float((w - upright).abs().sum(-1).mean()) for w in parts["windows"]]
    assert moved[0] < moved[len(moved) // 2] < moved[-1]  # farther from upright, window by window


def test_validation_stream_needs_a_pool(script):
    images, labels, angles = labelled_source(30)
    with pytest.raises(ValueError, match="no pool"):
        script.validation_protocol(images, labels, angles, seed=0, sizes=(20, 10, 5))
