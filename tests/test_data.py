import numpy as np
import pytest
import torch

from pyro_cl.data import (
    load_mnist,
    load_notmnist,
    permuted_mnist,
    permuted_tasks,
    split_mnist,
    split_notmnist,
    split_tasks,
)
from pyro_cl.data.idx import read_idx
from tests.helpers import write_fake_mnist, write_idx


@pytest.fixture
def fake_mnist(tmp_path):
    return write_fake_mnist(tmp_path)


def test_idx_reader_and_mnist_layout(fake_mnist):
    images = read_idx(fake_mnist / "MNIST" / "raw" / "train-images-idx3-ubyte.gz")
    assert images.shape == (60, 28, 28) and images.dtype == np.uint8
    (x, y), (xt, yt) = load_mnist(fake_mnist)
    assert x.shape == (60, 784) and 0 <= x.min() and x.max() <= 1
    assert np.array_equal(y, np.arange(60) % 10) and xt.shape == (20, 784)


def test_missing_data_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_mnist(tmp_path)


def test_split_mnist_tasks_are_binary_and_relabelled(fake_mnist):
    stream = split_mnist(fake_mnist)
    assert [t.name for t in stream] == ["0/1", "2/3", "4/5", "6/7", "8/9"]
    assert stream.multi_head and stream.num_classes == 2
    for task in stream:
        assert set(task.y_train.tolist()) == {0, 1}
        assert len(task.x_train) == 12


def test_permuted_stream_is_seeded_and_first_task_option(fake_mnist):
    a = permuted_mnist(fake_mnist, num_tasks=3, seed=1)
    b = permuted_mnist(fake_mnist, num_tasks=3, seed=1)
    assert all(torch.equal(s.x_train, t.x_train) for s, t in zip(a, b, strict=True))
    assert not torch.equal(a[0].x_train, a[1].x_train)
    (x, _), _ = load_mnist(fake_mnist)
    assert not torch.equal(a[0].x_train, torch.as_tensor(x))
    plain = permuted_mnist(fake_mnist, num_tasks=2, seed=1, permute_first_task=False)
    assert torch.equal(plain[0].x_train, torch.as_tensor(x))
    # a permutation only moves pixels
    assert torch.equal(a[1].x_train.sort(1).values, torch.as_tensor(x).sort(1).values)


def test_split_tasks_keep_the_given_class_order():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 3, 2, 3])
    stream = split_tasks("toy", (x, y), (x, y), [(3, 2)])
    assert stream[0].y_train.tolist() == [1, 0, 1, 0]  # 3 -> 0, 2 -> 1
    with pytest.raises(ValueError, match="num_tasks"):
        permuted_tasks("toy", (x, y), (x, y), 0)


def test_notmnist_subset_is_split_per_letter_into_a_held_out_fifth(tmp_path):
    folder = tmp_path / "notMNIST_small_subset10k"
    folder.mkdir()
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 20)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (200, 28, 28)))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", labels)
    (x, y), (xt, yt) = load_notmnist(tmp_path)
    assert x.shape == (160, 784) and xt.shape == (40, 784) and 0 <= x.min() and x.max() <= 1
    assert np.bincount(yt).tolist() == [4] * 10  # a fifth of every letter
    assert not set(map(bytes, x)) & set(map(bytes, xt))  # no image in both
    stream = split_notmnist(tmp_path)
    assert [t.name for t in stream] == ["A/F", "B/G", "C/H", "D/I", "E/J"]
    assert stream.multi_head and all(t.x_train.shape[0] == 32 for t in stream)
    np.testing.assert_array_equal(load_notmnist(tmp_path)[1][0], xt)  # the split is seeded
    with pytest.raises(FileNotFoundError, match="notMNIST"):
        load_notmnist(tmp_path / "nowhere")


def test_damaged_mnist_files_are_refused_naming_the_file(fake_mnist):
    raw = fake_mnist / "MNIST" / "raw"
    labels = raw / "train-labels-idx1-ubyte.gz"
    write_idx(labels, np.arange(60) % 181)  # labels 0..59: not MNIST's ten classes
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte: labels must lie in 0\.\.9"):
        load_mnist(fake_mnist)
    write_idx(labels, np.arange(59) % 10)
    with pytest.raises(ValueError, match="60 images but labels of shape"):
        load_mnist(fake_mnist)
    images = raw / "train-images-idx3-ubyte.gz"
    write_idx(images, np.zeros((59, 14, 56)))
    with pytest.raises(ValueError, match=r"shape \(N, 28, 28\)"):
        load_mnist(fake_mnist)
    images.write_bytes(images.read_bytes()[:40])  # a truncated download
    with pytest.raises(ValueError, match="truncated or not a valid gzip"):
        load_mnist(fake_mnist)
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    write_idx(images, np.zeros((59, 28, 28)))
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        load_mnist(fake_mnist)
