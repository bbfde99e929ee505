"""Function-space regularisation at context points (S-FSVI: Rudner, Bickford Smith, Feng, Teh &
Gal, ICML 2022), as a fitter.

VCL keeps the new posterior near the old one *in parameters*: ``KL(q_t(θ) ‖ q_{t-1}(θ))``. What a
continual learner must keep are the old tasks' *functions*; S-FSVI's objective (their eq. 9,
the sequential form of function-space VI) regularises the predictive function at a set of
context points ``X_C`` from earlier tasks instead::

    F(q_t) = E_{q_t(θ)}[log p(D_t | θ)] - KL(q_t(f(X_C)) ‖ q_{t-1}(f(X_C)))

so parameters that do not change the old tasks' outputs are free to move for the new task.
``q(f(X_C))`` is the distribution of the net's outputs at the context points under ``q(θ)``.
S-FSVI makes it Gaussian by linearising the net around its mean (``N(f(X_C; μ), J Σ Jᵀ)``,
their eq. 11-12, keeping the covariance per point over the outputs); here it is the Gaussian
with the **Monte Carlo moments** of the outputs under ``q`` (mean and variance per point and
output, from ``context_samples`` draws with the reparameterisation trick; the KL's bias from
sample moments corrected, :func:`gaussian_function_kl`), which needs no Jacobians and works for
any net the learner runs (the default); ``moments="linearised"`` takes S-FSVI's own
(:func:`linearised_moments`: the diagonal of ``J Σ Jᵀ``, from one backward pass per output, no
sampling noise) for nets of pyro_cl's linear and FiLM layers. The KL is then the closed form between
independent Gaussians, summed over points and outputs::

    KL = ½ Σ_{c,k} [log(v_p/v_q) + (v_q + (m_q - m_p)²)/v_p - 1],   v += jitter

For a linear model the outputs are exactly Gaussian and the moments converge to the closed form
(tested). The old posterior's moments are computed once per task, from ``target_samples`` draws
of the prior the learner installed (``q_{t-1}``); context points of earlier tasks run through
their own heads, whose distributions are held at ``q_{t-1}`` (they are not refitted).

The context points come from a :class:`~pyro_cl.fitters.context_points.ContextPoints` source,
told of each task after its fit: a :class:`~pyro_cl.memory.protocol.Memory` part (random,
k-center, or any user's selection; with ``budget="task"`` it keeps ``K`` points of every task, as
S-FSVI's coreset) is taken as :class:`~pyro_cl.fitters.context_points.FromMemory` (all its points
at every step, or a fresh draw of some of each task's per step), and
:class:`~pyro_cl.fitters.context_points.UniformInputs` and
:class:`~pyro_cl.fitters.context_points.CurrentInputs` keep no data at all (inputs drawn at
every step uniformly, or from the task being fitted: S-FSVI's "no coreset" rows). Where the
points change from step to step, the old posterior's moments are computed at every step
(``target_samples`` draws, or its linearisation), else once per task. On the first task
there is nothing to regularise in function space, and the fit is VCL's ELBO against the initial
prior; or, with ``function_prior_variance=v``, S-FSVI's own first task (their
``prior_type="fixed"`` for task 0, ``v = 10⁻³`` in every MNIST config): eq. 9 against a prior
*on the functions*, the outputs at ``function_prior_points`` inputs drawn uniformly within the
task's input range at every step i.i.d. ``N(0, v)``::

    F(q_1) = E_{q_1(θ)}[log p(D_1 | θ)] - KL(q_1(f(X_C)) ‖ N(0, v I))

(weighed as later tasks' functional KL), with the parameter-space KL weighed by ``kl_weight`` (0:
none, as theirs). A small ``v`` asks for outputs near 0 on inputs unlike the data, with small
function variance there, which also keeps the posterior variances small. Later tasks weigh the
parameter-space KL by ``kl_weight`` (0, the default, is S-FSVI's objective; 1 adds VCL's term, a
functional regulariser on top of VCL) and the functional KL by ``function_kl_weight``.

**How much a context point weighs.** Eq. 9 sums the functional KL over the context points
against the log-likelihood summed over the task's ``N`` points (``function_kl_scale="sum"``, the
default: the bound as written). S-FSVI's code weighs it otherwise (``objectives_cl.py``,
``kl_scale="equal"``): each minibatch's summed log-likelihood against the KL times
``batch size / |X_C|``, so the KL *per context point* counts as much as one training point's
log-likelihood; ``function_kl_scale="per_point"`` does the same, which on the whole task is::

    F(q_t) = E_{q_t(θ)}[log p(D_t | θ)] - (N / |X_C|) KL(q_t(f(X_C)) ‖ q_{t-1}(f(X_C)))

(a KL tempered up by ``N / |X_C|``: 1,500 at permuted MNIST's 60,000 points and 40 context
points.) ``|X_C|`` is the step's number of context points, all tasks' together.

**Kept points with their labels.** Kept context points have labels too; with
``label_weight=λ > 0`` their log-likelihood joins the task's, each point weighed as ``λ``
training points, so the same points both hold the old function and are fitted again, as a
replay buffer is (DER++'s two terms, Buzzega et al. 2020, eq. 6, with the logits' squared
distance replaced by the functional KL)::

    F(q_t) = E_{q_t(θ)}[log p(D_t | θ)] + λ Σ_{c ∈ C} E_{q_t(θ)}[log p(y_c | θ, x_c)]
             - KL(q_t(f(X_C)) ‖ q_{t-1}(f(X_C)))

The expectation is taken over the same ``context_samples`` draws of the outputs the moments
come from (no pass of its own with Monte Carlo moments). Counted twice, once in the old
function and once in the likelihood, the kept points are weighed more than Bayes' rule weighs
them: a replay method, not a posterior; ``λ = 0`` (the default) is S-FSVI's objective.
"""

