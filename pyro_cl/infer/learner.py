"""Shared machinery of continual learners: data checks, prediction, evaluation, save/load."""

from __future__ import annotations

import copy
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields, replace

import pyro
import torch

from pyro_cl.guides import DEFAULT_INIT_LOG_VARIANCE, REINIT_POLICIES, MeanFieldGuide
from pyro_cl.infer.objectives import negative_log_likelihood
from pyro_cl.infer.site_values import sample_outputs
from pyro_cl.infer.training import minimise
from pyro_cl.likelihoods import CategoricalLikelihood, Likelihood, likelihood_from_state
from pyro_cl.model import SupervisedModel
from pyro_cl.nn.cnn import BayesianCNN
from pyro_cl.nn.ibp_mlp import IndianBuffetMLP
from pyro_cl.nn.mlp import BayesianMLP
from pyro_cl.posterior import (
    detach_distribution,
    install_prior,
    posterior_from_state,
    posterior_to_state,
    read_priors,
)
from pyro_cl.serialization import atomic_save, safe_load

__all__ = ["TrainingConfig", "ContinualLearner"]

_FORMAT = "pyro_cl.learner/1"

#: Nets that :meth:`ContinualLearner.load` rebuilds from their ``config``.
_REBUILDABLE_NETS = {
    "BayesianMLP": BayesianMLP,
    "BayesianCNN": BayesianCNN,
    "IndianBuffetMLP": IndianBuffetMLP,
}


@dataclass
class TrainingConfig:
    """Settings of a learner. Defaults follow the VCL paper's permuted MNIST set-up (appendix A).

    :param epochs: passes over each task's data.
    :param first_epochs: passes over the first task's data (``None``: ``epochs``); the VOGN
        thesis trains 60 epochs on CIFAR-10 and 600 on each smaller CIFAR-100 task.
    :param batch_size: minibatch size; ``None`` uses the whole task as one batch.
    :param learning_rate: Adam's learning rate.
    :param learning_rate_decay: the learning rate is multiplied by this every
        ``learning_rate_decay_steps`` optimiser steps, smoothly (``lr · decay^(step/steps)``),
        restarting with each fit; the H-IBP supplement uses 0.87 every 1000 steps (section 6).
    :param learning_rate_decay_steps: see ``learning_rate_decay``.
    :param num_particles: Monte Carlo samples of the expected log-likelihood per step (10 in the
        reference code).
    :param num_predictive_samples: posterior samples averaged for prediction (100 in the
        reference code).
    :param ml_init_epochs: epochs of maximum-likelihood training that set the guide's means before
        the first task (VCL appendix A); ``None`` means ``epochs``, 0 switches it off.
    :param init_log_variance: log σ² of new guide sites (-6, the reference code's value).
    :param init_loc_std: scale of the random initial means of sites not set by ML.
    :param init_means: initial means when ML initialisation is off: "prior" (the prior mean plus
        noise of scale ``init_loc_std``) or "fresh" (PyTorch's initialisation of a new layer,
        as the VOGN thesis does; implied by ``between_tasks="fresh"``).
    :param between_tasks: guide re-initialisation before each later task: "keep" (start from the
        previous posterior), "reset_variance", "reset" or "fresh" (a newly initialised net, before
        the first task too when ``ml_init_epochs`` is 0; see :meth:`MeanFieldGuide.reinitialise`).
    :param later_init_log_variance: log σ² that re-initialisation resets to after the first task
        (``None``: ``init_log_variance``; the VOGN thesis uses precision 4e3 then 4e4 on CIFAR).
    :param elbo: "fast" (direct computation for pyro_cl layers), "pyro" (TraceMeanField_ELBO on
        the Pyro programs) or "auto" (fast whenever the net allows it).
    :param refit_epochs: epochs of the coreset refit before prediction (VCL eq. 3); ``None``
        means ``epochs``.
    :param refit_batch_size: minibatch size of that refit: ``"same"`` uses ``batch_size`` (the
        reference code's choice), ``None`` the whole coreset (the paper's text for coreset-only
        training).
    :param progress: show progress bars.
    """

    epochs: int = 100
    first_epochs: int | None = None
    batch_size: int | None = 256
    learning_rate: float = 1e-3
    learning_rate_decay: float = 1.0
    learning_rate_decay_steps: int = 1000
    num_particles: int = 10
    num_predictive_samples: int = 100
    ml_init_epochs: int | None = None
    init_log_variance: float = DEFAULT_INIT_LOG_VARIANCE
    init_loc_std: float = 0.1
    init_means: str = "prior"
    between_tasks: str = "keep"
    later_init_log_variance: float | None = None
    elbo: str = "auto"
    refit_epochs: int | None = None
    refit_batch_size: int | str | None = "same"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.epochs < 0 or (self.first_epochs is not None and self.first_epochs < 0):
            raise ValueError(f"epochs must be non-negative, got {self.epochs}/{self.first_epochs}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be positive or None, got {self.batch_size}")
        if not 0 < self.learning_rate_decay <= 1 or self.learning_rate_decay_steps < 1:
            raise ValueError(
                "learning_rate_decay must be in (0, 1] and learning_rate_decay_steps positive, got "
                f"{self.learning_rate_decay}/{self.learning_rate_decay_steps}"
            )
        if self.num_particles < 1 or self.num_predictive_samples < 1:
            raise ValueError("num_particles and num_predictive_samples must be at least 1")
        if self.init_means not in ("prior", "fresh"):
            raise ValueError(f"init_means must be 'prior' or 'fresh', got {self.init_means!r}")
        if self.between_tasks not in REINIT_POLICIES:
            raise ValueError(f"between_tasks must be one of {REINIT_POLICIES}")
        if self.elbo not in ("auto", "fast", "pyro"):
            raise ValueError(f"elbo must be 'auto', 'fast' or 'pyro', got {self.elbo!r}")
        if self.refit_epochs is not None and self.refit_epochs < 0:
            raise ValueError(f"refit_epochs must be non-negative, got {self.refit_epochs}")
        if self.refit_batch_size != "same" and not (
            self.refit_batch_size is None or self.refit_batch_size >= 1
        ):
            raise ValueError(
                f"refit_batch_size must be 'same', None or positive, got {self.refit_batch_size!r}"
            )

    def task_epochs(self, first_task: bool) -> int:
        """Epochs for a task: ``first_epochs`` for the first one where it is set."""
        return self.first_epochs if first_task and self.first_epochs is not None else self.epochs


