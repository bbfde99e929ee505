"""No silently wrong posterior: blow-ups, overflowing inputs, failed refits, modes and threads,
input types (issue 12)."""

import threading

import numpy as np
import pyro
import pytest
import torch

from pyro_cl import VCL, DivergenceError, FineTuning
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.divergence import Divergence
from pyro_cl.memory import KCenterCoreset, Memory, RandomCoreset, farthest_first
from pyro_cl.nn import BayesianMLP
from pyro_cl.points import Points
from tests.helpers import two_class_data

SMALL = dict(epochs=2, batch_size=32, num_particles=1, num_predictive_samples=4, progress=False)


def _state(learner):
    guide = {k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)}
    prior = {k: (q.base_dist.loc.clone(), q.base_dist.scale.clone()) for k, q in
             learner.current_prior().items()}  # fmt: skip
    return guide, prior, list(learner.trained_sites), list(learner.tasks_seen)


def _assert_unchanged(learner, before):
    guide, prior, trained, seen = _state(learner)
    assert guide.keys() == before[0].keys()
    assert all(torch.equal(guide[k], before[0][k]) for k in guide)
    assert prior.keys() == before[1].keys()
    assert all(
        torch.equal(a, b) for k in prior for a, b in zip(prior[k], before[1][k], strict=True)
    )
    assert trained == before[2] and seen == before[3]


def test_divergence_test_on_losses_and_values():
    divergence = Divergence(loss_growth=10, parameter_bound=5)
    divergence.check_loss(20.0, 2.0, "fit")  # 2 + 10·2 = 22 allowed
    with pytest.raises(DivergenceError, match="rose from 2 to 23"):
        divergence.check_loss(23.0, 2.0, "fit")
    with pytest.raises(DivergenceError, match="rose from -0.5"):
        divergence.check_loss(10.0, -0.5, "fit")  # -0.5 + 10·max(0.5, 1) = 9.5
    with pytest.raises(DivergenceError, match="became nan"):
        divergence.check_loss(float("nan"), 1.0, "fit")
    divergence.check_values({"w": torch.tensor([-5.0, 5.0])}, "fit")
    with pytest.raises(DivergenceError, match="'w' reach 6"):
        divergence.check_values({"w": torch.tensor([1.0, -6.0])}, "fit")
    with pytest.raises(DivergenceError, match="not finite"):
        Divergence(parameter_bound=None).check_values({"w": torch.tensor([float("inf")])}, "")
    with pytest.raises(ValueError, match=r"loss_growth must lie in \(0,"):
        Divergence(loss_growth=0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FineTuning(BayesianMLP(4, [8], 2), learning_rate=1e8, seed=0, **SMALL),
        lambda: VCL(BayesianMLP(4, [8], 2), fitter=VOGN(learning_rate=1e6), seed=0, **SMALL),
        lambda: VCL(BayesianMLP(4, [8], 2), fitter=IVON(learning_rate=1e6), seed=0, **SMALL),
        lambda: VCL(BayesianMLP(4, [8], 2), learning_rate=1e4, seed=0, **SMALL),
    ],
    ids=["finetune", "vogn", "ivon", "svi"],
)
def test_a_blow_up_on_a_later_task_is_refused_and_the_previous_state_kept(make):
    learner = make()
    learning_rate = learner.config.optimisation.learning_rate
    fitter_rate = getattr(learner.fitter, "learning_rate", None)
    # The first task with a sane step size, the second with the one that blows up.
    learner.config = learner.config.replace(learning_rate=1e-3)
    if fitter_rate is not None:
        learner.fitter.learning_rate = 1e-3
    learner.observe(two_class_data(64, 4))
    before = _state(learner)
    learner.config = learner.config.replace(learning_rate=learning_rate)
    if fitter_rate is not None:
        learner.fitter.learning_rate = fitter_rate
    with pytest.raises(DivergenceError):
        learner.observe(two_class_data(64, 4, column=1))
    _assert_unchanged(learner, before)


