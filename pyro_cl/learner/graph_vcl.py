"""VCL over a graph of domains: each domain's prior is built from the posteriors of its
already-fitted neighbours (issue 29; the VCL slides' "graph-based manner rather than a sequential
order")::

    graph = GraphVCL(VCL(net), metadata_graph(angles, bandwidth=20.0))
    for domain, parent in spanning_order(graph.weights, roots=[0]):
        graph.observe(domain, data[domain], parents=[parent] if parent is not None else [])
    graph.evaluate(target_test, domain=target, parents=[5, 6])   # predictive DA: no target data

The prior of domain ``d`` with parents ``P`` is ``combine_posteriors({q_p}, {w_dp})`` (the weighted
product in natural parameters, or the moment-matched mixture; :mod:`pyro_cl.transitions.combination`)
installed as the net's prior before the fit, and the guide starts at it; the fitted posterior is
kept as ``q_d``. A domain with no parents starts from the root prior: the learner's prior when
the graph was built (the initial one, for a new learner). So a domain's fit depends on its parents
alone, not on which sibling was fitted last: each fit also draws from a random stream of its own
domain (split from the learner's seed). (One exception: the learner's maximum-likelihood
start, ``ml_init_epochs``, belongs to its first step only, so of several roots only the one fitted
first gets it; set ``ml_init_epochs=0`` for graphs of several roots.) Along a path of single
parents this is exactly sequential VCL. The learner is any :class:`~pyro_cl.learner.learner.ContinualLearner` without a memory; its
fitter fits every step, the unsupervised one included.

One model or several (the slides' question): with ``heads="shared"`` one net, head included,
serves every domain; with ``heads="per_domain"`` a multi-head net gives domain ``d`` head ``d``
(its task id), the body stays shared, and a parent's head is carried onto the child's head
before the combination — so a target never fitted is predicted by its neighbours' heads,
combined like the body.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from pyro_cl.fitters.fitter import checked_posterior
from pyro_cl.guides import MEAN_FIELD
from pyro_cl.infer.callbacks import CallbackList
from pyro_cl.infer.fit_context import FitContext
from pyro_cl.infer.fit_problem import FitProblem
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.learner.state import transaction
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.exclusive import exclusive_mode
from pyro_cl.points import Points
from pyro_cl.posterior import (
    Posterior,
    detach_distribution,
    detach_posterior,
    install_prior,
    posterior_from_state,
    posterior_to_state,
    read_priors,
)
from pyro_cl.serialization import atomic_save, safe_load
from pyro_cl.spec import from_spec, tensors_to
from pyro_cl.transitions.base import Transition, TransitionContext
from pyro_cl.transitions.combination import COMBINATIONS, combine_posteriors

__all__ = ["GraphVCL", "HEADS", "PredictiveEntropy"]

#: How :class:`GraphVCL` gives domains their output heads (module docstring).
HEADS = ("shared", "per_domain")


class PredictiveEntropy(CategoricalLikelihood):
    """The unsupervised step's stand-in for a likelihood, which reads the inputs' predictions and
    never a label: per point ``-KL(p̄ ‖ π) - H(p(y | x_n, θ))``, with ``p̄`` the batch's mean
    prediction and ``π`` a class prior (information maximisation: Krause et al. 2010; SHOT, Liang
    et al. 2020, whose ``H(p̄)`` is this with a uniform ``π``, up to a constant). The second term
    is entropy minimisation (Grandvalet and Bengio 2005), which moves the class boundaries of
    ``q`` away from where the target's inputs lie densely; alone it is maximised by predicting one
    class for everything, which the first term forbids by holding the predicted class
    proportions to ``π``. A uniform ``π`` pushes an imbalanced target toward balanced predictions
    (weather: rain on 28% of days predicted on 50%); :meth:`GraphVCL.adapt_unlabelled` takes
    ``π`` from the prior's own predictive on the target's inputs. In the ELBO the KL term keeps
    ``q`` near the prior its source neighbours gave: a Bayesian, regularised self-training step.
    Chosen over a generative component because it needs nothing beyond the classifier itself; a
    minibatch's ``p̄`` estimates the whole set's.

    :param class_prior: ``π``, class probabilities (``None``: uniform).
    """

    name = "predictive_entropy"

    def __init__(self, class_prior: torch.Tensor | None = None) -> None:
        self.class_prior = class_prior

    def log_prob(self, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(outputs, dim=-1)
        negative_entropy = (log_p.exp() * log_p).sum(-1)  # -H(p_n), whatever y holds
        mean = log_p.exp().mean(-2, keepdim=True)  # p̄ per Monte Carlo draw
        log_mean = mean.clamp_min(1e-12).log()
        if self.class_prior is None:  # -KL(p̄ ‖ uniform) = H(p̄) - log K; the constant dropped
            return negative_entropy - (mean * log_mean).sum(-1)
        log_prior = self.class_prior.to(mean).clamp_min(1e-12).log()
        return negative_entropy - (mean * (log_mean - log_prior)).sum(-1)


class GraphVCL:
    """Domains visited in any order, each prior combined from its parents' posteriors (module
    docstring).

    :param learner: fits every domain; its net is shared by all of them.
    :param weights: ``(K, K)`` edge weights between domains (e.g.
        :func:`~pyro_cl.data.domain_graph.metadata_graph`), weighing the parents of a domain.
    :param how: one of :data:`~pyro_cl.transitions.combination.COMBINATIONS`.
    :param heads: one of :data:`HEADS`; ``"per_domain"`` needs a multi-head net with a head for
        every domain of ``weights``.
    :param transition: moves each parent's posterior along its edge before the combination,
        with ``Δt`` the edge's length in ``distances`` (a ``Wiener`` or ``OrnsteinUhlenbeck``
        diffusion, or Bayesian forgetting): a far domain's prior is wider than a near one's.
        Give the transition its ``time_constant`` (else one unit of ``distances`` is one).
    :param distances: ``(K, K)`` edge lengths (e.g. ``|m_i - m_j|`` of the metadata, in the
        transition's time units); needed with a transition.
    """

    def __init__(
        self,
        learner: ContinualLearner,
        weights: torch.Tensor,
        how: str = "product",
        heads: Literal["shared", "per_domain"] = "shared",
        transition: Transition | None = None,
        distances: torch.Tensor | None = None,
    ):
        if MEAN_FIELD not in learner.guide_family.lineage():
            raise ValueError(
                "graph VCL combines its parents' posteriors site by site: it takes a learner "
                f"with the mean-field guide family, not {learner.guide_family.name!r}"
            )
        if (transition is None) != (distances is None):
            raise ValueError("a transition along the edges needs their lengths (distances=)")
        if distances is not None and (
            distances.shape != weights.shape or not bool((distances >= 0).all())
        ):
            raise ValueError(
                f"distances must be non-negative and {tuple(weights.shape)} like the weights, "
                f"got {tuple(distances.shape)}"
            )
        if transition is not None:
            transition.check(learner.net)
        if how not in COMBINATIONS:
            raise ValueError(f"how must be one of {COMBINATIONS}, got {how!r}")
        if heads not in HEADS:
            raise ValueError(f"heads must be one of {HEADS}, got {heads!r}")
        if learner.memory is not None:
            raise ValueError(
                "GraphVCL hands on Gaussian posteriors only: build the learner without a memory"
            )
        if learner.point_estimate:
            raise ValueError(
                f"GraphVCL combines posteriors, and {type(learner.fitter).__name__} fits point "
                "values: give the learner a fitter of posteriors (ELBOFitter, VOGN, IVON, ...)"
            )
        weights = _checked_matrix(weights, "weights")
        if distances is not None:
            distances = _checked_matrix(distances, "distances")
        if heads == "per_domain":
            available = getattr(learner.net, "num_heads", 1) if learner.model.multi_head else 1
            if available < weights.shape[0]:
                raise ValueError(
                    f"heads='per_domain' needs a head per domain: the graph has "
                    f"{weights.shape[0]} domains, the net {available} head(s)"
                )
        self.learner = learner
        self.weights = weights
        self.how = how
        self.heads = heads
        self.transition = transition
        self.distances = distances
        #: ``q_d`` of every domain fitted so far
        self.posteriors: dict[int, Posterior] = {}
        #: What a domain without parents starts from: the learner's prior of every site when the
        #: graph was built.
        self.root_prior: Posterior = detach_posterior(read_priors(learner.net))
        #: Where a root domain's guide starts: the learner's guide when the graph was built (its
        #: ``state_dict``; sites created since are removed, and created afresh by the fit).
        self.root_guide: dict = copy.deepcopy(learner.guide.state_dict())
        self._task_sites: dict[int, list[str]] = {}

    def _checked(self, domain, parents: Sequence[int], new: bool = False) -> list[int]:
        """``parents`` as domain indices of the graph, after checking ``domain`` and them: every
        index in the graph, no domain its own parent and (``new``) a domain fitted once only —
        a second fit would count its data twice, and with parents fitted first it is what
        keeps the graph without cycles.

        :raises ValueError: naming the domain or parent at fault.
        """
        count = self.weights.shape[0]
        if isinstance(parents, int | str) or not isinstance(parents, Sequence):
            raise TypeError(f"parents must be a list of domain indices, got {parents!r}")
        for what, index in [("domain", domain), *(("parent", p) for p in parents)]:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise ValueError(
                    f"{what} {index!r} is not a domain of the graph (0..{count - 1}): give a Python int"
                )
        if domain in parents:
            raise ValueError(f"domain {domain} cannot be its own parent")
        if new and domain in self.posteriors:
            raise ValueError(
                f"domain {domain} has a posterior already: a domain is fitted once (its data "
                "would count twice)"
            )
        return list(parents)

    def task_of(self, domain: int) -> int:
        """The task id (head) ``domain`` runs with: its own with per-domain heads, else 0."""
        return domain if self.heads == "per_domain" else 0

    def prior_for(
        self,
        domain: int,
        parents: Sequence[int],
        weights: Sequence[float] | None = None,
        how: str | None = None,
    ) -> Posterior:
        """The combination of ``parents``' posteriors (each parent's head carried onto
        ``domain``'s with per-domain heads), weighted by their edges to ``domain`` unless
        ``weights`` are given, combined the graph's way unless ``how`` is given.

        :raises KeyError: naming a parent that has not been fitted.
        :raises ValueError: for a domain or parent outside the graph, or a self-loop.
        """
        parents = self._checked(domain, parents)
        missing = [p for p in parents if p not in self.posteriors]
        if missing:
            raise KeyError(f"parents {missing} of domain {domain} have not been fitted yet")
        if weights is None:
            weights = [float(self.weights[domain, p]) for p in parents]
        elif (
            isinstance(weights, str)
            or not isinstance(weights, Sequence | torch.Tensor)
            or len(weights) != len(parents)
        ):
            raise ValueError(f"weights must give one number per parent {parents}, got {weights!r}")
        posteriors = [
            self._along_edge(self._head_moved(self.posteriors[p], p, domain), p, domain)
            for p in parents
        ]
        return combine_posteriors(posteriors, weights, how or self.how)

    def _along_edge(self, posterior: Posterior, source: int, domain: int) -> Posterior:
        """``posterior`` moved by the graph's transition over the edge ``source → domain``
        (``Δt`` its length); as it is without a transition or along an edge of length 0."""
        if self.transition is None or float(self.distances[domain, source]) == 0.0:
            return posterior
        length = float(self.distances[domain, source])
        context = TransitionContext(
            elapsed=length,
            time=length,
            initial_prior=self.learner.initial_prior,
            net=self.learner.net,
            mean_lag=1.0,  # a transition without a time constant counts units of distance
        )
        return self.transition(posterior, context)

    def _sites_of(self, domain: int) -> list[str]:
        task = self.task_of(domain)
        if task not in self._task_sites:
            self._task_sites[task] = self._create_sites(task)
        return self._task_sites[task]

    def _create_sites(self, task: int) -> list[str]:
        """``task``'s sites, the guide's parameters for any it lacks drawn from the learner's
        random stream (within a step, the domain's own)."""
        model, learner = self.learner.model, self.learner
        with learner.random.scope():
            return model.sites(learner.guide, model.example_input(learner.device), [task])

    def _head_moved(self, posterior: Posterior, source: int, domain: int) -> Posterior:
        """``posterior`` with ``source``'s own sites (its head) renamed to ``domain``'s: the
        sites each task has and the other lacks, matched in the order the net samples them."""
        if self.task_of(source) == self.task_of(domain):
            return posterior
        theirs, ours = self._sites_of(source), self._sites_of(domain)
        own = [name for name in theirs if name not in ours]
        target = [name for name in ours if name not in theirs]
        moved = {name: q for name, q in posterior.items() if name not in own}
        moved.update({new: posterior[old] for old, new in zip(own, target, strict=True)})
        return moved

    def _start(self, domain: int, parents: Sequence[int]) -> Posterior:
        """What ``domain``'s fit starts from, the prior it returns and the guide: its parents'
        combination (the guide at its means and variances, as sequential VCL's guide starts at
        the last posterior), or the root prior (the guide as it was when the graph was built)."""
        learner = self.learner
        if parents:
            prior = self.prior_for(domain, parents)
            self._create_sites(self.task_of(domain))
            learner.guide.reinitialise("prior", prior)
            return prior
        learner.guide.restore(copy.deepcopy(self.root_guide))
        return self.root_prior

    @contextlib.contextmanager
    def _step(self, domain: int) -> Iterator[None]:
        """One domain's step: it draws from the domain's own random stream (so the order in
        which siblings are fitted changes nothing), and any failure leaves the learner — guide,
        new heads' parameters, priors, random streams — and the graph as they were."""
        learner = self.learner
        task_sites = dict(self._task_sites)
        with transaction(learner):
            try:
                if learner.random.seeded:
                    learner.random.load_state(
                        learner.random.spawn(_DOMAIN_STREAMS + domain).state()
                    )
                yield
            except BaseException:
                self._task_sites = task_sites
                raise

    def observe(self, domain: int, data, parents: Sequence[int] = ()) -> list[float]:
        """Fit ``domain`` on ``data = (x, y)`` from its parents' combined prior (the root prior
        without parents), the guide started at that prior, and keep its posterior."""
        self._checked(domain, parents, new=True)
        with self._step(domain):
            prior = self._start(domain, parents)
            history = self.learner.observe(data, task_id=self.task_of(domain), prior=prior)
        self.posteriors[domain] = self.learner.current_prior()
        return history

    def adapt_unlabelled(
        self,
        domain: int,
        x: torch.Tensor,
        parents: Sequence[int] = (),
        epochs: int | None = None,
        class_prior: str | torch.Tensor = "uniform",
    ) -> list[float]:
        """The unsupervised step on a target's inputs ``x`` alone: fit ``q`` from the parents'
        combined prior (the learner's current prior without parents) to the ELBO whose
        likelihood is :class:`PredictiveEntropy`, and keep it as ``domain``'s posterior. It takes
        no labels; the learner's own steps and bookkeeping are untouched.

        :param epochs: the fit's epochs (default: the learner's).
        :param class_prior: the class proportions the step holds the target's predictions to:
            ``"uniform"`` (balanced classes, information maximisation as published),
            ``"predicted"`` (what the starting prior predicts on ``x``: the step sharpens the
            boundaries without moving the proportions), or class probabilities, e.g. the
            sources' label frequencies.
        """
        self._checked(domain, parents, new=True)
        if not torch.is_tensor(x) or x.dim() < 2 or not len(x):
            raise ValueError("x must be a tensor of inputs, one row each (no labels)")
        with self._step(domain):
            history, posterior = self._adapt(domain, x, parents, epochs, class_prior)
        self.posteriors[domain] = posterior
        return history

    def _adapt(self, domain, x, parents, epochs, class_prior) -> tuple[list[float], Posterior]:
        """:meth:`adapt_unlabelled`'s fit, inside its step."""
        learner = self.learner
        prior = self._start(domain, parents)
        proportions = self._class_proportions(class_prior, x, domain, prior)
        likelihood = PredictiveEntropy(proportions)
        model = SupervisedModel(learner.net, likelihood, learner.config.monte_carlo.elbo)
        context = FitContext(
            model, learner.config, learner.device, CallbackList(), learner.initial_prior
        )
        x = x.to(learner.device)
        placeholder = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)  # never read
        task = self.task_of(domain)
        points = Points.of_task(x, placeholder, task)
        with exclusive_mode(learner.net, training=True), learner.random.scope():
            install_prior(learner.net, prior)
            sites = model.sites(learner.guide, x, [task])
            problem = FitProblem(
                points,
                sites,
                learner.config.schedule.epochs if epochs is None else epochs,
                context.batch_size(),
                f"unsupervised step, domain {domain}",
            )
            history = learner.fitter.fit(context, learner.guide, problem)  # the learner's own
            posterior = checked_posterior(learner.fitter.posterior(learner.guide, sites))
            posterior = {n: detach_distribution(q) for n, q in posterior.items()}
            install_prior(learner.net, posterior)
        return history, posterior

    def _class_proportions(
        self, class_prior: str | torch.Tensor, x: torch.Tensor, domain: int, prior
    ) -> torch.Tensor | None:
        """:meth:`adapt_unlabelled`'s ``π`` (``None``: uniform)."""
        if torch.is_tensor(class_prior):
            proportions = class_prior.detach().to(self.learner.device, torch.float32)
            if proportions.dim() != 1 or (proportions < 0).any() or not proportions.sum() > 0:
                raise ValueError("class_prior must be a vector of class probabilities")
            return proportions / proportions.sum()
        if class_prior == "uniform":
            return None
        if class_prior == "predicted":  # what the starting prior predicts on the target
            predicted = self.learner.predict(x, self.task_of(domain), sites=prior)
            return predicted.mean(0).detach()
        raise ValueError(
            f"class_prior is 'uniform', 'predicted' or class probabilities, not {class_prior!r}"
        )

    def evaluate(
        self, data, domain: int | None = None, parents: Sequence[int] = ()
    ) -> dict[str, float]:
        """Accuracy and log-likelihood on ``data`` with ``domain``'s posterior, or — for a
        domain never fitted (predictive domain adaptation) — with its parents' combination."""
        if domain is not None and domain in self.posteriors:
            sites = self.posteriors[domain]
        elif parents:
            sites = self.prior_for(domain, parents)
        else:
            raise ValueError(f"domain {domain} has no posterior and no parents to predict it from")
        task = self.task_of(domain) if domain is not None else 0
        return self.learner.evaluate(data, task_id=task, sites=sites)

    def save(self, folder: str | os.PathLike, key: bytes | None = None) -> None:
        """Save the learner (``learner.pt``) and the graph's state — every domain's posterior,
        the weights, the combination — (``graph.pt``) into ``folder``, both atomically (signed
        with ``key`` if given, as :meth:`ContinualLearner.save`)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.learner.save(folder / "learner.pt", key=key)
        state = {
            "posteriors": {str(d): posterior_to_state(q) for d, q in self.posteriors.items()},
            "weights": self.weights.detach().cpu(),
            "how": self.how,
            "heads": self.heads,
            "transition": None if self.transition is None else self.transition.spec(),
            "distances": None if self.distances is None else self.distances.detach().cpu(),
        }
        state["root_prior"] = posterior_to_state(self.root_prior)
        state["root_guide"] = self.root_guide
        atomic_save(state, folder / "graph.pt", key)

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike,
        learner_class: type[ContinualLearner] = ContinualLearner,
        net: torch.nn.Module | None = None,
        key: bytes | None = None,
    ) -> GraphVCL:
        """The graph learner :meth:`save` wrote to ``folder`` (``learner_class.load`` rebuilds the
        learner, as the subclass it was saved as; ``net``: a fresh net for nets pyro_cl cannot
        rebuild; ``key``: the key it was signed with)."""
        folder = Path(folder)
        learner = learner_class.load(folder / "learner.pt", net=net, key=key)
        state = safe_load(folder / "graph.pt", key=key)
        transition = state.get("transition")
        graph = cls(
            learner,
            state["weights"],
            state["how"],
            state.get("heads", "shared"),
            None if transition is None else from_spec(transition, "transition"),
            state.get("distances"),
        )
        graph.posteriors = {
            int(d): posterior_from_state(q, learner.device) for d, q in state["posteriors"].items()
        }
        # files before the root prior was kept: the learner's initial prior, which it was
        root = state.get("root_prior")
        graph.root_prior = (
            dict(learner.initial_prior)
            if root is None
            else posterior_from_state(root, learner.device)
        )
        if "root_guide" in state:
            graph.root_guide = tensors_to(state["root_guide"], learner.device)
        return graph


#: Where the domains' random streams start among the keys of the learner's seed
#: (:meth:`~pyro_cl.infer.random_stream.RandomStream.spawn`; the learner's own use 0 and 1).
_DOMAIN_STREAMS = 1000


def _checked_matrix(value: object, name: str) -> torch.Tensor:
    """``value`` as a square float matrix of finite entries.

    :raises TypeError: for a value that is not a tensor; :raises ValueError: otherwise."""
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a (K, K) tensor, got {type(value).__name__}")
    if value.dim() != 2 or value.shape[0] != value.shape[1] or not value.shape[0]:
        raise ValueError(f"{name} must be a square (K, K) tensor, got shape {tuple(value.shape)}")
    if not value.is_floating_point():
        value = value.to(torch.get_default_dtype())
    if not bool(value.isfinite().all()):
        raise ValueError(f"{name} must hold finite real numbers")
    return value
