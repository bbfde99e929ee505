"""Drift data: the standard file layouts read from small files written here, drift streams that
never standardise with future data, the rotating toy, and drift runs from the command line."""

import gzip
import json

import numpy as np
import pytest
import torch

from pyro_cl.app.cli import main
from pyro_cl.data import (
    batched_stream,
    batches_by_time,
    drift_stream,
    load_covertype,
    load_drift_table,
    load_elec2,
    load_gas_sensor,
    load_weather,
    rotating_logistic_stream,
    rotating_weights,
)
from pyro_cl.data.streams import _scales
from tests.helpers import load_benchmark_script


def test_weather_reads_the_two_csv_files_in_row_order(tmp_path):
    folder = tmp_path / "weather"
    folder.mkdir()
    x = np.arange(40, dtype=float).reshape(5, 8)
    np.savetxt(folder / "NEweather_data.csv", x, delimiter=",")
    np.savetxt(folder / "NEweather_class.csv", [0, 1, 1, 0, 1], fmt="%d")
    table = load_weather(tmp_path)
    np.testing.assert_array_equal(table.x, x)
    np.testing.assert_array_equal(table.y, [0, 1, 1, 0, 1])
    np.testing.assert_array_equal(table.times, np.arange(5))
    np.savetxt(folder / "NEweather_class.csv", [0, 1, 2, 0, 1], fmt="%d")
    with pytest.raises(ValueError, match="NEweather_class.csv: labels must be integers in 0..1"):
        load_weather(tmp_path)


def test_elec2_drops_date_and_nswprice(tmp_path):
    data = np.arange(24, dtype=float).reshape(3, 8)
    np.savetxt(tmp_path / "elec2_data.dat", data)
    np.savetxt(tmp_path / "elec2_label.dat", [1, 0, 1], fmt="%d")
    table = load_elec2(tmp_path)
    np.testing.assert_array_equal(table.x, data[:, [1, 2, 4, 5, 6, 7]])


def test_gas_sensor_reads_the_uci_batches_in_order(tmp_path):
    folder = tmp_path / "gas_sensor"
    folder.mkdir()
    rng = np.random.default_rng(0)
    expected = []
    for batch, labels in ((1, [1, 6]), (2, [3]), *((b, [2]) for b in range(3, 11))):
        lines = []
        for label in labels:
            features = rng.normal(size=128)
            expected.append((label - 1, features))
            pairs = " ".join(f"{i + 1}:{v:.6f}" for i, v in enumerate(features))
            lines.append(f"{label};{10.0 * label:.6f} {pairs}")
        (folder / f"batch{batch}.dat").write_text("\n".join(lines) + "\n")
    table = load_gas_sensor(tmp_path)
    np.testing.assert_array_equal(table.y, [label for label, _ in expected])
    np.testing.assert_allclose(table.x, np.stack([f for _, f in expected]), atol=1e-6)
    np.testing.assert_array_equal(table.times, [1.0, 1.0, *range(2, 11)])  # a row's batch
    (folder / "batch2.dat").write_text("3;10.0 1:0.5 2:oops\n")
    with pytest.raises(ValueError, match="batch2.dat, line 1"):
        load_gas_sensor(tmp_path)


def test_a_gas_sensor_copy_missing_a_batch_is_refused_naming_it(tmp_path):
    folder = tmp_path / "gas_sensor"
    folder.mkdir()
    line = "1;10.0 " + " ".join(f"{i + 1}:0.5" for i in range(128)) + "\n"
    for batch in (*range(1, 5), *range(6, 11)):  # batch5.dat lost on the way
        (folder / f"batch{batch}.dat").write_text(line)
    with pytest.raises(FileNotFoundError, match="lacks batch5.dat"):
        load_gas_sensor(tmp_path)
    (folder / "batch5.dat").write_text(line)
    table = load_gas_sensor(tmp_path)
    batches, times = batches_by_time(table.x, table.y, table.times)
    assert times == [float(b) for b in range(1, 11)] and all(len(y) == 1 for _, y in batches)


