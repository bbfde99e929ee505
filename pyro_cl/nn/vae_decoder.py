"""The multi-head Bayesian decoder of a continual VAE (VCL section 4, figure 1b)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pyro.nn import PyroModule
from torch import nn

from pyro_cl.nn.heads import MultiHead
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.rebuildable import RebuildableNet

__all__ = ["PRIVATE_PARTS", "VAEDecoder"]

#: Which half of the decoder is task-specific: ``"head"`` is the paper's architecture (i)
#: (private ``z → h``, shared ``h → x``), ``"output"`` is architecture (ii) (shared ``z → h``,
#: private ``h → x``).
PRIVATE_PARTS = ("head", "output")


def _stack(sizes: Sequence[int], prior_scale: float, local_reparameterization: bool):
    """Bayesian linear layers ``sizes[0] → sizes[1] → ...``."""
    return PyroModule[nn.ModuleList](
        [
            BayesianLinear(
                a, b, prior_scale=prior_scale, local_reparameterization=local_reparameterization
            )
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        ]
    )


class VAEDecoder(MultiHead, PyroModule, RebuildableNet):
    """``f_θ(z; t)``: latent code ``z`` to the likelihood's parameters (pixel logits), with a
    task-specific and a shared part, every weight a ``PyroSample`` site.

    With ``private="head"`` (VCL's architecture (i), the paper's experiments) task ``t`` maps
    ``z → hidden → h`` through its own head network ``θ^H_t`` and a shared network ``θ^S``
    maps ``h → hidden → x``; with ``private="output"`` (architecture (ii)) the ``z → h`` part is
    shared and the ``h → x`` part private. ReLUs follow every layer but the last. Sample sites
    are ``heads.{t}.{i}.weight``/``bias`` and ``shared.{i}.weight``/``bias``; a head never used
    keeps its prior.

    The encoders of the guide are symmetric to it by default (:attr:`encoder_hidden_sizes`:
    ``x → hidden → h → hidden → (μ, log σ²)``), and the net names its Pyro model,
    :class:`~pyro_cl.generative.GenerativeModel` (:attr:`model_class`).

    :param out_features: size of a data point (784 pixels for MNIST).
    :param latent_dim: dimension of ``z`` (50 in the paper).
    :param hidden_size: width of the hidden layer of each part (500).
    :param representation_size: dimension of ``h`` (500).
    :param heads: number of tasks.
    :param private: ``"head"`` or ``"output"`` (see above).
    :param prior_scale: prior standard deviation of every weight and bias.
    :param local_reparameterization: sample pre-activations instead of weights.
    :param encoder_hidden_sizes: the encoders' hidden widths (default: symmetric).
    """

    name = "VAEDecoder"

    def __init__(
        self,
        out_features: int = 784,
        latent_dim: int = 50,
        hidden_size: int = 500,
        representation_size: int = 500,
        heads: int = 10,
        private: str = "head",
        prior_scale: float = 1.0,
        local_reparameterization: bool = True,
        encoder_hidden_sizes: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        sizes = {
            "out_features": out_features,
            "latent_dim": latent_dim,
            "hidden_size": hidden_size,
            "representation_size": representation_size,
            "heads": heads,
        }
        for what, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{what} must be a positive integer, got {value!r}")
        if private not in PRIVATE_PARTS:
            raise ValueError(f"private must be one of {PRIVATE_PARTS}, got {private!r}")
        if encoder_hidden_sizes is None:
            encoder_hidden_sizes = [hidden_size, representation_size, hidden_size]
        self.out_features = out_features
        self.latent_dim = latent_dim
        self.num_heads = heads
        self.private = private
        self.encoder_hidden_sizes = [int(h) for h in encoder_hidden_sizes]
        self._config = {
            **sizes,
            "private": private,
            "prior_scale": float(prior_scale),
            "local_reparameterization": local_reparameterization,
            "encoder_hidden_sizes": self.encoder_hidden_sizes,
        }
        lower = [latent_dim, hidden_size, representation_size]
        upper = [representation_size, hidden_size, out_features]
        private_sizes, shared_sizes = (lower, upper) if private == "head" else (upper, lower)
        self.heads = PyroModule[nn.ModuleList](
            [_stack(private_sizes, prior_scale, local_reparameterization) for _ in range(heads)]
        )
        self.shared = _stack(shared_sizes, prior_scale, local_reparameterization)

    #: :class:`~pyro_cl.generative.GenerativeModel`, by its registered name
    #: (:data:`pyro_cl.model.MODEL_CLASSES`): the net needs no import from above it.
    model_class = "generative"

    @property
    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the net (used when a learner is loaded)."""
        return dict(self._config)

    def forward(self, z: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        head = self.heads[self.check_task_id(task_id)]
        lower, upper = (head, self.shared) if self.private == "head" else (self.shared, head)
        h = _run(lower, z, last_activation=True)
        return _run(upper, h, last_activation=False)


def _run(layers: nn.ModuleList, x: torch.Tensor, last_activation: bool) -> torch.Tensor:
    for i, layer in enumerate(layers):
        x = layer(x)
        if last_activation or i < len(layers) - 1:
            x = torch.relu(x)
    return x
