"""Parts a user writes from outside the package: a transition, a memory and a penalty.

Each is a few dozen lines of user code, runs through ``observe``, and saves, loads and resumes to
the same state as a learner that never stopped.
"""

import pytest
import torch

from pyro_cl import (
    VCL,
    DivergenceError,
    FineTuning,
    Penalty,
    PointEstimateFitter,
    Transition,
    map_gaussian_sites,
)
from pyro_cl.infer.callbacks import Callback
from pyro_cl.infer.per_example import gradient_statistics
from pyro_cl.memory import Memory
from pyro_cl.nn import BayesianMLP, IndianBuffetMLP
from pyro_cl.posterior import (
    base_distribution,
    detach_distribution,
    distribution_parameters,
    read_priors,
)
from tests.helpers import two_class_data

SMALL = dict(epochs=3, batch_size=32, num_particles=2, num_predictive_samples=5, progress=False)


# ---------------------------------------------------------------- user code
class WidenPriors(Transition):
    """Multiplies every Gaussian prior variance by ``factor`` per unit of elapsed time; other
    sites (an IBP net's Beta sticks) are handed on unchanged."""

    name = "test_widen_priors"

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, posterior, context):
        growth = self.factor ** (0.5 * context.elapsed)

        def widen(loc, scale, initial_loc, initial_scale):
            return loc, scale * growth

        return map_gaussian_sites(posterior, context.initial_prior, widen, others="keep")


class LowestLikelihoodMemory(Memory):
    """Keeps the ``size`` points of ``D_t ∪ M_{t-1}`` that the fitted posterior explains worst."""

    name = "test_lowest_likelihood"
    order = "after"
    refit = False

    def __init__(self, size: int) -> None:
        super().__init__(size, budget="total")

    def select(self, candidates, size, view):
        scores = torch.empty(len(candidates), device=candidates.x.device)
        for task in candidates.tasks():
            rows = candidates.task_ids == task
            scores[rows] = view.log_predictive(candidates.x[rows], candidates.y[rows], task, 20)
        return torch.argsort(scores)[:size]


class QuadraticAnchor(Penalty):
    """EWC: ``λ/2 Σ_i F_i (θ_i - θ*_i)²`` with the diagonal empirical Fisher at the last optimum."""

    name = "test_quadratic_anchor"

    def __init__(self, strength: float) -> None:
        self.strength = strength
        self.anchor, self.fisher = {}, {}

    def __call__(self, values):
        return sum(
            0.5 * self.strength * (self.fisher[n] * (values[n] - self.anchor[n]) ** 2).sum()
            for n in self.anchor
        )

    def after_fit(self, context, values, data, task_id):
        theta = {name: value.unsqueeze(0) for name, value in values.items()}
        stats = gradient_statistics(context.model, theta, data.x, data.y, task_id, "fisher")
        self.anchor = {n: v.clone() for n, v in values.items()}
        self.fisher = dict(stats.squared)  # Σ_n g_n²: the Fisher of the whole task

    def state_dict(self):
        return {"anchor": dict(self.anchor), "fisher": dict(self.fisher)}

    def load_state_dict(self, state):
        self.anchor, self.fisher = dict(state["anchor"]), dict(state["fisher"])


# ---------------------------------------------------------------- helpers
def assert_same_state(a, b):
    assert a.tasks_seen == b.tasks_seen and a.times == b.times
    prior_a, prior_b = a.current_prior(), b.current_prior()
    assert prior_a.keys() == prior_b.keys()
    for name, q in prior_a.items():
        theirs = distribution_parameters(prior_b[name])
        for key, value in distribution_parameters(q).items():
            assert torch.equal(value, theirs[key]), (name, key)
    for (key, x), (_, y) in zip(
        a.guide.state_dict().items(), b.guide.state_dict().items(), strict=True
    ):
        if torch.is_tensor(x):
            assert torch.equal(x, y), key


def resume_matches_straight_run(make, tasks, times, tmp_path):
    """Learn ``tasks`` straight through, and again saving and loading after the first."""
    straight = make()
    for t, (data, time) in enumerate(zip(tasks, times, strict=True)):
        straight.observe(data, task_id=t, time=time)
    first = make()
    first.observe(tasks[0], task_id=0, time=times[0])
    first.save(tmp_path / "state.pt")
    torch.rand(100)  # the process goes on doing other random things
    resumed = type(first).load(tmp_path / "state.pt")
    for t in range(1, len(tasks)):
        resumed.observe(tasks[t], task_id=t, time=times[t])
    assert_same_state(straight, resumed)
    return straight, resumed


class PriorAtPriorsFitStart(Callback):
    """The net's priors (base distributions, copied) at the start of every fit."""

    def __init__(self, net):
        self.net, self.seen = net, []

    def on_fit_start(self, description, epochs):
        self.seen.append(
            {n: detach_distribution(base_distribution(d)) for n, d in read_priors(self.net).items()}
        )