def test_a_batched_stream_is_one_step_a_batch_at_its_time_and_scored_one_step_ahead():
    from pyro_cl.app.one_step_ahead import one_step_ahead

    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(n, 3)), rng.integers(0, 2, size=n)) for n in (30, 10, 20)]
    stream = batched_stream(batches, times=[1.0, 2.0, 4.0])
    assert [len(step.y) for step in stream] == [30, 10, 20]
    assert [step.time for step in stream] == [1.0, 2.0, 4.0]
    first = stream.steps[0].x.double()
    np.testing.assert_allclose(first.mean(0), 0.0, atol=1e-6)  # standardised by batch 1 alone

    class Majority:
        def predict_proba(self, x, time):
            return np.tile([0.5, 0.5], (len(x), 1))

        def learn(self, x, y, time):
            pass

    scores = one_step_ahead(Majority(), stream)
    assert len(scores.accuracy) == 2 and scores.times == [2.0, 4.0]
    with pytest.raises(ValueError, match="batch 1 has 4 features"):
        batched_stream([batches[0], (rng.normal(size=(5, 4)), np.zeros(5))])
    with pytest.raises(ValueError, match="increasing"):
        batched_stream(batches, times=[1.0, 1.0, 2.0])


@pytest.mark.parametrize("compressed", [False, True])
def test_covertype_reads_the_uci_table_plain_or_gzipped(tmp_path, compressed):
    data = np.hstack(
        [np.arange(6 * 54, dtype=float).reshape(6, 54), [[1], [7], [2], [3], [4], [5]]]
    )
    text = "\n".join(",".join(f"{v:g}" for v in row) for row in data) + "\n"
    if compressed:
        with gzip.open(tmp_path / "covtype.data.gz", "wt") as f:
            f.write(text)
    else:
        (tmp_path / "covtype.data").write_text(text)
    table = load_covertype(tmp_path)
    assert table.x.shape == (6, 54)
    np.testing.assert_array_equal(table.y, [0, 6, 1, 2, 3, 4])


def test_a_missing_file_names_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="weather/NEweather_data.csv"):
        load_weather(tmp_path)
    with pytest.raises(FileNotFoundError, match="gas_sensor/batch1.dat"):
        load_gas_sensor(tmp_path)


