import pytest
import torch

from pyro_cl import VCL, DivergenceError, GaussianLikelihood, NoPropagation
from pyro_cl.memory import GaussianResidualMemory
from pyro_cl.nn import BayesianLinear, BayesianMLP
from tests.helpers import two_class_data


@pytest.fixture
def learner():
    net = BayesianMLP(4, [8], 2, heads=2)
    return VCL(net, epochs=2, batch_size=32, num_particles=1, progress=False, seed=0)


def test_inputs_of_the_wrong_shape(learner):
    with pytest.raises(ValueError, match=r"expects \(N, 4\)"):
        learner.observe((torch.randn(10, 5), torch.zeros(10, dtype=torch.long)), task_id=0)


def test_labels_out_of_range_for_the_head(learner):
    x, _ = two_class_data(10, 4)
    with pytest.raises(ValueError, match=r"labels must lie in 0\.\.1"):
        learner.observe((x, torch.full((10,), 2)), task_id=0)
    with pytest.raises(ValueError, match="labels must lie"):
        learner.observe((x, torch.full((10,), -1)), task_id=0)


def test_nan_or_inf_in_inputs(learner):
    x, y = two_class_data(10, 4)
    x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        learner.observe((x, y), task_id=0)
    x[3, 1] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf"):
        learner.evaluate((x, y), task_id=0)


def test_unknown_task_id_on_a_multi_head_net(learner):
    with pytest.raises(ValueError, match="unknown task id 2"):
        learner.observe(two_class_data(10, 4), task_id=2)
    with pytest.raises(ValueError, match="unknown task id"):
        learner.predict(two_class_data(10, 4)[0], task_id=5)


def test_empty_task(learner):
    with pytest.raises(ValueError, match="empty"):
        learner.observe((torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)), task_id=0)


def test_mismatched_lengths_and_float_labels(learner):
    x, y = two_class_data(10, 4)
    with pytest.raises(ValueError, match="10 inputs but 9 targets"):
        learner.observe((x, y[:9]), task_id=0)
    with pytest.raises(ValueError, match="integer"):
        learner.observe((x, y.float()), task_id=0)


def test_regression_targets_with_nan():
    learner = VCL(
        BayesianLinear(3, 1), likelihood=GaussianLikelihood(1.0), epochs=1, progress=False
    )
    y = torch.randn(5)
    y[0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        learner.observe((torch.randn(5, 3), y))


def test_diverging_training_raises_and_keeps_the_previous_posterior(learner, monkeypatch):
    learner.observe(two_class_data(64, 4), task_id=0)
    prior_before = {
        k: (d.base_dist.loc.clone(), d.base_dist.scale.clone())
        for k, d in learner.current_prior().items()
    }
    guide_before = {
        k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)
    }
    likelihood = learner.model.likelihood
    calls = {"n": 0}
    original = likelihood.log_prob

    def poisoned(outputs, y):
        calls["n"] += 1
        value = original(outputs, y)
        return value * float("nan") if calls["n"] > 1 else value

    monkeypatch.setattr(likelihood, "log_prob", poisoned)
    with pytest.raises(DivergenceError, match="nan"):
        learner.observe(two_class_data(64, 4, column=1), task_id=1)
    assert learner.tasks_seen == [0]
    for name, (loc, scale) in prior_before.items():
        now = learner.current_prior()[name].base_dist
        assert torch.equal(now.loc, loc) and torch.equal(now.scale, scale)
    for key, value in guide_before.items():
        assert torch.equal(learner.guide.state_dict()[key], value), key


@pytest.mark.parametrize(
    "options, message",
    [
        ({"samples_per_chunk": 0}, "samples_per_chunk must be a positive integer"),
        ({"samples_per_chunk": -1}, "samples_per_chunk must be a positive integer"),
        ({"samples_per_chunk": 2.5}, "samples_per_chunk must be a positive integer"),
        ({"precision_floor": float("inf")}, r"precision_floor must lie in \(0, "),
        ({"precision_floor": float("nan")}, r"precision_floor must lie in \(0, "),
        ({"precision_floor": True}, r"precision_floor must lie in \(0, "),
    ],
)
def test_a_grs_memory_refuses_arguments_that_would_hang_or_fail_later(options, message):
    with pytest.raises(ValueError, match=message):
        GaussianResidualMemory(5, **options)


@pytest.mark.parametrize("time", ["2", True, torch.tensor(1.0)])
def test_a_time_stamp_must_be_a_real_number(time):
    learner = VCL(BayesianMLP(4, [8], 2), progress=False, epochs=1)
    with pytest.raises(TypeError, match="time must be a real number"):
        learner.observe(two_class_data(16, 4), time=time)
    assert learner.tasks_seen == [] and learner.times == []


def test_a_memory_chosen_after_a_fit_that_never_happens_is_refused_up_front():
    with pytest.raises(ValueError, match="NoPropagation transition fits nothing"):
        VCL(BayesianMLP(4, [8], 2), memory=GaussianResidualMemory(5), transition=NoPropagation())
