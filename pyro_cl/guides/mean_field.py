"""Mean-field Gaussian guide with the VCL initialisation, created lazily site by site."""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import ClassVar

import pyro
import torch
from pyro import poutine
from pyro.distributions import Beta, Distribution, Gamma, Normal
from pyro.params.param_store import param_with_module_name
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import nn
from torch.distributions import constraints

from pyro_cl.nn.effects import PosteriorConditionals
from pyro_cl.nn.site_flags import OBSERVATION_FLAG, STRUCTURED_FLAG
from pyro_cl.posterior import base_distribution, sample_sites

__all__ = [
    "MeanFieldGuide",
    "task_id_key",
    "REINIT_POLICIES",
    "DEFAULT_INIT_LOG_VARIANCE",
]

#: log σ² = -6 (σ ≈ 0.05), as in the VCL authors' reference code. The paper's text says
#: "variance 1e-6", but the published numbers come from the code, so that is our default.
DEFAULT_INIT_LOG_VARIANCE = -6.0

#: What :meth:`MeanFieldGuide.reinitialise` may do between tasks.
REINIT_POLICIES = (
    "keep",
    "prior",
    "reset_variance",
    "cap_variance",
    "fresh_cap_variance",
    "reset",
    "fresh",
)


def task_id_key(args: tuple, kwargs: dict):
    """Default key for which sites a model call uses: its ``task_id`` keyword (``None`` if absent)."""
    return kwargs.get("task_id")


def _parameter_key(site: str) -> str:
    # nn.ParameterDict keys may not contain "."; "/" never occurs in Pyro module paths.
    return site.replace(".", "/")


