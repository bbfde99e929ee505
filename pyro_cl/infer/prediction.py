"""Prediction: net outputs under posterior draws, as one coherent function draw per sample.

Both the learner (``predict``, ``evaluate``) and a memory's
:class:`~pyro_cl.memory.model_view.ModelView` predict through :func:`predictive_samples`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from pyro_cl.infer.random_stream import random_state, set_random_state
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.exclusive import exclusive_mode

__all__ = [
    "MAX_CHUNK",
    "PREDICTION_ELEMENTS",
    "check_finite_outputs",
    "prediction_chunk",
    "predictive_samples",
    "widest_activation",
]

#: Activation elements per pass of prediction: rows (inputs × samples) times the net's widest
#: activation per row, ~8 MB of float32. Passes much larger than a CPU's cache run their
#: element-wise kernels (noise, activations) from memory: at 1024 inputs a pass prediction took
#: 1.75x (a 784-100-100-10 MLP, 100 samples) and 2.36x (the split CIFAR conv net, 10 samples)
#: the time it takes at this budget (one thread; docs/lab/speed.md, "Prediction in passes").
PREDICTION_ELEMENTS = 2**21
#: Inputs per pass at most (narrow nets and few samples): more gains nothing measurable.
MAX_CHUNK = 256


def widest_activation(
    net: torch.nn.Module, forward: Callable[[], object], device: torch.device
) -> int:
    """Elements of ``net``'s largest module output in ``forward()``, a probe pass (of a row or
    two: a draw of one or two inputs) on ``device``; its random draws are rolled back, so nothing
    after it sees them."""
    sizes = [1]

    def record(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            sizes.append(output.numel())

    state = random_state(device)
    handles = [module.register_forward_hook(record) for module in net.modules()]
    try:
        forward()
    finally:
        for handle in handles:
            handle.remove()
        set_random_state(device, state)
    return max(sizes)


def prediction_chunk(widest: int, num_samples: int) -> int:
    """Inputs per pass: :data:`PREDICTION_ELEMENTS` over ``widest`` × ``num_samples``, between 1
    and :data:`MAX_CHUNK`."""
    return max(1, min(MAX_CHUNK, PREDICTION_ELEMENTS // max(1, widest * num_samples)))


@torch.no_grad()
def predictive_samples(
    model: SupervisedModel,
    sites: dict,
    x: torch.Tensor,
    task_id: int,
    num_samples: int,
    chunk: int | None = None,
) -> torch.Tensor:
    """Net outputs for ``num_samples`` draws of the latent sites: shape ``(S, N, outputs)``.

    :param sites: distributions or values of latent sites (``{}``: every site from its prior,
        which after a step holds the propagated posterior).
    :param x: inputs already checked and on the model's device.
    :param chunk: inputs per pass (default :func:`prediction_chunk` of the net's
        :func:`widest_activation` and the draws a pass holds: all ``num_samples`` for nets that
        broadcast over draws, one for nets run one draw at a time, such as ``make_bayesian``'s,
        whose passes would otherwise shrink by ``num_samples`` for nothing).
    :raises ValueError: if an output is NaN or infinite (see :func:`check_finite_outputs`).
    """
    parts = []
    # Evaluation mode: test-time behaviour, e.g. Bernoulli rather than Concrete IBP masks.
    with exclusive_mode(model.net, training=False):
        # Every chunk starts from the same random state, so sample s uses the same weights for
        # all inputs (a coherent function draw) when weights, not pre-activations, are sampled.
        rng = random_state(x.device)
        if chunk is None:
            # two inputs, as site discovery: a forward may take statistics over its batch
            probe = partial(sample_outputs, model, sites, x[:2], task_id, 1)
            widest = -(-widest_activation(model.net, probe, x.device) // 2) if len(x) > 1 else 1
            per_pass = num_samples if model.vectorized_particles else 1
            chunk = prediction_chunk(widest, per_pass)
        for i in range(0, x.shape[0], chunk):
            set_random_state(x.device, rng)
            parts.append(sample_outputs(model, sites, x[i : i + chunk], task_id, num_samples))
    samples = torch.cat(parts, dim=1)
    check_finite_outputs(samples, x)
    return samples


def check_finite_outputs(samples: torch.Tensor, x: torch.Tensor) -> None:
    """Predictions are never computed from NaN: refuse outputs that are not finite.

    :raises ValueError: naming how many inputs overflow the net and their largest magnitude.
    """
    finite = torch.isfinite(samples).reshape(samples.shape[0], samples.shape[1], -1)
    bad = ~finite.all(dim=2).all(dim=0)
    if bad.any():
        largest = x[bad].abs().max().item()
        raise ValueError(
            f"the net's outputs are NaN or infinite for {int(bad.sum())} of {x.shape[0]} inputs "
            f"(largest |input| among them: {largest:.3g}); such inputs overflow the net, so no "
            "prediction is reported: standardise the inputs as in training"
        )
