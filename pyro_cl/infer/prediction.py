"""Prediction: net outputs under posterior draws, as one coherent function draw per sample.

Both the learner (``predict``, ``evaluate``) and a memory's
:class:`~pyro_cl.infer.model_view.ModelView` predict through :func:`predictive_samples`.
"""

from __future__ import annotations

import torch

from pyro_cl.infer.random_stream import random_state, set_random_state
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.exclusive import exclusive_mode

__all__ = ["check_finite_outputs", "predictive_samples"]


@torch.no_grad()
def predictive_samples(
    model: SupervisedModel,
    sites: dict,
    x: torch.Tensor,
    task_id: int,
    num_samples: int,
    chunk: int = 1024,
) -> torch.Tensor:
    """Net outputs for ``num_samples`` draws of the latent sites: shape ``(S, N, outputs)``.

    :param sites: distributions or values of latent sites (``{}``: every site from its prior,
        which after a step holds the propagated posterior).
    :param x: inputs already checked and on the model's device.
    :raises ValueError: if an output is NaN or infinite (see :func:`check_finite_outputs`).
    """
    parts = []
    # Evaluation mode: test-time behaviour, e.g. Bernoulli rather than Concrete IBP masks.
    with exclusive_mode(model.net, training=False):
        # Every chunk starts from the same random state, so sample s uses the same weights for
        # all inputs (a coherent function draw) when weights, not pre-activations, are sampled.
        rng = random_state(x.device)
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
