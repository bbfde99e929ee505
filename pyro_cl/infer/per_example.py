"""Gradient statistics of a minibatch for natural-gradient updates: the summed gradient and the
summed *squared per-example* gradients (empirical Fisher) or their Gauss-Newton analogue.

For weights ``θ_s`` (one draw per Monte Carlo sample ``s``) and per-example losses
``ℓ_{s,n} = -log p(y_n | f(x_n; θ_s))`` they return

* ``gradients[site]`` — ``Σ_n ∂ℓ_{s,n}/∂θ_s`` per sample, shape ``(S, *site shape)``;
* ``squared[site]`` — with ``curvature="fisher"`` ``Σ_{s,n} (∂ℓ_{s,n}/∂θ_s)²`` (the diagonal of the
  empirical Fisher, VOGN thesis eq. 50), with ``curvature="ggn"`` ``Σ_{s,n} diag(J_{s,n}ᵀ H_{s,n}
  J_{s,n})`` where ``J`` is the Jacobian of the net's output and ``H = L Lᵀ`` the likelihood's
  Hessian in the output (the generalised Gauss-Newton matrix, Schraudolph 2002): ``Σ_c (J ᵀL_c)²``,
  i.e. per-example "gradients" back-propagated from the columns of ``L`` instead of ``∂ℓ/∂f``.

Two routes give the same numbers (tested against autograd on single examples):

* :func:`layer_statistics` for nets built from pyro_cl layers: one batched forward/backward, and
  each layer forms its squared per-example gradients from its input and output gradient
  (outer products for linear layers, a convolution grouped by example for convolutions)
  without a loop over examples;
* :func:`functional_statistics` for any ``PyroModule``: the model runs with its sites conditioned
  on ``θ_s`` under ``torch.func.vmap(torch.func.grad(...))`` over the examples.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from pyro import poutine
from torch.func import grad, grad_and_value, vmap

from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.effects import RecordLayers
from pyro_cl.nn.linear import BayesianLinear

__all__ = [
    "CURVATURES",
    "checked_curvature",
    "ExampleGradientSums",
    "GradientStatistics",
    "example_gradient_sums",
    "kronecker_factor_sums",
    "layer_statistics",
    "functional_statistics",
    "gradient_statistics",
    "sites_by_layer",
]

#: ``None`` (gradients only), the empirical Fisher, or the generalised Gauss-Newton diagonal.
CURVATURES = (None, "fisher", "ggn")


class GradientStatistics(NamedTuple):
    """Sums over a minibatch (see the module docstring)."""

    #: ``Σ_{s,n} ℓ_{s,n}``, detached.
    loss: torch.Tensor
    #: ``{site: Σ_n ∂ℓ_{s,n}/∂θ_s}`` of shape ``(S, *site shape)``.
    gradients: dict[str, torch.Tensor]
    #: ``{site: Σ_{s,n} curvature}`` of the site's shape, or ``None`` without curvature.
    squared: dict[str, torch.Tensor] | None


def checked_curvature(curvature: object) -> str:
    """``curvature`` if it names a curvature statistic (``"fisher"`` or ``"ggn"``), for the parts
    that take one (VOGN, EWC, Laplace propagation).

    :raises ValueError: naming the choices otherwise.
    """
    if curvature is None or curvature not in CURVATURES:
        raise ValueError(f"curvature must be 'fisher' or 'ggn', got {curvature!r}")
    return curvature


def _check_curvature(curvature: str | None) -> None:
    if curvature not in CURVATURES:
        raise ValueError(f"unknown curvature {curvature!r}; choose from {CURVATURES}")


def _recorded_forward(model: SupervisedModel, theta: dict[str, torch.Tensor], x, task_id: int):
    """The net's outputs with its sites set to ``theta`` (leading sample dimension ``S``) as
    gradient leaves, every layer's input and output recorded: ``(leaves, records, outputs)``."""
    particles = next(iter(theta.values())).shape[0]
    leaves = {name: value.detach().requires_grad_() for name, value in theta.items()}
    with RecordLayers() as records:
        with substitute_sites(model.net, leaves, particles):
            outputs = model.net_outputs(x.unsqueeze(0), task_id)
    return leaves, records, outputs


