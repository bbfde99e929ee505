"""The local reparameterisation trick (Kingma, Salimans & Welling, 2015).

For a linear map ``a = x W^T + b`` with independent Gaussian weights
``W_ij ~ N(m_ij, s_ij^2)`` and bias ``b_j ~ N(c_j, d_j^2)`` the pre-activations are Gaussian too:

.. math::

    a_{nj} \\sim \\mathcal{N}\\Big(\\sum_i x_{ni} m_{ji} + c_j,\\;
                               \\sum_i x_{ni}^2 s_{ji}^2 + d_j^2\\Big).

Sampling ``a`` directly instead of ``W`` gives every data point its own weight draw, which lowers
the variance of the ELBO's gradient at the cost of a second matrix product.

Inside ordinary Pyro programs the layer only sees the *sampled* weight tensor. The
:class:`LocalReparameterizationMessenger` remembers which Normal each sampled tensor was drawn
from (the guide's, because the guide runs first and the model replays the very same tensor), so a
layer can ask :func:`normal_source` for it and sample pre-activations instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pyro.distributions import Normal
from pyro.poutine.messenger import Messenger

from pyro_cl.diagonal_gaussian import DiagonalGaussian
from pyro_cl.nn.effects import MinibatchShard, active_effects, enter_scope, exit_scope, innermost
from pyro_cl.posterior import base_distribution

#: The smallest pre-activation variance sampled (so that its square root stays differentiable).
VARIANCE_FLOOR = 1e-16

__all__ = [
    "LocalReparameterizationMessenger",
    "local_reparameterization",
    "normal_source",
    "unbroadcast_normal",
    "DiagonalGaussian",
    "gaussian_linear",
    "sample_gaussian_outputs",
    "standard_normal",
]


class LocalReparameterizationMessenger(Messenger):
    """Record the Normal distribution behind every latent sample drawn while active.

    Wrap a whole loss evaluation (guide *and* model) in it::

        with local_reparameterization():
            loss = TraceMeanField_ELBO().differentiable_loss(model, guide, x, y)

    The first distribution a tensor is drawn from wins, so during ``replay`` the guide's
    distribution is kept and the model's prior, which sees the same tensor, is ignored.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sources: dict[int, tuple[torch.Tensor, Normal | None]] = {}

    def __enter__(self):
        self._sources = {}
        entered = super().__enter__()
        self._scope = enter_scope(self)  # so normal_source finds it (pyro_cl.nn.effects)
        return entered

    def __exit__(self, *args):
        exit_scope(self._scope)
        self._sources = {}
        return super().__exit__(*args)

    def _pyro_post_sample(self, msg) -> None:
        if msg["is_observed"] or not torch.is_tensor(msg["value"]):
            return
        key = id(msg["value"])
        if key in self._sources:
            return
        normal = base_distribution(msg["fn"])
        if not isinstance(normal, Normal) or normal.loc.shape != msg["value"].shape:
            normal = None
        # Non-Normal draws are recorded too (as None) so that a replaying model's prior can never
        # claim them. The reference to the value keeps its id from being reused while active.
        self._sources[key] = (msg["value"], normal)

    def lookup(self, value: torch.Tensor) -> Normal | None:
        entry = self._sources.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        return None


def local_reparameterization() -> LocalReparameterizationMessenger:
    """Context manager form of :class:`LocalReparameterizationMessenger`."""
    return LocalReparameterizationMessenger()


def normal_source(value: torch.Tensor) -> Normal | None:
    """The Normal that ``value`` was sampled from, if a messenger on the stack recorded one."""
    for frame in active_effects(LocalReparameterizationMessenger):
        found = frame.lookup(value)
        if found is not None:
            return found
    return None


def unbroadcast_normal(normal: Normal, event_dim: int) -> Normal | None:
    """``normal`` without its batch dimensions when a plate only broadcast it there (as a guide's
    global site drawn in a :class:`~pyro_cl.nn.effects.ParticlePlate` is: its ``loc`` and
    ``scale`` are stride-0 views along every batch dimension longer than 1, so every particle has
    the same Normal and local reparameterisation applies once to all of them); ``None`` when the
    batch entries differ."""
    batch = normal.loc.dim() - event_dim
    if batch <= 0:
        return normal
    for tensor in (normal.loc, normal.scale):
        sizes, strides = tensor.shape[:batch], tensor.stride()[:batch]
        if any(size > 1 and stride != 0 for size, stride in zip(sizes, strides, strict=True)):
            return None
    first = (0,) * batch
    return Normal(normal.loc[first], normal.scale[first], validate_args=False)


