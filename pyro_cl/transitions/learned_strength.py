"""A transition whose strength is learnt online, by empirical Bayes, instead of chosen from a grid.

A drift transition (Wiener diffusion ``c``, Ornstein-Uhlenbeck stiffness ``a``, Bayesian
forgetting rate ``ε``) has one strength ``s``; the right one depends on the stream. Before step
``k`` is learnt, its data ``D_k`` score candidate priors ``p_s = T_s(q_{k-1})`` by their
one-step-ahead predictive (the evidence a :class:`~pyro_cl.learner.bank.LearnerBank` weighs its
members by)::

    E_k(s) = Σ_{n ∈ D_k} log (1/S) Σ_{j=1}^{S} p(y_n | x_n, θ_j),   θ_j ~ T_s(q_{k-1})     (1)

and the strength is the maximum of the evidence gathered so far, each step's discounted by
``γ`` per step::

    s_k = argmax_s  Σ_{i ≤ k} γ^{k-i} E_i(s)                                               (2)

a posterior over ``log s`` under a flat prior, for a strength shared by the steps (``γ = 1``) or
one that moves slowly (``γ < 1``); ``γ = 0`` takes each step's own maximum, which follows every
surprising step (on weather a forgetting rate of 0.88 on one step in twenty). ``D_k`` is scored
before it is learnt, so ``s_k`` is a forecast's strength. ``E_i`` is kept on a fixed grid of
``points`` strengths, log-spaced over ``[low, high]`` (a range wide enough to hold any stream's
strength, not a grid for the user to guess; ``low`` stands for no drift); the draws ``θ_j`` are
shared by the candidates (the learner's evidence holds its random state fixed), so (1) is
smooth in ``s``. Where a step has no data in view (predicting at a later time,
:meth:`~pyro_cl.learner.learner.ContinualLearner.prior_at`), the last learnt strength carries the
posterior.

**Per layer** (``per="layer"``, or ``"site"``): each group ``g`` of sites (a layer's weight
and bias; or each site) has a strength of its own, learnt by one sweep over the groups at each
step, each group's evidence read with the groups before it at their new strengths and those
after it at their last (a coordinate ascent of the joint evidence, ``G`` times (1)'s cost)::

    s_{k,g} = argmax_s  Σ_{i ≤ k} γ^{k-i} E_i(s_{i,<g}, s, s_{i-1,>g})                    (3)

A layer whose weights drift and one whose weights stay each find their own rate
(tests/test_learned_strength.py); on the drift streams of docs/lab/drift.md it is level with
one strength or worse. Per-layer strengths act site by site: they carry a mean-field posterior,
not a joint Gaussian's.

With a Gaussian random walk of known rate, ``s_k`` recovers it (tests/test_learned_strength.py).
On a learner's own path the greedy choice can settle far from the best fixed strength (at the
range's floor on four drift streams, near 1 on elec2: docs/lab/drift.md);
:class:`~pyro_cl.learner.moving_bank.MovingBank` reads each strength on a path of its own.
"""

from __future__ import annotations

import math

import torch

from pyro_cl.checks import checked_count, checked_real
from pyro_cl.guides import GAUSSIAN_FAMILIES, MEAN_FIELD
from pyro_cl.posterior import Posterior
from pyro_cl.transitions.base import Transition, TransitionContext, check_time_constant
from pyro_cl.transitions.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.forgetting import BayesianForgetting

__all__ = ["FAMILIES", "GROUPINGS", "LearnedStrength", "family_range"]

#: The transitions whose strength can be learnt, and the range searched by default.
FAMILIES: dict[str, tuple[type[Transition], float, float]] = {
    "wiener": (Wiener, 1e-4, 1e2),
    "ornstein_uhlenbeck": (OrnsteinUhlenbeck, 1e-4, 1e2),
    "bayesian_forgetting": (BayesianForgetting, 1e-4, 0.999),
}