def test_a_users_table_is_sorted_by_time_and_its_labels_numbered(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("t,a,b,label\n3,0.3,1,7\n1,0.1,1,5\n2,0.2,1,7\n2,0.25,1,9\n")
    table = load_drift_table(path, label_column=-1, time_column=0)
    np.testing.assert_array_equal(table.times, [1, 2, 2, 3])
    np.testing.assert_array_equal(table.x[:, 0], [0.1, 0.2, 0.25, 0.3])  # stable for ties
    np.testing.assert_array_equal(table.y, [0, 1, 2, 1])
    with pytest.raises(ValueError, match="non-integer labels"):
        load_drift_table(path, label_column=1, time_column=0)


def test_drift_streams_standardise_with_the_first_step_only():
    rng = np.random.default_rng(1)
    x, y = rng.normal(3.0, 2.0, size=(50, 3)), rng.integers(0, 2, 50)
    times = np.cumsum(rng.uniform(0.5, 2.0, 50))
    stream = drift_stream(x, y, times, first_size=20, step_size=10)
    assert len(stream) == 4 and stream.test is None
    first = stream[0].x.double()
    torch.testing.assert_close(
        first.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-6, rtol=0
    )
    assert [s.time for s in stream] == pytest.approx([times[19], times[29], times[39], times[49]])
    future = x.copy()
    future[20:] *= 100.0  # the future changes; no earlier step may notice
    changed = drift_stream(future, y, times, first_size=20, step_size=10)
    assert torch.equal(changed[0].x, stream[0].x)
    mean, std = x[:20].mean(0), x[:20].std(0)
    torch.testing.assert_close(
        changed[1].x.double(), torch.as_tensor((future[20:30] - mean) / std), rtol=1e-5, atol=1e-4
    )
    with pytest.raises(ValueError, match="non-decreasing"):
        drift_stream(x, y, times[::-1], first_size=20, step_size=10)


def test_a_column_constant_in_the_first_step_is_centred_not_blown_up():
    """elec2's Victorian columns are one value (0.003467, 0.414912, ...) for its first ~17,000
    rows: their standard deviation over the first step is rounding (~10⁻¹⁸ to 10⁻¹⁶), not 0,
    and dividing by it made later values ~10¹⁶. A column constant up to rounding is centred."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(70, 3))
    x[:30, 1], x[:30, 2] = 0.003467, 0.414912  # constant while the first step lasts
    x[30:, 1], x[30:, 2] = rng.uniform(0.0, 0.01, 40), 0.0
    assert 0 < x[:30, 1].std() < 1e-15 and 0 < x[:30, 2].std() < 1e-15  # rounding, not 0
    stream = drift_stream(x, rng.integers(0, 2, 70), first_size=30, step_size=10)
    later = torch.cat([step.x for step in list(stream)[1:]]).double()
    torch.testing.assert_close(later[:, 1], torch.as_tensor(x[30:, 1] - 0.003467))  # raw units
    torch.testing.assert_close(later[:, 2], torch.full((40,), -0.414912, dtype=torch.float64))
    assert stream[0].x[:, 1:].abs().max() < 1e-6
    small = x.copy()
    small[:30, 1] = rng.normal(0.0, 1e-6, 30)  # small but varying: still standardised
    varying = drift_stream(small, rng.integers(0, 2, 70), first_size=30, step_size=10)
    assert varying[0].x[:, 1].double().std(unbiased=False) == pytest.approx(1.0, rel=1e-4)
    constant32 = np.full(1000, 0.414912, dtype=np.float32)  # float32 rounds coarser: ~10⁻⁷
    assert 0 < constant32.std() and _scales(constant32.mean(0), constant32.std(0)) == 1.0
    raw = drift_stream(x, rng.integers(0, 2, 70), first_size=30, step_size=10, standardise=False)
    torch.testing.assert_close(
        torch.cat([s.x for s in raw]), torch.as_tensor(x, dtype=torch.float32)
    )


def test_a_column_that_starts_to_vary_late_is_scaled_by_its_first_varying_step_alone():
    """With ``constant_columns="first-varying-step"``, a column constant for the first steps is
    0 until it varies, then divided by its standard deviation over the first step in which it
    varies: that step's inputs alone, so neither labels nor later rows shape it (elec2's
    Victorian columns); a batched stream alike. By default it keeps its raw units."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(60, 2))
    x[:40, 1] = 7.0  # constant over the first step (20 rows) and the next two (10 each)
    x[40:, 1] = 7.0 + rng.normal(0.0, 0.02, 20)
    labels = rng.integers(0, 2, 60)
    late = {"constant_columns": "first-varying-step"}
    stream = drift_stream(x, labels, first_size=20, step_size=10, **late)
    assert torch.cat([stream[1].x, stream[2].x])[:, 1].abs().max() < 1e-6  # constant: centred
    scale = x[40:50, 1].std()
    torch.testing.assert_close(
        torch.cat([stream[3].x, stream[4].x])[:, 1].double(),
        torch.as_tensor((x[40:, 1] - 7.0) / scale),
    )
    later = x.copy()
    later[50:, 1] *= 100.0  # rows after the first varying step do not move its scale
    moved = drift_stream(later, 1 - labels, first_size=20, step_size=10, **late)
    torch.testing.assert_close(moved[3].x, stream[3].x)
    batches = [(x[:20], labels[:20]), (x[20:40], labels[20:40]), (x[40:], labels[40:])]
    batched = batched_stream(batches, **late)
    torch.testing.assert_close(
        batched[2].x[:, 1].double(), torch.as_tensor((x[40:, 1] - 7.0) / x[40:, 1].std())
    )
    default = drift_stream(x, labels, first_size=20, step_size=10)
    torch.testing.assert_close(default[3].x[:, 1].double(), torch.as_tensor(x[40:50, 1] - 7.0))
    for make in (
        lambda: drift_stream(x, labels, first_size=20, step_size=10, constant_columns="scale"),
        lambda: batched_stream(batches, standardise=False, constant_columns="scale"),
    ):
        with pytest.raises(ValueError, match="constant_columns"):
            make()


def test_the_rotating_toy_follows_its_rotating_logistic_model():
    stream = rotating_logistic_stream(num_steps=73, step_size=400, seed=3)
    assert len(stream) == 73 and [s.time for s in stream[:3]] == [0.0, 1.0, 2.0]
    np.testing.assert_allclose(rotating_weights([0.0, 18.0]), [[0.0, 10.0], [10.0, 0.0]], atol=1e-9)
    for step in (stream[0], stream[18], stream[72]):
        x, y = step.x.numpy(), step.y.numpy()
        assert np.abs(x).max() <= 3
        w = rotating_weights([step.time])[0]
        confident = np.abs(x @ w) > 5
        agree = ((x @ w > 0) == (y == 1))[confident].mean()
        assert agree > 0.97


TINY_DRIFT = ["--num-steps", "3", "--iterations", "3", "--first-iterations", "5"]
TINY_DRIFT += ["--train-samples", "2", "--term-samples", "10", "--predictive-samples", "5"]


