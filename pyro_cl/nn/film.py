"""Task-specific FiLM layers (Perez et al. 2018), GVCL's remedy for VCL's over-pruning.

Loo, Swaroop & Turner (2021, section 4) find that mean-field VI switches hidden units off: a unit
whose incoming weights are pruned back to the prior costs no KL, and a later task can only reuse
it by paying that KL again. A *task-specific* scale and shift of every hidden unit's
pre-activation,

    h̃_t = γ_t ⊙ h + b_t,        γ_t, b_t ∈ R^{units}, one pair per task t,

lets a task switch units on and off (and re-scale them) without moving the shared weights, so
the shared weights need not be pruned for one task to ignore a unit. Here ``γ_t`` and ``b_t``
are the sites ``weight`` and ``bias`` of a :class:`BayesianFiLM`, with priors ``N(1, s²)`` and
``N(0, s²)`` (the identity map, as GVCL initialises them). Each task has its own layers, so
their posterior is never the prior of another task: only the task that owns them fits them.

For convolutional feature maps ``(..., C, H, W)`` the scale and shift act per channel.

A net of pyro_cl's (``BayesianMLP``, ``BayesianCNN``) builds its FiLM layers itself
(``film_tasks=``); a user's net made Bayesian gets them after the layers it names
(``make_bayesian(net, film_tasks=5, film_after=["body.0"])``): each named layer becomes a
:class:`TaskFiLM`, and a :class:`TaskSlot` hook on the net tells them the task the net runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pyro.nn import PyroModule
from torch import nn

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.nn.heads import normalised_task_id
from pyro_cl.nn.layer import BayesianLayer

__all__ = ["BayesianFiLM", "TaskFiLM", "TaskSlot", "checked_film_settings", "film_layers"]


class BayesianFiLM(BayesianLayer):
    """``y = γ ⊙ x + b`` per unit (or per channel of a feature map), with Gaussian priors
    ``γ ~ N(1, s²)``, ``b ~ N(0, s²)`` (see the module docstring).

    :param features: units of a hidden layer (``x`` of shape ``(..., features)``), or channels
        of a feature map (``(..., features, H, W)``) with ``channels=True``.
    :param channels: whether ``x`` is a feature map.
    :param prior_scale: ``s``.
    """

    starts_at_prior_mean = True  # the identity map, never a random scale

    def __init__(self, features: int, channels: bool = False, prior_scale: float = 1.0) -> None:
        super().__init__()
        if features <= 0:
            raise ValueError(f"a FiLM layer needs a positive number of features, got {features}")
        self.features = features
        self.channels = bool(channels)
        self._register_sites((features,), True, 0.0, prior_scale, False)
        self.weight_prior_loc.fill_(1.0)

    def _broadcastable(self, value: torch.Tensor) -> torch.Tensor:
        """A ``(features,)`` or ``(P, features)`` draw shaped to broadcast against the input:
        ``(P, 1, features)`` for units, ``(..., features, 1, 1)`` for channels."""
        if value.dim() == 2:
            value = value.unsqueeze(-2)
        return value[..., None, None] if self.channels else value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = -3 if self.channels else -1
        if x.dim() < -dim or x.shape[dim] != self.features:
            raise ValueError(
                f"a FiLM layer of {self.features} {'channels' if self.channels else 'units'} got "
                f"an input of shape {tuple(x.shape)}"
            )
        scale = self._broadcastable(self._draw(self._site("weight")))
        shift = self._broadcastable(self._draw(self._site("bias")))
        return self._record(x, x * scale + shift)

    def _per_example(self, x: torch.Tensor, output_gradient: torch.Tensor) -> dict:
        """``∂ℓ_{s,n}/∂γ = Σ g ⊙ x`` and ``∂ℓ_{s,n}/∂b = Σ g`` (sums over a feature map's
        positions), shape ``(S, N, features)``."""
        scale = output_gradient * x
        if self.channels:
            return {"weight": scale.sum((-2, -1)), "bias": output_gradient.sum((-2, -1))}
        return {"weight": scale, "bias": output_gradient}

    def example_variances(
        self, x: torch.Tensor, output_gradient: torch.Tensor, variances: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``Σ_c (∂(g·out_n)/∂γ_c)² V_γ,c + (∂(g·out_n)/∂b_c)² V_b,c`` from the per-example
        gradients."""
        per_example = self._per_example(x, output_gradient)
        return sum(per_example[name].square() @ variances[name] for name in ("weight", "bias"))

    def squared_gradient_sums(
        self, x: torch.Tensor, output_gradient: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """``Σ_{s,n} (∂ℓ_{s,n}/∂θ)²`` for the scale and the shift."""
        return {
            name: value.square().sum((0, 1))
            for name, value in self._per_example(x, output_gradient).items()
        }

    def example_gradient_sums(
        self,
        x: torch.Tensor,
        output_gradient: torch.Tensor,
        weights: dict[str, torch.Tensor | None],
    ) -> dict[str, torch.Tensor]:
        """Per example: ``Σ_s (∂ℓ_{s,n}/∂θ_s) ⊙ A_s`` (``A`` of shape ``(S, features)``, or
        ``None`` for all ones)."""
        gradients = self._per_example(x, output_gradient)
        sums = {}
        for name, weight in weights.items():
            if name not in gradients:
                raise KeyError(f"{type(self).__name__} has no site {name!r}")
            value = gradients[name]
            sums[name] = (
                value.sum(0) if weight is None else torch.einsum("snf,sf->nf", value, weight)
            )
        return sums

    def extra_repr(self) -> str:
        return f"features={self.features}, channels={self.channels}"


def film_layers(
    tasks: int, widths: Sequence[int], channels: bool | Sequence[bool], prior_scale: float
) -> nn.ModuleList | None:
    """``tasks`` lists of FiLM layers, one per hidden layer of ``widths`` (``channels[i]`` says
    whether layer ``i`` is a feature map); ``None`` for no tasks."""
    if not tasks:
        return None
    maps = [channels] * len(widths) if isinstance(channels, bool) else list(channels)
    return PyroModule[nn.ModuleList](
        [
            PyroModule[nn.ModuleList](
                [
                    BayesianFiLM(int(width), is_map, prior_scale)
                    for width, is_map in zip(widths, maps, strict=True)
                ]
            )
            for _ in range(tasks)
        ]
    )


def checked_film_settings(tasks: int, prior_scale: float) -> tuple[int, float]:
    """A net's ``film_tasks`` (0, or a positive count; not a bool) and ``film_prior_scale`` (a
    positive real), checked whether or not FiLM layers are built.

    :raises ValueError: naming the argument.
    """
    if isinstance(tasks, bool) or tasks != 0:
        tasks = checked_count(tasks, "film_tasks (0 for no FiLM layers)")
    prior_scale = checked_real(prior_scale, "film_prior_scale", 0, low_open=True)
    return int(tasks), prior_scale


class TaskSlot:
    """The task a net runs, for its :class:`TaskFiLM` layers: a forward pre-hook of the net
    (``net.register_forward_pre_hook(slot, with_kwargs=True)``) that reads the ``task_id`` the
    net is called with."""

    def __init__(self) -> None:
        self.task = 0

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        task = kwargs.get("task_id", args[1] if len(args) > 1 else 0)
        if torch.is_tensor(task) and task.numel() > 1:
            if (task != task.flatten()[0]).any():
                raise ValueError("FiLM layers are per task: a batch must hold one task's points")
            task = task.flatten()[0]
        self.task = normalised_task_id(task)


class TaskFiLM(PyroModule):
    """``film[t](layer(x))``: a user's layer followed by the FiLM layer of the task ``t`` that
    ``slot`` says the net runs.

    :param layer: the layer (its sites keep their names under ``layer.``).
    :param features: its output units (or channels, with ``channels=True``).
    :param tasks: how many tasks have FiLM layers.
    """

    def __init__(
        self,
        layer: nn.Module,
        features: int,
        tasks: int,
        slot: TaskSlot,
        channels: bool = False,
        prior_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.layer = layer
        self.film = PyroModule[nn.ModuleList](
            [BayesianFiLM(features, channels, prior_scale) for _ in range(tasks)]
        )
        self.slot = slot

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        task = self.slot.task
        if not 0 <= task < len(self.film):
            raise ValueError(f"task {task} has no FiLM layer: the net has {len(self.film)}")
        return self.film[task](self.layer(x))
