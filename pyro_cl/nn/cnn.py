"""Bayesian convolutional net with a shared trunk and one head per task (split CIFAR)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from pyro.nn import PyroModule
from torch import nn

from pyro_cl.checks import checked_count
from pyro_cl.nn.conv import BayesianConv2d
from pyro_cl.nn.film import checked_film_settings, film_layers
from pyro_cl.nn.heads import MultiHead
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.point_layers import PointConv2d, checked_deterministic
from pyro_cl.nn.priors import Prior, bayesian_layers, prior_named, use_prior
from pyro_cl.nn.rebuildable import RebuildableNet

__all__ = ["BayesianCNN"]


class BayesianCNN(MultiHead, PyroModule, RebuildableNet):
    """Blocks of two 3×3 Bayesian convolutions (the first padded, the second not) and a 2×2 max
    pool, then fully connected Bayesian layers and one head per task.

    The defaults are the net of Zenke et al. (2017) used for split CIFAR-10/100 in the VOGN thesis
    (section 4.5): conv 32, conv 32, pool, conv 64, conv 64, pool, dense 512, heads of 10 —
    without dropout, as in the thesis. ReLU activations throughout.

    Inputs are images ``(N, C, H, W)`` (with a leading particle dimension on the fast path).
    Sample sites are ``convs.{i}.weight``, ``dense.{i}.weight`` and ``heads.{t}.weight`` (and their
    biases).

    :param input_shape: ``(C, H, W)`` of one image.
    :param conv_blocks: output channels of the two convolutions of each block.
    :param hidden_sizes: widths of the fully connected layers after the convolutions.
    :param out_features: outputs of each head.
    :param heads: number of heads (tasks); 1 for a single-head net.
    :param prior_scale: prior standard deviation of every weight (prior mean 0).
    :param local_reparameterization: sample pre-activations instead of weights (VCL's default).
    :param film_tasks: task-specific FiLM layers (GVCL; :mod:`pyro_cl.nn.film`) for this many
        tasks, after every convolution (per channel) and dense layer (per unit), before the
        activation (sites ``film.{t}.{i}.weight``/``.bias``); 0 for none.
    :param film_prior_scale: the FiLM sites' prior standard deviation (around the identity).
    :param prior_family: the first priors' family on every weight but the FiLM layers', at
        ``prior_loc`` and ``prior_scale``: ``"normal"``, ``"laplace"``, ``"student_t"`` or any
        registered prior's name, or a :class:`~pyro_cl.nn.priors.Prior` whose
        :meth:`~pyro_cl.nn.priors.Prior.distribution` is taken (``StudentTPrior(df=5)``).
    :param deterministic: layers kept as point values, e.g. the feature extractor
        ``["convs.0", "convs.1", "convs.2", "convs.3"]`` (:mod:`pyro_cl.nn.point_layers`).
    """

    name = "BayesianCNN"

    def __init__(
        self,
        input_shape: Sequence[int] = (3, 32, 32),
        conv_blocks: Sequence[Sequence[int]] = ((32, 32), (64, 64)),
        hidden_sizes: Sequence[int] = (512,),
        out_features: int = 10,
        heads: int = 6,
        prior_scale: float = 1.0,
        local_reparameterization: bool = True,
        film_tasks: int = 0,
        film_prior_scale: float = 1.0,
        prior_family: str | Prior = "normal",
        deterministic: Sequence[str] = (),
    ) -> None:
        super().__init__()
        heads = checked_count(heads, "heads (a net needs at least one)")
        channels, height, width = (int(v) for v in input_shape)
        self.input_shape = (channels, height, width)
        self.in_features = None
        self.out_features = out_features
        self.num_heads = heads
        self._config = {
            "input_shape": list(self.input_shape),
            "conv_blocks": [list(block) for block in conv_blocks],
            "hidden_sizes": list(hidden_sizes),
            "out_features": out_features,
            "heads": heads,
            "prior_scale": prior_scale,
            "local_reparameterization": local_reparameterization,
        }
        film_tasks, film_prior_scale = checked_film_settings(film_tasks, film_prior_scale)
        # older checkpoints' configs lack these and rebuild with the defaults: no FiLM layers
        self._config.update(film_tasks=film_tasks, film_prior_scale=film_prior_scale)
        family = prior_named(prior_family)
        # older configs: "normal"; a Prior part is kept as its spec
        self._config["prior_family"] = (
            prior_family if isinstance(prior_family, str) else family.spec()
        )
        layer_options = {
            "prior_scale": prior_scale,
            "local_reparameterization": (local_reparameterization),
        }
        paths = [f"convs.{i}" for i in range(2 * len(conv_blocks))]
        paths += [f"dense.{i}" for i in range(len(hidden_sizes))]
        paths += [f"heads.{t}" for t in range(heads)]
        kept = checked_deterministic(deterministic, paths)
        self._config["deterministic"] = kept  # older configs: none

        def conv(inputs: int, outputs: int, padding: int) -> nn.Module:
            if f"convs.{len(convs)}" in kept:
                return PointConv2d(inputs, outputs, 3, padding=padding)
            return BayesianConv2d(inputs, outputs, 3, padding=padding, **layer_options)

        def linear(path: str, inputs: int, outputs: int) -> nn.Module:
            if path in kept:
                return nn.Linear(inputs, outputs)
            return BayesianLinear(inputs, outputs, **layer_options)

        convs = []
        for block in conv_blocks:
            first, second = block
            convs.append(conv(channels, first, 1))
            convs.append(conv(first, second, 0))
            channels, height, width = second, (height - 2) // 2, (width - 2) // 2
            if height < 1 or width < 1:
                raise ValueError(
                    f"input {tuple(input_shape)} is too small for {len(conv_blocks)} blocks"
                )
        self.convs = PyroModule[nn.ModuleList](convs)
        sizes = [channels * height * width] + [int(h) for h in hidden_sizes]
        self.dense = PyroModule[nn.ModuleList](
            [linear(f"dense.{i}", sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]
        )
        self.heads = PyroModule[nn.ModuleList](
            [linear(f"heads.{t}", sizes[-1], out_features) for t in range(heads)]
        )
        self.num_film_tasks = film_tasks
        widths = [conv.out_channels for conv in convs] + sizes[1:]
        maps = [True] * len(convs) + [False] * (len(sizes) - 1)
        self.film = film_layers(self.num_film_tasks, widths, maps, film_prior_scale)
        use_prior(bayesian_layers([*self.convs, *self.dense, *self.heads]), family)

    @property
    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the net (used when a learner is loaded)."""
        return dict(self._config)

    def forward(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        head = self.check_task_id(task_id)
        film = self.task_film(task_id)
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = torch.relu(x if film is None else film[i](x))
            if i % 2 == 1:
                lead = x.shape[:-3]
                x = F.max_pool2d(x.reshape(-1, *x.shape[-3:]), 2)
                x = x.reshape(*lead, *x.shape[1:])
        x = x.flatten(-3)
        for j, layer in enumerate(self.dense, start=len(self.convs)):
            x = layer(x)
            x = torch.relu(x if film is None else film[j](x))
        return self.heads[head](x)
