"""A run that resumes: stopped after a task and started again, it ends where the uninterrupted
run ends; a checkpoint of another run is refused by name."""

import json
import time

import numpy as np
import pytest

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.continual_run import Metric, Step, run_continual
from pyro_cl.app.run_checkpoint import RunCheckpoint
from pyro_cl.app.runner import run_benchmark
from pyro_cl.app.selection import run_setting
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.serialization import safe_load


def digits_run(
    output, method: str = "vcl", hidden: int = 8, forward_transfer: bool = False
) -> BenchmarkRun:
    return BenchmarkRun(
        benchmark="split-digits",
        methods=[method],
        hidden_sizes=[hidden],
        training={"epochs": 2},
        output=output,
        progress=False,
        resumable=True,
        forward_transfer=forward_transfer,
    )


def matrices(output) -> dict:
    run = json.loads((output / "results.json").read_text())["runs"][0]
    return {k: np.array(v, dtype=float) for k, v in run["matrices"].items()}


def before_each_observe(monkeypatch, action) -> None:
    """Call ``action()`` before every ``observe`` from now."""
    observe = ContinualLearner.observe
    monkeypatch.setattr(
        ContinualLearner, "observe", lambda self, *a, **k: action() or observe(self, *a, **k)
    )


def stop_at_observe(monkeypatch, number: int) -> None:
    """Make the ``number``-th ``observe`` from now raise, as a session's end would."""
    calls = {"n": 0}
    observe = ContinualLearner.observe

    def stopping(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == number:
            raise KeyboardInterrupt("the session ended")
        return observe(self, *args, **kwargs)

    monkeypatch.setattr(ContinualLearner, "observe", stopping)


@pytest.mark.parametrize("method", ["vcl", "vcl-random"])
def test_a_run_stopped_after_a_task_resumes_to_the_uninterrupted_result(
    tmp_path, monkeypatch, method
):
    run_benchmark(digits_run(tmp_path / "straight", method))
    with monkeypatch.context() as patch:
        stop_at_observe(patch, 3)  # tasks 1-2 done and saved, task 3 interrupted
        with pytest.raises(KeyboardInterrupt):
            run_benchmark(digits_run(tmp_path / "stopped", method))
    saved = tmp_path / "stopped" / f"checkpoint-{method}-seed0" / "run.pt"
    assert saved.exists()
    run_benchmark(digits_run(tmp_path / "stopped", method))  # the same command again
    straight, resumed = matrices(tmp_path / "straight"), matrices(tmp_path / "stopped")
    for name in ("accuracy", "log_likelihood", "calibration_error"):
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert not saved.parent.exists()  # a finished run leaves no checkpoint behind


def test_a_resumed_setting_counts_the_seconds_before_its_checkpoint(tmp_path, monkeypatch):
    """A record's seconds for a run resumed in a second process are the two processes' time,
    not the second's alone (each of the stopped process's observes takes half a second more)."""
    with monkeypatch.context() as patch:
        before_each_observe(patch, lambda: time.sleep(0.5))
        stop_at_observe(patch, 3)  # tasks 1-2 done and saved, task 3 interrupted
        with pytest.raises(KeyboardInterrupt):
            run_setting(digits_run(tmp_path), {}, 0, output=tmp_path)
    before = safe_load(tmp_path / "checkpoint-vcl-seed0" / "run.pt")["times"]["elapsed"]
    assert before >= 1.0  # two slowed observes
    start = time.perf_counter()
    seconds = run_setting(digits_run(tmp_path), {}, 0, output=tmp_path)["seconds"]
    second_process = time.perf_counter() - start
    assert second_process < seconds <= second_process + before


def details(output) -> dict:
    return json.loads((output / "results.json").read_text())["runs"][0]["details"]


def test_fresh_fits_stopped_with_their_session_resume_and_leave_the_run_as_it_was(
    tmp_path, monkeypatch
):
    run_benchmark(digits_run(tmp_path / "alone"))
    run_benchmark(digits_run(tmp_path / "straight", forward_transfer=True))
    # the fresh fits come first, and the run fits the same (a seeded learner's own streams)
    for name, matrix in matrices(tmp_path / "alone").items():
        np.testing.assert_array_equal(matrices(tmp_path / "straight")[name], matrix, err_msg=name)
    with monkeypatch.context() as patch:
        stop_at_observe(patch, 3)  # two fresh fits done and kept, the third interrupted
        with pytest.raises(KeyboardInterrupt):
            run_benchmark(digits_run(tmp_path / "stopped", forward_transfer=True))
    folder = tmp_path / "stopped" / "checkpoint-vcl-seed0"
    assert sorted(p.name for p in folder.iterdir()) == ["fresh-fit-0.pt", "fresh-fit-1.pt"]
    kept = sum(safe_load(p)["seconds"] for p in folder.iterdir())
    observed = []
    with monkeypatch.context() as patch:
        before_each_observe(patch, lambda: observed.append(1))
        run_benchmark(digits_run(tmp_path / "stopped", forward_transfer=True))
    assert len(observed) == 3 + 5  # the three fresh fits left, then the run's five tasks
    resumed = details(tmp_path / "stopped")
    assert resumed["scratch_accuracy"] == details(tmp_path / "straight")["scratch_accuracy"]
    assert resumed["scratch_wall_time_s"] > kept > 0  # the kept fits' seconds counted too
    for name, matrix in matrices(tmp_path / "straight").items():
        np.testing.assert_array_equal(matrices(tmp_path / "stopped")[name], matrix, err_msg=name)
    assert not folder.exists()  # a finished run leaves no fresh fit behind


def test_a_kept_fresh_fit_of_other_settings_is_refused(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        stop_at_observe(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            run_benchmark(digits_run(tmp_path, forward_transfer=True))
    with pytest.raises(ValueError, match="holds a fresh fit of other settings"):
        run_benchmark(digits_run(tmp_path, hidden=16, forward_transfer=True))


def test_a_checkpoint_of_other_steps_or_another_learner_is_refused(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        stop_at_observe(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            run_benchmark(digits_run(tmp_path))
    folder = tmp_path / "checkpoint-vcl-seed0"
    run = digits_run(tmp_path, hidden=16)  # a learner of another width
    stream = run.task_stream(0)
    learner = run.make_learner("vcl", stream, 0, "cpu")
    names = [task.name for task in stream]
    with pytest.raises(ValueError, match="holds a run of the steps"):
        RunCheckpoint(folder, names[:2]).resume(learner, [])
    with pytest.raises(ValueError, match="holds a run measured by"):
        RunCheckpoint(folder, names).resume(learner, [])
    resumable = {"measured": lambda self: {}, "load_measured": lambda self, state: None}
    metrics = [type(name, (Metric,), resumable)() for name in ("AccuracyMatrix", "Pruning")]
    with pytest.raises(ValueError, match="differs from this one in its net"):
        RunCheckpoint(folder, names).resume(learner, metrics)


def test_a_metric_without_a_state_cannot_be_checkpointed(tmp_path):
    class Counting(Metric):  # keeps a count, says nothing of how to save it
        count = 0

        def after_step(self, learner, step, seconds):
            self.count += 1

    run = digits_run(tmp_path)
    stream = run.task_stream(0)
    learner = run.make_learner("vcl", stream, 0, "cpu")
    steps = [Step(task.train, task.name, i, task_id=task.id) for i, task in enumerate(stream)]
    with pytest.raises(TypeError, match="Counting cannot be checkpointed"):
        run_continual(learner, steps[:1], [Counting()], checkpoint=tmp_path / "c")
    assert learner.tasks_seen == []  # refused before the first step's work


def test_a_resumable_run_needs_an_output():
    with pytest.raises(ValueError, match="give an output"):
        digits_run(None)
