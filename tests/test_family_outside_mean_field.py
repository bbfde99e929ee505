"""A guide family written from scratch, as a user writes one in a file of their own: an
isotropic Gaussian per site, ``q(w_s) = N(m_s, σ_s² I)`` (one variance per weight matrix), built
on ``nn.Module`` and the guide protocol (pyro_cl/guides/protocol.py) alone — no
``MeanFieldGuide`` underneath — and run through VCL, a coreset's refit, a transition and a
checkpoint with no edit to the library.

The check is exact. On linear regression with known noise ``σ²`` the tempered-free target of a
step is Gaussian, ``N(μ, Λ⁻¹)`` with ``Λ = I/σ_prev² + XᵀX/σ²`` and
``μ = Λ⁻¹ (m_prev/σ_prev² + Xᵀy/σ²)`` (the previous step's isotropic posterior as prior). The
KL from an isotropic ``q = N(m, s² I)`` to it is ``½[s² tr Λ + (m - μ)ᵀ Λ (m - μ) - D log s²] +
const``, so the family's optimum is ``m = μ`` and ``s² = D / tr Λ``: VCL with this family must
reach that, step after step (which fails if the handoff drops the posterior, if the KL's trace
or log term is lost, or if the guide's variance is not the one its distribution reports).
"""

import pytest
import torch
from pyro import poutine
from pyro.distributions import Normal
from pyro.poutine.util import site_is_subsample
from torch import nn

from pyro_cl import ContinualLearner, GaussianLikelihood
from pyro_cl.guides import GuideFamily
from pyro_cl.guides.protocol import Guide
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianLinear
from pyro_cl.nn.site_flags import OBSERVATION_FLAG
from pyro_cl.transitions import Wiener
from tests.helpers import exact_regression_settings

NOISE = 0.5
DIM = 3


class IsotropicGaussianGuide(nn.Module):
    """``q(w_s) = N(m_s, exp(ρ_s) I)`` for every real-valued latent site ``s`` of ``model``."""

    mean_field = True  # each site its own factor: the learner installs q site by site

    def __init__(self, model, init_log_variance: float) -> None:
        super().__init__()
        self.model = model
        self.init_log_variance = init_log_variance
        self.loc = nn.ParameterDict()
        self.log_variance = nn.ParameterDict()

    @staticmethod
    def _key(name: str) -> str:
        return name.replace(".", "__")

    @property
    def site_names(self) -> list[str]:
        return [key.replace("__", ".") for key in self.loc]

    def sites_for(self, *args, **kwargs) -> list[str]:
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(self.model).get_trace(*args, **kwargs)
        names = [  # latent sites: not data, not a plate's subsample, not an observation
            name
            for name, site in trace.nodes.items()
            if site["type"] == "sample"
            and not site["is_observed"]
            and not site_is_subsample(site)
            and not site["infer"].get(OBSERVATION_FLAG)
        ]
        for name in names:
            if self._key(name) not in self.loc:
                prior = trace.nodes[name]["fn"]
                self.loc[self._key(name)] = nn.Parameter(prior.mean.detach().clone())
                self.log_variance[self._key(name)] = nn.Parameter(
                    torch.tensor(self.init_log_variance)
                )
        return names

    def distribution(self, name: str):
        loc = self.loc[self._key(name)]
        scale = torch.exp(0.5 * self.log_variance[self._key(name)]).expand_as(loc)
        return Normal(loc, scale).to_event(loc.dim())

    def posterior(self, names=None) -> dict:
        return {name: self.distribution(name) for name in (names or self.site_names)}

    def locs(self, names=None) -> dict:
        return {name: self.loc[self._key(name)] for name in (names or self.site_names)}

    def gaussian_parameters(self, names) -> dict:
        return {}  # not per-coordinate Gaussians: the KL comes from torch's registry per site

    def joint_terms(self, names):
        return 0.0, {}

    def prior_sites(self) -> dict:
        return {}

    def hand_off(self, names) -> None:
        pass  # the learner installs q as the sites' priors; nothing else is kept

    def carry_prior(self, step, initial_prior) -> None:
        pass

    @torch.no_grad()
    def reinitialise(self, policy, priors, log_variance=None) -> None:
        if policy == "prior":  # start at the step's prior, an isotropic Gaussian here
            for name, prior in priors.items():
                base = prior.base_dist if hasattr(prior, "base_dist") else prior
                self.loc[self._key(name)].copy_(base.loc)
                self.log_variance[self._key(name)].copy_(2 * base.scale.log().mean())

    def forward(self, *args, **kwargs) -> dict:
        import pyro

        return {name: pyro.sample(name, self.distribution(name)) for name in self.sites_for(*args)}

    def clone(self) -> "IsotropicGaussianGuide":
        copy = IsotropicGaussianGuide(self.model, self.init_log_variance)
        copy.load_state_dict(self.state_dict())
        return copy

    def release(self) -> None:
        pass  # nothing in Pyro's parameter store

    def restore(self, state_dict) -> None:
        for group in (self.loc, self.log_variance):
            prefix = "loc." if group is self.loc else "log_variance."
            for key in [key for key in group if prefix + key not in state_dict]:
                del group[key]
        self.load_state_dict(state_dict)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        for full_key, value in state_dict.items():
            group, _, key = full_key.partition(".")
            holder = getattr(self, group)
            if key not in holder:
                holder[key] = nn.Parameter(torch.empty_like(value))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class Isotropic(GuideFamily):
    """The family's part: what the learner is given (``guide=Isotropic()``)."""

    name = "isotropic-test"
    per_site = True  # one distribution a site: transitions carry it site by site

    def build(self, model, init_log_variance: float, init_loc_std: float):
        return IsotropicGaussianGuide(model, init_log_variance)

    def check_initialisation(self, between_tasks: str, init_means: str) -> None:
        if between_tasks not in ("keep", "prior"):
            raise ValueError(
                f"the isotropic family keeps or restarts at its prior, not {between_tasks!r}"
            )


