"""benchmarks/keeps_learning.py: every row of its table is a run the library accepts, with every
option the row names reaching its method (a row's option that a method does not take would be
dropped without a word by ``BenchmarkRun.make_learner``)."""

import numpy as np
import pytest

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.methods import METHODS
from pyro_cl.app.plotting import plot_pruning
from tests.helpers import load_benchmark_script

keeps_learning = load_benchmark_script("keeps_learning")


def test_a_tempered_row_only_where_validation_chose_a_beta_other_than_one():
    untempered = keeps_learning.rows({False: 1.0, True: 1.0})
    assert not any(label.startswith("vcl β") for label in untempered)
    table = keeps_learning.rows({False: 0.1, True: 0.3})
    assert table["vcl β=0.1"]["fitter_options"] == {"kl_weight": 0.1}
    assert table["vcl β=0.3 + film"]["film"] is True
    assert table["vcl β=0.3 + film"]["fitter_options"] == {"kl_weight": 0.3}
    freed = table["vcl β=0.1 small variances, variance step"]
    assert freed["fitter_options"] == {"kl_weight": 0.1}
    assert freed["training"] == table["vcl small variances, variance step"]["training"]


@pytest.mark.parametrize("label", sorted(keeps_learning.rows({False: 0.1, True: 0.3})))
def test_every_row_builds_a_learner_that_takes_its_options(label):
    fields = keeps_learning.rows({False: 0.1, True: 0.3})[label]
    for method in fields["methods"]:
        unknown = set(fields.get("fitter_options", {})) - set(METHODS[method].fitter_parameters())
        assert not unknown, f"{label}: {method}'s fitter does not take {unknown}"
    run = BenchmarkRun(benchmark="split-digits", num_tasks=2, progress=False, **fields)
    stream = run.task_stream(seed=0)
    for method in run.method_names:
        learner = run.make_learner(method, stream, seed=0, device="cpu")
        for name, value in fields.get("fitter_options", {}).items():
            # the options a fitter keeps under their own names (a context part keeps the rest)
            assert getattr(learner.fitter, name, value) == value, (label, name)
        settings = learner.config.flat()
        for name, value in fields.get("training", {}).items():
            assert settings[name] == value, (label, name)


def test_rows_on_validation_are_scored_on_the_held_out_share_in_folders_of_their_own(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(keeps_learning.SCHEDULES["paper"], "split-digits", {"epochs": 1})
    argv = ["--benchmark", "split-digits", "--schedule", "paper", "--seeds", "0", "--betas", "1"]
    argv += ["--rows", "finetune", "--data-root", str(tmp_path), "--output", str(tmp_path)]
    assert keeps_learning.main(argv + ["--on-validation", "--validation", "0.2"]) == 0
    (held_out,) = keeps_learning.run_once(tmp_path / "validation-finetune-seed0", {})
    assert held_out.settings["validation"] == 0.2
    assert (tmp_path / "validation-table.md").exists() and not (tmp_path / "table.md").exists()
    # a point estimate has no posterior to prune: no pruning plot, and asked for one, a reason
    assert not (tmp_path / "validation-pruning.png").exists()
    with pytest.raises(ValueError, match="pruning"):
        plot_pruning([held_out], tmp_path / "pruning.png")
    keeps_learning.main(argv)
    (tested,) = keeps_learning.run_once(tmp_path / "finetune-seed0", {})
    assert tested.settings["validation"] is None
    # a different split of the training data: the held-out scores are not the test set's
    assert not np.array_equal(held_out.matrices["accuracy"], tested.matrices["accuracy"])


def test_on_validation_names_its_rows():
    with pytest.raises(SystemExit):
        keeps_learning.main(["--benchmark", "split-digits", "--betas", "1", "--on-validation"])


def test_a_vcl_row_draws_its_pruning_per_shared_layer(tmp_path, monkeypatch):
    monkeypatch.setitem(keeps_learning.SCHEDULES["paper"], "split-digits", {"epochs": 1})
    argv = ["--benchmark", "split-digits", "--schedule", "paper", "--seeds", "0", "--betas", "1"]
    argv += ["--rows", "vcl", "--no-fresh-fits", "--data-root", str(tmp_path)]
    assert keeps_learning.main(argv + ["--output", str(tmp_path)]) == 0
    (run,) = keeps_learning.run_once(tmp_path / "vcl-seed0", {})
    assert len(run.details["units_in_use"]) == len(run.step_names)
    assert (tmp_path / "pruning.png").stat().st_size > 1000