def sites_by_layer(model: SupervisedModel) -> dict:
    """``{(module, attribute): site name}`` for the model's latent sites."""
    return {(module, attribute): name for name, (module, attribute) in model.site_index.items()}


#: How many numbers of per-example gradients (samples x examples x parameters) the generic
#: route forms at once (1 GiB of float32); more samples are taken in chunks.
PER_EXAMPLE_FLOATS = 2**28


def layer_statistics(
    model: SupervisedModel,
    theta: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    curvature: str | None = "fisher",
) -> GradientStatistics:
    """Gradient statistics for a net of pyro_cl layers (``theta[site]`` of shape ``(S, ...)``).

    A layer called more than once per forward pass would have its per-example gradients split
    across calls; pyro_cl's nets call each layer once.
    """
    _check_curvature(curvature)
    names = list(theta)
    leaves_by_name, records, outputs = _recorded_forward(model, theta, x, task_id)
    leaves = [leaves_by_name[name] for name in names]
    loss = -model.likelihood.log_prob(outputs, y).sum()
    layer_outputs = [out for _, _, out in records]
    targets = leaves + (layer_outputs if curvature == "fisher" else [])
    derivatives = torch.autograd.grad(loss, targets, retain_graph=curvature == "ggn")
    gradients = dict(zip(names, derivatives[: len(names)], strict=True))
    if curvature is None:
        return GradientStatistics(loss.detach(), gradients, None)
    site_of = sites_by_layer(model)
    squared: dict[str, torch.Tensor] = {}

    def accumulate(output_gradients) -> None:
        for (layer, inputs, _), g in zip(records, output_gradients, strict=True):
            for attribute, value in layer.squared_gradient_sums(inputs.detach(), g).items():
                name = site_of.get((layer, attribute))
                if name in leaves_by_name:
                    squared[name] = value if name not in squared else squared[name] + value

    if curvature == "fisher":
        accumulate(derivatives[len(names) :])
    else:
        factor = model.likelihood.hessian_factor(outputs.detach())
        columns = factor.shape[-1]
        for c in range(columns):
            seeds = torch.autograd.grad(
                outputs, layer_outputs, factor[..., c], retain_graph=c < columns - 1
            )
            accumulate(seeds)
    for name in names:  # sites this task's forward pass does not use (other heads)
        if name not in squared:
            squared[name] = torch.zeros_like(theta[name][0])
    return GradientStatistics(loss.detach(), gradients, {name: squared[name] for name in names})