class PriorAtFitStart(Callback):
    def __init__(self, net):
        self.net, self.seen = net, []

    def on_fit_start(self, description, epochs):
        self.seen.append({n: d.base_dist.scale.clone() for n, d in read_priors(self.net).items()})


# ---------------------------------------------------------------- the transition
def test_a_user_transition_widens_the_prior_by_the_elapsed_time_and_resumes(tmp_path):
    net = BayesianMLP(4, [8], 2)
    learner = VCL(net, transition=WidenPriors(3.0), seed=0, ml_init_epochs=0, **SMALL)
    learner.observe(two_class_data(60, 4), time=0.0)
    posterior = {n: d.base_dist.scale.clone() for n, d in learner.current_prior().items()}
    watcher = PriorAtFitStart(learner.net)
    learner.observe(two_class_data(60, 4, column=1, seed=1), time=2.5, callbacks=[watcher])
    for name, scale in posterior.items():  # variance × 3^2.5 at the start of the next fit
        torch.testing.assert_close(watcher.seen[0][name] ** 2, scale**2 * 3.0**2.5)

    tasks = [two_class_data(60, 4, column=c, seed=c) for c in range(3)]
    resume_matches_straight_run(
        lambda: VCL(BayesianMLP(4, [8], 2), transition=WidenPriors(2.0), seed=1, **SMALL),
        tasks,
        [0.0, 0.5, 3.0],  # not equidistant
        tmp_path,
    )


def test_the_user_transition_works_on_an_ibp_net_and_resumes(tmp_path):
    """Gaussian weights widen, the Beta sticks pass through, through save, load and resume."""

    def make():
        net = IndianBuffetMLP(4, [6], 2, heads=3, alpha=3.0)
        return VCL(net, transition=WidenPriors(2.0), seed=1, ml_init_epochs=0, **SMALL)

    tasks = [two_class_data(60, 4, column=c, seed=c) for c in range(3)]
    learner = make()
    learner.observe(tasks[0], task_id=0, time=0.0)
    posterior = learner.current_prior()
    sticks = [n for n, q in posterior.items() if not hasattr(base_distribution(q), "scale")]
    assert sticks  # the net has non-Gaussian sites
    watcher = PriorAtPriorsFitStart(learner.net)
    learner.observe(tasks[1], task_id=1, time=1.0, callbacks=[watcher])
    for name, q in posterior.items():
        seen = watcher.seen[0][name]
        if name in sticks:
            torch.testing.assert_close(seen.concentration1, base_distribution(q).concentration1)
        else:
            torch.testing.assert_close(seen.scale**2, base_distribution(q).scale ** 2 * 2.0)
    resume_matches_straight_run(make, tasks, [0.0, 1.0, 3.0], tmp_path)


# ---------------------------------------------------------------- the memory
def test_a_user_memory_keeps_the_worst_explained_points_after_the_fit_and_resumes(
    tmp_path, monkeypatch
):
    x, y = two_class_data(200, 4)
    flipped = torch.argsort(x[:, 0].abs(), descending=True)[:5]  # confidently wrong labels
    y[flipped] = 1 - y[flipped]
    logistic = BayesianMLP(4, [], 2)  # logistic regression: the flipped points stand out
    learner = VCL(logistic, memory=LowestLikelihoodMemory(5), seed=0, **SMALL)
    learner.config = learner.config.replace(epochs=40, learning_rate=0.05)
    learner.observe((x, y))
    kept = {tuple(row.tolist()) for row in learner.memory_points.x}
    assert kept == {tuple(row.tolist()) for row in x[flipped]}
    # the fit on D_t ∪ M_{t-1} predicts; the points let go are fitted again from the step's
    # prior into the Gaussian part handed on (Kurle et al.'s ELBO Gaussian update)
    (predicting,) = learner.prediction_posteriors.values()
    handed_on = learner.current_prior()
    assert not all(torch.equal(predicting[n].mean, q.mean) for n, q in handed_on.items())

    sizes = []
    original = type(learner.fitter).fit

    def recording(self, context, guide, problem):
        sizes.append(problem.num_data)
        return original(self, context, guide, problem)

    monkeypatch.setattr(type(learner.fitter), "fit", recording)
    learner.observe(two_class_data(50, 4, column=1, seed=3), task_id=0)
    assert sizes == [50 + 5, 50]  # fitted on D_t ∪ M_{t-1}; M_t chosen; the rest from p_t
    assert len(learner.memory_points) == 5
    monkeypatch.undo()

    tasks = [two_class_data(60, 4, column=c, seed=c) for c in range(3)]
    straight, resumed = resume_matches_straight_run(
        lambda: VCL(BayesianMLP(4, [8], 2), memory=LowestLikelihoodMemory(7), seed=2, **SMALL),
        tasks,
        [0, 1, 2],
        tmp_path,
    )
    assert torch.equal(straight.memory_points.x, resumed.memory_points.x)