class ContinualLearner(ABC):
    """Base class: a Bayesian net, a guide and the current prior, fed one task at a time.

    Subclasses implement :meth:`_learn` (fit one task) and :meth:`prediction_sites` (what to
    predict with). Everything else — checking data, rolling back a failed task, prediction by
    Monte Carlo, evaluation, saving and loading — lives here once.

    :param net: a ``PyroModule`` with ``PyroSample`` latent sites, e.g. :class:`BayesianMLP`.
        Its ``forward`` may take a ``task_id`` keyword (multi-head nets do).
    :param likelihood: observation model (default: categorical, i.e. classification).
    :param config: a :class:`TrainingConfig`; keyword ``overrides`` replace single fields.
    :param device: where the net, guide and data live ("cpu", "cuda", ...).
    :param seed: seeds Pyro's and torch's random number generators.
    """

    #: True for learners that predict with a point estimate (a single "sample").
    point_estimate = False

    def __init__(
        self,
        net: torch.nn.Module,
        likelihood: Likelihood | None = None,
        config: TrainingConfig | None = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        **overrides,
    ) -> None:
        self.config = replace(config or TrainingConfig(), **overrides)
        self.device = torch.device(device or "cpu")
        self.seed = seed
        if seed is not None:
            pyro.set_rng_seed(seed)
        self.model = SupervisedModel(net.to(self.device), likelihood or CategoricalLikelihood())
        self.guide = MeanFieldGuide(
            self.model,
            init_log_variance=self.config.init_log_variance,
            init_loc_std=self.config.init_loc_std,
        )
        if self.config.elbo == "fast" and not self.model.library_layers_only:
            raise ValueError("elbo='fast' needs a net built from pyro_cl layers only")
        self.fast = self.config.elbo != "pyro" and self.model.library_layers_only
        self.tasks_seen: list[int] = []
        #: Sites trained so far, in order; their priors hold the current posterior.
        self.trained_sites: list[str] = []

    @property
    def net(self) -> torch.nn.Module:
        return self.model.net

    # ------------------------------------------------------------------ data
    def _prepare(self, data, task_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ValueError("data must be a pair (inputs, targets)")
        x, y = data
        x = torch.as_tensor(x)
        y = torch.as_tensor(y)
        self.model.check_data(x, y, task_id)
        return x.to(self.device), y.to(self.device)

    # ------------------------------------------------------------------ learning
    def observe(self, data, task_id: int = 0) -> list[float]:
        """Learn task ``task_id`` from ``data = (x, y)``; afterwards its posterior is the prior.

        If training fails (for example it diverges) the guide and the priors are rolled back,
        so the previous posterior stays intact.

        :returns: the loss of every epoch.
        """
        x, y = self._prepare(data, task_id)
        guide_state = copy.deepcopy(self.guide.state_dict())
        priors = {name: detach_distribution(d) for name, d in read_priors(self.net).items()}
        buffers = {name: b.clone() for name, b in self.net.named_buffers()}
        try:
            history = self._learn(x, y, task_id)
        except BaseException:
            self.guide.load_state_dict(guide_state, strict=False)
            install_prior(self.net, priors)
            with torch.no_grad():  # prior buffers and per-task hyperparameters (H-IBP's α_j)
                for name, buffer in self.net.named_buffers():
                    buffer.copy_(buffers[name])
            raise
        self.tasks_seen.append(task_id)
        return history

    @abstractmethod
    def _learn(self, x: torch.Tensor, y: torch.Tensor, task_id: int) -> list[float]:
        """Fit task ``task_id`` on ``(x, y)`` (already checked and on the device)."""

    def _active_sites(
        self, x: torch.Tensor, task_id: int, guide: MeanFieldGuide | None = None
    ) -> list[str]:
        """The latent sites the model samples for task ``task_id`` (creating them in ``guide``,
        by default the learner's own). Only the shape of ``x`` matters."""
        guide = guide or self.guide
        return guide.sites_for(x, None, task_id=task_id, dataset_size=x.shape[0])

    def _fit_point_estimate(
        self, x: torch.Tensor, y: torch.Tensor, task_id: int, epochs: int, description: str
    ) -> list[float]:
        """Maximum likelihood for the guide's means of the sites task ``task_id`` uses."""
        locs = self.guide.locs(self._active_sites(x, task_id))

        def loss(index: torch.Tensor) -> torch.Tensor:
            return negative_log_likelihood(self.model, locs, x[index], y[index], task_id, self.fast)

        return self._minimise(loss, locs.values(), x.shape[0], epochs, description)

    def _minimise(
        self, loss, parameters, num_data: int, epochs: int, description: str, batch_size="same"
    ):
        cfg = self.config
        return minimise(
            loss,
            parameters,
            num_data,
            epochs,
            cfg.batch_size if batch_size == "same" else batch_size,
            cfg.learning_rate,
            self.device,
            description,
            cfg.progress,
            decay=(cfg.learning_rate_decay, cfg.learning_rate_decay_steps),
        )

    def _record_trained(self, names) -> None:
        for name in names:
            if name not in self.trained_sites:
                self.trained_sites.append(name)

    # ------------------------------------------------------------------ prediction
    @abstractmethod
    def prediction_sites(self, x: torch.Tensor, task_id: int) -> dict:
        """Distributions or values of the latent sites used for prediction."""

    @property
    def num_predictive_samples(self) -> int:
        return 1 if self.point_estimate else self.config.num_predictive_samples

    @torch.no_grad()
    def predictive_samples(
        self, x: torch.Tensor, task_id: int = 0, num_samples: int | None = None, chunk: int = 1024
    ) -> torch.Tensor:
        """Net outputs for ``num_samples`` posterior draws: shape ``(S, N, outputs)``."""
        x = torch.as_tensor(x)
        self.model.check_data(x, None, task_id)
        return self._predictive_samples(x.to(self.device), task_id, num_samples, chunk)

    @torch.no_grad()
    def _predictive_samples(
        self,
        x: torch.Tensor,
        task_id: int,
        num_samples: int | None,
        chunk: int = 1024,
        sites: dict | None = None,
    ) -> torch.Tensor:
        """:meth:`predictive_samples` for inputs already checked and on the device, with the
        latent sites drawn from ``sites`` (default :meth:`prediction_sites`)."""
        num_samples = num_samples or self.num_predictive_samples
        if sites is None:
            sites = self.prediction_sites(x[:1], task_id)
        # Every chunk starts from the same random state, so sample s uses the same weights for
        # all inputs (a coherent function draw) when weights, not pre-activations, are sampled.
        rng = _rng_state(self.device)
        parts = []
        training = self.net.training
        self.net.eval()  # test-time behaviour, e.g. Bernoulli rather than Concrete IBP masks
        try:
            for i in range(0, x.shape[0], chunk):
                _set_rng_state(self.device, rng)
                parts.append(
                    sample_outputs(
                        self.model, sites, x[i : i + chunk], task_id, num_samples, self.fast
                    )
                )
        finally:
            self.net.train(training)
        return torch.cat(parts, dim=1)

    def predict(self, x: torch.Tensor, task_id: int = 0, num_samples: int | None = None):
        """Class probabilities ``(1/S) Σ_s softmax(f(x; θ_s))`` (classification likelihoods)."""
        samples = self.predictive_samples(x, task_id, num_samples)
        return self.model.likelihood.predictive_probabilities(samples)

    def evaluate(
        self, data, task_id: int = 0, num_samples: int | None = None, sites: dict | None = None
    ) -> dict[str, float]:
        """Accuracy (classification) and mean test log-likelihood on ``data = (x, y)``.

        :param sites: distributions or values of latent sites to predict with instead of
            :meth:`prediction_sites` (others come from their priors), e.g. a pruned posterior.
        """
        x, y = self._prepare(data, task_id)
        samples = self._predictive_samples(x, task_id, num_samples, sites=sites)
        return self.model.likelihood.metrics(samples, y)

    # ------------------------------------------------------------------ state
    def posterior(self, task_id: int) -> dict:
        """The posterior used to predict task ``task_id``: ``{site: distribution}`` for every
        trained site (a coreset refit where there is one, else the propagated posterior)."""
        x = torch.zeros(1, *self._input_shape(), device=self.device)
        return {**self.current_prior(), **self.prediction_sites(x, task_id)}

    def _input_shape(self) -> tuple[int, ...]:
        shape = getattr(self.net, "input_shape", None)
        return tuple(shape) if shape is not None else (self.model.in_features,)

    def current_prior(self) -> dict:
        """The prior the next task will use, for every site trained so far (= latest posterior)."""
        return read_priors(self.net, self.trained_sites)

    def state(self) -> dict:
        """Everything needed to continue exactly here: tensors and plain containers only."""
        net_config = None
        if type(self.net).__name__ in _REBUILDABLE_NETS:
            net_config = {"class": type(self.net).__name__, "arguments": self.net.config}
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "format": _FORMAT,
            "learner": type(self).__name__,
            "net_config": net_config,
            "net_state": self.net.state_dict(),
            "prior": posterior_to_state(self.current_prior()),
            "trained_sites": list(self.trained_sites),
            "guide_state": self.guide.state_dict(),
            "likelihood": self.model.likelihood.state(),
            "config": asdict(self.config),
            "tasks_seen": list(self.tasks_seen),
            "seed": self.seed,
            "rng": rng,
            "extra": self._extra_state(),
        }

    def _extra_state(self) -> dict:
        """Subclass state beyond the shared fields (tensors and plain containers only)."""
        return {}

    def _load_extra_state(self, state: dict) -> None:  # noqa: B027 (optional hook)
        """Restore what :meth:`_extra_state` saved (nothing, unless a subclass saves more)."""

    @classmethod
    def _constructor_arguments(cls, extra: dict) -> dict:
        """Keyword arguments of ``cls(...)`` that :meth:`load` must pass, from the extra state."""
        return {}

    def save(self, path: str | os.PathLike) -> None:
        """Save the whole learner atomically (see :func:`pyro_cl.serialization.atomic_save`)."""
        atomic_save(self.state(), path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        net: torch.nn.Module | None = None,
        device: str | torch.device | None = None,
    ):
        """Rebuild a learner saved with :meth:`save` and restore the random number generator.

        :param net: a freshly built net of the same architecture; required unless the saved net
            is a :class:`BayesianMLP` or :class:`BayesianCNN`, rebuilt from its stored
            configuration.
        """
        state = safe_load(path, map_location=device or "cpu")
        if state.get("format") != _FORMAT:
            raise ValueError(f"{path} is not a pyro_cl learner file")
        if state["learner"] != cls.__name__:
            raise TypeError(f"{path} holds a {state['learner']}, not a {cls.__name__}")
        if net is None:
            config = state["net_config"]
            if config is None:
                raise ValueError("this learner's net is not a pyro_cl net: pass net=...")
            if "class" not in config:  # files written before nets other than the MLP
                config = {"class": "BayesianMLP", "arguments": config}
            net = _REBUILDABLE_NETS[config["class"]](**config["arguments"])
        known = {f.name for f in fields(TrainingConfig)}
        config = TrainingConfig(**{k: v for k, v in state["config"].items() if k in known})
        extra = state.get("extra", {})
        learner = cls(
            net,
            likelihood_from_state(state["likelihood"]),
            config,
            device=device,
            **cls._constructor_arguments(extra),
        )
        learner.net.load_state_dict(state["net_state"])
        install_prior(learner.net, posterior_from_state(state["prior"], learner.device))
        learner.guide.load_state_dict(state["guide_state"])
        learner.guide.to(learner.device)
        learner.trained_sites = list(state["trained_sites"])
        learner.tasks_seen = list(state["tasks_seen"])
        learner.seed = state["seed"]
        learner._load_extra_state(extra)
        torch.set_rng_state(state["rng"]["torch"].cpu())
        if "cuda" in state["rng"] and learner.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), learner.device)
        return learner


def _rng_state(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)
