"""Indian Buffet nets: the pieces against exact answers, and the whole through the learner."""

import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.distributions import Beta, Normal
from torch.distributions.relaxed_bernoulli import LogitRelaxedBernoulli

import pyro_cl.nn.concrete as concrete_module
from pyro_cl import VCL, ChildConcentrationGrowth, DivergenceError, install_prior
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.infer.config import Optimisation
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.infer.objectives import Minibatch, negative_elbo
from pyro_cl.infer.training import minimise
from pyro_cl.inspection import active_units, prune_weights, pruning_curve
from pyro_cl.kl import kl_to_prior
from pyro_cl.nn import BayesianMLP, IBPMask, IndianBuffetMLP
from pyro_cl.nn.concrete import LogitBinaryConcrete, binary_concrete_log_prob, mask_logits
from pyro_cl.nn.effects import RecordMasks
from pyro_cl.nn.sticks import stick_breaking_log_probabilities
from pyro_cl.points import Points
from tests.helpers import two_class_data


def _learner(hierarchical=False, growth=None, **net_options):
    net = IndianBuffetMLP(4, [6, 6], 2, heads=2, hierarchical=hierarchical, **net_options)
    return VCL(
        net,
        transition=None if growth is None else ChildConcentrationGrowth(growth),
        epochs=3,
        batch_size=25,
        num_particles=2,
        num_predictive_samples=5,
        ml_init_epochs=1,
        progress=False,
        seed=0,
    )


# ---------------------------------------------------------------- the distributions
def test_closed_form_beta_kl_equals_monte_carlo():
    torch.manual_seed(0)
    q = Beta(torch.tensor([2.0, 0.7, 5.0]), torch.tensor([3.0, 1.5, 1.0]))
    p = Beta(torch.tensor([5.0, 1.0, 1.0]), torch.tensor([1.0, 1.0, 2.0]))
    v = q.sample((400_000,))
    monte_carlo = (q.log_prob(v) - p.log_prob(v)).mean(0)
    closed_form = kl_to_prior({"v": q}, {"v": p})
    torch.testing.assert_close(closed_form, monte_carlo.sum(), rtol=0.01, atol=0.003)


def test_binary_concrete_log_density_is_the_supplements_formula():
    """log q(y) = log λ - λy + log α - 2 log(1 + exp(-λy + log α)) (text after eq. 21)."""
    y = torch.linspace(-8, 8, 41)
    for temperature, log_alpha in [(0.7, -1.3), (1.0, 0.4), (2.5, 3.0)]:
        formula = (
            math.log(temperature)
            - temperature * y
            + log_alpha
            - 2 * torch.log1p(torch.exp(-temperature * y + log_alpha))
        )
        ours = binary_concrete_log_prob(y, torch.tensor(log_alpha), temperature)
        torch.testing.assert_close(ours, formula)
        torch_density = LogitRelaxedBernoulli(
            torch.tensor(temperature), logits=torch.tensor(log_alpha)
        )
        torch.testing.assert_close(ours, torch_density.log_prob(y))
        # a density: it integrates to one
        grid = torch.linspace(-80, 80, 200_001, dtype=torch.float64)
        mass = torch.trapezoid(
            binary_concrete_log_prob(grid, torch.tensor(log_alpha), temperature).exp(), grid
        )
        assert abs(mass.item() - 1) < 1e-6
    # no overflow where exp(-λy + log α) would
    assert torch.isfinite(binary_concrete_log_prob(torch.tensor(-500.0), torch.tensor(0.0), 1.0))


def test_concrete_sampler_keeps_the_bernoulli_probability_at_any_temperature():
    """P(y > 0) = σ(log α) for every λ (Maddison et al., 2017, proposition 1)."""
    torch.manual_seed(0)
    logits = torch.tensor([-2.0, 0.0, 1.5])
    for temperature in (0.3, 1.0, 3.0):
        y = LogitBinaryConcrete(temperature, logits).rsample((200_000,))
        torch.testing.assert_close(
            (y > 0).double().mean(0), torch.sigmoid(logits).double(), atol=4e-3, rtol=0
        )


