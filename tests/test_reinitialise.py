"""What each guide re-initialisation policy does to a site before a later task."""

import torch

from pyro_cl import ContinualLearner, GaussianLikelihood
from pyro_cl.infer.callbacks import Callback
from pyro_cl.nn import BayesianLinear
from pyro_cl.posterior import read_priors


def test_cap_variance_lowers_only_the_variances_above_the_cap_and_keeps_the_means():
    learner = ContinualLearner(
        BayesianLinear(3, 1, bias=False),
        likelihood=GaussianLikelihood(0.5),
        epochs=1,
        progress=False,
    )
    learner.observe((torch.randn(4, 3), torch.randn(4)), task_id=0)
    guide = learner.guide
    loc, log_variance = guide.gaussian_parameters(["weight"])["weight"]
    with torch.no_grad():
        loc.copy_(torch.tensor([[0.5, -1.0, 2.0]]))
        log_variance.copy_(torch.tensor([[-9.0, -7.0, 0.0]]))
    with torch.no_grad():
        guide.reinitialise("cap_variance", read_priors(learner.net, ["weight"]), log_variance=-7.0)
    torch.testing.assert_close(loc, torch.tensor([[0.5, -1.0, 2.0]]), rtol=0, atol=0)
    torch.testing.assert_close(log_variance, torch.tensor([[-9.0, -7.0, -7.0]]), rtol=0, atol=0)


def test_fresh_cap_variance_caps_the_variances_and_draws_every_mean_afresh():
    """GVCL's start of a later task: the capped variances of ``cap_variance`` and the means of a
    new layer, ``U(-1/√fan_in, 1/√fan_in)``, whatever they were (a unit the last task pruned
    to 0 starts alive)."""
    learner = ContinualLearner(
        BayesianLinear(400, 1), likelihood=GaussianLikelihood(0.5), epochs=1, progress=False
    )
    learner.observe((torch.randn(4, 400), torch.randn(4)), task_id=0)
    guide = learner.guide
    pairs = guide.gaussian_parameters(["weight", "bias"])
    with torch.no_grad():
        for loc, log_variance in pairs.values():
            loc.fill_(3.0)
            log_variance.copy_(torch.linspace(-12.0, 0.0, loc.numel()).reshape(loc.shape))
        before = {name: pair[1].clone() for name, pair in pairs.items()}
        priors = read_priors(learner.net, ["weight", "bias"])
        guide.reinitialise("fresh_cap_variance", priors, log_variance=-7.0)
    for name, (loc, log_variance) in pairs.items():
        torch.testing.assert_close(log_variance, before[name].clamp(max=-7.0), rtol=0, atol=0)
        assert loc.abs().max() <= 400**-0.5  # the bias too: its layer's fan-in
    # the 400 weights: a draw across the bound, not 3 and not 0
    weight = pairs["weight"][0]
    assert 0.8 * 400**-0.5 < weight.abs().max() and abs(weight.mean()) < 0.2 * 400**-0.5


def test_a_learner_caps_the_variances_before_each_later_task_only():
    """``between_tasks="cap_variance"`` with the first task's variances wide (a prior at log σ² =
    0): the second task starts with none above ``later_init_log_variance``."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(20, 3, generator=generator)
    y = x @ torch.tensor([1.0, 0.0, -1.0])
    starts = []

    class FirstVariances(Callback):
        def on_fit_start(self, description: str, epochs: int) -> None:
            pair = learner.guide.gaussian_parameters(["weight"])["weight"]
            starts.append(pair[1].detach().clone())

    learner = ContinualLearner(
        BayesianLinear(3, 1, bias=False),
        likelihood=GaussianLikelihood(0.5),
        between_tasks="cap_variance",
        init_log_variance=0.0,
        later_init_log_variance=-7.0,
        epochs=2,
        ml_init_epochs=0,
        callbacks=[FirstVariances()],
        progress=False,
        seed=0,
    )
    learner.observe((x, y), task_id=0)
    learner.observe((x, y), task_id=1)
    assert starts[0].max() > -1  # the first task starts at init_log_variance
    assert starts[1].max() <= -7.0
