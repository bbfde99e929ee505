"""Bayesian multi-layer perceptron with a shared trunk and one or more heads (VCL section 3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pyro.nn import PyroModule
from torch import nn

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.nn.film import checked_film_settings, film_layers
from pyro_cl.nn.heads import MultiHead
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.moment_matching import ACTIVATIONS, moment_matched_prior_scales
from pyro_cl.nn.point_layers import checked_deterministic
from pyro_cl.nn.priors import Prior, bayesian_layers, prior_named, use_prior
from pyro_cl.nn.rebuildable import RebuildableNet

__all__ = ["BayesianMLP"]


class BayesianMLP(MultiHead, PyroModule, RebuildableNet):
    """A fully connected Bayesian net ``in -> hidden... -> out`` as a Pyro model component.

    With ``heads=1`` it is a *single-head* net and ``task_id`` is ignored. With ``heads=H > 1``
    it is a *multi-head* net (VCL fig. 1a): the hidden layers ``θ^S`` are shared and task ``t``
    reads out through its own head ``θ^H_t``, so only the trunk and head ``t`` appear as sample
    sites when ``forward(x, task_id=t)`` runs. Heads that were never used keep their prior.

    Sample sites are named ``hidden.{i}.weight``/``hidden.{i}.bias`` and
    ``heads.{t}.weight``/``heads.{t}.bias``.

    :param in_features: input dimension.
    :param hidden_sizes: widths of the hidden layers.
    :param out_features: outputs of each head (classes for a classifier).
    :param heads: number of heads; 1 for a single-head net.
    :param activation: "relu", "tanh" or "sigmoid".
    :param prior_loc: prior mean of all weights (a per-layer sequence is accepted).
    :param prior_scale: prior standard deviation of all weights (a per-layer sequence is accepted;
        layers are ordered hidden layers first, then the heads' layer), or ``"moment_matched"``
        for ``(N_{l-1} c_f)^{-½}`` per layer, which keeps every pre-activation's second moment
        at one for standardised inputs (Kurle et al. 2020, eq. 17;
        :mod:`pyro_cl.nn.moment_matching`).
    :param local_reparameterization: sample pre-activations instead of weights (default on).
    :param film_tasks: task-specific FiLM layers (GVCL; :mod:`pyro_cl.nn.film`) for this many
        tasks, a scale and shift of every hidden pre-activation per task (sites
        ``film.{t}.{i}.weight``/``.bias``); 0 for none. ``task_id`` then picks the task's layers
        on a single-head net too.
    :param film_prior_scale: the FiLM sites' prior standard deviation (around the identity).
    :param prior_family: the first priors' family on every weight but the FiLM layers', at
        ``prior_loc`` and ``prior_scale``: ``"normal"``, ``"laplace"``, ``"student_t"`` or any
        registered prior's name, or a :class:`~pyro_cl.nn.priors.Prior` whose
        :meth:`~pyro_cl.nn.priors.Prior.distribution` is taken (``StudentTPrior(df=5)``).
    :param deterministic: layers kept as point values (``"hidden.0"``, ``"heads.1"``, ...;
        :mod:`pyro_cl.nn.point_layers`).
    """

    name = "BayesianMLP"

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        heads: int = 1,
        activation: str = "relu",
        prior_loc: float | Sequence[float] = 0.0,
        prior_scale: float | Sequence[float] | str = 1.0,
        local_reparameterization: bool = True,
        film_tasks: int = 0,
        film_prior_scale: float = 1.0,
        prior_family: str | Prior = "normal",
        deterministic: Sequence[str] = (),
    ) -> None:
        super().__init__()
        heads = checked_count(heads, "heads (a net needs at least one)")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose from {list(ACTIVATIONS)}")
        in_features = checked_count(in_features, "in_features")
        out_features = checked_count(out_features, "out_features")
        hidden_sizes = [checked_count(h, "a hidden layer's width") for h in hidden_sizes]
        num_layers = len(hidden_sizes) + 1
        locs = _per_layer(prior_loc, num_layers, "prior_loc")
        if prior_scale == "moment_matched":
            scales = moment_matched_prior_scales(in_features, hidden_sizes, activation)
        else:
            scales = _per_layer(prior_scale, num_layers, "prior_scale")
        sizes = [in_features] + hidden_sizes
        self.in_features = in_features
        self.out_features = out_features
        self.num_heads = heads
        self.activation = activation
        self._config = {
            "in_features": in_features,
            "hidden_sizes": hidden_sizes,
            "out_features": out_features,
            "heads": heads,
            "activation": activation,
            "prior_loc": locs,
            "prior_scale": scales,
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
        self.num_film_tasks = film_tasks
        self.film = film_layers(self.num_film_tasks, hidden_sizes, False, film_prior_scale)
        paths = [f"hidden.{i}" for i in range(len(hidden_sizes))]
        paths += [f"heads.{t}" for t in range(heads)]
        kept = checked_deterministic(deterministic, paths)
        self._config["deterministic"] = kept  # older configs: none

        def layer(path: str, inputs: int, outputs: int, i: int) -> nn.Module:
            if path in kept:
                return nn.Linear(inputs, outputs)
            return BayesianLinear(
                inputs,
                outputs,
                prior_loc=locs[i],
                prior_scale=scales[i],
                local_reparameterization=local_reparameterization,
            )

        self.hidden = PyroModule[nn.ModuleList](
            [layer(f"hidden.{i}", sizes[i], sizes[i + 1], i) for i in range(len(hidden_sizes))]
        )
        self.heads = PyroModule[nn.ModuleList](
            [layer(f"heads.{t}", sizes[-1], out_features, -1) for t in range(heads)]
        )
        use_prior(bayesian_layers([*self.hidden, *self.heads]), family)

    @property
    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the net (used when a learner is loaded)."""
        return dict(self._config)

    def forward(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        head = self.check_task_id(task_id)
        activation = ACTIVATIONS[self.activation]
        film = self.task_film(task_id)
        for i, layer in enumerate(self.hidden):
            x = layer(x)
            x = activation(x if film is None else film[i](x))
        return self.heads[head](x)


def _per_layer(value, num_layers: int, what: str) -> list[float]:
    if isinstance(value, (int, float)):
        return [checked_real(value, what)] * num_layers
    values = [checked_real(v, what) for v in value]
    if len(values) != num_layers:
        raise ValueError(f"{what} needs one value per layer ({num_layers}), got {len(values)}")
    return values
