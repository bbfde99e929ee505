"""What a continual VAE is judged by (VCL section 6.2, figures 6 and 7): samples from every head,
the importance-sampled test log-likelihood, and how surely a classifier recognises the samples."""

from __future__ import annotations

import math
from functools import partial

import pyro.distributions as dist
import torch
from torch.distributions import Distribution

from pyro_cl.infer.prediction import PREDICTION_ELEMENTS, widest_activation
from pyro_cl.infer.site_values import outputs_per_draw
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.nn.exclusive import exclusive_mode

__all__ = ["classifier_uncertainty", "generate", "importance_log_likelihood"]


def _check_generative(learner: ContinualLearner) -> None:
    if getattr(learner.model, "local_guide", None) is None:
        raise ValueError(f"{type(learner.model).__name__} is not a generative model (no encoders)")


def _check_count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


@torch.no_grad()
def importance_log_likelihood(
    learner: ContinualLearner,
    x: torch.Tensor,
    task_id: int,
    num_samples: int = 5000,
    chunk: int | None = None,
    batch_size: int = 100,
) -> torch.Tensor:
    """Per-point importance-sampling estimate of ``log p(x_n)`` under task ``task_id``'s
    generator (VCL section 6.2's test-LL, 5,000 samples; Burda et al. 2016)::

        log p̂(x) = log (1/K) Σ_k p(x | z_k, θ_k) p(z_k) / q_φt(z_k | x),
        z_k ~ q_φt(z | x),  θ_k ~ q_t(θ)

    with the task's encoder as the proposal and ``θ`` drawn from the posterior that predicts
    task ``task_id`` (the learner's :meth:`~ContinualLearner.prediction_sites`: ``q_t`` for
    VCL, the point values for fine-tuning and the penalties). Its expectation is a lower bound
    on ``log E_{q_t(θ)}[p(x | θ)]`` that tightens as ``K`` grows and equals it for point values
    of ``θ`` in the limit (tested on a linear-Gaussian VAE). Each ``(k, n)`` draws its own ``θ``
    (under local reparameterisation, its own pre-activations, which for one point and one draw
    have exactly the distribution a weight draw gives).

    :param num_samples: ``K``; ``chunk`` of them are drawn at a time for ``batch_size`` points
        (default: as many as keep a pass near
        :data:`~pyro_cl.infer.prediction.PREDICTION_ELEMENTS` activation elements; 500 at a time,
        50,000 rows of a 784-pixel decoder, took 1.41x as long).
    :returns: ``log p̂(x_n)``, shape ``(N,)``.
    """
    _check_generative(learner)
    _check_count(num_samples, "num_samples")
    if chunk is not None:
        _check_count(chunk, "chunk")
    _check_count(batch_size, "batch_size")
    model = learner.model
    x, _, task_id = learner.prepare_data(x, task_id)
    sites = learner.prediction_sites(x, task_id)
    prior = dist.Normal(x.new_zeros(model.latent_dim), x.new_ones(model.latent_dim))
    results = []
    with exclusive_mode(learner.net, training=False), learner.prediction_random.scope():
        if chunk is None:
            z = x.new_zeros(1, 1, model.latent_dim)  # one code: only the widths matter
            probe = partial(outputs_per_draw, model.decode, model, sites, z, task_id)
            widest = widest_activation(learner.net, probe, x.device)
            chunk = max(1, min(num_samples, PREDICTION_ELEMENTS // (batch_size * widest)))
        for start in range(0, x.shape[0], batch_size):
            batch = x[start : start + batch_size]
            q = model.local_guide.distribution(batch, task_id)
            parts = []
            for done in range(0, num_samples, chunk):
                k = min(chunk, num_samples - done)
                z = q.sample((k,))  # (k, M, D)
                outputs = outputs_per_draw(model.decode, model, sites, z, task_id)
                log_weights = (
                    model.likelihood.log_prob(outputs, batch)
                    + prior.log_prob(z).sum(-1)
                    - q.log_prob(z).sum(-1)
                )
                parts.append(torch.logsumexp(log_weights, dim=0))
            results.append(torch.logsumexp(torch.stack(parts), dim=0) - math.log(num_samples))
    return torch.cat(results)


@torch.no_grad()
def generate(
    learner: ContinualLearner,
    task_id: int,
    num_samples: int,
    mean: bool = True,
    mean_weights: bool = False,
) -> torch.Tensor:
    """``num_samples`` draws from task ``task_id``'s generator: ``z ~ N(0, I)``, ``θ`` from the
    posterior that predicts the task, then the likelihood's mean (pixel probabilities, the
    pictures of VCL figure 6) or, with ``mean=False``, a draw of ``x``.

    :param mean_weights: decode with the posterior mean of ``θ`` instead of a draw per image
        (the VCL reference code's pictures and classifier scores use the mean).

    Draws come from the learner's prediction stream (:attr:`ContinualLearner.prediction_random`):
    the same seed gives the same samples, and drawing them changes nothing training draws.

    :returns: shape ``(num_samples, data size)``.
    """
    _check_generative(learner)
    _check_count(num_samples, "num_samples")
    model = learner.model
    task_id = model.checked_task_id(task_id)
    example = model.example_input(learner.device)
    sites = learner.prediction_sites(example, task_id)
    if mean_weights:
        sites = {
            name: value.mean if isinstance(value, Distribution) else value
            for name, value in learner.posterior(task_id).items()
        }
    with exclusive_mode(learner.net, training=False), learner.prediction_random.scope():
        z = torch.randn(1, num_samples, model.latent_dim, device=learner.device, dtype=model.dtype)
        outputs = outputs_per_draw(model.decode, model, sites, z, task_id)[0]
        observations = model.likelihood.distribution(outputs)
        return observations.mean if mean else observations.sample()


@torch.no_grad()
def classifier_uncertainty(classifier: torch.nn.Module, images: torch.Tensor, label: int) -> float:
    """``(1/N) Σ_n KL(onehot(label) ‖ p_classifier(· | x_n)) = -(1/N) Σ_n log p(label | x_n)``:
    VCL section 6.2's "classifier uncertainty" of generated images (0 for images the classifier
    is certain show ``label``)."""
    log_probs = torch.log_softmax(classifier(images), dim=-1)
    if not 0 <= label < log_probs.shape[-1]:
        raise ValueError(f"label {label} is not a class of the classifier")
    return -log_probs[:, label].mean().item()