from __future__ import annotations

import math
import weakref

import torch

from pyro_cl.checks import checked_count, checked_optional_count, checked_real
from pyro_cl.fitters.context_points import ContextPoints, FromMemory, UniformInputs
from pyro_cl.fitters.elbo_fitter import ELBOFitter, data_size
from pyro_cl.guides import MEAN_FIELD
from pyro_cl.infer.objectives import kl_and_sites, task_groups
from pyro_cl.infer.per_example import sites_by_layer
from pyro_cl.infer.site_values import sample_outputs, substitute_sites
from pyro_cl.nn.effects import RecordLayers
from pyro_cl.nn.layer import as_diagonal_gaussian
from pyro_cl.posterior import read_priors
from pyro_cl.spec import Registrable

__all__ = [
    "FUNCTION_KL_SCALES",
    "MOMENTS",
    "FunctionSpaceFitter",
    "function_draws",
    "function_moments",
    "gaussian_function_kl",
    "linearised_moments",
]

#: How the outputs' moments at the context points are computed.
MOMENTS = ("monte_carlo", "linearised")

#: How the functional KL is weighed against the log-likelihood (module docstring).
FUNCTION_KL_SCALES = ("sum", "per_point")


def function_draws(
    model,
    sites: dict,
    x: torch.Tensor,
    task_id,
    num_samples: int,
    fast: bool | None = None,
    rows_at_once: int | None = None,
) -> torch.Tensor:
    """The net's outputs at ``x`` (one task id, or one per row) under ``num_samples`` draws of
    ``sites``, shape ``(num_samples, N, *output shape)``, rows in ``x``'s order
    (``rows_at_once``: :func:`~pyro_cl.infer.site_values.sample_outputs`' chunks)."""
    groups = task_groups(task_id, x.shape[0])
    outputs, order = [], []
    for task, rows in groups:
        outputs.append(sample_outputs(model, sites, x[rows], task, num_samples, fast, rows_at_once))
        order.append(torch.arange(x.shape[0], device=x.device)[rows])
    if len(outputs) == 1:
        return outputs[0]
    return torch.cat(outputs, 1)[:, torch.argsort(torch.cat(order))]