class MeanFieldGuide(nn.Module):
    """``q(θ) = ∏_sites N(θ_site; μ_site, diag(σ²_site))`` for the latent sites of ``model``.

    Parameters are the means ``μ`` and the log-variances ``log σ²`` (the VCL reference code's
    parametrisation). Sites on the unit interval with a Beta prior (IBP sticks) get a mean-field
    Beta ``q(v) = Beta(a, b)`` instead, parametrised by ``log a`` and ``log b`` and started at
    the prior's concentrations (H-IBP supplement eq. 8 and section 6); torch's Beta ``rsample``
    gives implicit reparameterisation gradients (eq. 16-18). Positive sites with a Gamma prior (a
    noise precision) get a Gamma ``q(τ) = Gamma(a, b)``, parametrised by ``log a`` and ``log b``
    and started at the prior (implicit reparameterisation likewise).

    *Structured* sites (``infer={"structured": True}``, see :mod:`pyro_cl.nn.structured`) get no
    parameters: their posterior is the model's own conditional given the other sites (eq. 10-11).
    For models that have them, the guide runs the model with every other latent site drawn from
    its ``q`` and the structured sites from their posterior conditionals, in the model's order. They are created the first time a site is seen: the guide traces the model
    once per distinct value of ``site_key(args, kwargs)`` (by default the ``task_id`` keyword), so
    a head first used by task 7 gets its parameters when task 7 arrives, and a call for task ``t``
    samples only the sites the model uses for task ``t`` (no KL term for unused heads). Tracing is
    done under a forked random number generator so that it never shifts later draws.

    Sites whose ``infer`` dict sets ``"observation"`` (``OBSERVATION_FLAG``) are treated as data
    even when the model draws them (prediction without targets).

    New means start at the prior mean plus truncated-normal noise of scale ``init_loc_std`` (the
    VCL reference code uses 0.1); maximum-likelihood initialisation trains the means in place
    (:func:`~pyro_cl.fitters.initialisation.initialise_guide`).

    *Local* latent sites (inside the data plate, one per data point) have no mean-field factor:
    a model with them must come with an amortised ``local_guide`` that samples exactly those
    sites (``local_guide.site_names``), such as the task encoders ``q_φt(z | x)`` of a generative
    model (:class:`~pyro_cl.generative.TaskEncoders`). The guide then runs it before its global
    sites (the order of the fast route's draws) and owns its parameters (they train, save and roll back with the guide's). Without
    one, a local latent site is an error, as before.

    It is an ordinary guide: ``SVI(model, guide, Adam(...), TraceMeanField_ELBO())`` works, since
    every call registers the parameters with Pyro's param store under a name unique to the guide.

    :param model: the Pyro model (callable) whose latent sites this guide covers.
    :param init_log_variance: log σ² of new sites (default -6, see ``DEFAULT_INIT_LOG_VARIANCE``;
        use ``math.log(1e-6)`` for the paper's text).
    :param init_loc_std: scale of the random perturbation of new means.
    :param site_key: maps a call's ``(args, kwargs)`` to a hashable key identifying which sites
        that call samples.
    :param local_guide: a guide module for the model's local latent sites (see above), with
        ``site_names`` and ``prepare(task_id, like)``; ``None`` for models without them.
    """

    #: The dictionaries of per-site (or per-block) tensors, created lazily: what :meth:`restore`
    #: and :meth:`load_state_dict` create and remove by key.
    parameter_groups: tuple[str, ...] = (
        "loc",
        "log_variance",
        "log_concentration1",
        "log_concentration0",
        "log_shape",
        "log_rate",
    )

    def __init__(
        self,
        model: Callable,
        init_log_variance: float = DEFAULT_INIT_LOG_VARIANCE,
        init_loc_std: float = 0.1,
        site_key: Callable[[tuple, dict], object] = task_id_key,
        local_guide: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.local_guide = local_guide
        object.__setattr__(self, "model", model)  # not a submodule: its weights are not ours
        self.init_log_variance = float(init_log_variance)
        self.init_loc_std = float(init_loc_std)
        self.site_key = site_key
        self.loc = nn.ParameterDict()
        self.log_variance = nn.ParameterDict()
        self.log_concentration1 = nn.ParameterDict()
        self.log_concentration0 = nn.ParameterDict()
        self.log_shape = nn.ParameterDict()
        self.log_rate = nn.ParameterDict()
        self._event_dims: dict[str, int] = {}
        self._families: dict[str, str] = {}
        self._sites_by_key: dict[object, list[str]] = {}
        #: Keys whose calls sample structured sites (so the guide re-runs the model for them).
        self._structured_keys: set = set()
        self._store_name = f"pyro_cl_guide_{uuid.uuid4().hex[:12]}"

    # ----------------------------------------------------------------- sites and parameters
    @property
    def site_names(self) -> list[str]:
        """All sites that have parameters, in the order they were created."""
        return list(self._event_dims)

    def sites_for(self, *args, **kwargs) -> list[str]:
        """Names of the latent sites the model samples for this call (creating their parameters)."""
        key = self.site_key(args, kwargs)
        names = self._sites_by_key.get(key)
        if names is None:
            names = self._discover(key, args, kwargs)
            self._sites_by_key[key] = names
        return names

    def _discover(self, key, args: tuple, kwargs: dict) -> list[str]:
        local_sites = set()
        if self.local_guide is not None:
            self.local_guide.prepare(key, like=args[0])
            local_sites = set(self.local_guide.site_names)
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices), poutine.block(), torch.no_grad():
            with _batch_statistics_frozen(self.model):
                trace = poutine.trace(self.model).get_trace(*args, **kwargs)
        names = []
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            if site["infer"].get(OBSERVATION_FLAG):  # data, even when drawn for prediction
                continue
            if site["infer"].get("is_auxiliary") or site["infer"].get("_deterministic"):
                continue
            if site["infer"].get(STRUCTURED_FLAG):  # drawn from the model's own conditional
                self._structured_keys.add(key)
                continue
            if name in local_sites:  # sampled by the amortised local guide
                continue
            if any(frame.vectorized for frame in site["cond_indep_stack"]):
                raise ValueError(
                    f"site {name!r} is a local latent variable inside a plate; MeanFieldGuide "
                    "covers global sites only (give it a local_guide for amortised local sites)"
                )
            names.append(name)
            if name not in self._event_dims:
                self._create_site(name, site["fn"])
        return names

    def _create_site(self, name: str, prior: Distribution) -> None:
        support = prior.support
        while isinstance(support, constraints.independent):
            support = support.base_constraint
        key = _parameter_key(name)
        if support is constraints.unit_interval and isinstance(base_distribution(prior), Beta):
            beta = base_distribution(prior)
            self.log_concentration1[key] = nn.Parameter(beta.concentration1.detach().log())
            self.log_concentration0[key] = nn.Parameter(beta.concentration0.detach().log())
            self._families[name] = "beta"
        elif isinstance(base_distribution(prior), Gamma):
            gamma = base_distribution(prior)
            self.log_shape[key] = nn.Parameter(gamma.concentration.detach().log())
            self.log_rate[key] = nn.Parameter(gamma.rate.detach().log())
            self._families[name] = "gamma"
        elif support is constraints.real:
            mean = _starting_moments(prior)[0].detach()
            if name not in self._prior_mean_starts():  # a FiLM layer starts at the identity
                mean = mean + self._loc_noise(mean)
            self.loc[key] = nn.Parameter(mean)
            self.log_variance[key] = nn.Parameter(torch.full_like(mean, self.init_log_variance))
            self._families[name] = "normal"
        else:
            raise ValueError(
                f"site {name!r} has support {prior.support}; MeanFieldGuide fits real-valued "
                "sites (Gaussian), Beta-distributed sites on the unit interval and "
                "Gamma-distributed positive sites"
            )
        self._event_dims[name] = prior.event_dim

    def _loc_noise(self, like: torch.Tensor) -> torch.Tensor:
        noise = torch.empty_like(like)
        nn.init.trunc_normal_(
            noise, std=self.init_loc_std, a=-2 * self.init_loc_std, b=2 * self.init_loc_std
        )
        return noise

    # ----------------------------------------------------------------- distributions
    def distribution(self, name: str) -> Distribution:
        """``q`` of one site, differentiable in the guide's parameters."""
        key = _parameter_key(name)
        if self._families[name] == "beta":
            beta = Beta(
                self.log_concentration1[key].exp(),
                self.log_concentration0[key].exp(),
                validate_args=False,
            )
            return beta.to_event(self._event_dims[name])
        if self._families[name] == "gamma":
            gamma = Gamma(self.log_shape[key].exp(), self.log_rate[key].exp(), validate_args=False)
            return gamma.to_event(self._event_dims[name])
        scale = torch.exp(0.5 * self.log_variance[key])
        # exp() is positive and the loc is a parameter, so argument validation would only cost time.
        return Normal(self.loc[key], scale, validate_args=False).to_event(self._event_dims[name])

    def gaussian_parameters(
        self, names: Iterable[str]
    ) -> dict[str, tuple[nn.Parameter, nn.Parameter]]:
        """``{site: (μ, log σ²)}``: the raw parameters of the Gaussian sites among ``names``."""
        return {
            name: (self.loc[_parameter_key(name)], self.log_variance[_parameter_key(name)])
            for name in names
            if self._families[name] == "normal"
        }

    def gaussian_sites(self, names: Iterable[str] | None = None) -> list[str]:
        """The sites among ``names`` (default: all) with a Gaussian ``q``."""
        return [n for n in (names or self.site_names) if self._families[n] == "normal"]

    def posterior(self, names: Iterable[str] | None = None) -> dict[str, Distribution]:
        """``{site: q(site)}`` for ``names`` (default: every site with parameters)."""
        return {name: self.distribution(name) for name in (names or self.site_names)}

    # ----------------------------------------------------------------- the family's protocol
    #: True when every site's ``q`` is its own factor (Pyro's ``TraceMeanField_ELBO`` then
    #: computes the KL site by site); a guide that couples sites says False.
    mean_field: ClassVar[bool] = True

    def joint_terms(self, names: Iterable[str]) -> tuple[torch.Tensor | float, dict]:
        """``(KL, {site: distribution})`` of the sites among ``names`` that ``q`` couples, drawn
        together (:func:`~pyro_cl.guides.joint_gaussian.draw_joint_sites`): none here."""
        return 0.0, {}

    def prior_sites(self) -> dict[str, Distribution]:
        """The sites whose prior this guide holds itself (jointly), as distributions to predict
        with: none here, since the net's per-site priors hold the whole posterior."""
        return {}

    def hand_off(self, names: Iterable[str]) -> None:
        """Make the fitted ``q`` of ``names`` the prior of the next step, beyond the per-site
        priors the learner installs in the net: nothing more for a mean-field posterior."""

    def carry_prior(self, step: Callable, initial_prior: Mapping[str, Distribution]) -> None:
        """Carry the prior this guide keeps itself through a transition's linear Gaussian step
        (``step(initial_loc, initial_scale) -> (a, b, v)``, or ``None`` for no change;
        :meth:`~pyro_cl.transitions.Transition.gaussian_step`): nothing for a mean-field guide,
        whose prior the transition carries site by site in the net."""

    def locs(self, names: Iterable[str] | None = None) -> dict[str, nn.Parameter]:
        """``{site: μ_site}`` of the Gaussian sites: the means as point values (for
        maximum-likelihood fits)."""
        return {name: self.loc[_parameter_key(name)] for name in self.gaussian_sites(names)}

    def precisions(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """``{site: 1/σ²}``, detached (the state of natural-gradient updates)."""
        return {
            name: self.log_variance[_parameter_key(name)].detach().neg().exp()
            for name in self.gaussian_sites(names)
        }

    @torch.no_grad()
    def set_precisions(self, values: Mapping[str, torch.Tensor]) -> None:
        """Set ``σ² = 1/precision`` for the given sites."""
        for name, value in values.items():
            self.log_variance[_parameter_key(name)].copy_(value.log().neg())

    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        names = self.sites_for(*args, **kwargs)
        pyro.module(self._store_name, self)
        if self.local_guide is not None:
            # local sites first: their draws precede the decoder's, as on the fast route
            self.local_guide(*args, **kwargs)
        if self.site_key(args, kwargs) not in self._structured_keys:
            return {name: pyro.sample(name, self.distribution(name)) for name in names}
        # Run the model with q in place of the priors and the structured sites' posterior
        # conditionals; observations are hidden, so the trace holds exactly the latent sites.
        with PosteriorConditionals(), _SwapPriors(self, names):
            trace = poutine.trace(
                poutine.block(self.model, hide_fn=lambda msg: msg["is_observed"])
            ).get_trace(*args, **kwargs)
        return {name: trace.nodes[name]["value"] for name in names}

    # ----------------------------------------------------------------- initialisation
    @torch.no_grad()
    def reinitialise(
        self,
        policy: str,
        priors: Mapping[str, Distribution],
        log_variance: float | None = None,
    ) -> None:
        """Re-initialise the sites in ``priors`` before a new task.

        ``"keep"`` starts the next task at the current posterior (the VCL reference code's choice);
        ``"prior"`` starts it at the step's prior, means and variances (the same as ``"keep"`` for
        VCL; after a transition such as forgetting, the forgotten posterior; for a new head, its
        initial prior); ``"reset_variance"`` keeps the means and resets log σ²;
        ``"cap_variance"`` keeps the means and lowers every log σ² above the reset value to it
        (weights the last task left at the prior start narrow, the others where they were);
        ``"fresh_cap_variance"`` does the same to the variances and draws the means afresh as
        ``"fresh"`` does — the GVCL reference code's start of each later task, at log σ² = -7
        (yolky/gvcl, ``gvcl_model_classes.py``, ``add_new_task``): the KL to the last posterior
        pulls back the means the earlier tasks needed, and units the last task pruned (in- and
        outgoing means near 0, where their gradients vanish) start alive; ``"reset"`` resets log
        σ² and redraws the means around the mean of the site's prior in ``priors``; ``"fresh"``
        resets log σ² and draws the means as PyTorch initialises a new layer, ``U(-1/√fan_in,
        1/√fan_in)`` (the VOGN thesis's choice for permuted and split MNIST, section 4.3).

        :param log_variance: the log σ² to reset to (default ``init_log_variance``).
        """
        if policy not in REINIT_POLICIES:
            raise ValueError(f"unknown re-initialisation {policy!r}; choose from {REINIT_POLICIES}")
        if policy == "keep":
            return
        log_variance = self.init_log_variance if log_variance is None else float(log_variance)
        for name, prior in priors.items():
            key = _parameter_key(name)
            if self._families.get(name) == "beta":  # restart at the prior (= last posterior)
                self.log_concentration1[key].copy_(base_distribution(prior).concentration1.log())
                self.log_concentration0[key].copy_(base_distribution(prior).concentration0.log())
                continue
            if self._families.get(name) == "gamma":  # likewise
                self.log_shape[key].copy_(base_distribution(prior).concentration.log())
                self.log_rate[key].copy_(base_distribution(prior).rate.log())
                continue
            if key not in self.loc:
                continue
            if policy == "prior":
                base = base_distribution(prior)  # a Normal, or a first prior of another family
                like = self.loc[key]
                mean, variance = _starting_moments(base)
                self.loc[key].copy_(mean.to(like).expand_as(like))
                if isinstance(base, Normal):
                    scale = base.scale.to(like).expand_as(like)
                    current = self.log_variance[key]
                    # a guide already at its prior keeps its log σ² bit for bit (no round trip)
                    there = torch.exp(0.5 * current) == scale
                    self.log_variance[key].copy_(torch.where(there, current, 2 * scale.log()))
                else:  # its moments
                    self.log_variance[key].copy_(variance.to(like).expand_as(like).log())
                continue
            if policy in ("cap_variance", "fresh_cap_variance"):
                self.log_variance[key].clamp_(max=log_variance)
            else:
                self.log_variance[key].fill_(log_variance)
            if policy == "reset":
                mean = _starting_moments(prior)[0].to(self.loc[key])
                self.loc[key].copy_(mean + self._loc_noise(mean))
            elif policy in ("fresh", "fresh_cap_variance"):
                if name in self._prior_mean_starts():
                    self.loc[key].copy_(_starting_moments(prior)[0].to(self.loc[key]))
                    continue
                bound = self._fan_in(name) ** -0.5
                self.loc[key].uniform_(-bound, bound)

    @torch.no_grad()
    def match_prior_moments(
        self, priors: Mapping[str, Distribution], alpha: float = 0.001, beta: float = 0.999
    ) -> None:
        """Kurle et al. 2020, appendix I: draw each Gaussian site's means and log-scales so that
        ``E[μ² + σ²]`` equals the prior variance ``v`` of the site (zero-mean weights keep the
        pre-activations' moments of the prior, appendix H): ``μ ~ N(0, β v)`` and
        ``log σ ~ N(½ log((1-β) e^{-2α²} v), α²)``.

        :param alpha: spread of the log-scales (0 gives every weight of a site the same σ).
        :param beta: the share of ``v`` carried by the spread of the means, in ``[0, 1)``.
        """
        if not (alpha >= 0 and 0 <= beta < 1):
            raise ValueError(f"need alpha >= 0 and 0 <= beta < 1, got alpha={alpha}, beta={beta}")
        for name, prior in priors.items():
            key = _parameter_key(name)
            if self._families.get(name) != "normal":
                continue
            if name in self._prior_mean_starts():  # at the prior's mean, narrow
                self.loc[key].copy_(base_distribution(prior).mean.to(self.loc[key]))
                self.log_variance[key].fill_(self.init_log_variance)
                continue
            variance = base_distribution(prior).variance.to(self.loc[key])
            variance = variance.expand_as(self.loc[key])
            self.loc[key].copy_(torch.randn_like(variance) * (beta * variance).sqrt())
            log_scale = 0.5 * torch.log((1 - beta) * math.exp(-2 * alpha**2) * variance)
            log_scale = log_scale + alpha * torch.randn_like(variance)
            self.log_variance[key].copy_(2 * log_scale)

    def _prior_mean_starts(self) -> set[str]:
        """Sites whose layer starts at its prior's mean where others start afresh (FiLM layers:
        :attr:`~pyro_cl.nn.layer.BayesianLayer.starts_at_prior_mean`)."""
        net = getattr(self.model, "net", None)
        if not isinstance(net, nn.Module):
            return set()
        return {
            name
            for name, module, _ in sample_sites(net)
            if getattr(module, "starts_at_prior_mean", False)
        }

    def _fan_in(self, name: str) -> int:
        """Inputs per output unit of a site: its trailing dimensions for a weight; for a bias, those
        of the same module's ``weight`` site (PyTorch's convention)."""
        shape = self.loc[_parameter_key(name)].shape
        if len(shape) < 2:
            sibling = name.rpartition(".")[0] + ".weight" if "." in name else "weight"
            key = _parameter_key(sibling)
            shape = self.loc[key].shape if key in self.loc else (1, 1)
        return max(1, int(torch.Size(shape[1:]).numel()))

    def amortised_parameters(self, tasks: Iterable[int]) -> dict[str, nn.Parameter]:
        """``{name: φ}`` of the local guide for ``tasks`` (empty without a local guide): what a
        fit trains besides the global sites."""
        if self.local_guide is None:
            return {}
        return {f"local_guide.{k}": v for k, v in self.local_guide.parameters_of(tasks).items()}

    def clone(self) -> MeanFieldGuide:
        """An independent copy (same model, same values, its own parameters and store name) of
        the global sites; a local guide is shared, not copied."""
        copy = self._empty_like()
        copy.load_state_dict(self.state_dict())  # creates each parameter like the source's
        return copy

    def _empty_like(self) -> MeanFieldGuide:
        """A guide of this kind and settings for the same model, with no sites yet."""
        return MeanFieldGuide(
            self.model, self.init_log_variance, self.init_loc_std, self.site_key, self.local_guide
        )

    def release(self) -> None:
        """Remove this guide's parameters from Pyro's global parameter store (``elbo="pyro"``
        registers them there; they are registered again the next time the guide runs). Call
        it on a guide about to be discarded, e.g. a refit copy, or the store grows without end."""
        store = pyro.get_param_store()
        prefix = param_with_module_name(self._store_name, "")
        for name in [name for name in store.keys() if name.startswith(prefix)]:
            del store[name]

    # ----------------------------------------------------------------- saving and loading
    def restore(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Return exactly to ``state_dict`` (from :meth:`state_dict`): parameters created since
        (those of a head first used in a step that failed) are removed, here and in Pyro's
        parameter store, so none is left behind to be picked up later."""
        for group in self.parameter_groups:
            parameters = getattr(self, group)
            for key in [key for key in parameters.keys() if f"{group}.{key}" not in state_dict]:
                del parameters[key]
        if self.local_guide is not None:
            self.local_guide.remove_missing(_local_part(state_dict))
        self.release()
        self.load_state_dict(state_dict)

    def get_extra_state(self) -> dict:
        return {
            "event_dims": dict(self._event_dims),
            "families": dict(self._families),
            "sites_by_key": [[key, list(names)] for key, names in self._sites_by_key.items()],
            "structured_keys": list(self._structured_keys),
        }

    def set_extra_state(self, state: dict) -> None:
        self._event_dims = {k: int(v) for k, v in state["event_dims"].items()}
        self._families = dict(state["families"])
        self._sites_by_key = {key: list(names) for key, names in state["sites_by_key"]}
        self._structured_keys = set(state["structured_keys"])

    def load_state_dict(
        self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False
    ):
        """Load parameters, first creating those a fresh guide has not created lazily yet."""
        for full_key, value in state_dict.items():
            group, _, key = full_key.partition(".")
            if group in self.parameter_groups and key not in getattr(self, group):
                holder = getattr(self, group)
                empty = torch.empty_like(value)
                holder[key] = nn.Parameter(empty) if isinstance(holder, nn.ParameterDict) else empty
        if self.local_guide is not None:
            self.local_guide.create_from_state(_local_part(state_dict))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def extra_repr(self) -> str:
        return f"sites={len(self._event_dims)}, init_log_variance={self.init_log_variance}"


def _local_part(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The local guide's entries of a guide's state dict, with the prefix removed."""
    prefix = "local_guide."
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


@contextlib.contextmanager
def _batch_statistics_frozen(model: Callable) -> Iterator[None]:
    """Batch normalisation layers of ``model``'s net in evaluation mode for the block: tracing
    the first inputs neither fails on a small batch nor moves their running statistics."""
    net = getattr(model, "net", model)
    modules = net.modules() if isinstance(net, nn.Module) else ()
    training = [m for m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    for module in training:
        module.eval()
    try:
        yield
    finally:
        for module in training:
            module.train()


class _SwapPriors(Messenger):
    """Draw the named latent sites from the guide's ``q`` instead of the model's prior."""

    def __init__(self, guide: MeanFieldGuide, names: Iterable[str]) -> None:
        super().__init__()
        self.guide = guide
        self.names = set(names)

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.names and not msg["is_observed"]:
            msg["fn"] = self.guide.distribution(msg["name"])


def _starting_moments(prior: Distribution) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and variance a Gaussian guide starts from at ``prior``: its moments, or where a
    heavy-tailed family has none (a Cauchy, a Student-t with ``ν ≤ 2``), its location and
    squared scale."""
    prior = base_distribution(prior)
    mean, variance = prior.mean, prior.variance
    if not bool(torch.isfinite(mean).all()):
        mean = prior.loc
    if not bool(torch.isfinite(variance).all()):
        variance = prior.scale.square()
    return mean, variance