def test_mask_parameterisations():
    log_pi = torch.log(torch.tensor([1e-8, 0.2, 0.5, 0.9, 1 - 1e-7]))
    pi = log_pi.exp()
    torch.testing.assert_close(torch.sigmoid(mask_logits(log_pi, "log_odds")), pi)
    torch.testing.assert_close(torch.sigmoid(mask_logits(log_pi, "log_probability")), pi / (1 + pi))
    assert torch.isfinite(mask_logits(log_pi, "log_odds")).all()
    with pytest.raises(ValueError, match="parameterisation"):
        mask_logits(log_pi, "odds")


def test_beta_sample_gradients_agree_with_finite_differences_of_the_expectation():
    """∇_{a,b} E_{Beta(a,b)}[v²] through rsample (implicit reparameterisation) against central
    differences of the exact E[v²] = a(a+1) / ((a+b)(a+b+1))."""
    torch.manual_seed(0)

    def exact(a, b):
        return a * (a + 1) / ((a + b) * (a + b + 1))

    a0, b0, h = 2.0, 3.5, 1e-4
    a = torch.tensor(a0, requires_grad=True)
    b = torch.tensor(b0, requires_grad=True)
    v = Beta(a.expand(1_000_000), b.expand(1_000_000)).rsample()
    (v**2).mean().backward()
    finite_a = (exact(a0 + h, b0) - exact(a0 - h, b0)) / (2 * h)
    finite_b = (exact(a0, b0 + h) - exact(a0, b0 - h)) / (2 * h)
    assert a.grad.item() == pytest.approx(finite_a, rel=0.03)
    assert b.grad.item() == pytest.approx(finite_b, rel=0.03)


def test_stick_breaking_probabilities_are_the_cumulative_product_and_non_increasing():
    torch.manual_seed(0)
    sticks = Beta(torch.full((4, 30), 5.0), torch.ones(4, 30)).sample()
    log_pi = stick_breaking_log_probabilities(sticks)
    torch.testing.assert_close(log_pi.exp(), torch.cumprod(sticks, -1))
    assert (log_pi[:, 1:] <= log_pi[:, :-1]).all()
    assert torch.isfinite(stick_breaking_log_probabilities(torch.tensor([1.0, 0.0, 0.5]))).all()


# ---------------------------------------------------------------- the model
@pytest.mark.parametrize("hierarchical", [False, True])
def test_masks_have_one_row_per_data_point_in_the_data_plate(hierarchical):
    learner = _learner(hierarchical)
    x, y = two_class_data(9, 4)
    trace = poutine.trace(learner.model).get_trace(x, y, task_id=1, dataset_size=90)
    trace.compute_log_prob()
    for layer in (0, 1):
        site = trace.nodes[f"masks.{layer}.mask_logit"]
        assert site["value"].shape == (9, 6)
        assert [f.name for f in site["cond_indep_stack"]] == ["data"]
        assert site["scale"] == pytest.approx(10.0)  # 90 points, 9 in the batch
        if hierarchical:
            assert trace.nodes[f"masks.{layer}.unit_probs"]["value"].shape == (6,)
    assert ("global_sticks.v" in trace.nodes) == hierarchical
    assert ("sticks.0.v" in trace.nodes) != hierarchical
    learner.net.eval()  # test time: Bernoulli masks
    trace = poutine.trace(learner.model).get_trace(x, y, task_id=1, dataset_size=90)
    mask = trace.nodes["masks.0.mask"]["value"]
    assert mask.shape == (9, 6) and set(mask.unique().tolist()) <= {0.0, 1.0}
    # fast path: one row per point and particle
    from pyro_cl.infer.site_values import sample_outputs

    learner.net.train()
    with RecordMasks() as masks:
        sample_outputs(learner.model, {}, x, 1, num_samples=3, fast=True)
    assert [m.shape for m in masks] == [(3, 9, 6), (3, 9, 6)]