def standard_normal(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise for pre-activations (one place, so tests can control the draws)."""
    return torch.randn(shape, dtype=like.dtype, device=like.device)


def gaussian_linear(
    x: torch.Tensor,
    weight: DiagonalGaussian,
    bias: DiagonalGaussian | None,
    num_particles: int | None = None,
) -> torch.Tensor:
    """Sample pre-activations ``a = x W^T + b`` for Gaussian ``W`` and ``b`` (see module docstring).

    :param x: inputs ``(..., in_features)``.
    :param weight: means and variances of shape ``(out_features, in_features)``.
    :param bias: means and variances of shape ``(out_features,)``, or ``None``.
    :param num_particles: if given, ``x`` carries a leading particle dimension of size 1 or
        ``num_particles`` and the noise is drawn with ``num_particles`` rows along it.
    """
    # the floor keeps √variance differentiable where an input row is 0; added to the bias's
    # variance (out_features numbers) it costs nothing per point
    if bias is None:
        floor = torch.full_like(weight.variance[:, 0], VARIANCE_FLOOR)
    else:
        floor = bias.variance + VARIANCE_FLOOR
    bias_loc = None if bias is None else bias.loc
    if num_particles is None or x.shape[0] == num_particles:  # no particle broadcast
        noise = _noise(x.shape[:-1] + weight.loc.shape[:1], x, num_particles)
        return SampledGaussianLinear.apply(x, weight.loc, weight.variance, bias_loc, floor, noise)
    mean = F.linear(x, weight.loc, bias_loc)
    variance = F.linear(x * x, weight.variance, floor)
    return sample_gaussian_outputs(mean, variance, num_particles, floored=True)


class SampledGaussianLinear(torch.autograd.Function):
    """``a = x mᵀ + c + √(x² sᵀ + d) ∘ ε`` for given noise ``ε`` of ``a``'s shape, with the
    backward pass written out (fewer kernels and autograd nodes than the traced form):

    ``∂/∂m = gᵀ x``, ``∂/∂c = Σ g``, ``∂/∂s = hᵀ x²`` and ``∂/∂d = Σ h`` with
    ``h = g ∘ ε / (2√v)``, and ``∂/∂x = g m + 2 x ∘ (h s)``.
    """

    @staticmethod
    def forward(ctx, x, loc, variance, bias_loc, floor, noise):
        squares = x * x
        scale = F.linear(squares, variance, floor).sqrt_()
        ctx.save_for_backward(x, squares, loc, variance, scale, noise)
        ctx.has_bias = bias_loc is not None
        return torch.addcmul(F.linear(x, loc, bias_loc), scale, noise)

    @staticmethod
    def backward(ctx, grad):
        x, squares, loc, variance, scale, noise = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])
        half = (grad * noise).div_(scale).mul_(0.5).reshape(rows.shape)
        needs = ctx.needs_input_grad
        inputs, squared = x.reshape(-1, x.shape[-1]), squares.reshape(-1, x.shape[-1])
        grad_x = grad_loc = grad_variance = grad_bias = grad_floor = None
        if needs[0]:
            grad_x = torch.mm(rows, loc).addcmul_(inputs, torch.mm(half, variance), value=2.0)
            grad_x = grad_x.reshape(x.shape)
        if needs[1]:
            grad_loc = torch.mm(rows.t(), inputs)
        if needs[2]:
            grad_variance = torch.mm(half.t(), squared)
        if needs[3] and ctx.has_bias:
            grad_bias = rows.sum(0)
        if needs[4]:
            grad_floor = half.sum(0)
        return grad_x, grad_loc, grad_variance, grad_bias, grad_floor, None


def _noise(shape: torch.Size, like: torch.Tensor, num_particles: int | None) -> torch.Tensor:
    """Standard normal noise of ``shape``: this process's rows of the global minibatch's noise in
    a data-parallel fit (as :func:`sample_gaussian_outputs` draws it)."""
    shard = innermost(MinibatchShard)
    if shard is None:
        return standard_normal(shape, like)
    data_dim = 0 if num_particles is None else 1
    return shard.rows_of(shape, data_dim, lambda full: standard_normal(full, like))


def sample_gaussian_outputs(
    mean: torch.Tensor,
    variance: torch.Tensor,
    num_particles: int | None = None,
    floored: bool = False,
) -> torch.Tensor:
    """``mean + √variance · ε`` with standard normal ``ε``; with ``num_particles`` the leading
    (particle) dimension of the result has ``num_particles`` rows, however many ``mean`` has.

    :param floored: the caller already kept ``variance`` at or above :data:`VARIANCE_FLOOR`
        (else it is clamped here)."""
    shape = mean.shape
    if num_particles is not None:
        shape = torch.Size((num_particles,)) + mean.shape[1:]
    noise = _noise(shape, mean, num_particles)  # data-parallel: the global minibatch's, our rows
    scale = (variance if floored else variance.clamp_min(VARIANCE_FLOOR)).sqrt()
    return torch.addcmul(mean, scale, noise)
