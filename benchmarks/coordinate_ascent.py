"""Mean-field coordinate ascent against SVI on the same model and family: Bayesian
linear regression with an unknown noise precision, ``q(w, τ) = Π_d N(μ_d, s_d²) Gamma(a, b)``.

* **CAVI** — :func:`pyro_cl.fitters.coordinate_ascent.fit_coordinate_ascent`, closed-form factor
  updates until a sweep gains less than 1e-10 nats;
* **SVI** — Adam on a reparameterised Monte Carlo estimate of the same bound (``K`` draws of
  ``w`` and of ``τ``, Gamma's implicit reparameterisation; the KL terms in closed form), from
  the same start;
* the same two through the library: a :class:`~pyro_cl.ContinualLearner` on a
  :class:`~pyro_cl.nn.BayesianLinearRegression` net with the
  :class:`~pyro_cl.fitters.coordinate_ascent.CoordinateAscent` fitter, and with the default SVI
  fitter (``MeanFieldGuide``'s Gamma factor for ``τ``), in float32, each bound evaluated in
  closed form from the fitted ``q``.

Both bounds are compared with the exact log evidence ``log p(y) = log ∫ N(y; X m, X V Xᵀ + I/τ)
Gamma(τ; α, β) dτ`` (``w`` integrated out in closed form, ``τ`` by quadrature on a fine grid of
``log τ``), which no mean-field bound can exceed.

    python benchmarks/coordinate_ascent.py [--points 200] [--features 10] [--svi-steps 3000]
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch.distributions import Gamma, MultivariateNormal, Normal, kl_divergence

from pyro_cl import ContinualLearner, CoordinateAscent, PrecisionGaussianLikelihood
from pyro_cl.fitters.coordinate_ascent import (
    CoordinateAscentRegression,
    NormalGammaPosterior,
    evidence_lower_bound,
    fit_coordinate_ascent,
)
from pyro_cl.nn import BayesianLinearRegression


def log_evidence(x: torch.Tensor, y: torch.Tensor, prior) -> float:
    """``log p(y)`` by quadrature over ``u = log τ`` (20,001 points from -15 to 15)."""
    u = torch.linspace(-15.0, 15.0, 20001, dtype=torch.float64)
    covariance = x @ torch.diag(prior.scale.square()) @ x.T
    identity = torch.eye(len(y), dtype=torch.float64)
    values = []
    for chunk in u.split(500):
        tau = chunk.exp()
        normal = MultivariateNormal(
            (x @ prior.loc).expand(len(chunk), -1), covariance + identity / tau[:, None, None]
        )
        values.append(normal.log_prob(y) + prior.precision.log_prob(tau) + chunk)
    logs = torch.cat(values)
    return float(torch.logsumexp(logs, 0) + math.log(float(u[1] - u[0])))


def svi(x, y, prior, steps: int, samples: int, learning_rate: float):
    loc = prior.loc.clone().requires_grad_()
    log_scale = prior.scale.log().clone().requires_grad_()
    log_concentration = prior.concentration.log().clone().requires_grad_()
    log_rate = prior.rate.log().clone().requires_grad_()
    parameters = [loc, log_scale, log_concentration, log_rate]
    optimiser = torch.optim.Adam(parameters, lr=learning_rate)
    for _ in range(steps):
        q_w = Normal(loc, log_scale.exp())
        q_tau = Gamma(log_concentration.exp(), log_rate.exp())
        w, tau = q_w.rsample((samples,)), q_tau.rsample((samples,))
        log_likelihood = Normal(w @ x.T, tau.rsqrt()[:, None]).log_prob(y).sum(-1).mean()
        kl = kl_divergence(q_w, prior.weights).sum() + kl_divergence(q_tau, prior.precision)
        optimiser.zero_grad()
        (kl - log_likelihood).backward()
        optimiser.step()
    q = prior.copy()
    with torch.no_grad():
        q.loc, q.scale = loc.detach(), log_scale.exp().detach()
        q.concentration, q.rate = log_concentration.exp().detach(), log_rate.exp().detach()
    return q


def through_the_learner(x, y, steps: int | None, samples: int, learning_rate: float):
    """``q`` fitted by a learner: CAVI (``steps=None``) or SVI with ``steps`` Adam steps."""
    net = BayesianLinearRegression(x.shape[1], prior_scale=1.0, concentration=2.0, rate=1.0)
    if steps is None:
        learner = ContinualLearner(
            net, PrecisionGaussianLikelihood(), fitter=CoordinateAscent(), ml_init_epochs=0
        )
    else:
        learner = ContinualLearner(
            net,
            PrecisionGaussianLikelihood(),
            epochs=steps,
            learning_rate=learning_rate,
            num_particles=samples,
            batch_size=None,
            ml_init_epochs=0,
            seed=1,
            progress=False,
        )
    learner.observe((x.float(), y.float()))
    posterior = learner.current_prior()
    weight, precision = posterior["weight"].base_dist, posterior["noise_precision"]
    return NormalGammaPosterior(
        *(t.double() for t in (weight.loc, weight.scale, precision.concentration, precision.rate))
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--svi-steps", type=int, nargs="+", default=[300, 1000, 3000])
    parser.add_argument("--svi-samples", type=int, default=10)
    parser.add_argument("--svi-learning-rate", type=float, default=0.02)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    x = torch.randn(args.points, args.features, dtype=torch.float64)
    true_w = torch.randn(args.features, dtype=torch.float64)
    y = x @ true_w + 0.7 * torch.randn(args.points, dtype=torch.float64)
    prior = CoordinateAscentRegression(args.features, concentration=2.0, rate=1.0).prior
    exact = log_evidence(x, y, prior)
    start = time.perf_counter()
    q, history = fit_coordinate_ascent(x, y, prior, max_sweeps=1000, tolerance=1e-10)
    seconds = time.perf_counter() - start
    print(f"{args.points} points, {args.features} features; exact log evidence {exact:.4f}")
    print("| method | bound (nats) | gap to log p(y) | sweeps / steps | seconds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(
        f"| CAVI | {history[-1]:.4f} | {exact - history[-1]:.4f} | {len(history) - 1} | "
        f"{seconds:.3f} |"
    )
    for steps in args.svi_steps:
        torch.manual_seed(1)
        start = time.perf_counter()
        fitted = svi(x, y, prior, steps, args.svi_samples, args.svi_learning_rate)
        seconds = time.perf_counter() - start
        bound = evidence_lower_bound(x, y, fitted, prior)
        print(f"| SVI (Adam, {args.svi_samples} samples) | {bound:.4f} | {exact - bound:.4f} | "
              f"{steps} | {seconds:.3f} |")  # fmt: skip
    for steps in (None, *args.svi_steps):
        start = time.perf_counter()
        fitted = through_the_learner(x, y, steps, args.svi_samples, args.svi_learning_rate)
        seconds = time.perf_counter() - start
        bound = evidence_lower_bound(x, y, fitted, prior)
        label = "CoordinateAscent fitter" if steps is None else "ELBOFitter (SVI)"
        count = "to 1e-10" if steps is None else steps
        print(f"| ContinualLearner, {label} | {bound:.4f} | {exact - bound:.4f} | {count} | "
              f"{seconds:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
