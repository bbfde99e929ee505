"""Observation models ``p(y | f(x; θ))`` that turn a net's outputs into a Pyro model."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

import pyro
import pyro.distributions as dist
import torch

from pyro_cl.checks import checked_real
from pyro_cl.finite import all_finite
from pyro_cl.metrics import expected_calibration_error
from pyro_cl.nn.effects import current_data_plate
from pyro_cl.nn.site_flags import OBSERVATION_FLAG
from pyro_cl.spec import Registrable

__all__ = [
    "BernoulliLikelihood",
    "Likelihood",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "HeteroscedasticGaussianLikelihood",
    "PixelBernoulliLikelihood",
    "PrecisionGaussianLikelihood",
]


class Likelihood(Registrable, ABC, kind="likelihood"):
    """Base class: how targets are scored given net outputs.

    ``outputs`` may carry leading sample dimensions; ``log_prob`` broadcasts over them. A
    subclass with a ``name`` saves and loads with a learner (:mod:`pyro_cl.spec`).
    """

    @abstractmethod
    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        """``p(y | outputs)`` for a batch of outputs."""

    def log_prob(self, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-point log-likelihood ``log p(y_n | outputs_n)``."""
        return self.distribution(outputs).log_prob(y)

    def observe(
        self, outputs: torch.Tensor, y: torch.Tensor | None, dataset_size: int | None = None
    ) -> torch.Tensor:
        """The ``obs`` sample site, in a data plate scaled to ``dataset_size`` (default: batch).
        The points are the distribution's last batch dimension (particles, if any, lead)."""
        distribution = self.distribution(outputs)
        with current_data_plate(distribution.batch_shape[-1], outputs.device, dataset_size):
            return pyro.sample("obs", distribution, obs=y, infer={OBSERVATION_FLAG: True})

    def hessian_factor(self, outputs: torch.Tensor) -> torch.Tensor:
        """``L`` of shape ``(..., outputs, C)`` with ``L Lᵀ = -∂² log p(y | f) / ∂f²`` at ``f =
        outputs`` (for the generalised Gauss-Newton matrix ``Jᵀ L Lᵀ J``; it must not depend on
        ``y``, as for exponential families in their natural parameters)."""
        raise TypeError(f"{type(self).__name__} has no Gauss-Newton factor; use curvature='fisher'")

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        """Raise ``ValueError`` if ``y`` cannot be scored by this likelihood."""
        if not all_finite(y):
            raise ValueError("targets contain NaN or inf")

    def converted_targets(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Checked targets in the dtype the likelihood scores (floating targets: ``dtype``)."""
        return y.to(dtype) if y.dtype.is_floating_point else y

    def predictive_log_likelihood(self, samples: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-point ``log (1/S) Σ_s p(y_n | outputs_s)`` from ``samples`` of shape ``(S, N, ...)``."""
        log_probs = self.log_prob(samples, y)
        return torch.logsumexp(log_probs, dim=0) - math.log(samples.shape[0])

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Summary metrics of the Monte Carlo predictive on ``(x, y)``."""
        return {"log_likelihood": self.predictive_log_likelihood(samples, y).mean().item()}

    def predictive_probabilities(self, samples: torch.Tensor) -> torch.Tensor:
        """Class probabilities of the Monte Carlo predictive (classification likelihoods)."""
        raise TypeError(f"{type(self).__name__} has no class probabilities to predict")


class CategoricalLikelihood(Likelihood):
    """``y ~ Categorical(softmax(f(x)))`` for integer class labels."""

    name = "categorical"

    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        return dist.Categorical(logits=outputs)

    def log_prob(self, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.gather(
            torch.log_softmax(outputs, dim=-1), -1, y.expand(outputs.shape[:-1]).unsqueeze(-1)
        ).squeeze(-1)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        if y.dtype.is_floating_point or y.dtype == torch.bool:
            raise ValueError(f"class labels must be an integer tensor, got dtype {y.dtype}")
        if y.dim() != 1:
            raise ValueError(f"class labels must be one-dimensional, got shape {tuple(y.shape)}")
        if num_outputs is not None and y.numel() and (y.min() < 0 or y.max() >= num_outputs):
            raise ValueError(
                f"labels must lie in 0..{num_outputs - 1} for this head, got range "
                f"{y.min().item()}..{y.max().item()}"
            )

    def converted_targets(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Labels of any integer dtype (uint8, int32, ...) as int64 indices."""
        return y.long()

    def hessian_factor(self, outputs: torch.Tensor) -> torch.Tensor:
        """The Hessian of ``-log softmax(f)_y`` in ``f`` is ``diag(p) - p pᵀ`` whatever ``y``;
        ``L = diag(√p) - p √pᵀ`` is a square root of it (``L Lᵀ = diag(p) - 2ppᵀ + p (Σp) pᵀ``)."""
        probs = torch.softmax(outputs, dim=-1)
        root = probs.sqrt()
        return torch.diag_embed(root) - probs.unsqueeze(-1) * root.unsqueeze(-2)

    def predictive_probabilities(self, samples: torch.Tensor) -> torch.Tensor:
        """Class probabilities averaged over the ``S`` samples: ``(1/S) Σ_s softmax(f_s(x))``."""
        return torch.softmax(samples, dim=-1).mean(0)

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Log-likelihood, accuracy and the expected calibration error of the predictive."""
        probabilities = self.predictive_probabilities(samples)
        out = super().metrics(samples, y)
        out["accuracy"] = (probabilities.argmax(-1) == y).float().mean().item()
        out["calibration_error"] = expected_calibration_error(probabilities, y)
        return out


class BernoulliLikelihood(Likelihood):
    """``y ~ Bernoulli(sigmoid(f(x)))`` for 0/1 labels, from one output (logistic regression).

    Labels may be integers, booleans or floats equal to 0 or 1; :meth:`predictive_probabilities`
    returns both classes' probabilities, so ``predict`` works as for categorical likelihoods.
    """

    name = "bernoulli"

    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        return dist.Bernoulli(logits=outputs.squeeze(-1), validate_args=False)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        if num_outputs is not None and num_outputs != 1:
            raise ValueError(f"a Bernoulli likelihood needs a net with 1 output, not {num_outputs}")
        if y.dim() != 1:
            raise ValueError(f"binary labels must be one-dimensional, got shape {tuple(y.shape)}")
        if not ((y == 0) | (y == 1)).all():
            raise ValueError("binary labels must be 0 or 1")

    def converted_targets(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return y.to(dtype)

    def hessian_factor(self, outputs: torch.Tensor) -> torch.Tensor:
        """``-∂² log p(y | f)/∂f² = p(1-p)`` whatever ``y``: ``L = √(p(1-p))``."""
        p = torch.sigmoid(outputs)
        return (p * (1 - p)).sqrt().unsqueeze(-1)

    def predictive_probabilities(self, samples: torch.Tensor) -> torch.Tensor:
        """``[1 - p̄, p̄]`` per input with ``p̄ = (1/S) Σ_s sigmoid(f_s(x))``, shape ``(N, 2)``."""
        p = torch.sigmoid(samples.squeeze(-1)).mean(0)
        return torch.stack([1 - p, p], dim=-1)

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        out = super().metrics(samples, y)
        predicted = self.predictive_probabilities(samples)[:, 1] > 0.5
        out["accuracy"] = (predicted == y.bool()).float().mean().item()
        return out


class PixelBernoulliLikelihood(Likelihood):
    """``x_d ~ Bernoulli(sigmoid(f_d))`` independently for every pixel ``d`` of an image (one
    output per pixel; the generative models of VCL section 4).

    Targets are images of shape ``(N, pixels)`` with values in ``[0, 1]``; grey values are
    scored by the same cross-entropy ``x log p + (1 − x) log(1 − p)`` (the usual VAE treatment
    of MNIST intensities), so the per-image log-likelihood sums over pixels.
    """

    name = "pixel_bernoulli"

    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        return dist.Bernoulli(logits=outputs, validate_args=False).to_event(1)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        if not y.dtype.is_floating_point:
            raise ValueError(f"images must be floating point in [0, 1], got dtype {y.dtype}")
        if y.dim() != 2 or (num_outputs is not None and y.shape[1] != num_outputs):
            raise ValueError(
                f"images must have shape (N, {num_outputs or 'pixels'}), got {tuple(y.shape)}"
            )
        if not ((y >= 0) & (y <= 1)).all():
            raise ValueError("pixel values must lie in [0, 1] (scale the images first)")

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """The mean reconstruction log-likelihood ``log (1/S) Σ_s p(x | f(z_s))`` with
        ``z_s ~ q(z | x)``: not the test-LL (that is
        :func:`~pyro_cl.generative.importance_log_likelihood`)."""
        value = self.predictive_log_likelihood(samples, y).mean().item()
        return {"reconstruction_log_likelihood": value}


class GaussianLikelihood(Likelihood):
    """``y ~ N(f(x), noise_scale²)`` with a known noise scale (regression)."""

    name = "gaussian"

    def __init__(self, noise_scale: float = 1.0) -> None:
        self.noise_scale = checked_real(noise_scale, "noise_scale", 0, low_open=True)

    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        return dist.Normal(outputs.squeeze(-1), self.noise_scale)

    def hessian_factor(self, outputs: torch.Tensor) -> torch.Tensor:
        """``-∂² log N(y; f, σ²)/∂f² = 1/σ²``, so ``L = 1/σ`` (one column)."""
        return outputs.new_full((*outputs.shape, 1), 1.0 / self.noise_scale)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        _check_regression_targets(y)

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        out = super().metrics(samples, y)
        out["rmse"] = (samples.squeeze(-1).mean(0) - y).pow(2).mean().sqrt().item()
        return out


class _TwoOutputGaussian(Likelihood):
    """``y ~ N(f₁(x), σ(f₂(x))²)``: regression whose net's second output sets the noise."""

    #: how error messages name the likelihood and its second output
    described: ClassVar[tuple[str, str]]

    @abstractmethod
    def noise_scale(self, second_output: torch.Tensor) -> torch.Tensor:
        """``σ`` from the net's second output."""

    def distribution(self, outputs: torch.Tensor) -> dist.Distribution:
        if outputs.shape[-1] != 2:
            kind, second = self.described
            raise ValueError(f"a {kind} needs 2 outputs (mean, {second}), got {outputs.shape[-1]}")
        return dist.Normal(outputs[..., 0], self.noise_scale(outputs[..., 1]), validate_args=False)

    def check_targets(self, y: torch.Tensor, num_outputs: int | None) -> None:
        _check_regression_targets(y)

    def metrics(self, samples: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        out = super().metrics(samples, y)
        out["rmse"] = (samples[..., 0].mean(0) - y).pow(2).mean().sqrt().item()
        return out


class HeteroscedasticGaussianLikelihood(_TwoOutputGaussian):
    """``y ~ N(f₁(x), σ(x)²)`` with ``σ(x) = softplus(f₂(x)) + min_scale``: the net's second output
    sets the noise, so the noise level is learned with (and is as uncertain as) the weights.

    Used for the online regression streams (Kurle et al. 2020 section 6.1 report test log
    marginal likelihoods that a fixed unit noise could not reach, e.g. 1.9 nats on Yacht).

    :param min_scale: a floor on ``σ`` that keeps the log-likelihood bounded.
    """

    name = "heteroscedastic_gaussian"
    described = ("heteroscedastic Gaussian", "scale")

    def __init__(self, min_scale: float = 1e-3) -> None:
        self.min_scale = checked_real(min_scale, "min_scale", 0, low_open=True)

    def noise_scale(self, second_output: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(second_output) + self.min_scale


class PrecisionGaussianLikelihood(_TwoOutputGaussian):
    """``y ~ N(f₁(x), 1/f₂(x))``: the net's second output is the noise precision itself (a latent
    site of the net, as in :class:`~pyro_cl.nn.linear_regression.BayesianLinearRegression`)."""

    name = "precision_gaussian"
    described = ("precision Gaussian", "precision")

    def noise_scale(self, second_output: torch.Tensor) -> torch.Tensor:
        return second_output.rsqrt()


def _check_regression_targets(y: torch.Tensor) -> None:
    if not y.dtype.is_floating_point:
        raise ValueError(f"regression targets must be floating point, got dtype {y.dtype}")
    if y.dim() != 1:
        raise ValueError(f"regression targets must be one-dimensional, got {tuple(y.shape)}")
    if not all_finite(y):
        raise ValueError("targets contain NaN or inf")