@pytest.mark.parametrize("particles", [1, 3])
@pytest.mark.parametrize("hierarchical", [False, True])
def test_fast_elbo_equals_trace_mean_field_elbo_for_ibp_nets(hierarchical, particles, monkeypatch):
    """Same mask noise on both routes, near-deterministic weights and sticks, λ1 ≠ λ2 so the
    local Concrete KL term is non-zero: the fast objective equals Pyro's TraceMeanField_ELBO
    (several particles: in one pass on both routes, the masks' noise drawn in the same order)."""
    net = IndianBuffetMLP(
        4,
        [6, 6],
        2,
        hierarchical=hierarchical,
        local_reparameterization=False,
        posterior_temperature=0.6,
        prior_temperature=1.3,
        child_concentration=3.0,
    )
    learner = VCL(net, init_log_variance=-40.0, progress=False)
    guide, model = learner.guide, learner.model
    x, y = two_class_data(16, 4)
    guide.sites_for(x, y, task_id=0, dataset_size=160)
    with torch.no_grad():  # nearly deterministic sticks: Beta(7e6, 1e6)
        for key in guide.log_concentration1:
            guide.log_concentration1[key].fill_(math.log(7e6))
            guide.log_concentration0[key].fill_(math.log(1e6))
    generator = torch.Generator()
    monkeypatch.setattr(
        concrete_module,
        "uniform_noise",
        lambda shape, like: torch.rand(shape, generator=generator, dtype=like.dtype),
    )
    losses = {}
    for fast in (True, False):
        generator.manual_seed(5)
        pyro.set_rng_seed(1)
        losses[fast] = negative_elbo(model, guide, Minibatch(x, y, 0), 160, particles, fast=fast)
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-3, atol=1e-4)


def test_the_sticks_beta_posterior_becomes_the_next_prior():
    learner = _learner()
    x, y = two_class_data(100, 4)
    learner.observe((x, y), task_id=0)
    guide = learner.guide
    for layer in (0, 1):
        q = guide.distribution(f"sticks.{layer}.v").base_dist
        prior = learner.current_prior()[f"sticks.{layer}.v"].base_dist
        assert isinstance(prior, Beta)
        torch.testing.assert_close(prior.concentration1, q.concentration1.detach())
        torch.testing.assert_close(prior.concentration0, q.concentration0.detach())
        assert not torch.allclose(prior.concentration1, torch.full((6,), 5.0))  # it learned
    learner.observe((x, 1 - y), task_id=1)  # and the next task starts from it
    assert learner.trained_sites.count("sticks.0.v") == 1


def test_hibp_child_concentration_grows_before_each_later_task_and_rolls_back_on_failure():
    learner = _learner(hierarchical=True, growth=3.0, child_concentration=2.0)
    data = two_class_data(100, 4)
    learner.observe(data, task_id=0)
    assert [m.child_concentration.item() for m in learner.net.masks] == [2.0, 2.0]
    assert "global_sticks.v" in learner.current_prior()
    prior_before = learner.current_prior()["global_sticks.v"].base_dist.concentration1.clone()
    good = learner.config
    learner.config = good.replace(learning_rate=1e30)
    with pytest.raises(DivergenceError):  # the transition grew α_j, then the fit diverged
        learner.observe(data, task_id=1)
    assert [m.child_concentration.item() for m in learner.net.masks] == [2.0, 2.0]
    after = learner.current_prior()["global_sticks.v"].base_dist.concentration1
    torch.testing.assert_close(after, prior_before)
    learner.config = good
    learner.observe(data, task_id=1)  # task 1 is fitted with α_j = 2 · 3
    assert [m.child_concentration.item() for m in learner.net.masks] == [6.0, 6.0]


