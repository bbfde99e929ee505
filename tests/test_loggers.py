"""Loggers: CSV and TensorBoard callbacks of losses, timings and metrics."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.app.cli import main
from pyro_cl.infer.loggers import CSVLogger, TensorBoardLogger
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data

SMALL = {"epochs": 3, "ml_init_epochs": 2, "num_particles": 1, "num_predictive_samples": 2}


def _rows(path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_a_csv_logger_writes_every_epochs_loss_and_every_fits_time(tmp_path):
    path = tmp_path / "logs" / "run.csv"
    learner = VCL(BayesianMLP(4, [8], 2, heads=2), seed=0, callbacks=[CSVLogger(path)], **SMALL)
    learner.observe(two_class_data(60, 4), task_id=0)
    learner.observe(two_class_data(60, 4, column=1, seed=1), task_id=1)
    rows = _rows(path)
    losses = [r for r in rows if r["name"] == "loss"]
    start = [r for r in rows if r["name"] == "loss/ml_initialisation"]
    # task 0: 2 epochs of maximum-likelihood start (a series of its own) and 3 of the fit;
    # task 1: 3; one global step across tasks and fits
    assert len(start) == 2 and len(losses) == 3 + 3
    assert [int(r["step"]) for r in start + losses] == list(range(1, 9))
    assert {r["task"] for r in losses} == {"0", "1"}
    assert all(torch.isfinite(torch.tensor(float(r["value"]))) for r in losses)
    assert sum(r["name"] == "seconds/task" for r in rows) == 2
    assert sum(r["name"] == "seconds/fit" for r in rows) == 3  # ML start, two propagations
    assert {r["fit"] for r in start} == {"ML initialisation"}
    assert {r["fit"] for r in losses} == {
        "ELBOFitter, step 1 (task 0)",
        "ELBOFitter, step 2 (task 1)",
    }

    learner.callbacks.callbacks[0].log_metrics(learner.evaluate(two_class_data(20, 4), task_id=0))
    assert {"metric/accuracy", "metric/log_likelihood"} <= {r["name"] for r in _rows(path)}


def test_a_saved_learners_csv_logger_keeps_appending_after_load(tmp_path):
    path = tmp_path / "run.csv"
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, callbacks=[CSVLogger(path)], **SMALL)
    learner.observe(two_class_data(40, 4))
    learner.save(tmp_path / "state.pt")
    before = len(_rows(path))
    resumed = VCL.load(tmp_path / "state.pt")
    assert isinstance(resumed.callbacks.callbacks[0], CSVLogger)
    resumed.observe(two_class_data(40, 4, seed=2))
    rows = _rows(path)
    assert len(rows) > before
    assert open(path).read().count("run,wall_time,task,fit,step,name,value") == 1  # one header


def test_a_tensorboard_logger_writes_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path / "tb")
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    learner.observe(two_class_data(40, 4), callbacks=[logger])
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    names = events.Tags()["scalars"]
    assert "seconds/task" in names and "seconds/fit" in names
    assert [event.step for event in events.Scalars("loss/ml_initialisation")] == [1, 2]
    assert sorted(event.step for event in events.Scalars("loss")) == [3, 4, 5]  # the fit's


def test_the_command_line_logs_each_run_and_its_metrics(tmp_path):
    argv = ["run", "--benchmark", "split-digits", "--hidden", "8", "--epochs", "1"]
    argv += ["--particles", "1", "--predictive-samples", "2", "--no-progress"]
    argv += ["--methods", "vcl,finetune", "--log-dir", str(tmp_path / "logs")]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 0
    for name in ("vcl_seed0.csv", "finetune_seed0.csv"):
        rows = _rows(tmp_path / "logs" / name)
        accuracies = [r for r in rows if r["name"] == "metric/mean_accuracy"]
        assert len(accuracies) == 5  # one per task of split digits
        # the accuracy matrix: task j's accuracy after every step from j on
        for j in range(1, 6):
            assert sum(r["name"] == f"metric/accuracy/task{j}" for r in rows) == 6 - j
    with pytest.raises(SystemExit, match="tensorboard needs a log_dir"):
        main(["run", "--tensorboard"])
    settings = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]["settings"]
    assert "learning_rate" in settings


def test_an_unwritable_csv_path_fails_before_the_step_and_the_step_is_not_taken(tmp_path):
    (tmp_path / "taken").write_text("a file where the log's folder would be")
    logger = CSVLogger(tmp_path / "taken" / "run.csv")
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, callbacks=[logger], **SMALL)
    with pytest.raises(ValueError, match="the CSV log .*run.csv cannot be written"):
        learner.observe(two_class_data(40, 4))
    assert learner.tasks_seen == [] and learner.current_prior() == {}


def test_a_resumed_run_keeps_its_id_and_counts_on_from_its_last_step(tmp_path):
    path = tmp_path / "run.csv"
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, callbacks=[CSVLogger(path)], **SMALL)
    learner.observe(two_class_data(40, 4))
    learner.save(tmp_path / "state.pt")
    last = max(int(r["step"]) for r in _rows(path))
    resumed = VCL.load(tmp_path / "state.pt")
    resumed.observe(two_class_data(40, 4, seed=2))
    other = VCL(BayesianMLP(4, [8], 2), seed=1, callbacks=[CSVLogger(path)], **SMALL)
    other.observe(two_class_data(40, 4))
    rows = _rows(path)
    runs = list(dict.fromkeys(r["run"] for r in rows))
    assert len(runs) == 2  # the resumed run is the first run; a second learner is another
    first = [int(r["step"]) for r in rows if r["run"] == runs[0]]
    assert first == sorted(first) and max(first) > last  # no step counted twice


def test_a_tensorboard_folder_that_cannot_be_made_is_named(tmp_path):
    pytest.importorskip("tensorboard")
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ValueError, match="TensorBoard folder .*cannot be written"):
        TensorBoardLogger(tmp_path / "taken" / "tb")
