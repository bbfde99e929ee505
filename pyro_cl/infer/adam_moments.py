"""Adam's state carried from one fit to the next: one optimiser for the whole stream.

Every fit builds a fresh Adam (:func:`~pyro_cl.infer.training.minimise`), so each task starts
with zero moments and a step count of zero: its first steps move every parameter by about the
learning rate, whatever the gradient. An optimiser built once for the whole stream (Avalanche's
strategies, a plain PyTorch loop over tasks) keeps them instead::

    m_t = β₁ m_{t-1} + (1 - β₁) g_t
    v_t = β₂ v_{t-1} + (1 - β₂) g_t²
    θ_t = θ_{t-1} - α (m_t / (1 - β₁ᵗ)) / (√(v_t / (1 - β₂ᵗ)) + ε)     (Kingma & Ba 2015, alg. 1)

with ``t``, ``m`` and ``v`` running on across task boundaries. :class:`AdamMoments` keeps
``(t, m, v)`` of every trained tensor by name between fits, so a learner with
``carry_adam_state=True`` steps as that single optimiser would. Names are the fit's parameter
names (a guide's ``loc.<site>``, ``log_variance.<site>``, a point fit's site names, ``net.<name>``
for the net's own parameters): a tensor first trained in a later task (a new head) starts at
zero with its own count, as a parameter added to a running optimiser does.

The moments are part of the learner's state: a step that fails restores them with everything
else, and a checkpoint saves them, so a resumed learner steps as one that never stopped.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["AdamMoments"]

#: What torch's Adam keeps per tensor (without ``amsgrad``).
ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")


class AdamMoments:
    """``{name: {"step", "exp_avg", "exp_avg_sq"}}``: Adam's state of each trained tensor after
    the last fit that carried it."""

    def __init__(self) -> None:
        self.moments: dict[str, dict[str, torch.Tensor]] = {}

    def load_into(
        self, optimizer: torch.optim.Optimizer, parameters: Mapping[str, torch.Tensor]
    ) -> None:
        """Give ``optimizer`` the kept state of every one of ``parameters`` (``{name: tensor}``)
        it has moments for; the others start as Adam starts them.

        :raises ValueError: if a kept tensor's shape is not its parameter's (a net or a guide
            that changed between fits, or a checkpoint of another net).
        """
        # torch keeps the count on the parameter's device for its fused kernel, else on the CPU
        on_device = bool(optimizer.defaults.get("fused") or optimizer.defaults.get("capturable"))
        for name, parameter in parameters.items():
            kept = self.moments.get(name)
            if kept is None:
                continue
            if kept["exp_avg"].shape != parameter.shape:
                raise ValueError(
                    f"Adam's kept moments of {name!r} have shape {tuple(kept['exp_avg'].shape)} "
                    f"and the parameter has {tuple(parameter.shape)}: the state carried "
                    "(carry_adam_state=True) is not this net's"
                )
            step = kept["step"].to(parameter.device if on_device else "cpu", copy=True)
            optimizer.state[parameter] = {
                "step": step,
                **{
                    key: kept[key].to(device=parameter.device, dtype=parameter.dtype, copy=True)
                    for key in ("exp_avg", "exp_avg_sq")
                },
            }

    def keep_from(
        self, optimizer: torch.optim.Optimizer, parameters: Mapping[str, torch.Tensor]
    ) -> None:
        """Keep ``optimizer``'s state of every one of ``parameters`` after a fit (a parameter it
        never stepped keeps what it had)."""
        for name, parameter in parameters.items():
            state = optimizer.state.get(parameter)
            if state:
                self.moments[name] = {key: state[key].detach().clone() for key in ADAM_STATE}

    def state_dict(self) -> dict:
        return {
            name: {key: value.clone() for key, value in kept.items()}
            for name, kept in self.moments.items()
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Take ``state`` (:meth:`state_dict`'s), checked to hold Adam's three tensors a name.

        :raises ValueError: naming the entry that is not Adam's state.
        """
        moments = {}
        for name, kept in state.items():
            if not isinstance(kept, Mapping) or set(kept) != set(ADAM_STATE):
                raise ValueError(
                    f"Adam's kept state of {name!r} must hold {', '.join(ADAM_STATE)}, "
                    f"got {sorted(kept) if isinstance(kept, Mapping) else type(kept).__name__}"
                )
            if kept["exp_avg"].shape != kept["exp_avg_sq"].shape:
                raise ValueError(f"Adam's kept moments of {name!r} differ in shape")
            moments[name] = {key: kept[key].clone() for key in ADAM_STATE}
        self.moments = moments

    def __len__(self) -> int:
        return len(self.moments)
