"""benchmarks/keeps_learning.py: every row of its table is a run the library accepts, with every
option the row names reaching its method (a row's option that a method does not take would be
dropped without a word by ``BenchmarkRun.make_learner``)."""

import pytest

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.methods import METHODS
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