def function_moments(draws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The Monte Carlo moments of the outputs from their draws (:func:`function_draws`): the
    sample mean and the unbiased sample variance over the first dimension, each of shape
    ``(N, *output shape)``."""
    if draws.shape[0] < 2:
        raise ValueError("function moments need at least 2 samples for a variance")
    return draws.mean(0), draws.var(0, unbiased=True)


def linearised_moments(
    model, sites: dict, x: torch.Tensor, task_id
) -> tuple[torch.Tensor, torch.Tensor]:
    """S-FSVI's moments (their eq. 11-12, the covariance kept to its diagonal over outputs): the
    net linearised around the means, ``f(x; θ) ≈ f(x; μ) + J (θ - μ)``, gives
    ``N(f(x; μ), J Σ Jᵀ)`` under ``q = N(μ, Σ)`` with ``Σ`` diagonal, whose variance per point
    ``n`` and output ``k`` is ``Σ_θ J_{nk,θ}² σ_θ²``. Each layer writes its share from its input
    and the gradient of output ``k`` with respect to its output
    (:meth:`~pyro_cl.nn.layer.BayesianLayer.example_variances`: for a linear layer
    ``Σ_oi δ_o² x_i² σ_oi²``), one backward pass per output; the passes keep their graph while
    gradients are on, so the fit differentiates the variance through ``J`` too.

    :param sites: every site the net uses for these points, as (diagonal) Gaussians.
    :returns: mean and variance, each ``(N, *output shape)`` like :func:`function_moments`.
    :raises TypeError: for a site that is not Gaussian or a layer without linearised variances.
    """
    gaussians = {}
    for name, value in sites.items():
        gaussian = as_diagonal_gaussian(value)
        if gaussian is None:
            raise TypeError(f"linearised moments need Gaussian sites; {name!r} is {value!r}")
        gaussians[name] = gaussian
    site_of = sites_by_layer(model)
    keep_graph = torch.is_grad_enabled()
    means, variances, order = [], [], []
    with torch.enable_grad():
        # every mean a graph leaf (a fixed site's too), so each layer's output has a gradient
        locs = {
            name: (g.loc if g.loc.requires_grad else g.loc.detach().requires_grad_())[None]
            for name, g in gaussians.items()
        }
        for task, rows in task_groups(task_id, x.shape[0]):
            with RecordLayers() as records, substitute_sites(model.net, locs, 1):
                outputs = model.net_outputs(x[rows].unsqueeze(0), task)
            flat = outputs.reshape(*outputs.shape[:2], -1)
            layer_outputs = [out for _, _, out in records]
            per_output = []
            for k in range(flat.shape[-1]):
                deltas = torch.autograd.grad(
                    flat[..., k].sum(), layer_outputs, create_graph=keep_graph, retain_graph=True
                )
                total = 0.0
                for (layer, inputs, _), delta in zip(records, deltas, strict=True):
                    own = {a: gaussians[site_of[(layer, a)]].variance for a in layer.site_names}
                    total = total + layer.example_variances(inputs, delta, own)
                per_output.append(total[0])
            means.append(outputs[0])
            variances.append(torch.stack(per_output, -1).reshape(outputs.shape[1:]))
            order.append(torch.arange(x.shape[0], device=x.device)[rows])
    inverse = torch.argsort(torch.cat(order))
    mean, variance = torch.cat(means)[inverse], torch.cat(variances)[inverse]
    return (mean, variance) if keep_graph else (mean.detach(), variance.detach())


def gaussian_function_kl(
    mean_q: torch.Tensor,
    variance_q: torch.Tensor,
    mean_p: torch.Tensor,
    variance_p: torch.Tensor,
    jitter: float = 0.0,
    draws_q: int | None = None,
    draws_p: int | None = None,
) -> torch.Tensor:
    """``Σ KL(N(m_q, v_q + jitter) ‖ N(m_p, v_p + jitter))`` over every element, from exact
    moments, or from Monte Carlo moments of ``draws_q`` and ``draws_p`` draws.

    Plugged into the closed form, sample moments bias the KL: the sample mean's own variance
    ``v/n`` adds to the squared mean difference (so the minimiser over ``v_q`` is
    ``v_p n/(n+1)``, a function variance shrunk by 11% at ``n = 8``), ``log`` of a sample
    variance is low on average, and ``1/v̂_p`` high; two identical posteriors score above 0.
    With the draws given, each term is replaced by its unbiased estimate for Gaussian outputs
    (sample mean and variance independent, ``(n-1) v̂/v ~ χ²_{n-1}``)::

        (m̂_q - m̂_p)² - v̂_q/n_q - v̂_p/n_p      for (m_q - m_p)²
        log v̂ - ψ((n-1)/2) + log((n-1)/2)        for log v
        (n_p - 3) / ((n_p - 1) v̂_p)              for 1/v_p

    so its expectation is the KL of the true moments (exact for a linear model, whose outputs
    are Gaussian; for a net, the outputs' non-Gaussianity is not corrected), and its minimiser
    over ``q`` is the true one. ``None`` for moments that are exact (linearised, or a fixed
    function prior)."""
    total_q, total_p = variance_q + jitter, variance_p + jitter
    inverse_p = 1.0 / total_p
    log_ratio = total_q.log() - total_p.log()
    square = (mean_q - mean_p).square()
    if draws_q is not None:
        log_ratio = log_ratio - _log_variance_bias(draws_q)
        square = square - variance_q / draws_q
    if draws_p is not None:
        if draws_p < 4:
            raise ValueError(f"an unbiased 1/v_p needs at least 4 draws, got {draws_p}")
        inverse_p = inverse_p * (draws_p - 3) / (draws_p - 1)
        log_ratio = log_ratio + _log_variance_bias(draws_p)
        square = square - variance_p / draws_p
    return 0.5 * (total_q * inverse_p - log_ratio + square * inverse_p - 1).sum()


def _log_variance_bias(draws: int) -> float:
    """``E[log v̂] - log v`` for the sample variance of ``draws`` Gaussian draws:
    ``ψ(k/2) - log(k/2)``, ``k = draws - 1``."""
    half = (draws - 1) / 2
    return float(torch.special.digamma(torch.tensor(half, dtype=torch.float64))) - math.log(half)


def _rows(target: tuple, rows: torch.Tensor) -> tuple:
    """The inputs, task ids, the old posterior's moments and the labels of ``rows`` of a set's."""
    x, task_id, mean, variance, y = target
    task_id = task_id[rows] if torch.is_tensor(task_id) else task_id
    return x[rows], task_id, mean[rows], variance[rows], y[rows]


class FunctionSpaceFitter(ELBOFitter):
    """SVI on S-FSVI's objective with Monte Carlo or linearised function moments (module
    docstring).

    :param context: where the context points come from: a
        :class:`~pyro_cl.fitters.context_points.ContextPoints` source, or a memory that chooses
        them (e.g. ``RandomCoreset(40)``, taken as ``FromMemory(RandomCoreset(40))``).
    :param function_kl_weight: the weight of ``KL(q_t(f(X_C)) ‖ q_{t-1}(f(X_C)))``.
    :param function_kl_scale: ``"sum"`` (eq. 9 as written) or ``"per_point"`` (S-FSVI's code:
        the KL times ``N / |X_C|``, each context point weighed as one training point).
    :param context_draws: with a memory as ``context``, draw this many of each task's kept points
        afresh at every step (S-FSVI draws 40 of a 200-point coreset); ``None`` uses them all.
    :param context_total: with a memory as ``context``, draw this many of all its kept points
        afresh at every step instead (a context of fixed size, for task-free streams).
    :param kl_weight: the weight of the parameter-space KL after the first task, and on it with
        a function prior (0: S-FSVI).
    :param context_samples: draws of ``q_t`` per step for its moments at the context points.
    :param target_samples: draws of ``q_{t-1}`` for its moments, once per task.
    :param jitter: added to both variances (outputs that no weight makes uncertain).
    :param moments: ``"monte_carlo"`` (the draws above) or ``"linearised"`` (S-FSVI's,
        :func:`linearised_moments`: exact for a linear model, no sampling noise; nets of
        linear and FiLM layers).
    :param function_prior_variance: ``v`` of S-FSVI's first-task prior ``N(0, v)`` on the
        outputs (module docstring); ``None`` fits the first task with VCL's ELBO.
    :param function_prior_points: the uniform inputs it is taken at, drawn at every step.
    :param label_weight: ``λ``: each kept context point's log-likelihood of its label added to
        the task's, weighed as ``λ`` training points (module docstring); needs kept points (a
        memory) as ``context``. ``0``: S-FSVI.
    :param target_rows_at_once: run at most this many (draw, point) rows of ``q_{t-1}``'s
        moments through the net at a time (``None``: all at once). A conv net needs it: 64
        draws of 400 context points through split CIFAR's at once took the process past 19 GiB.
        Each point's draws are its own under local reparameterisation, so chunks change which
        random numbers a point gets, not their distribution.
    """

    name = "function_space"

    #: The old posterior's function moments are drawn from the per-site priors: mean-field.
    guide_families = (MEAN_FIELD,)

    def __init__(
        self,
        context: Registrable,
        function_kl_weight: float = 1.0,
        kl_weight: float = 0.0,
        context_samples: int = 8,
        target_samples: int = 64,
        jitter: float = 1e-4,
        moments: str = "monte_carlo",
        function_kl_scale: str = "sum",
        context_draws: int | None = None,
        function_prior_variance: float | None = None,
        function_prior_points: int = 40,
        context_total: int | None = None,
        target_rows_at_once: int | None = None,
        label_weight: float = 0.0,
    ) -> None:
        super().__init__(heads_in_kl=True, kl_weight=1.0)
        if getattr(context, "kind", None) == "memory":
            context = FromMemory(context, per_task=context_draws, total=context_total)
        elif context_draws is not None or context_total is not None:
            raise ValueError(
                "context_draws and context_total need a memory as context (they draw from its "
                f"kept points), not {context!r}"
            )
        if not isinstance(context, ContextPoints):
            raise TypeError(f"context must be a ContextPoints source or a Memory, got {context!r}")
        self.context = context
        self.label_weight = checked_real(label_weight, "label_weight", 0)
        if self.label_weight and not isinstance(context, FromMemory):
            raise ValueError(
                f"label_weight fits kept points' labels: it needs a memory as context, not "
                f"{context!r} (drawn inputs have no labels)"
            )
        self.function_kl_weight = checked_real(function_kl_weight, "function_kl_weight", 0)
        self.kl_weight = checked_real(kl_weight, "kl_weight", 0)
        self.context_samples = checked_count(context_samples, "context_samples")
        self.target_samples = checked_count(target_samples, "target_samples")
        if self.context_samples < 2 or self.target_samples < 4:
            raise ValueError(
                "context_samples must be at least 2 and target_samples at least 4 (their moments' "
                "bias is corrected: see gaussian_function_kl)"
            )
        self.jitter = checked_real(jitter, "jitter", 0)
        if moments not in MOMENTS:
            raise ValueError(f"moments must be one of {MOMENTS}, got {moments!r}")
        self.moments = moments
        if function_kl_scale not in FUNCTION_KL_SCALES:
            raise ValueError(
                f"function_kl_scale must be one of {FUNCTION_KL_SCALES}, got {function_kl_scale!r}"
            )
        self.function_kl_scale = function_kl_scale
        self.function_prior_variance = (
            None
            if function_prior_variance is None
            else checked_real(function_prior_variance, "function_prior_variance", 0, low_open=True)
        )
        self.function_prior_points = checked_count(function_prior_points, "function_prior_points")
        self.target_rows_at_once = checked_optional_count(
            target_rows_at_once, "target_rows_at_once"
        )
        self._task_data = None
        self._first_task = True
        self._step = None  # the fit context of the step whose fit added context points

    def hyperparameters(self) -> dict:
        # points drawn from a memory are given as the memory and its draws, as the constructor
        # takes them (FromMemory(memory, per_task) is built from them again)
        context, draws, total = self.context, None, None
        if isinstance(context, FromMemory):
            context, draws, total = context.memory, context.per_task, context.total
        return {"context": context, "context_draws": draws, "context_total": total} | {
            name: getattr(self, name)
            for name in (
                "function_kl_weight",
                "kl_weight",
                "context_samples",
                "target_samples",
                "jitter",
                "moments",
                "function_kl_scale",
                "function_prior_variance",
                "function_prior_points",
                "target_rows_at_once",
                "label_weight",
            )
        }

    def prepare(self, context, guide, data, task_id, sites, first_task) -> None:
        super().prepare(context, guide, data, task_id, sites, first_task)
        # the step's first fit adds context points when it succeeds; a later fit of the same step
        # (a replay buffer's Gaussian of the points that left it) adds none
        later = self._step is not None and self._step() is context
        self._task_data = None if later else data
        self._first_task = first_task

    def fit(self, context, guide, problem) -> list[float]:
        history = super().fit(context, guide, problem)
        if problem.data is self._task_data:  # a task's step, not a coreset refit
            # the step's own points, the latest: a replay buffer's in the data are earlier
            # steps', in the context since their own
            own = problem.data.times == problem.data.times.max()
            self.context.after_task(problem.data.select(own))
            self._step = weakref.ref(context)
            self._task_data, self._first_task = None, False  # a coreset refit regularises too
        return history

    def _parameter_kl_weight(self) -> float:
        if self._first_task and self.function_prior_variance is None:
            return 1.0  # VCL's ELBO against the initial prior
        return self.kl_weight

    def _regulariser(self, context, guide, problem, packed):
        if not (self.function_kl_weight or self.label_weight):
            return None
        model, fitted, first = context.model, set(problem.sites), self._first_task
        if first:
            if self.function_prior_variance is None:
                return None
            uniform = UniformInputs(self.function_prior_points)  # within this task's range
            uniform.after_task(problem.data)
            draw, per_step = uniform.draw, True
        else:
            draw, per_step = self.context.draw, self.context.per_step
        points = draw(problem.data)
        if points is None:
            return None
        tasks = points.tasks() if model.multi_head else [points.tasks()[0]]
        names = model.sites(guide, points.x.to(context.device), tasks)
        old = read_priors(model.net, names)  # q_{t-1}, also every fixed site's distribution

        def target(points):
            x, y = points.x.to(context.device), points.y.to(context.device)
            task_id = model.task_argument(points)
            if first:  # the function prior, N(0, v) for every output
                return x, task_id, x.new_zeros(()), x.new_tensor(self.function_prior_variance), y
            with torch.no_grad():
                return (x, task_id, *self._target_moments(model, old, x, task_id), y)

        # the old posterior's moments once per fit where every step's points are the same, or
        # rows of one set (a memory's kept points, drawn from); else at each step's new points
        candidates = None if first or not per_step else self.context.candidates()
        if not per_step:
            fixed = target(points)
        elif candidates is not None:
            fixed = target(candidates)
        else:
            fixed = None

        def next_target() -> tuple:
            if not per_step:
                return fixed
            if candidates is not None:
                return _rows(fixed, self.context.draw_rows(problem.data))
            return target(draw(problem.data))

        num_data = data_size(problem.data)  # per point: R / N = KL / |X_C|, so R = KL·N/|X_C|
        labelled = bool(self.label_weight) and not first  # a function prior's inputs have none

        def regulariser() -> torch.Tensor:
            x, task_id, target_mean, target_variance, y = next_target()
            _, current = kl_and_sites(
                model, guide, [n for n in names if n in fitted], model.fast, packed
            )
            sites = {name: current[name] if name in fitted else old[name] for name in names}
            draws = None
            if self.moments == "linearised":
                mean, variance = linearised_moments(model, sites, x, task_id)
            else:
                draws = function_draws(model, sites, x, task_id, self.context_samples)
                mean, variance = function_moments(draws)
            kl = gaussian_function_kl(
                mean,
                variance,
                target_mean,
                target_variance,
                self.jitter,
                *self._draws(first),
            )
            if self.function_kl_scale == "per_point":
                kl = kl * (num_data / x.shape[0])
            term = self.function_kl_weight * kl
            if labelled:  # λ Σ_c E_q[log p(y_c | θ, x_c)], over the moments' own draws
                if draws is None:
                    draws = function_draws(model, sites, x, task_id, self.context_samples)
                log_likelihood = model.likelihood.log_prob(draws, y).mean(0).sum()
                term = term - self.label_weight * log_likelihood
            return term

        return regulariser

    def _draws(self, first: bool) -> tuple[int | None, int | None]:
        """The Monte Carlo draws behind the current and the target moments (``None``: exact),
        for :func:`gaussian_function_kl`'s bias correction."""
        if self.moments == "linearised":
            return None, None
        return self.context_samples, None if first else self.target_samples

    def _target_moments(self, model, sites, x, task_id):
        """The old posterior's outputs' mean and variance at ``x``, this fitter's way (no
        gradient: Monte Carlo moments in chunks of bounded memory)."""
        if self.moments == "linearised":
            return linearised_moments(model, sites, x, task_id)
        draws = function_draws(
            model, sites, x, task_id, self.target_samples, rows_at_once=self.target_rows_at_once
        )
        return function_moments(draws)

    def state_dict(self) -> dict:
        return self.context.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.context.load_state_dict(state)
