"""The continual-learning methods that benchmarks and the command line know by name.

A method is a recipe: a learner class, and the parts plugged into it (a memory class, a fitter
class with the arguments that define the method, a transition) with training settings that
differ from :class:`~pyro_cl.infer.config.TrainingConfig`'s defaults. :func:`register_method`
adds one to :data:`METHODS`, the one registry of task-stream methods (``pyro-cl run``) and online
methods (``pyro-cl stream``, Kurle et al. 2020, section 6.1 and appendix B), told apart by
:attr:`Method.streams`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from pyro_cl.app.part_options import accepted
from pyro_cl.baselines import CoresetOnly, FineTuning
from pyro_cl.baselines.ewc import EWC, OnlineEWC
from pyro_cl.baselines.laplace import LaplacePropagation
from pyro_cl.baselines.map_estimate import GaussianMAP
from pyro_cl.baselines.synaptic_intelligence import SynapticIntelligence
from pyro_cl.fitters.context_points import CurrentInputs, GaussianInputs, UniformInputs
from pyro_cl.fitters.elbo_fitter import ELBOFitter
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.function_space import FunctionSpaceFitter
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.penalty import Penalty
from pyro_cl.fitters.point_estimate import PointEstimateFitter
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.guides import GuideFamily
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.learner.vcl import VCL
from pyro_cl.memory import (
    EveryPoint,
    ExperienceReplay,
    GaussianResidualMemory,
    KCenterCoreset,
    RandomCoreset,
    RecentPoints,
    Replay,
)
from pyro_cl.transitions.base import NoPropagation, Transition

__all__ = [
    "Method",
    "METHODS",
    "ONLINE_SETTINGS",
    "VOGN_MNIST_SETTINGS",
    "make_method",
    "method_names",
    "register_method",
]

#: The VOGN thesis's set-up for permuted and split MNIST (section 4.3): no maximum-likelihood
#: initialisation, PyTorch's initial means and precision 1e6, re-initialised before every task.
VOGN_MNIST_SETTINGS = {
    "ml_init_epochs": 0,
    "init_log_variance": -math.log(1e6),
    "between_tasks": "fresh",
}

#: The online methods' settings (Kurle et al. 2020, appendix I): full-batch Adam at 1e-3 from
#: the moment-matched initial posterior, no maximum-likelihood start, and prediction from the
#: fitted posterior itself (no refit on the memory).
ONLINE_SETTINGS = {
    "batch_size": None,
    "ml_init_epochs": 0,
    "init_means": "moment_matched",
    "progress": False,
    "learning_rate": 1e-3,
    "refit_per_task": False,
}

#: Every method by name (see :func:`register_method`).
METHODS: dict[str, Method] = {}


@dataclass(frozen=True)
class Method:
    """How to build a learner: its class, an optional memory (coreset selector) class, an
    optional fitter class with the arguments that define the method (e.g.
    ``curvature="ggn"``), an optional penalty class for a point-estimate fitter (EWC, SI), and
    training settings that differ from the defaults (the caller's settings and fitter or penalty
    options win).

    :ivar streams: ``"tasks"`` for ``pyro-cl run``'s task streams, ``"online"`` for ``pyro-cl
        stream``'s time-stamped streams.
    :ivar memory_defaults: keyword arguments of the memory that define the method (e.g.
        ``budget="total"``).
    :ivar transition: the transition class that defines the method (e.g. batch VI's
        :class:`~pyro_cl.transitions.base.NoPropagation`); a caller's transition wins.
    :ivar context: where a function-space fitter's context points come from: a memory class
        (keeping the run's memory size of every task) or a
        :class:`~pyro_cl.fitters.context_points.ContextPoints` class (drawing that many for
        every task at each step)."""

    name: str
    learner: type[ContinualLearner]
    memory: type | None = None
    fitter: type[Fitter] | None = None
    defaults: dict = field(default_factory=dict)
    fitter_defaults: dict = field(default_factory=dict)
    description: str = ""
    penalty: type[Penalty] | None = None
    streams: str = "tasks"
    memory_defaults: dict = field(default_factory=dict)
    transition: type[Transition] | None = None
    context: type | None = None

    def __post_init__(self) -> None:
        if self.streams not in ("tasks", "online"):
            raise ValueError(f"streams must be 'tasks' or 'online', got {self.streams!r}")

    @property
    def keeps_points(self) -> bool:
        """Whether the method keeps (or draws) points whose number a run's coreset size sets:
        a memory with a size, or a function-space fitter's context points."""
        sized = self.memory is not None and "size" in accepted(self.memory)
        return sized or self.context is not None

    def fitter_parameters(self) -> set[str]:
        """Names of the keyword arguments the method's fitter takes (none without one); a
        function-space method takes its ``context`` source too (default: its own of the coreset
        size)."""
        if self.fitter is None:
            return set()
        return (
            accepted(self.fitter) - {"penalty"} - ({"context"} if self.context is None else set())
        )

    def penalty_parameters(self) -> set[str]:
        """Names of the keyword arguments the method's penalty takes (none without one)."""
        return set() if self.penalty is None else accepted(self.penalty)

    def build(
        self,
        net: torch.nn.Module,
        memory_size: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        fitter_options: dict | None = None,
        transition: Transition | None = None,
        penalty_options: dict | None = None,
        memory_options: dict | None = None,
        guide: GuideFamily | None = None,
        **training,
    ) -> ContinualLearner:
        """A fresh learner of this method on ``net``.

        :param memory_size: points per task (or in all) for the methods whose memory has a size.
        :param fitter_options: keyword arguments of the method's fitter (``learning_rate``,
            ``beta``, ``num_samples``, ``momentum``, ...), for the methods that name one.
        :param transition: the transition between tasks (default: the learner's).
        :param penalty_options: keyword arguments of the method's penalty (``strength``, ...).
        :param memory_options: keyword arguments of the method's memory besides its size (e.g.
            ``num_term_samples`` of a Gaussian residual memory).
        :param guide: the guide family (default: the learner's, mean-field).
        :param training: :class:`~pyro_cl.infer.config.TrainingConfig` settings.
        """
        if transition is None and self.transition is not None:
            transition = self.transition()
        parts: dict[str, object] = {"transition": transition}
        if guide is not None:
            parts["guide"] = guide
        if self.memory is not None:
            # a memory that keeps every point (batch VI's) takes no size
            sized = (memory_size,) if "size" in accepted(self.memory) else ()
            options = {**self.memory_defaults, **(memory_options or {})}
            parts["memory"] = self.memory(*sized, **options)
        elif memory_options:
            raise ValueError(f"method {self.name!r} has no memory to take {memory_options}")
        fitter_arguments = {**self.fitter_defaults, **(fitter_options or {})}
        if self.penalty is not None:
            fitter_arguments["penalty"] = self.penalty(**(penalty_options or {}))
        elif penalty_options:
            raise ValueError(f"method {self.name!r} has no penalty to take {penalty_options}")
        if self.context is not None:
            fitter_arguments.setdefault("context", self.context(memory_size))
        if self.fitter is not None:
            parts["fitter"] = self.fitter(**fitter_arguments)
        elif fitter_options:
            raise ValueError(f"method {self.name!r} has no fitter options to take {fitter_options}")
        settings = {**self.defaults, **training}
        return self.learner(net, device=device, seed=seed, **parts, **settings)


def register_method(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` under its name.

    :raises ValueError: if another method holds the name.
    """
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered already: {METHODS[method.name]}")
    METHODS[method.name] = method
    return method


_PENALTIES = (
    ("ewc", EWC, "EWC (Kirkpatrick et al. 2017): a Fisher quadratic per task"),
    ("online-ewc", OnlineEWC, "online EWC (Schwarz et al. 2018): one running Fisher"),
    ("si", SynapticIntelligence, "Synaptic Intelligence (Zenke et al. 2017)"),
    ("map", GaussianMAP, "MAP with the last fit as prior mean and Σ = I (VCL paper section 5)"),
)
for _method in (
    Method("vcl", VCL, None, ELBOFitter, description="VCL: SVI on the online ELBO (eq. 4)"),
    Method(
        "vcl-random",
        VCL,
        RandomCoreset,
        ELBOFitter,
        description="VCL + random coreset (Algorithm 1)",
    ),
    Method(
        "vcl-kcenter",
        VCL,
        KCenterCoreset,
        ELBOFitter,
        description="VCL + K-center coreset (Algorithm 1)",
    ),
    Method(
        "coreset-only", CoresetOnly, RandomCoreset, description="refit on a random coreset only"
    ),
    Method(
        "kcenter-only", CoresetOnly, KCenterCoreset, description="refit on a K-center coreset only"
    ),
    Method("finetune", FineTuning, description="maximum likelihood on each task in turn"),
    Method(
        "finetune-er",
        FineTuning,
        ExperienceReplay,
        description="experience replay: fine-tuning on each task with a buffer of the coreset "
        "size a task (drawn uniformly) shuffled into its data",
        memory_defaults={"budget": "task"},
    ),
    Method(
        "vcl-er",
        VCL,
        ExperienceReplay,
        ELBOFitter,
        description="VCL with a replay buffer in every fit's likelihood (the coreset size a "
        "task); the Gaussian handed on holds the points that left the buffer",
        memory_defaults={"budget": "task"},
    ),
    Method(
        "joint",
        FineTuning,
        Replay,
        description="maximum likelihood on every task so far (the VOGN thesis's 'Joint' upper "
        "bound, table 2)",
    ),
    Method("vogn", VCL, None, VOGN, VOGN_MNIST_SETTINGS, description="VOGN (thesis eq. 52/53)"),
    Method(
        "vogn-ggn",
        VCL,
        None,
        VOGN,
        VOGN_MNIST_SETTINGS,
        {"curvature": "ggn"},
        "VOGN with the Gauss-Newton curvature",
    ),
    Method(
        "vogn-random", VCL, RandomCoreset, VOGN, VOGN_MNIST_SETTINGS, description="VOGN + random"
    ),
    Method(
        "vogn-kcenter",
        VCL,
        KCenterCoreset,
        VOGN,
        VOGN_MNIST_SETTINGS,
        description="VOGN + K-center",
    ),
    Method("ivon", VCL, None, IVON, {"ml_init_epochs": 0}, description="IVON (Shen et al. 2024)"),
    Method(
        "fsvi",
        VCL,
        None,
        FunctionSpaceFitter,
        description="function-space VI (S-FSVI, Rudner et al. 2022) at random context points "
        "of each task (the coreset size), Monte Carlo function moments",
        context=RandomCoreset,
    ),
    Method(
        "fsvi-er",
        VCL,
        ExperienceReplay,
        FunctionSpaceFitter,
        description="function-space VI beside a replay buffer: the buffer's points (the coreset "
        "size a task) in every fit's likelihood, with their labels, and the function KL at "
        "context points of each task (the coreset size, kept apart: twice the points in all)",
        context=RandomCoreset,
        memory_defaults={"budget": "task"},
    ),
    Method(
        "fsvi-uniform",
        VCL,
        None,
        FunctionSpaceFitter,
        description="function-space VI without keeping any data: context points drawn "
        "uniformly within the inputs' range at every step (S-FSVI's no-coreset rows), the "
        "coreset size of them for each task",
        context=UniformInputs,
    ),
    Method(
        "fsvi-gaussian",
        VCL,
        None,
        FunctionSpaceFitter,
        description="function-space VI without keeping any data point: each task's input mean "
        "and covariance kept, the coreset size of inputs drawn from that Gaussian for each "
        "earlier task at every step",
        context=GaussianInputs,
    ),
    Method(
        "fsvi-current",
        VCL,
        None,
        FunctionSpaceFitter,
        description="function-space VI without keeping any data: the old heads' outputs held "
        "at the new task's own inputs, drawn at every step (S-FSVI's no-coreset context points; "
        "multi-head nets), the coreset size of them for each earlier task",
        context=CurrentInputs,
    ),
    Method(
        "fsvi-kcenter",
        VCL,
        None,
        FunctionSpaceFitter,
        description="function-space VI at K-center context points",
        context=KCenterCoreset,
    ),
    *(
        Method(name, FineTuning, None, PointEstimateFitter, description=text, penalty=penalty)
        for name, penalty, text in _PENALTIES
    ),
    Method(
        "batch-vi",
        VCL,
        EveryPoint,
        defaults={"refit_per_task": False},
        description="batch VI on every task so far from the initial prior: the upper bound of "
        "the VCL paper's figure 4",
        transition=NoPropagation,
    ),
    Method(
        "lp",
        VCL,
        None,
        LaplacePropagation,
        description="diagonal Laplace propagation: MAP + Gauss-Newton precision, handed on",
    ),
):
    register_method(_method)

# Section 6.1's online methods (appendix B) and figure 8's ablations: ``kcenter``/``random`` choose
# from ``D_t ∪ M_{t-1}`` and fit the rest with the ELBO.
for _name, _memory, _memory_defaults, _text in (
    ("grs", GaussianResidualMemory, {}, "Gaussian residual scoring: top-M scores after the fit, factors divided out (eq. 8-9)"),
    ("kcenter", KCenterCoreset, {"budget": "total"}, "k-center memory of M points chosen before the fit, refit on it to predict"),
    ("random", RandomCoreset, {"budget": "total"}, "random memory of M points chosen before the fit, refit on it to predict"),
    ("recent", RecentPoints, {}, "the last M points (a sliding window), refit on it to predict"),
    ("grs-refit", GaussianResidualMemory, {"gaussian_update": "elbo"}, "residual scores, ELBO fit of the points let go instead of the factor update"),
    ("kcenter-grs", GaussianResidualMemory, {"selection": "kcenter"}, "k-center memory after the fit with GRS's factor update"),
    ("none", None, {}, "online VB without a memory (with --transition: adaptation alone)"),
):  # fmt: skip
    register_method(
        Method(
            _name,
            ContinualLearner,
            _memory,
            defaults=ONLINE_SETTINGS,
            description=_text,
            streams="online",
            memory_defaults=_memory_defaults,
        )
    )


def method_names(streams: str = "tasks") -> list[str]:
    """The names of the registered methods for ``streams`` (``"tasks"`` or ``"online"``)."""
    return [name for name, method in METHODS.items() if method.streams == streams]


def make_method(name: str, net: torch.nn.Module, *args: Any, **kwargs: Any) -> ContinualLearner:
    """A fresh learner for method ``name`` on ``net``: :meth:`Method.build` of the registered
    method, with the same arguments.

    :raises ValueError: for a name no method is registered under.
    """
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {list(METHODS)}")
    return METHODS[name].build(net, *args, **kwargs)