def test_ibp_learner_learns_and_reloads_to_the_same_posterior(tmp_path):
    x, y = two_class_data(200, 4)
    learner = _learner(hierarchical=True, growth=2.0)
    learner.config = learner.config.replace(epochs=30, learning_rate=0.01)
    learner.observe((x, y), task_id=0)
    assert learner.evaluate((x, y), task_id=0)["accuracy"] > 0.9
    path = tmp_path / "ibp.pt"
    learner.save(path)
    learner.observe((x, 1 - y), task_id=1)
    restored = VCL.load(path)  # restores the random state saved with it
    assert type(restored.net) is IndianBuffetMLP
    restored.observe((x, 1 - y), task_id=1)
    assert [m.child_concentration.item() for m in restored.net.masks] == [2.0, 2.0]
    assert restored.transition.factor == 2.0
    for name, q in learner.current_prior().items():
        for key, value in q.base_dist.__dict__.items():
            if torch.is_tensor(value):
                assert torch.equal(restored.current_prior()[name].base_dist.__dict__[key], value)


def test_natural_gradient_updates_refuse_ibp_nets():
    net = IndianBuffetMLP(4, [6], 2)
    with pytest.raises(ValueError, match="VOGN fits against Normal priors.*has a Beta prior"):
        VCL(net, fitter=VOGN(), epochs=1, progress=False, ml_init_epochs=0)


def test_bad_ibp_settings_are_refused():
    with pytest.raises(ValueError, match="equal widths"):
        IndianBuffetMLP(4, [6, 8], 2, hierarchical=True)
    with pytest.raises(ValueError, match="temperature"):
        IndianBuffetMLP(4, [6], 2, posterior_temperature=0.0)
    with pytest.raises(ValueError, match="parameterisation"):
        IndianBuffetMLP(4, [6], 2, mask_parameterisation="odds")
    with pytest.raises(ValueError, match="concentration"):
        IndianBuffetMLP(4, [6], 2, alpha=-1.0)
    net = IndianBuffetMLP(4, [6], 2)
    with pytest.raises(TypeError, match="Beta prior"):
        install_prior(net, {"sticks.0.v": Normal(torch.zeros(6), 1.0).to_event(1)})


# ---------------------------------------------------------------- inspection
def test_active_units_count_the_units_the_sticks_switch_on():
    """Sticks ≈ 1 for the first 3 units and ≈ 0 after: π ≈ (1, 1, 1, 0, 0, 0), so every point
    uses exactly 3 units of layer 1 and, with all sticks ≈ 1, all 6 of layer 2."""
    learner = _learner(posterior_temperature=0.5)
    first = torch.tensor([1e6, 1e6, 1e6, 1.0, 1.0, 1.0])
    install_prior(
        learner.net,
        {
            "sticks.0.v": Beta(first, first.flip(0)).to_event(1),
            "sticks.1.v": Beta(torch.full((6,), 1e6), torch.ones(6)).to_event(1),
        },
    )
    x, _ = two_class_data(50, 4)
    counts = active_units(learner, x, task_id=0, num_samples=2)
    assert [c.shape for c in counts] == [(2, 50), (2, 50)]
    assert (counts[0] == 3).all() and (counts[1] == 6).all()
    with pytest.raises(TypeError, match="no IBP masks"):
        active_units(VCL(BayesianMLP(4, [6], 2), progress=False), x)