def test_cli_runs_a_drift_stream_with_a_chosen_transition(tmp_path, capsys):
    out = tmp_path / "rotating"
    argv = ["stream", "rotating", "--methods", "none", "--transition", "ornstein_uhlenbeck"]
    argv += ["--transition-stiffness", "0.5", "--no-progress", "--output", str(out)]
    assert main([*argv, *TINY_DRIFT]) == 0
    assert "none + ornstein_uhlenbeck(stiffness=0.5)" in capsys.readouterr().out
    payload = json.loads((out / "results.json").read_text())
    assert payload["run"]["transition"]["name"] == "ornstein_uhlenbeck"
    result = payload["results"][0]
    assert result["series"]["test_lml"] == []
    assert len(result["series"]["one_step_ahead_accuracy"]) == 2


def test_a_transition_option_of_another_transition_is_a_one_line_error():
    with pytest.raises(SystemExit) as exit_info:
        main(["stream", "rotating", "--transition", "wiener", "--transition-stiffness", "1"])
    text = str(exit_info.value)
    assert text.startswith("pyro-cl stream:") and "not an option" in text and "\n" not in text


def test_the_drift_benchmark_draws_figure_2_and_combines_sweeps(tmp_path):
    script = load_benchmark_script("drift_paper")
    assert script.main(["--part", "evolution", "--output", str(tmp_path)]) == 0
    assert (tmp_path / "transition_evolution.png").stat().st_size > 0
    argv = ["--part", "sweep", "--stream", "rotating", "--methods", "ou", "memory"]
    argv += [
        "--memory-sizes",
        "3",
        "--num-steps",
        "3",
        "--predictive-samples",
        "5",
        "--no-progress",
    ]
    argv += ["--iterations", "3", "--first-iterations", "5"]
    for seed in (0, 1):
        folder = tmp_path / f"s{seed}"
        assert script.main([*argv, "--seeds", str(seed), "--output", str(folder)]) == 0
    assert (
        script.main(
            ["--combine", str(tmp_path / "s0"), str(tmp_path / "s1"), "--output", str(tmp_path)]
        )
        == 0
    )
    table = (tmp_path / "table.md").read_text()
    assert "| 3 | grs + bayesian_forgetting(forgetting_rate=0.031) |" in table and "| 2 |" in table
    for figure in ("adaptation_sweep.png", "memory_sweep.png", "lml_over_time.png"):
        assert (tmp_path / figure).stat().st_size > 0
    # the schedule study reads each sweep's schedule and draws LML against steps per time step
    assert json.loads((tmp_path / "s0" / "schedule.json").read_text())["iterations"] == 3
    (tmp_path / "s1" / "schedule.json").write_text(json.dumps({"iterations": 6}))
    steps = load_benchmark_script("drift_schedule")
    assert steps.main([str(tmp_path / "s0"), str(tmp_path / "s1"), "--output", str(tmp_path)]) == 0
    assert (tmp_path / "lml_vs_steps.png").stat().st_size > 0


def test_drift_data_enters_checked(tmp_path):
    x, y = np.random.default_rng(0).normal(size=(300, 3)), np.arange(300) % 2
    for options, message in (
        ({"num_steps": 0}, r"num_steps must be a positive integer .*got 0"),
        ({"num_steps": -3}, r"num_steps must be a positive integer .*got -3"),
        ({"first_size": 2.5}, r"first_size must be a positive integer .*got 2.5"),
    ):
        with pytest.raises(ValueError, match=message):
            drift_stream(x, y, **{"first_size": 100, "step_size": 50, **options})
    for labels in (y + 0.5, y - 1):
        with pytest.raises(ValueError, match="labels must be integers from 0"):
            drift_stream(x, labels, first_size=100, step_size=50)
    with pytest.raises(ValueError, match="one class only"):
        drift_stream(x, y * 0, first_size=100, step_size=50)
    huge = x.copy()
    huge[:, 1] *= 1e160  # its variance overflows: it was zeroed with only a numpy warning
    with pytest.raises(ValueError, match="column 1's values are not finite or overflow"):
        drift_stream(huge, y, first_size=100, step_size=50)
    # a byte-order mark is not a header (the first row was dropped), garbage names its file
    marked = tmp_path / "marked.csv"
    marked.write_text("1,2,0\n3,4,1\n5,6,0\n", encoding="utf-8-sig")
    assert len(load_drift_table(marked).y) == 3
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="garbage.csv: not a text table"):
        load_drift_table(garbage)