# ---------------------------------------------------------------- the penalty
def test_a_user_penalty_anchors_the_point_estimate_and_resumes(tmp_path):
    old, new = two_class_data(200, 4), two_class_data(200, 4, column=1, seed=1)

    def trained(strength):
        fitter = PointEstimateFitter(QuadraticAnchor(strength))
        learner = FineTuning(BayesianMLP(4, [8], 2), fitter=fitter, seed=0, **SMALL)
        learner.config = learner.config.replace(epochs=20, learning_rate=0.05)
        learner.observe(old)
        anchor = {n: v.clone() for n, v in fitter.penalty.anchor.items()}
        fisher = fitter.penalty.fisher
        learner.observe(new)
        locs = learner.guide.locs()
        moved = sum((fisher[n] * (locs[n] - anchor[n]) ** 2).sum() for n in anchor)
        return learner, anchor, moved.item()

    free, anchor, moved_free = trained(0.0)
    # strength 1 (the Laplace approximation of the old task's log-likelihood) changes the result
    _, _, moved_laplace = trained(1.0)
    assert anchor.keys() == set(free.trained_sites) and moved_laplace < 0.5 * moved_free
    held, _, moved_held = trained(100.0)
    assert moved_held < 0.1 * moved_free
    assert held.evaluate(old)["accuracy"] > free.evaluate(old)["accuracy"]

    before = {n: v.clone() for n, v in held.fitter.penalty.anchor.items()}
    held.config = held.config.replace(learning_rate=1e30)
    with pytest.raises(DivergenceError):  # a failed task leaves the penalty's state as it was
        held.observe(old)
    for name, value in held.fitter.penalty.anchor.items():
        assert torch.equal(value, before[name])

    def make():
        fitter = PointEstimateFitter(QuadraticAnchor(10.0))
        return FineTuning(BayesianMLP(4, [8], 2), fitter=fitter, seed=3, **SMALL)

    straight, resumed = resume_matches_straight_run(make, [old, new, old], [0, 1, 2], tmp_path)
    for name, value in straight.fitter.penalty.fisher.items():
        assert torch.equal(value, resumed.fitter.penalty.fisher[name])
    for name, value in straight.guide.locs().items():
        assert torch.equal(value, resumed.guide.locs()[name])


# ---------------------------------------------------------------- refusals
def test_a_part_that_cannot_be_rebuilt_is_refused_at_save_not_at_load(tmp_path):
    class Unnamed(Transition):
        def __call__(self, posterior, context):
            return posterior

    learner = VCL(BayesianMLP(4, [8], 2), transition=Unnamed(), **SMALL)
    learner.observe(two_class_data(40, 4))
    with pytest.raises(TypeError, match=r"not registered; give Unnamed a class attribute `name"):
        learner.save(tmp_path / "state.pt")
    assert not (tmp_path / "state.pt").exists()

    class Forgetful(Transition):
        name = "test_forgetful"

        def __init__(self, rate: float) -> None:
            self.speed = rate  # not kept under its argument's name

        def __call__(self, posterior, context):
            return posterior

    learner.transition = Forgetful(0.5)
    with pytest.raises(TypeError, match="constructor argument 'rate'"):
        learner.save(tmp_path / "state.pt")
    with pytest.raises(TypeError, match="transition must be a Transition"):
        VCL(BayesianMLP(4, [8], 2), transition=lambda posterior, context: posterior)


def test_time_stamps_must_increase():
    learner = VCL(BayesianMLP(4, [8], 2), **SMALL)
    learner.observe(two_class_data(40, 4), time=1.5)
    with pytest.raises(ValueError, match="not after the last step's time 1.5"):
        learner.observe(two_class_data(40, 4), time=1.5)
    with pytest.raises(ValueError, match="finite"):
        learner.observe(two_class_data(40, 4), time=float("nan"))
    learner.observe(two_class_data(40, 4))  # default: one after the last
    assert learner.times == [1.5, 2.5]


class SingleHeadOnlyMemory(Memory):
    """A user's memory that knows it cannot serve a multi-head net, and says so when the
    learner is built: its own compatibility check."""

    name = "single_head_only_test_memory"

    def select(self, candidates, size, view):
        return torch.arange(size)

    def check_parts(self, parts):
        super().check_parts(parts)
        if parts.model.multi_head:
            raise ValueError("SingleHeadOnlyMemory serves single-head nets only")


def test_a_users_part_refuses_a_combination_when_the_learner_is_built():
    net = BayesianMLP(4, [8], 2, heads=2)
    with pytest.raises(ValueError, match="single-head nets only"):
        VCL(net, memory=SingleHeadOnlyMemory(3))
    learner = VCL(net, epochs=1, progress=False)  # the refused learner did not keep the net
    learner.observe(two_class_data(20, 4), task_id=0)
    VCL(BayesianMLP(4, [8], 2), memory=SingleHeadOnlyMemory(3), epochs=1, progress=False)