def test_a_last_step_that_overflows_is_caught_by_the_fitted_values():
    # One whole-batch step: the loss is computed before the step, so only the values show it.
    learner = FineTuning(
        BayesianMLP(4, [8], 2), learning_rate=1e30, epochs=1, batch_size=None, progress=False
    )
    learner.config = learner.config.replace(loss_growth=None)
    with pytest.raises(DivergenceError, match="fitted values"):
        learner.observe(two_class_data(64, 4))
    assert learner.tasks_seen == [] and learner.trained_sites == []


def test_predictions_are_never_computed_from_nan():
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    x, y = two_class_data(64, 4)
    learner.observe((x, y))
    x = x.clone()
    x[:3] *= 1e30
    with pytest.raises(ValueError, match=r"NaN or infinite for 3 of 64 inputs"):
        learner.predict(x)
    with pytest.raises(ValueError, match="overflow the net"):
        learner.evaluate((x, y))


def test_a_failed_refit_rolls_back_the_new_head_and_leaves_no_parameters_behind():
    net = BayesianMLP(4, [8], 2, heads=2)
    learner = VCL(net, memory=RandomCoreset(5), seed=0, elbo="pyro", **SMALL)
    learner.observe(two_class_data(64, 4), task_id=0)
    before = _state(learner)
    store_before = set(pyro.get_param_store().keys())
    original = learner.fitter.fit

    def refit_diverges(context, guide, problem):
        if problem.description.startswith("coreset refit"):
            raise DivergenceError("refit diverged")
        return original(context, guide, problem)

    learner.fitter.fit = refit_diverges
    with pytest.raises(DivergenceError, match="refit diverged"):
        learner.observe(two_class_data(64, 4, column=1), task_id=1)
    _assert_unchanged(learner, before)  # no head-1 site in trained_sites, guide or prior
    assert not any("heads.1" in name for name in learner.guide.state_dict())
    assert set(pyro.get_param_store().keys()) <= store_before


def test_refits_do_not_grow_pyros_parameter_store():
    learner = VCL(BayesianMLP(4, [8], 2), memory=RandomCoreset(5), seed=0, elbo="pyro", **SMALL)
    sizes = []
    for task in range(4):
        learner.observe(two_class_data(40, 4, column=task % 4))
        sizes.append(len(pyro.get_param_store().keys()))
    assert sizes == [sizes[0]] * 4


def test_observe_trains_in_training_mode_and_restores_the_users_mode():
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    modes = []
    learner.net.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    learner.net.eval()
    learner.observe(two_class_data(64, 4))
    assert modes and all(modes)
    assert not learner.net.training
    modes.clear()
    learner.predict(two_class_data(8, 4)[0])
    assert modes and not any(modes) and not learner.net.training