def kronecker_factor_sums(
    model: SupervisedModel,
    theta: dict[str, torch.Tensor],
    x: torch.Tensor,
    task_id: int,
    sites: list[str],
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{site: (Σ_n G_n, Σ_n A_n)}`` for the weight matrices ``sites`` of linear layers
    ``s = W a + b`` at ``theta`` (one draw, shape ``(1, *site shape)``), whose Gauss-Newton block
    (``vec W`` by rows) is ``Σ_n G_n ⊗ A_n``: ``A_n = a_n a_nᵀ`` from the layer's input and
    ``G_n = Σ_c g_{n,c} g_{n,c}ᵀ`` from the gradients ``g_{n,c}`` of the output ``s`` back-propagated
    from the columns ``L_c`` of the likelihood's Hessian factor (as :func:`layer_statistics`'
    ``"ggn"``): KFAC's factors (Martens & Grosse 2015), for nets of pyro_cl layers.

    :raises TypeError: for a site that is not a :class:`~pyro_cl.nn.BayesianLinear`'s weight.
    """
    site_of = sites_by_layer(model)
    layer_of = {
        name: module for (module, attribute), name in site_of.items() if attribute == "weight"
    }
    for name in sites:
        if not isinstance(layer_of.get(name), BayesianLinear):
            raise TypeError(
                f"Kronecker factors are those of a linear layer's weight matrix; {name!r} is not "
                "one (leave it out of the Kronecker-factored guide with sites=...)"
            )
    _, records, outputs = _recorded_forward(model, theta, x, task_id)
    chosen = {layer_of[name]: name for name in sites}
    used = [(layer, inputs, out) for layer, inputs, out in records if layer in chosen]
    sums = {}
    for layer, inputs, _ in used:
        a = inputs.detach().reshape(-1, inputs.shape[-1])
        sums[chosen[layer]] = [a.new_zeros(layer.out_features, layer.out_features), a.T @ a]
    factor = model.likelihood.hessian_factor(outputs.detach())
    count = factor.shape[-1]
    for c in range(count if used else 0):
        seeds = torch.autograd.grad(
            outputs, [out for _, _, out in used], factor[..., c], retain_graph=c < count - 1
        )
        for (layer, _, _), g in zip(used, seeds, strict=True):
            g = g.reshape(-1, g.shape[-1])
            sums[chosen[layer]][0] += g.T @ g
    for name in sites:  # a head this task does not use: no curvature
        if name not in sums:
            out_size, in_size = theta[name].shape[1:]
            sums[name] = [
                theta[name].new_zeros(out_size, out_size),
                theta[name].new_zeros(in_size, in_size),
            ]
    return {name: tuple(pair) for name, pair in sums.items()}


def functional_statistics(
    model: SupervisedModel,
    theta: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    curvature: str | None = "fisher",
) -> GradientStatistics:
    """Gradient statistics for any ``PyroModule`` net, with ``torch.func`` per-example gradients:
    the model runs with its sample sites conditioned on ``θ_s``, vectorised over the Monte Carlo
    samples and the examples (``vmap`` of ``vmap``; the samples in chunks that keep the
    per-example gradients under :data:`PER_EXAMPLE_FLOATS` numbers)."""
    _check_curvature(curvature)
    names = list(theta)
    values = {name: theta[name].detach() for name in names}

    def outputs_at(sample: dict[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
        return poutine.condition(model.net_outputs, data=sample)(inputs, task_id)

    def example_loss(sample, xi, yi) -> torch.Tensor:
        return -model.likelihood.log_prob(outputs_at(sample, xi[None]), yi[None]).sum()

    def example_projection(sample, xi, column) -> torch.Tensor:
        return (outputs_at(sample, xi[None])[0] * column).sum()

    size = sum(value[0].numel() for value in values.values())
    chunk = max(1, PER_EXAMPLE_FLOATS // max(1, x.shape[0] * size))
    over_examples = vmap(grad_and_value(example_loss), in_dims=(None, 0, 0))
    per_example, losses = vmap(over_examples, in_dims=(0, None, None), chunk_size=chunk)(
        values, x, y
    )  # {site: (S, N, *shape)}, (S, N)
    gradients = {name: per_example[name].sum(1) for name in names}
    if curvature is None:
        return GradientStatistics(losses.sum(), gradients, None)
    if curvature == "fisher":
        squared = {name: per_example[name].square().sum((0, 1)) for name in names}
        return GradientStatistics(losses.sum(), gradients, squared)
    del per_example
    squared = {name: torch.zeros_like(values[name][0]) for name in names}
    with torch.no_grad():
        outputs = vmap(outputs_at, in_dims=(0, None), chunk_size=chunk)(values, x)
    factor = model.likelihood.hessian_factor(outputs)  # (S, N, out, out)
    project = vmap(grad(example_projection), in_dims=(None, 0, 0))
    for c in range(factor.shape[-1]):
        seeds = vmap(project, in_dims=(0, None, 0), chunk_size=chunk)(values, x, factor[..., c])
        for name in names:
            squared[name] += seeds[name].square().sum((0, 1))
    return GradientStatistics(losses.sum(), gradients, squared)


def gradient_statistics(
    model: SupervisedModel,
    theta: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    curvature: str | None = "fisher",
    fast: bool | None = None,
) -> GradientStatistics:
    """:func:`layer_statistics` for nets of pyro_cl layers, else :func:`functional_statistics`."""
    if fast is None:
        fast = model.fast
    route = layer_statistics if fast else functional_statistics
    return route(model, theta, x, y, task_id, curvature)


class ExampleGradientSums(NamedTuple):
    """Per-example sums over ``S`` weight samples ``θ_s`` of the log-likelihood
    ``ℓ_{s,n} = log p(y_n | f(x_n; θ_s))`` and its gradient (see :func:`example_gradient_sums`)."""

    #: ``Σ_s ℓ_{s,n}``, shape ``(N,)``.
    log_likelihood: torch.Tensor
    #: ``{site: Σ_s ∂ℓ_{s,n}/∂θ_s}``, shape ``(N, *site shape)``.
    gradients: dict[str, torch.Tensor]
    #: ``{site: Σ_s (∂ℓ_{s,n}/∂θ_s) ⊙ weights[site]_s}``, shape ``(N, *site shape)``.
    weighted: dict[str, torch.Tensor]


def example_gradient_sums(
    model: SupervisedModel,
    theta: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    task_id: int,
    fast: bool | None = None,
) -> ExampleGradientSums:
    """Per-example log-likelihoods and gradients at ``S`` weight samples, summed over the samples
    (plain and weighted by ``weights[site]`` of shape ``(S, *site shape)``): what Gaussian factors
    of single data points are made of (:mod:`pyro_cl.memory.gaussian_factors`).

    Nets of pyro_cl linear layers take one batched forward/backward pass and a contraction per
    layer (:meth:`~pyro_cl.nn.layer.BayesianLayer.example_gradient_sums`); any other net runs
    ``torch.func.vmap`` over samples and examples of ``torch.func.grad``.
    """
    if fast is None:
        fast = model.fast
    route = _layer_example_sums if fast else _functional_example_sums
    return route(model, theta, weights, x, y, task_id)


def _layer_example_sums(model, theta, weights, x, y, task_id) -> ExampleGradientSums:
    names = list(theta)
    leaves, records, outputs = _recorded_forward(model, theta, x, task_id)
    log_likelihood = model.likelihood.log_prob(outputs, y)  # (S, N)
    output_gradients = torch.autograd.grad(log_likelihood.sum(), [out for _, _, out in records])
    site_of = sites_by_layer(model)
    gradients, weighted = {}, {}
    for (layer, inputs, _), g in zip(records, output_gradients, strict=True):
        mine = {a: n for (module, a), n in site_of.items() if module is layer and n in leaves}
        plain = layer.example_gradient_sums(inputs.detach(), g, dict.fromkeys(mine))
        scaled = layer.example_gradient_sums(
            inputs.detach(), g, {a: weights[n] for a, n in mine.items()}
        )
        for attribute, name in mine.items():
            gradients[name] = plain[attribute]
            weighted[name] = scaled[attribute]
    for name in names:  # sites this task's forward pass does not use (other heads)
        if name not in gradients:
            gradients[name] = weighted[name] = theta[name].new_zeros(
                (x.shape[0], *theta[name].shape[1:])
            )
    return ExampleGradientSums(log_likelihood.detach().sum(0), gradients, weighted)


def _functional_example_sums(model, theta, weights, x, y, task_id) -> ExampleGradientSums:
    def example_log_likelihood(values, xi, yi) -> torch.Tensor:
        outputs = poutine.condition(model.net_outputs, data=values)(xi[None], task_id)
        return model.likelihood.log_prob(outputs, yi[None]).sum()

    per_example = vmap(grad_and_value(example_log_likelihood), in_dims=(None, 0, 0))
    per_sample = vmap(per_example, in_dims=(0, None, None))
    values = {name: value.detach() for name, value in theta.items()}
    g, log_likelihood = per_sample(values, x, y)  # {site: (S, N, *shape)}, (S, N)
    gradients = {name: g[name].sum(0) for name in values}
    weighted = {name: (g[name] * weights[name].unsqueeze(1)).sum(0) for name in values}
    return ExampleGradientSums(log_likelihood.detach().sum(0), gradients, weighted)