def test_pruning_removes_the_lowest_scoring_weights():
    loc = torch.tensor([[0.1, -4.0], [2.0, 0.3]])
    scale = torch.tensor([[0.01, 10.0], [1.0, 0.1]])  # SNR: 10, 0.4, 2, 3
    posterior = {
        "layer.weight": Normal(loc, scale).to_event(2),
        "layer.bias": Normal(torch.zeros(2), 1.0).to_event(1),
    }
    by_magnitude = prune_weights(posterior, 0.5, "magnitude")["layer.weight"].base_dist
    assert by_magnitude.loc.tolist() == [[0.0, -4.0], [2.0, 0.0]]
    assert by_magnitude.scale.tolist() == [[0.0, 10.0], [1.0, 0.0]]
    by_snr = prune_weights(posterior, 0.5, "snr")["layer.weight"].base_dist
    assert torch.equal(by_snr.loc, loc * torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    assert prune_weights(posterior, 0.5)["layer.bias"] is posterior["layer.bias"]
    with pytest.raises(ValueError, match="pruning score"):
        prune_weights(posterior, 0.5, "size")


def test_pruning_curve_on_a_net_whose_answer_rests_on_two_weights():
    """Class 1 iff 50·50·relu(x_0) > 0.5 (bias of class 0), through two large weights; the six
    small ones only add noise. Pruning those six leaves exactly that rule; pruning all leaves
    the biases, so the net answers class 0 everywhere."""
    learner = VCL(BayesianMLP(2, [2], 2), progress=False, num_predictive_samples=3)
    hidden = torch.full((2, 2), 0.01)
    hidden[0, 0] = 50.0
    head = torch.full((2, 2), 0.01)
    head[0, 0], head[1, 0] = 0.02, 50.0
    tiny = 1e-6
    posterior = {
        "hidden.0.weight": Normal(hidden, tiny).to_event(2),
        "hidden.0.bias": Normal(torch.zeros(2), tiny).to_event(1),
        "heads.0.weight": Normal(head, tiny).to_event(2),
        "heads.0.bias": Normal(torch.tensor([0.5, 0.0]), tiny).to_event(1),
    }
    install_prior(learner.net, posterior)
    learner.trained_sites = list(posterior)
    x, y = two_class_data(200, 2)
    rule = (2500 * torch.relu(x[:, 0]) > 0.5).long()
    accuracies = pruning_curve(learner, (x, y), 0, fractions=[6 / 8, 1.0])
    assert accuracies[0] == pytest.approx((rule == y).float().mean().item())
    assert accuracies[0] > 0.98
    assert accuracies[1] == pytest.approx((y == 0).float().mean().item())


def test_learning_rate_decays_exponentially():
    """Adam's first steps on a linear loss move by exactly the learning rate, so the total move
    over three steps is lr (1 + r^(1/2) + r^(2/2)) with decay r every 2 steps."""
    parameter = torch.nn.Parameter(torch.zeros(()))
    one_point = Points.of_task(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), 0)
    minimise(
        lambda index: parameter * 1.0,
        {"p": parameter},
        FitProblem(one_point, [], epochs=3, batch_size=1),
        Optimisation(learning_rate=0.1, learning_rate_decay=0.25, learning_rate_decay_steps=2),
    )
    assert parameter.item() == pytest.approx(-0.1 * (1 + 0.5 + 0.25), rel=1e-4)


def test_hibp_child_sticks_have_the_supplements_mean_and_variance():
    """Eq. 3: ``π_jk ~ Beta(α π⁰_k, α (1 - π⁰_k))``, so ``E[π_jk] = π⁰_k`` and
    ``Var[π_jk] = π⁰_k (1 - π⁰_k) / (α + 1)``; a layer's units follow the global sticks on
    average (swapped arguments would give mean ``1 - π⁰_k``)."""
    torch.manual_seed(0)
    alpha = 4.0
    mask = IBPMask(3, child_concentration=alpha)
    parent = torch.tensor([0.9, 0.5, 0.15])
    draws = mask.unit_log_probabilities(parent.log().expand(40_000, 3)).exp()
    torch.testing.assert_close(draws.mean(0), parent, atol=0.01, rtol=0)
    torch.testing.assert_close(draws.var(0), parent * (1 - parent) / (alpha + 1), rtol=0.05, atol=0)