def test_predict_from_many_threads_while_another_thread_trains():
    learner = FineTuning(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    x, y = two_class_data(64, 4)
    learner.observe((x, y))
    expected = learner.predict(x)
    seen = []
    learner.net.register_forward_pre_hook(
        lambda module, args: seen.append((threading.current_thread().name, module.training))
    )
    errors, results = [], []

    def predict_many():
        try:
            for _ in range(10):
                results.append(learner.predict(x))
        except Exception as error:  # collected: an exception in a thread would be lost
            errors.append(error)

    def train():
        try:
            learner.observe(two_class_data(64, 4, column=1))
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=predict_many, name=f"predict-{i}") for i in range(4)]
    threads.append(threading.Thread(target=train, name="train"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 40
    # Every prediction ran in evaluation mode and every training step in training mode.
    assert all(training == (name == "train") for name, training in seen)
    # Predictions made before the second task equal the sequential ones; all are probabilities.
    assert any(torch.equal(r, expected) for r in results)
    assert all(torch.allclose(r.sum(-1), torch.ones(64)) for r in results)


def test_numpy_and_other_float_dtypes_are_converted_and_integer_labels_widened():
    x, y = two_class_data(64, 4)
    reference = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    expected = reference.observe((x, y))
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    assert learner.observe((x.double().numpy(), y.to(torch.uint8).numpy())) == expected
    learner.observe((x.to(torch.bfloat16), y.int()))
    probabilities = learner.predict(x.half())
    assert probabilities.dtype == torch.float32 and probabilities.shape == (64, 2)
    with pytest.raises(ValueError, match="inputs must be floating point, got dtype torch.uint8"):
        learner.observe(((x > 0).to(torch.uint8), y))


@pytest.mark.parametrize(
    "task_id, normalised",
    [(np.int64(1), 1), (torch.tensor(1), 1), (np.int32(0), 0), (1, 1)],
)
def test_integer_like_task_ids_are_normalised(task_id, normalised):
    learner = VCL(BayesianMLP(4, [8], 2, heads=3), seed=0, **SMALL)
    learner.observe(two_class_data(32, 4), task_id=task_id)
    assert learner.tasks_seen == [normalised] and type(learner.tasks_seen[0]) is int


@pytest.mark.parametrize(
    "task_id, message",
    [
        (True, "must be an integer, got True"),
        ("a", "must be an integer, got 'a'"),
        (1.0, "must be an integer, got 1.0"),
        (torch.tensor([0, 1]), "must be an integer, got the tensor"),
        (-1, "must be non-negative"),
        (3, "unknown task id 3: this multi-head net has heads 0..2"),
    ],
)
@pytest.mark.parametrize("make", [VCL, FineTuning])
def test_bad_task_ids_are_refused_with_one_clear_message(task_id, message, make):
    heads = 3 if isinstance(task_id, int) and task_id == 3 else 1
    learner = make(BayesianMLP(4, [8], 2, heads=heads), seed=0, **SMALL)
    with pytest.raises(ValueError, match=message):
        learner.observe(two_class_data(32, 4), task_id=task_id)
    assert learner.tasks_seen == []


def test_k_center_is_unchanged_by_the_scale_of_finite_data():
    x = torch.randn(300, 6)
    chosen = farthest_first(x, 25)
    assert torch.equal(farthest_first(x * 1e20, 25), chosen)
    assert torch.equal(farthest_first(x * 1e-20, 25), chosen)
    update = KCenterCoreset(5).update(None, Points.of_task(x * 1e20, torch.zeros(300).long(), 0))
    assert len(update.points) == 5


class _Returns(Memory):
    def __init__(self, size: int, indices=None) -> None:
        super().__init__(size)
        self.indices = indices

    def select(self, candidates, size, view):
        return self.indices


def test_a_selectors_indices_are_checked_not_truncated():
    points = Points.of_task(*two_class_data(20, 4), 0)
    assert len(_Returns(3, [0, 5, 7]).update(None, points).points) == 3
    with pytest.raises(ValueError, match="integer indices, got dtype torch.float32"):
        _Returns(2, torch.tensor([0.7, 3.2])).update(None, points)
    with pytest.raises(ValueError, match="integer indices"):
        _Returns(2, ["a", "b"]).update(None, points)
    with pytest.raises(ValueError, match="picked a point twice"):
        _Returns(2, [1, 1]).update(None, points)


def test_a_save_from_another_thread_during_observe_is_never_torn(tmp_path):
    """A save asked for mid-step (from a callback, on another thread) waits for the step and
    holds the state after it; without the lock it would write half-fitted values."""
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    learner.observe(two_class_data(64, 4))
    path, savers = tmp_path / "state.pt", []

    class SaveMidStep(Callback):
        def on_epoch_end(self, epoch, loss):
            if epoch == 0:
                saver = threading.Thread(target=learner.save, args=(path,))
                saver.start()
                saver.join(timeout=1.0)  # an unlocked save finishes in this time
                savers.append(saver)

    learner.observe(two_class_data(64, 4, column=1, seed=1), callbacks=[SaveMidStep()])
    savers[0].join()
    loaded = VCL.load(path)
    assert loaded.tasks_seen == learner.tasks_seen == [0, 0]
    for key, value in learner.guide.state_dict().items():
        if torch.is_tensor(value):
            assert torch.equal(loaded.guide.state_dict()[key], value), key
