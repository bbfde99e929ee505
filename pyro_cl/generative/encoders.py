"""Task-specific amortised encoders ``q_φt(z | x)``: the local half of a generative VCL guide."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyro_cl.nn.effects import new_data_plate
from pyro_cl.nn.heads import normalised_task_id

__all__ = ["TaskEncoders", "gaussian_kl_to_standard_normal"]


def gaussian_kl_to_standard_normal(q: dist.Normal) -> torch.Tensor:
    """``KL(N(μ, σ²) ‖ N(0, I)) = ½ Σ_d (μ_d² + σ_d² − 1 − log σ_d²)`` per point (last dim summed)."""
    variance = q.scale.square()
    return 0.5 * (q.loc.square() + variance - 1.0 - variance.log()).sum(-1)


class TaskEncoders(nn.Module):
    """One deterministic encoder per task, ``x ↦ (μ_φt(x), log σ²_φt(x))`` of
    ``q_φt(z | x) = N(μ, diag σ²)`` (VCL section 4: "the encoder network is task-specific").

    Each encoder is an MLP ``in_features → hidden... → 2·latent_dim`` with ReLUs, symmetric to the
    generator by default (:class:`~pyro_cl.nn.VAEDecoder`). Encoders are created lazily, the first
    time a task is seen (:meth:`prepare`), so task ``t``'s parameters do not exist before task
    ``t`` and are never in a later task's graph: a later task cannot change them.

    As a Pyro guide for the local site ``site`` (default ``"z"``), calling it samples
    ``z_n ~ q_φt(z | x_n)`` in the model's data plate; :class:`~pyro_cl.guides.MeanFieldGuide`
    calls it next to its global sites when given as its ``local_guide``.

    :param in_features: size of one data point.
    :param hidden_sizes: widths of the hidden layers.
    :param latent_dim: dimension of ``z``.
    :param site: the name of the model's local latent site this guide covers.
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        latent_dim: int,
        site: str = "z",
    ) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.hidden_sizes = [int(h) for h in hidden_sizes]
        self.latent_dim = int(latent_dim)
        self.site = site
        self.encoders = nn.ModuleDict()

    @property
    def site_names(self) -> tuple[str, ...]:
        """The model's local sites this guide samples."""
        return (self.site,)

    @property
    def tasks(self) -> list[int]:
        """The tasks that have an encoder, in the order they were created."""
        return [int(key) for key in self.encoders]

    def _new_encoder(self) -> nn.Sequential:
        sizes = [self.in_features, *self.hidden_sizes]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], 2 * self.latent_dim))
        return nn.Sequential(*layers)

    def prepare(self, task_id, like: torch.Tensor) -> None:
        """Create task ``task_id``'s encoder (on ``like``'s device and dtype) if it has none."""
        key = str(normalised_task_id(task_id))
        if key not in self.encoders:
            self.encoders[key] = self._new_encoder().to(device=like.device, dtype=like.dtype)

    def encoder(self, task_id) -> nn.Module:
        key = str(normalised_task_id(task_id))
        if key not in self.encoders:
            raise ValueError(f"task {task_id} has no encoder yet: it has not been observed")
        return self.encoders[key]

    def distribution(self, x: torch.Tensor, task_id) -> dist.Normal:
        """``q_φt(z | x)`` with batch shape ``x.shape[:-1]`` (event dims not declared)."""
        out = self.encoder(task_id)(x)
        loc, log_variance = out[..., : self.latent_dim], out[..., self.latent_dim :]
        return dist.Normal(loc, torch.exp(0.5 * log_variance), validate_args=False)

    def parameters_of(self, tasks: Iterable[int]) -> dict[str, nn.Parameter]:
        """``{name: φ}`` of the encoders of ``tasks`` (those that exist)."""
        out = {}
        for task in tasks:
            key = str(normalised_task_id(task))
            if key in self.encoders:
                for name, value in self.encoders[key].named_parameters():
                    out[f"encoders.{key}.{name}"] = value
        return out

    def forward(self, x, y=None, task_id=0, dataset_size=None) -> torch.Tensor:
        """Sample the local site in the model's data plate (the same plate name, size and
        subsample as :func:`~pyro_cl.nn.effects.new_data_plate`, which the model uses)."""
        with new_data_plate(x.shape[0], x.device, dataset_size):
            return pyro.sample(self.site, self.distribution(x, task_id).to_event(1))

    # ----------------------------------------------------------------- state
    def create_from_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Create the encoders that ``state`` (this module's state dict) holds, so that
        ``load_state_dict`` finds every parameter."""
        for name, value in state.items():
            if name.startswith("encoders."):
                key = name.split(".")[1]
                if key not in self.encoders:
                    self.encoders[key] = self._new_encoder().to(device=value.device)

    def remove_missing(self, state: Mapping[str, torch.Tensor]) -> None:
        """Remove the encoders ``state`` does not hold (created by a step being rolled back)."""
        kept = {name.split(".")[1] for name in state if name.startswith("encoders.")}
        for key in [key for key in self.encoders if key not in kept]:
            del self.encoders[key]

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, hidden_sizes={self.hidden_sizes}, "
            f"latent_dim={self.latent_dim}, tasks={self.tasks}"
        )