#: How :class:`LearnedStrength` groups the sites that share a strength: the whole net, each
#: layer (a site's name up to its last dot: ``hidden.0.weight`` and ``hidden.0.bias``), each site.
GROUPINGS = ("net", "layer", "site")


def family_range(
    family: str, low: float | None = None, high: float | None = None
) -> tuple[type[Transition], float, float]:
    """``family``'s transition class and its strengths' range ``[low, high]`` (the family's own
    bound where one is not given), checked.

    :raises ValueError: for an unknown family, a range that is empty or not positive, or a
        forgetting rate's ``high`` of 1 or more.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    kind, default_low, default_high = FAMILIES[family]
    low = checked_real(default_low if low is None else low, "low", 0, low_open=True)
    high = checked_real(default_high if high is None else high, "high", low)
    if family == "bayesian_forgetting" and not high < 1:
        raise ValueError(f"a forgetting rate is below 1: high must be < 1, got {high}")
    return kind, low, high


class LearnedStrength(Transition):
    """``family``'s transition at the strength of eq. (2) of the module docstring (eq. (3) per
    layer).

    :param family: ``"wiener"``, ``"ornstein_uhlenbeck"`` or ``"bayesian_forgetting"``.
    :param low: the smallest strength (standing for no drift); default the family's.
    :param high: the largest; default the family's.
    :param points: strengths on the log-spaced grid over ``[low, high]`` that (1) is kept at.
    :param discount: ``γ`` in ``[0, 1]``: the weight of the last step's evidence against this
        one's (1: a strength shared by every step; 0: each step's own).
    :param time_constant: ``τ`` of the family's transition (``None``: the mean lag).
    :param per: one of :data:`GROUPINGS`: one strength for the net (eq. 2), or one per layer or
        per site (eq. 3; mean-field posteriors only).
    """

    name = "learned_strength"

    def __init__(
        self,
        family: str = "wiener",
        low: float | None = None,
        high: float | None = None,
        points: int = 41,
        discount: float = 1.0,
        time_constant: float | None = None,
        per: str = "net",
    ) -> None:
        kind, self.low, self.high = family_range(family, low, high)
        if per not in GROUPINGS:
            raise ValueError(f"per must be one of {GROUPINGS}, got {per!r}")
        self.family = family
        self.per = per
        self.points = checked_count(points, "points")
        self.discount = checked_real(discount, "discount", 0, 1)
        self.time_constant = check_time_constant(time_constant)
        self._kind = kind
        #: A linear Gaussian step at one strength carries a joint Gaussian prior too; strengths
        #: per layer act site by site.
        self.guide_families = GAUSSIAN_FAMILIES if per == "net" else (MEAN_FIELD,)
        #: Each group's strength learnt at the last step (``low`` before the first).
        self.strengths: dict[str, float] = {}
        #: Every step's learnt strength, in order (per layer: each step's :attr:`strengths`).
        self.history: list = []
        #: ``Σ_i γ^{k-i} E_i(s)`` on :attr:`grid`, per group.
        self.evidences: dict[str, torch.Tensor] = {}

    @property
    def strength(self) -> float:
        """The net's strength learnt at the last step (``per="net"``; ``low`` before the
        first)."""
        if self.per != "net":
            raise AttributeError(f"strengths are learnt per {self.per}: read .strengths")
        return self.strengths.get("net", self.low)

    @property
    def evidence(self) -> torch.Tensor:
        """The net's gathered evidence on :attr:`grid` (``per="net"``)."""
        if self.per != "net":
            raise AttributeError(f"strengths are learnt per {self.per}: read .evidences")
        return self.evidences.get("net", torch.zeros(self.points, dtype=torch.float64))

    @property
    def grid(self) -> torch.Tensor:
        """The strengths (1) is kept at: ``points`` of them, log-spaced over ``[low, high]``."""
        if self.points == 1:
            return torch.tensor([self.low], dtype=torch.float64)
        return torch.logspace(
            math.log10(self.low), math.log10(self.high), self.points, dtype=torch.float64
        )

    def group(self, site: str) -> str:
        """The group whose strength ``site`` shares."""
        if self.per == "net":
            return "net"
        return site.rsplit(".", 1)[0] if self.per == "layer" else site

    def check(self, net: torch.nn.Module) -> None:
        self._at(self.low).check(net)

    def _at(self, strength: float) -> Transition:
        return self._kind(strength, self.time_constant)

    def _carried(
        self, posterior: Posterior, context: TransitionContext, strengths: dict[str, float]
    ) -> Posterior:
        """Each group's sites through the family's transition at the group's strength."""
        groups: dict[str, dict] = {}
        for site, q in posterior.items():
            groups.setdefault(self.group(site), {})[site] = q
        carried = {}
        for group, sites in groups.items():
            carried |= self._at(strengths.get(group, self.low))(sites, context)
        return {site: carried[site] for site in posterior}

    def __call__(self, posterior: Posterior, context: TransitionContext) -> Posterior:
        if context.evidence is not None:
            strengths, grid = dict(self.strengths), self.grid.tolist()
            for group in dict.fromkeys(self.group(site) for site in posterior):  # eq. (3)
                scores = [
                    context.evidence(self._carried(posterior, context, strengths | {group: s}))
                    for s in grid
                ]
                gathered = self.discount * self.evidences.get(group, 0.0)
                self.evidences[group] = gathered + torch.tensor(scores).double()
                strengths[group] = grid[int(torch.argmax(self.evidences[group]))]
            self.strengths = strengths
            self.history.append(self.strength if self.per == "net" else dict(strengths))
        return self._carried(posterior, context, self.strengths)

    def gaussian_step(self, initial_loc, initial_scale, context):
        if self.per != "net":
            raise TypeError(
                f"strengths learnt per {self.per} carry a mean-field posterior site by site, "
                "not a joint Gaussian's prior: use per='net'"
            )
        return self._at(self.strength).gaussian_step(initial_loc, initial_scale, context)

    def likelihood_weights(self, ages: torch.Tensor, context: TransitionContext):
        if self.per == "net":
            return self._at(self.strength).likelihood_weights(ages, context)
        if self._at(self.low).likelihood_weights(ages, context) is None:
            return None  # the family weighs no memory point (Wiener, Ornstein-Uhlenbeck)
        raise TypeError(  # a memory point's likelihood involves every layer
            f"forgetting rates learnt per {self.per} give no one age weight to a memory point: "
            "use per='net' with a memory"
        )

    def state_dict(self) -> dict:
        if self.per == "net":  # the single strength's layout
            return {
                "strength": self.strength,
                "history": list(self.history),
                "evidence": self.evidence.clone(),
            }
        return {
            "per": self.per,
            "strengths": dict(self.strengths),
            "history": [dict(h) for h in self.history],
            "evidences": {g: e.clone() for g, e in self.evidences.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("per", "net")
        if saved != self.per:
            raise ValueError(
                f"the saved strengths were learnt per {saved}, this transition learns them "
                f"per {self.per}"
            )
        if self.per == "net":
            self.strengths = {"net": float(state.get("strength", self.low))}
            self.history = [float(s) for s in state.get("history", [])]
            evidences = {} if state.get("evidence") is None else {"net": state["evidence"]}
        else:
            self.strengths = {g: float(s) for g, s in state.get("strengths", {}).items()}
            self.history = [{g: float(s) for g, s in h.items()} for h in state["history"]]
            evidences = state.get("evidences", {})
        self.evidences = {}
        for group, evidence in evidences.items():
            evidence = torch.as_tensor(evidence, dtype=torch.float64).cpu()
            if evidence.shape != (self.points,):
                raise ValueError(
                    f"the saved evidence has {tuple(evidence.shape)} points, not {self.points}"
                )
            self.evidences[group] = evidence
