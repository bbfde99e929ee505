"""A supervised Pyro model: a Bayesian net's outputs scored by a likelihood."""

from __future__ import annotations

import inspect

import torch

from pyro_cl.likelihoods import Likelihood
from pyro_cl.nn import structured
from pyro_cl.nn.substitution import SubstitutableModule
from pyro_cl.posterior import sample_sites

__all__ = ["SupervisedModel"]


class SupervisedModel:
    """The Pyro model ``θ ~ prior; y_n ~ p(y | net(x_n; θ))`` for one task.

    Call it as ``model(x, y=None, task_id=0, dataset_size=None)``. It runs ``net`` (a
    ``PyroModule`` whose latent weights are ``PyroSample`` sites), then observes ``y`` in a
    ``pyro.plate("data")`` whose log-likelihood is scaled by ``dataset_size / len(x)``, so a
    minibatch gives an unbiased estimate of the whole task's log-likelihood. It returns the net's
    outputs. ``task_id`` is passed to the net only if the net's ``forward`` takes it.

    It is not an ``nn.Module`` on purpose: sample site names stay exactly those of ``net``.
    """

    def __init__(self, net: torch.nn.Module, likelihood: Likelihood) -> None:
        self.net = net
        self.likelihood = likelihood
        self.net_takes_task_id = "task_id" in inspect.signature(net.forward).parameters
        sites = list(sample_sites(net))
        if not sites:
            raise ValueError(f"{type(net).__name__} has no PyroSample sites: nothing to learn")
        #: ``{site name: (module, attribute)}`` for every latent site of the net.
        self.site_index = {name: (module, attribute) for name, module, attribute in sites}
        #: True when every latent site belongs to a pyro_cl layer, so the fast path applies.
        self.library_layers_only = all(isinstance(m, SubstitutableModule) for _, m, _ in sites)

    @property
    def in_features(self) -> int | None:
        return getattr(self.net, "in_features", None)

    @property
    def out_features(self) -> int | None:
        return getattr(self.net, "out_features", None)

    def check_task_id(self, task_id: int) -> None:
        if hasattr(self.net, "check_task_id"):
            self.net.check_task_id(task_id)

    def check_data(self, x: torch.Tensor, y: torch.Tensor | None, task_id: int) -> None:
        """Raise ``ValueError`` naming the problem if ``(x, y)`` cannot be fed to this model."""
        self.check_task_id(task_id)
        if not torch.is_tensor(x) or not x.dtype.is_floating_point:
            raise ValueError("inputs must be a floating-point tensor")
        if x.shape[0] == 0:
            raise ValueError(f"task {task_id} is empty: it has no data points")
        if self.in_features is not None and (x.dim() != 2 or x.shape[1] != self.in_features):
            raise ValueError(
                f"inputs have shape {tuple(x.shape)} but the net expects (N, {self.in_features})"
            )
        input_shape = getattr(self.net, "input_shape", None)
        if input_shape is not None and tuple(x.shape[1:]) != tuple(input_shape):
            raise ValueError(
                f"inputs have shape {tuple(x.shape)} but the net expects (N, "
                f"{', '.join(map(str, input_shape))})"
            )
        if not torch.isfinite(x).all():
            raise ValueError(f"inputs of task {task_id} contain NaN or inf")
        if y is not None:
            if y.shape[0] != x.shape[0]:
                raise ValueError(f"{x.shape[0]} inputs but {y.shape[0]} targets")
            self.likelihood.check_targets(y, self.out_features)

    def net_outputs(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        if self.net_takes_task_id:
            return self.net(x, task_id=task_id)
        return self.net(x)

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        task_id: int = 0,
        dataset_size: int | None = None,
    ) -> torch.Tensor:
        # one data plate for the whole run: the observations and any local latent sites
        with structured.using_data_plate(structured.data_plate(x.shape[0], x.device, dataset_size)):
            outputs = self.net_outputs(x, task_id)
            self.likelihood.observe(outputs, y, dataset_size)
        return outputs
