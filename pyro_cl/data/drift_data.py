"""Data sets with concept drift (Kurle et al. 2020, section 6.2), read from their standard files.

Every loader returns a :class:`DriftTable`: the rows in time order with their time stamps, for
:func:`pyro_cl.data.streams.drift_stream`. Each takes a root folder, accepts the file at the root
or in the data set's own folder, checks what it reads and names the file at fault; where a public
copy exists, ``download=True`` fetches a missing file.

* :func:`load_weather` — NOAA weather, Offutt AFB 1949-1999 (Elwell & Polikar 2011): 8 daily
  features, rain or not; one row per day.
* :func:`load_gas_sensor` — UCI Gas Sensor Array Drift (Vergara et al. 2012): ``batch1.dat`` ...
  ``batch10.dat`` in the svmlight-like ``class;concentration 1:v 2:v ... 128:v`` layout, 6 gases;
  rows in batch order (the batches span 36 months).
* :func:`load_covertype` — UCI Covertype: ``covtype.data`` (or ``.gz``), 54 features and the
  cover type 1-7; the row order is the stream's order.
* :func:`load_elec2` — Elec2, NSW electricity prices (Harries 1999, MOA's normalised copy): up or
  down, without ``date`` and ``nswprice`` as Gamma et al. advise; one row per half hour.
* :func:`load_drift_table` — any delimited (time, features, label) table a user brings.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from pyro_cl.data.files import fetch, find_file, read_matrix

__all__ = [
    "DriftTable",
    "load_covertype",
    "load_drift_table",
    "load_elec2",
    "load_gas_sensor",
    "load_weather",
]

_WEATHER_URL = (
    "https://raw.githubusercontent.com/vlosing/driftDatasets/"
    "01d08dec716870a36ea793e26e7e896ba921fe5d/realWorld/weather"
)
_ELEC2_URL = (
    "https://raw.githubusercontent.com/vlosing/driftDatasets/"
    "01d08dec716870a36ea793e26e7e896ba921fe5d/realWorld/Elec2"
)
_COVERTYPE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz"


class DriftTable(NamedTuple):
    """Rows in time order: inputs ``x`` (float64), labels ``y`` (int64 classes from 0) and the
    time stamp of each row (float64, non-decreasing)."""

    x: np.ndarray
    y: np.ndarray
    times: np.ndarray


def _located(root: str | Path, folder: str, names: list[str]) -> list[Path]:
    root = Path(root)
    return [base / name for name in names for base in (root / folder, root)]


def _required(root, folder, names, download_from: str | None, download: bool) -> Path:
    path = find_file(Path(root), _located(root, folder, names))
    if path is not None:
        return path
    if download and download_from is not None:
        path = Path(root) / folder / names[0]
        fetch(f"{download_from}/{names[0]}", path)
        return path
    hint = "; pass download=True" if download_from is not None else ""
    raise FileNotFoundError(f"no {folder}/{names[0]} under {root}{hint}")


def _labels(values: np.ndarray, path: Path, first: int, count: int) -> np.ndarray:
    """Integer labels ``first .. first+count-1`` as ``0 .. count-1``."""
    labels = np.rint(values).astype(np.int64)
    if not np.array_equal(labels, values) or labels.min() < first or labels.max() >= first + count:
        raise ValueError(f"{path}: labels must be integers in {first}..{first + count - 1}")
    return labels - first


def _by_row(x: np.ndarray, y: np.ndarray) -> DriftTable:
    return DriftTable(x, y, np.arange(len(x), dtype=np.float64))


def load_weather(root: str | Path, download: bool = False) -> DriftTable:
    """NOAA weather: ``NEweather_data.csv`` (N x 8) and ``NEweather_class.csv`` (0/1), one row per
    day (time = day index), in ``root`` or ``root/weather``."""
    data_path = _required(root, "weather", ["NEweather_data.csv"], _WEATHER_URL, download)
    label_path = _required(root, "weather", ["NEweather_class.csv"], _WEATHER_URL, download)
    x = read_matrix(data_path, delimiter=",")
    labels = read_matrix(label_path, delimiter=",").reshape(-1)
    if x.shape[1] != 8 or len(labels) != len(x):
        raise ValueError(
            f"{data_path}: expected 8 columns and one label per row in {label_path.name}, got "
            f"{x.shape[1]} columns, {len(x)} rows and {len(labels)} labels"
        )
    return _by_row(x, _labels(labels, label_path, 0, 2))


def load_elec2(root: str | Path, download: bool = False) -> DriftTable:
    """Elec2: ``elec2_data.dat`` (date, day, period, nswprice, nswdemand, vicprice, vicdemand,
    transfer) and ``elec2_label.dat``; ``date`` and ``nswprice`` are dropped (6 features), time =
    half-hour index, in ``root`` or ``root/elec2``."""
    data_path = _required(root, "elec2", ["elec2_data.dat"], _ELEC2_URL, download)
    label_path = _required(root, "elec2", ["elec2_label.dat"], _ELEC2_URL, download)
    data = read_matrix(data_path)
    labels = read_matrix(label_path).reshape(-1)
    if data.shape[1] != 8 or len(labels) != len(data):
        raise ValueError(
            f"{data_path}: expected 8 columns and one label per row in {label_path.name}, got "
            f"{data.shape[1]} columns, {len(data)} rows and {len(labels)} labels"
        )
    return _by_row(data[:, [1, 2, 4, 5, 6, 7]], _labels(labels, label_path, 0, 2))


def load_gas_sensor(root: str | Path) -> DriftTable:
    """Gas Sensor Array Drift: ``batch1.dat`` ... ``batch10.dat`` (in ``root`` or
    ``root/gas_sensor``), 128 features, gases 1-6 as labels 0-5; the time of a row is its
    batch's number (1-10, the months the batches were recorded in, in order), so
    :func:`~pyro_cl.data.streams.batched_stream` makes one step a batch. The concentration
    after ``;`` is not used.

    :raises FileNotFoundError: naming every batch file that is missing (a copy without one would
        otherwise lose it, or every batch after it, without a word)."""
    folders = [Path(root) / "gas_sensor", Path(root) / "Dataset", Path(root)]
    folder = next((f for f in folders if (f / "batch1.dat").is_file()), None)
    if folder is None:
        raise FileNotFoundError(
            f"no gas_sensor/batch1.dat under {root} (the UCI archive's batch1.dat ... batch10.dat)"
        )
    missing = [f"batch{b}.dat" for b in range(1, 11) if not (folder / f"batch{b}.dat").is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)} of the archive's batch1.dat ... batch10.dat"
        )
    rows, labels, times = [], [], []
    for batch in range(1, 11):
        path = folder / f"batch{batch}.dat"
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                label, features = _gas_line(line, path, number)
                labels.append(label)
                rows.append(features)
                times.append(float(batch))
    y = _labels(np.array(labels, dtype=np.float64), folder, 1, 6)
    return DriftTable(np.stack(rows), y, np.array(times))


def _gas_line(line: str, path: Path, number: int) -> tuple[float, np.ndarray]:
    """``class;concentration 1:v1 ... 128:v128`` parsed, or a ``ValueError`` naming the line."""
    try:
        head, *pairs = line.split()
        label = float(head.split(";")[0])
        features = np.zeros(128)
        for pair in pairs:
            index, value = pair.split(":")
            features[int(index) - 1] = float(value)
    except (ValueError, IndexError) as error:
        raise ValueError(f"{path}, line {number}: not 'class;concentration i:v ...'") from error
    if len(pairs) != 128 or not np.isfinite(features).all():
        raise ValueError(f"{path}, line {number}: expected 128 finite features, got {len(pairs)}")
    return label, features


def load_covertype(root: str | Path, download: bool = False) -> DriftTable:
    """Covertype: ``covtype.data`` or ``covtype.data.gz`` (in ``root`` or ``root/covertype``),
    54 features and the cover type 1-7 as labels 0-6; time = row index."""
    names = ["covtype.data.gz", "covtype.data"]
    path = _required(root, "covertype", names, _COVERTYPE_URL.rsplit("/", 1)[0], download)
    data = read_matrix(path, delimiter=",")  # numpy reads .gz transparently
    if data.shape[1] != 55:
        raise ValueError(
            f"{path}: expected 55 columns (54 features, the label), got {data.shape[1]}"
        )
    return _by_row(data[:, :-1], _labels(data[:, -1], path, 1, 7))


def load_drift_table(
    path: str | Path,
    label_column: int = -1,
    time_column: int | None = None,
    delimiter: str | None = ",",
) -> DriftTable:
    """Any numeric table of (time, features, label) rows: bring your own drift data.

    A first line that is not numeric is taken as a header. Labels may be any integers: the
    distinct values, sorted, become classes ``0 .. C-1``. Rows are put in time order (a stable
    sort, so rows with equal times keep their order); without ``time_column`` the row index is
    the time.

    :param label_column: the label's column (negative counts from the end).
    :param time_column: the time stamp's column, or ``None``.
    :param delimiter: the column separator (``None``: any whitespace).
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8-sig") as text:  # a byte-order mark is not a header
            first = text.readline()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a text table (undecodable bytes: {error.reason})") from error
    try:
        [float(v) for v in first.replace(delimiter or " ", " ").split()]
        header = 0
    except ValueError:
        header = 1
    data = read_matrix(path, delimiter=delimiter, skiprows=header)
    columns = data.shape[1]
    label = label_column % columns
    time = None if time_column is None else time_column % columns
    if not -columns <= label_column < columns or time == label:
        raise ValueError(f"{path}: bad label column {label_column} for {columns} columns")
    if time_column is not None and not -columns <= time_column < columns:
        raise ValueError(f"{path}: bad time column {time_column} for {columns} columns")
    features = [c for c in range(columns) if c not in (label, time)]
    if not features:
        raise ValueError(f"{path}: no feature columns besides the label and time")
    values = data[:, label]
    if not np.array_equal(values, np.rint(values)):
        raise ValueError(f"{path}: column {label_column} holds non-integer labels")
    _, classes = np.unique(values, return_inverse=True)
    times = np.arange(len(data), dtype=np.float64) if time is None else data[:, time]
    order = np.argsort(times, kind="stable")
    return DriftTable(data[order][:, features], classes[order].astype(np.int64), times[order])
