"""Adam's state carried across tasks (``carry_adam_state``): one optimiser for the stream.

The exact check: with whole-batch steps, two one-epoch steps of the same data must end where one
two-epoch step does, since Adam then runs on (its count at 2 and its moments kept) as it would
inside one fit; without the carry the second fit restarts Adam and ends elsewhere. Then: a failed
step leaves the carried state as it was, a saved learner resumes to the same values, a memory's
refits never touch it, and fitters without Adam refuse the setting.
"""

import pytest
import torch

from pyro_cl import IVON, VCL, VOGN, DivergenceError, FineTuning
from pyro_cl.infer.adam_moments import AdamMoments
from pyro_cl.infer.config import Optimisation
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianMLP

from .helpers import two_class_data

WHOLE_BATCH = {"batch_size": None, "progress": False, "learning_rate": 0.05}


def fine_tuning(epochs: int, carry: bool) -> FineTuning:
    return FineTuning(
        BayesianMLP(4, [8], 2), seed=0, epochs=epochs, carry_adam_state=carry, **WHOLE_BATCH
    )


def means(learner) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in learner.guide.locs().items()}


def assert_close(a: dict, b: dict, **tolerance) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **tolerance)


def one_fit_and_two_steps(carry: bool) -> tuple[dict, FineTuning]:
    """The means after one two-epoch step, and a learner after two one-epoch steps of the same
    data (``carry``: with Adam's state carried between them)."""
    data = two_class_data(64, 4)
    once = fine_tuning(epochs=2, carry=False)
    once.observe(data)
    twice = fine_tuning(epochs=1, carry=carry)
    twice.observe(data)
    twice.observe(data)
    return means(once), twice


def test_two_steps_carrying_adam_end_where_one_fit_of_both_epochs_does():
    once, carried = one_fit_and_two_steps(carry=True)
    assert_close(means(carried), once)
    steps = {kept["step"].item() for kept in carried.adam_moments.moments.values()}
    assert steps == {2.0}


def test_without_the_carry_the_second_step_restarts_adam():
    once, fresh = one_fit_and_two_steps(carry=False)
    difference = max((means(fresh)[k] - once[k]).abs().max() for k in once)
    assert difference > 1e-3  # a restarted Adam's first step moves each weight by ~lr
    assert len(fresh.adam_moments) == 0


def test_the_elbo_fit_carries_every_site_by_name_unpacked():
    learner = VCL(
        BayesianMLP(4, [8], 2, heads=2),
        seed=0,
        epochs=2,
        ml_init_epochs=0,
        carry_adam_state=True,
        **WHOLE_BATCH,
    )
    learner.observe(two_class_data(64, 4), task_id=0)
    first = dict(learner.adam_moments.moments)
    learner.observe(two_class_data(64, 4, column=1), task_id=1)
    kept = learner.adam_moments.moments
    trunk = [name for name in first if "heads" not in name]
    assert trunk and all(kept[name]["step"].item() == 4.0 for name in trunk)
    new_head = [name for name in kept if name not in first]
    assert new_head and all(kept[name]["step"].item() == 2.0 for name in new_head)
    assert all(name.startswith(("loc.", "log_variance.")) for name in kept)


def test_a_failed_step_leaves_the_carried_state_as_it_was():
    learner = fine_tuning(epochs=2, carry=True)
    learner.observe(two_class_data(64, 4))
    before = learner.adam_moments.state_dict()
    learner.config = learner.config.replace(learning_rate=1e30)
    with pytest.raises(DivergenceError):
        learner.observe(two_class_data(64, 4, column=1))
    after = learner.adam_moments.state_dict()
    assert after.keys() == before.keys()
    for name in before:
        for key in before[name]:
            assert torch.equal(after[name][key], before[name][key])


def test_a_saved_learner_resumes_with_adam_where_it_was(tmp_path):
    first, second = two_class_data(64, 4), two_class_data(64, 4, column=1)
    straight = fine_tuning(epochs=2, carry=True)
    straight.observe(first)
    straight.save(tmp_path / "after-one.pt")
    straight.observe(second)
    resumed = FineTuning.load(tmp_path / "after-one.pt")
    assert len(resumed.adam_moments) == len(straight.adam_moments)
    resumed.observe(second)
    assert_close(means(resumed), means(straight), rtol=0, atol=0)


def test_a_memory_refit_does_not_step_the_carried_adam():
    learner = VCL(
        BayesianMLP(4, [8], 2),
        memory=RandomCoreset(10),
        seed=0,
        epochs=3,
        refit_epochs=5,
        ml_init_epochs=0,
        carry_adam_state=True,
        **WHOLE_BATCH,
    )
    learner.observe(two_class_data(64, 4))
    steps = {kept["step"].item() for kept in learner.adam_moments.moments.values()}
    assert steps == {3.0}  # the propagation fit's three whole-batch steps, not the refit's five


@pytest.mark.parametrize("fitter", [VOGN(), IVON()], ids=lambda f: type(f).__name__)
def test_a_fitter_without_adam_refuses_to_carry_it(fitter):
    with pytest.raises(ValueError, match="does not fit with Adam"):
        VCL(BayesianMLP(4, [8], 2), fitter=fitter, carry_adam_state=True)


def test_the_setting_must_be_a_bool():
    with pytest.raises(TypeError, match="carry_adam_state must be True or False"):
        Optimisation(carry_adam_state="yes")


def test_moments_of_another_shape_are_refused():
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.Adam([parameter])
    moments = AdamMoments()
    moments.load_state_dict(
        {"w": {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)}}
    )
    with pytest.raises(ValueError, match="shape"):
        moments.load_into(optimizer, {"w": parameter})
    with pytest.raises(ValueError, match="must hold step"):
        moments.load_state_dict({"w": {"exp_avg": torch.zeros(2)}})