def tasks(num_tasks: int, per_task: int = 40) -> list:
    generator = torch.Generator().manual_seed(3)
    weight = torch.tensor([1.0, -2.0, 0.5])
    out = []
    for task in range(num_tasks):
        x = torch.randn(per_task, DIM, generator=generator) + 0.5 * task
        y = x @ (weight + task) + NOISE * torch.randn(per_task, generator=generator)
        out.append((x, y))
    return out


def isotropic_optima(data) -> list[tuple[torch.Tensor, float]]:
    """``(m, s²)`` of the best isotropic Gaussian after each step (module docstring)."""
    mean, variance, out = torch.zeros(DIM), 1.0, []
    for x, y in data:
        precision = torch.eye(DIM) / variance + x.T @ x / NOISE**2
        mean = torch.linalg.solve(precision, mean / variance + x.T @ y / NOISE**2)
        variance = DIM / precision.trace().item()
        out.append((mean, variance))
    return out


def learner(**settings) -> ContinualLearner:
    return ContinualLearner(
        BayesianLinear(DIM, 1, bias=False),
        likelihood=GaussianLikelihood(NOISE),
        guide=Isotropic(),
        **{**exact_regression_settings(600, 0.05), **settings},
    )


def fitted(learner: ContinualLearner) -> tuple[torch.Tensor, float]:
    q = learner.current_prior()["weight"].base_dist
    assert torch.allclose(q.scale, q.scale.flatten()[0])  # one variance for the matrix
    return q.loc.reshape(-1), q.scale.flatten()[0].item() ** 2


def test_the_users_guide_follows_the_protocol_without_mean_field_underneath():
    model = learner().model
    guide = Isotropic().build(model, -4.0, 0.0)
    assert isinstance(guide, Guide)
    assert not any(type(base).__name__ == "MeanFieldGuide" for base in type(guide).__mro__)


def test_vcl_with_the_users_family_reaches_its_optimum_step_after_step():
    data = tasks(2)
    cl = learner()
    for (x, y), (mean, variance) in zip(data, isotropic_optima(data), strict=True):
        cl.observe((x, y))
        loc, fitted_variance = fitted(cl)
        torch.testing.assert_close(loc, mean, atol=0.02, rtol=0)
        assert fitted_variance == pytest.approx(variance, rel=0.1)
    # the second step's optimum is not the first's nor the batch fit's: the handoff mattered
    first, second = isotropic_optima(data)
    assert (second[0] - first[0]).abs().max() > 0.5


def test_the_users_family_runs_with_a_coreset_a_transition_and_a_checkpoint(tmp_path):
    data = tasks(2)
    cl = learner(epochs=50, memory=RandomCoreset(5), transition=Wiener(0.1))
    for step in data:
        cl.observe(step)
    before = cl.current_prior()["weight"].base_dist
    # Wiener's step adds c² σ_0² Δt/τ to every weight's variance: 0.1² · 1 · 1/1 here
    carried = cl.prior_at(cl.times[-1] + 1.0)["weight"].base_dist
    torch.testing.assert_close(carried.scale**2, before.scale**2 + 0.01)
    assert cl.prediction_posteriors  # the coreset's refit, in the user's family
    path = tmp_path / "isotropic.pt"
    cl.save(path)
    loaded = ContinualLearner.load(path, net=BayesianLinear(DIM, 1, bias=False))
    x, y = tasks(3)[2]
    assert isinstance(loaded.guide, IsotropicGaussianGuide)
    torch.testing.assert_close(loaded.predictive_samples(x), cl.predictive_samples(x))
    loaded.observe(tasks(3)[2])  # and both continue to the same posterior
    cl.observe(tasks(3)[2])
    torch.testing.assert_close(
        loaded.current_prior()["weight"].base_dist.loc, fitted(cl)[0].reshape(1, -1)
    )
