"""Looking inside a fitted Bayesian net: active IBP units and weight pruning.

* :func:`active_units` — how many hidden units each data point uses: units whose relaxed mask
  ``z_ik`` exceeds 0.1 (the H-IBP supplement's definition, section 5), per hidden layer.
* :func:`prune_weights` / :func:`pruning_curve` — zero the Gaussian weights with the smallest
  ``|μ|`` or signal-to-noise ratio ``|μ|/σ`` and measure the accuracy that is left (supplement
  section 3, figures 1-4). IBP masks keep acting on the pruned net.
* :func:`share_at_prior` / :func:`units_in_use` — VI's over-pruning (Trippe & Turner 2018; GVCL,
  Loo et al. 2021, section 4): a weight whose posterior is still its initial prior carries no
  information and no KL, ``KL(q(θ_i) ‖ p_0(θ_i)) < PRUNED_KL`` nats; a hidden unit is pruned when
  its incoming weights and bias are at the prior on average.
* :func:`penultimate_features` — what the net's last Bayesian layer (the head) reads, every site
  at its posterior mean: the trunk as a fixed encoder (GOAT's feature space, He et al. 2023).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from pyro.distributions import Distribution, Normal

from pyro_cl.infer.site_values import sample_outputs, substitute_sites
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.nn.effects import PosteriorConditionals, RecordLayers, RecordMasks
from pyro_cl.nn.exclusive import exclusive_mode
from pyro_cl.nn.structured import has_structured_sites
from pyro_cl.posterior import base_distribution

__all__ = [
    "ACTIVE_THRESHOLD",
    "PRUNED_KL",
    "PRUNING_SCORES",
    "active_units",
    "penultimate_features",
    "prune_weights",
    "pruning_curve",
    "share_at_prior",
    "shared_sites",
    "units_in_use",
]

#: A weight is at its prior when ``KL(q(θ_i) ‖ p_0(θ_i))`` is below this many nats. For the
#: default prior N(0, 1) it is a posterior such as N(0.3, 1) or N(0, 0.72²): indistinguishable
#: from the prior by the data a task carries.
PRUNED_KL = 0.05

#: A unit is active for a data point when its relaxed mask exceeds this (supplement section 5).
ACTIVE_THRESHOLD = 0.1

#: How :func:`prune_weights` ranks weights: by ``|μ|`` or by ``|μ| / σ``.
PRUNING_SCORES = ("magnitude", "snr")


@torch.no_grad()
def active_units(
    learner: ContinualLearner,
    x: torch.Tensor,
    task_id: int = 0,
    threshold: float = ACTIVE_THRESHOLD,
    num_samples: int = 1,
) -> list[torch.Tensor]:
    """Per hidden layer, the number of units with ``z_ik > threshold`` for each point of ``x``.

    Masks are the posterior's relaxed (Concrete, temperature ``λ1``) masks, drawn with the
    weights and sticks from the posterior used to predict task ``task_id``.

    :returns: one integer tensor of shape ``(num_samples, N)`` per masked layer.
    :raises TypeError: if the learner's net has no IBP masks.
    """
    net = learner.net
    if not has_structured_sites(net):
        raise TypeError(f"{type(net).__name__} has no IBP masks to count active units of")
    x, _, task_id = learner.model.prepare_data(x, None, task_id)
    x = x.to(learner.device)
    sites = learner.prediction_sites(x, task_id)
    # Relaxed masks, as in training.
    with exclusive_mode(net, training=True), RecordMasks() as masks, PosteriorConditionals():
        sample_outputs(learner.model, sites, x, task_id, num_samples, learner.model.fast)
    return [(mask > threshold).sum(-1).reshape(-1, x.shape[0]) for mask in masks]


@torch.no_grad()
def penultimate_features(
    learner: ContinualLearner, x: torch.Tensor, task_id: int = 0
) -> torch.Tensor:
    """The input of the net's last Bayesian layer (the head of task ``task_id``) for each point
    of ``x``, with every site at the mean of the posterior that predicts that task: the features
    of the fit's trunk used as a fixed encoder, shape ``(N, features)``.

    :raises TypeError: for a net outside pyro_cl's layers (which the fast path cannot run).
    """
    x, _, task_id = learner.model.prepare_data(x, None, task_id)
    x = x.to(learner.device)
    means = {name: q.mean.unsqueeze(0) for name, q in learner.posterior(task_id).items()}
    net = learner.net
    with exclusive_mode(net, training=False), RecordLayers() as records:
        with substitute_sites(net, means, 1):
            learner.model.net_outputs(x.unsqueeze(0), task_id)
    if not records:
        raise TypeError(f"{type(net).__name__} ran no pyro_cl layer: it has no head to read")
    _, inputs, _ = records[-1]
    return inputs[0].reshape(x.shape[0], -1)


def _weight_sites(posterior: Mapping[str, Distribution]) -> dict[str, Normal]:
    """The Gaussian ``*.weight`` sites of a posterior (biases and sticks are never pruned)."""
    weights = {}
    for name, distribution in posterior.items():
        normal = base_distribution(distribution)
        if name.rsplit(".", 1)[-1] == "weight" and isinstance(normal, Normal):
            weights[name] = normal
    return weights


def prune_weights(
    posterior: Mapping[str, Distribution], fraction: float, by: str = "magnitude"
) -> dict[str, Distribution]:
    """A copy of ``posterior`` with the lowest-scoring ``fraction`` of all Gaussian weights set
    to exactly zero (mean and variance 0), ranked over all weight sites together.

    :param by: ``"magnitude"`` ranks by ``|μ|``; ``"snr"`` by ``|μ| / σ``.
    """
    if by not in PRUNING_SCORES:
        raise ValueError(f"unknown pruning score {by!r}; choose from {PRUNING_SCORES}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the pruned fraction must be in [0, 1], got {fraction}")
    weights = _weight_sites(posterior)
    if not weights:
        raise ValueError("the posterior has no Gaussian weight sites to prune")

    def score(normal: Normal) -> torch.Tensor:
        return normal.loc.abs() if by == "magnitude" else normal.loc.abs() / normal.scale

    scores = torch.cat([score(normal).flatten() for normal in weights.values()])
    count = int(round(fraction * scores.numel()))
    pruned = dict(posterior)
    if count == 0:
        return pruned
    # ties at the cut-off are broken by position, so exactly `count` weights go
    order = torch.argsort(scores, stable=True)
    keep_flat = torch.ones_like(scores, dtype=torch.bool)
    keep_flat[order[:count]] = False
    start = 0
    for name, normal in weights.items():
        keep = keep_flat[start : start + normal.loc.numel()].reshape(normal.loc.shape)
        start += normal.loc.numel()
        kept = Normal(normal.loc * keep, normal.scale * keep, validate_args=False)
        pruned[name] = kept.to_event(posterior[name].event_dim)
    return pruned


def pruning_curve(
    learner: ContinualLearner,
    data,
    task_id: int = 0,
    fractions: Sequence[float] = (0.0, 0.5, 0.9, 0.95, 0.98, 0.99),
    by: str = "magnitude",
    num_samples: int | None = None,
) -> list[float]:
    """Test accuracy on ``data`` after pruning each of ``fractions`` of the weights of the
    posterior that predicts task ``task_id`` (:func:`prune_weights`)."""
    posterior = learner.posterior(task_id)
    return [
        learner.evaluate(data, task_id, num_samples, sites=prune_weights(posterior, f, by))[
            "accuracy"
        ]
        for f in fractions
    ]


def _per_weight_kl(
    posterior: Mapping[str, Distribution], prior: Mapping[str, Distribution]
) -> dict[str, torch.Tensor]:
    """``KL(q(θ_i) ‖ p_0(θ_i))`` elementwise, for every Gaussian site in both."""
    kls = {}
    for name, distribution in posterior.items():
        if name not in prior:
            continue
        q, p = base_distribution(distribution), base_distribution(prior[name])
        if isinstance(q, Normal) and isinstance(p, Normal):
            kls[name] = torch.distributions.kl_divergence(
                Normal(q.loc, q.scale, validate_args=False),
                Normal(p.loc.expand_as(q.loc), p.scale.expand_as(q.scale), validate_args=False),
            )
    return kls


def shared_sites(names: Iterable[str]) -> list[str]:
    """The sites of ``names`` every task uses: not those of pyro_cl's output heads (``heads.…``)
    or task-specific FiLM layers (``film.…``), which one task owns each."""
    return [name for name in names if name.split(".", 1)[0] not in ("heads", "film")]


def share_at_prior(
    posterior: Mapping[str, Distribution],
    prior: Mapping[str, Distribution],
    threshold: float = PRUNED_KL,
) -> dict[str, float]:
    """Per Gaussian ``*.weight`` site, the share of its weights whose ``posterior`` is within
    ``threshold`` nats of ``prior`` (the learner's initial prior, ``learner.initial_prior``)."""
    return {
        name: float((kl < threshold).double().mean())
        for name, kl in _per_weight_kl(posterior, prior).items()
        if name.rsplit(".", 1)[-1] == "weight"
    }


def units_in_use(
    posterior: Mapping[str, Distribution],
    prior: Mapping[str, Distribution],
    threshold: float = PRUNED_KL,
) -> dict[str, int]:
    """Per Gaussian ``*.weight`` site of a layer ``(units, inputs, ...)``, the units whose
    incoming weights and bias are, on average, at least ``threshold`` nats from ``prior``
    (a unit below it is pruned: its output is the prior's noise)."""
    kls = _per_weight_kl(posterior, prior)
    counts = {}
    for name, kl in kls.items():
        layer, _, attribute = name.rpartition(".")
        if attribute != "weight" or kl.dim() < 2:
            continue
        per_unit = kl.flatten(1)
        bias = kls.get(f"{layer}.bias")
        if bias is not None and bias.shape == per_unit.shape[:1]:
            per_unit = torch.cat([per_unit, bias.unsqueeze(1)], dim=1)
        counts[name] = int((per_unit.mean(1) >= threshold).sum())
    return counts
