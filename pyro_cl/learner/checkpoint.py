"""Checkpoints: a learner as a file of tensors and plain containers, and back.

A checkpoint holds what builds the learner — every part's spec (rebuilt from the registry on load,
:mod:`pyro_cl.spec`), the training configuration, the seed, the net's parameters and the initial
prior — and what its steps changed: the :class:`~pyro_cl.learner.state.LearnerState` (the guide,
the priors and buffers, every part's state, the bookkeeping, the memory's points, the prediction
posteriors, the random streams), the same value a step's transaction restores. So a loaded
learner continues exactly where the saved one stopped. Files are written atomically and read
without unpickling code (:mod:`pyro_cl.serialization`). Files of the earlier format
(``pyro_cl.learner/2``, which listed the state's stores one by one) still load.
"""

from __future__ import annotations

import copy
import os
from typing import ClassVar, TypeVar

import torch

from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.data_parallel import is_writer, writer_barrier
from pyro_cl.learner.state import LearnerState, LearnerStores, transaction
from pyro_cl.likelihoods import CategoricalLikelihood
from pyro_cl.nn.exclusive import MODEL_LOCK
from pyro_cl.posterior import distribution_parameters, posterior_from_state, posterior_to_state
from pyro_cl.serialization import CorruptFileError, atomic_save, check_key, safe_load
from pyro_cl.spec import check_rebuildable, from_spec, tensors_to

__all__ = [
    "FORMAT",
    "CheckpointMethods",
    "check_meaning",
    "learner_state",
    "net_structure",
    "load_learner",
    "restore_learner",
    "save_learner",
]

#: The format written in every checkpoint (a file of another format is refused).
FORMAT = "pyro_cl.learner/3"
#: Earlier formats that still load.
EARLIER_FORMATS = ("pyro_cl.learner/2",)

LearnerType = TypeVar("LearnerType", bound=LearnerStores)


def _built_from(learner: LearnerStores) -> dict:
    """How ``learner`` was built: its class and the specs of its net, likelihood and parts.

    :raises TypeError: if a part (net, likelihood, fitter, transition, memory, callback)
        cannot be rebuilt from its spec; the message says how to register it.
    """
    specs = {role: check_rebuildable(part, role) for role, part in learner.parts().items()}
    net_spec = None
    if hasattr(learner.net, "spec"):
        net_spec = check_rebuildable(learner.net, "net")
    return {
        "learner": type(learner).__name__,
        "net": net_spec,
        "likelihood": check_rebuildable(learner.model.likelihood, "likelihood"),
        "parts": {
            "guide": specs["guide"],
            "fitter": specs["fitter"],
            "transition": specs["transition"],
            "memory": specs.get("memory"),
            "callbacks": [specs[f"callback {i}"] for i in range(len(learner.callbacks.callbacks))],
        },
    }


def net_structure(net: torch.nn.Module) -> list[str]:
    """What a net is beyond its weights' shapes: its class and every module's class by path
    (``"body.1: ReLU"``), compared when a file is loaded into a net the user built, so a ReLU
    net's posterior is not read into a tanh one."""
    return [
        f"{path or '<net>'}: {_class_name(type(module))}" for path, module in net.named_modules()
    ]


def _class_name(cls: type) -> str:
    # make_bayesian's nets are PyroModule[UserNet], a class Pyro makes: the user's tells them apart
    own = next((c for c in cls.__mro__ if c.__module__ != "pyro.nn.module"), cls)
    return f"{own.__module__}.{own.__qualname__}"


def learner_state(learner: LearnerStores) -> dict:
    """Everything needed to continue exactly here: tensors and plain containers only.

    :raises TypeError: if a part (net, likelihood, fitter, transition, memory, callback)
        cannot be rebuilt from its spec; the message says how to register it.
    """
    return {
        "format": FORMAT,
        **_built_from(learner),
        "net_structure": net_structure(learner.net),
        "net_parameters": {name: p.detach() for name, p in learner.net.named_parameters()},
        "refit_per_task": learner.refit_per_task,
        "config": learner.config.state(),
        "initial_prior": posterior_to_state(learner.initial_prior),
        "seed": learner.seed,
        "state": LearnerState.of(learner).to_state(),
    }


def save_learner(learner: LearnerStores, path: str | os.PathLike, key: bytes | None = None) -> None:
    """Save the whole learner atomically (see :func:`pyro_cl.serialization.atomic_save`);
    in a data-parallel run rank 0 writes and every rank waits until it has.

    The state is read and written under :data:`~pyro_cl.nn.exclusive.MODEL_LOCK`, which a step
    holds from start to end: a save from another thread waits for a running ``observe`` and
    writes the state before or after it, never half of it.

    :param key: sign the file with an HMAC under this secret key, for files that will travel
        through places you do not trust (see :mod:`pyro_cl.serialization`).
    :raises TypeError: before writing anything, if a part cannot be rebuilt on load.
    :raises ValueError: before writing anything, for a state the load would refuse
        (:func:`check_meaning`): a file that cannot load is never written.
    """
    with MODEL_LOCK:
        check_meaning(learner)
        state = learner_state(learner)  # every rank takes part (its random state)
        if is_writer():  # rank 0 writes
            atomic_save(state, path, key)
    writer_barrier()


def load_learner(
    cls: type[LearnerType],
    path: str | os.PathLike,
    net: torch.nn.Module | None = None,
    device: str | torch.device | None = None,
    key: bytes | None = None,
) -> LearnerType:
    """Rebuild a learner saved with :meth:`save` and restore its random streams, after checking
    the file's integrity (digest, or signature with ``key``) and then its meaning
    (:func:`check_meaning`).

    :param net: a freshly built net of the same architecture; required unless the saved net
        is one of pyro_cl's (rebuilt from its spec).
    :raises ValueError: naming the file, for a file that is corrupt, edited or meaningless.
    :raises TypeError: for a ``key`` that is not bytes (a mistake of the call, not of the file).
    """
    if key is not None:
        check_key(key)
    try:
        learner = _load(cls, path, net, device, key)
        check_meaning(learner)
    except CorruptFileError:
        raise
    except (ValueError, TypeError, KeyError) as error:
        text = " ".join(str(error).split())
        raise CorruptFileError(text if str(path) in text else f"{path}: {text}") from error
    return learner


def _load(cls, path, net, device, key):
    state = safe_load(path, map_location=device or "cpu", key=key)
    if state.get("format") not in (FORMAT, *EARLIER_FORMATS):
        raise ValueError(f"{path} is not a pyro_cl learner file of format {FORMAT}")
    saved = cls.class_named(state["learner"])
    if saved is None:
        raise TypeError(f"{path} holds a {state['learner']}, not a {cls.__name__}")
    cls = saved
    weights = _net_weights(state)
    if net is None:
        if state["net"] is None:
            raise ValueError("this learner's net is not a pyro_cl net: pass net=...")
        net = _net_matching_its_weights(state["net"], weights, path)
    else:
        _check_given_net(net, state, weights)
    parts = state["parts"]
    learner = cls(
        net,
        from_spec(state["likelihood"], "likelihood"),
        TrainingConfig.from_state(state["config"]),
        device=device,
        fitter=from_spec(parts["fitter"], "fitter"),
        transition=from_spec(parts["transition"], "transition"),
        memory=None if parts["memory"] is None else from_spec(parts["memory"], "memory"),
        guide=from_spec(parts["guide"], "guide") if parts.get("guide") else None,
        callbacks=[from_spec(spec, "callback") for spec in parts["callbacks"]],
        refit_per_task=state["refit_per_task"],
        seed=state["seed"],
    )
    if state["format"] == "pyro_cl.learner/2":
        state["state"] = _state_of_format_2(state, learner)
    _put_state(learner, state)
    return learner


def restore_learner(learner: LearnerStores, state: dict) -> None:
    """Put ``state`` (what :func:`learner_state` returned, e.g. read back from a file) into
    ``learner``, a learner built the same way: the same class, net, likelihood and parts. A run
    that stopped resumes in the objects it was built with, where :func:`load_learner` builds new
    ones.

    :raises ValueError: naming what differs between the saved learner and ``learner``, or what
        makes no sense in the restored state (:func:`check_meaning`); on either, ``learner`` is
        left as it was.
    """
    if state.get("format") != FORMAT:
        raise ValueError(f"not a learner state of format {FORMAT}: {state.get('format')!r}")
    built = _built_from(learner)  # only what is compared, not the posterior's tensors
    for field in built:
        if state.get(field) != built[field]:
            raise ValueError(
                f"the saved learner differs from this one in its {field}: {state.get(field)!r} "
                f"against {built[field]!r}"
            )
    changed = _changed_settings(TrainingConfig.from_state(state["config"]), learner.config)
    if changed or state.get("seed") != learner.seed:
        if state.get("seed") != learner.seed:
            changed.append(f"seed {state.get('seed')!r} → {learner.seed!r}")
        raise ValueError(
            "the saved run was trained with other settings: " + ", ".join(changed) + " (resume "
            "with the settings it was started with, or start again in another folder)"
        )
    initial_prior = learner.initial_prior  # the one store a step's transaction leaves alone
    try:
        with transaction(learner):
            _put_state(learner, state)
            check_meaning(learner)
    except BaseException:
        learner.initial_prior = initial_prior
        raise


def _check_given_net(net: torch.nn.Module, state: dict, weights: dict) -> None:
    """Refuse a net given to ``load`` that is not the one saved: another spec (a pyro_cl net of
    other settings), other modules (another class or activation), other weights' names or shapes.

    :raises ValueError: naming the first difference."""
    if not isinstance(net, torch.nn.Module):
        raise TypeError(f"net must be a torch.nn.Module, got {type(net).__name__}")
    spec = getattr(net, "spec", None)
    if state["net"] is not None and callable(spec) and spec() != state["net"]:
        raise ValueError(
            f"the file holds a net built as {state['net']}, and the net given is built as "
            f"{spec()}: build the net as it was saved, or load without net="
        )
    saved = state.get("net_structure")  # files before this check do not hold it
    given = net_structure(net)
    if saved is not None and saved != given:
        first = next((a, b) for a, b in zip([*saved, None], [*given, None], strict=False) if a != b)
        raise ValueError(
            f"the net given is not the one saved: the file has {first[0]!r} where the net has "
            f"{first[1]!r}"
        )
    expected = {name: tuple(t.shape) for name, t in _loadable(net, weights).items()}
    held = {name: tuple(t.shape) for name, t in net.state_dict().items()}
    if expected != held:
        name = sorted(n for n in expected.keys() | held.keys() if expected.get(n) != held.get(n))[0]
        raise ValueError(
            f"the net given does not fit the saved weights ({name}: saved {expected.get(name)}, "
            f"the net's {held.get(name)}): build the net as it was saved"
        )


def _loadable(net: torch.nn.Module, weights: dict) -> dict:
    """``weights`` without the net's non-persistent buffers (kept in the learner's state, not in
    a ``state_dict``)."""
    persistent = set(net.state_dict())
    transient = {name for name, _ in net.named_buffers()} - persistent
    return {name: value for name, value in weights.items() if name not in transient}


def _put_state(learner: LearnerStores, state: dict) -> None:
    """A checkpoint's net weights, initial prior and :class:`LearnerState` into ``learner``."""
    learner.net.load_state_dict(_loadable(learner.net, _net_weights(state)))
    learner.initial_prior = posterior_from_state(state["initial_prior"], learner.device)
    LearnerState.from_state(state["state"], learner.device).restore_into(learner)


def _changed_settings(saved: TrainingConfig, current: TrainingConfig) -> list[str]:
    """Every training setting that differs (the display aside), as ``name saved → current``."""
    old, new = saved.flat(), current.flat()
    return [
        f"{name} {old[name]!r} → {new[name]!r}"
        for name in old
        if name != "progress" and old[name] != new[name]
    ]


def _net_weights(state: dict) -> dict:
    """The net's ``state_dict`` the file holds: its parameters and its buffers."""
    if state["format"] == "pyro_cl.learner/2":
        return state["net_state"]
    return {**state["net_parameters"], **state["state"]["buffers"]}


def _state_of_format_2(state: dict, learner: LearnerStores) -> dict:
    """A format-2 file's stores, listed one by one there, as a :class:`LearnerState`'s state
    (the priors of its trained sites; the buffers from its net's weights)."""
    buffers = {name: state["net_state"][name] for name, _ in learner.net.named_buffers()}
    return {
        "guide": state["guide_state"],
        "priors": state["prior"],
        "buffers": buffers,
        "parts": state["part_states"],
        "trained_sites": state["trained_sites"],
        "tasks_seen": state["tasks_seen"],
        "times": state["times"],
        "memory_points": state["coreset"],
        "prediction_posteriors": state["prediction_posteriors"],
        "random": state["rng"],
        # files saved before prediction had a stream of its own keep the fresh one
        "prediction_random": state.get("prediction_rng", learner.prediction_random.state()),
    }


def check_meaning(learner: LearnerStores) -> None:
    """Refuse a learner whose state makes no sense (a file edited and re-digested, or written by
    a bug): non-finite guide parameters or posteriors, non-positive scales, times that are not
    finite and increasing, memory points of tasks never seen or more than the memory holds.

    :raises ValueError: naming the first thing wrong.
    """
    for name, value in learner.guide.state_dict().items():
        if torch.is_tensor(value) and value.is_floating_point() and not value.isfinite().all():
            raise ValueError(f"the guide's {name} is not finite")
    for name, value in learner.net.named_parameters():
        if not value.isfinite().all():
            raise ValueError(f"the net's parameter {name} is not finite")
    bound = learner.config.divergence.parameter_bound
    for name, value in learner.guide.locs().items():
        if bound is not None and value.detach().abs().max() > bound:
            raise ValueError(
                f"the guide's mean of {name} leaves [-{bound:g}, {bound:g}], which no fit "
                "keeps (the divergence test's parameter_bound)"
            )
    posteriors = {"prior": learner.current_prior()}
    for key, posterior in learner.prediction_posteriors.items():
        posteriors[f"prediction posterior {key}"] = posterior
    for what, posterior in posteriors.items():
        for name, distribution in posterior.items():
            for parameter, value in distribution_parameters(distribution).items():
                if not torch.is_tensor(value) or not value.is_floating_point():
                    continue
                if not value.isfinite().all():
                    raise ValueError(f"the {what}'s {name} has a non-finite {parameter}")
                if parameter in _POSITIVE and not (value > 0).all():
                    raise ValueError(f"the {what}'s {name} has a non-positive {parameter}")
    times = torch.tensor(learner.times, dtype=torch.float64)
    if len(learner.times) != len(learner.tasks_seen):
        raise ValueError("the numbers of times and of tasks seen differ")
    if not times.isfinite().all() or (times.diff() <= 0).any():
        raise ValueError(f"the steps' times must be finite and increasing, got {learner.times}")
    points = learner.memory_points
    if points is not None:
        unseen = sorted(set(points.tasks()) - set(learner.tasks_seen))
        if unseen:
            raise ValueError(f"the memory holds points of tasks never observed: {unseen}")
        if not points.times.isfinite().all() or not points.x.isfinite().all():
            raise ValueError("the memory's points or their times are not finite")
        classes = getattr(learner.net, "out_features", None)
        categorical = isinstance(learner.model.likelihood, CategoricalLikelihood)
        if categorical and classes is not None and len(points):
            if points.y.min() < 0 or points.y.max() >= classes:
                raise ValueError(
                    f"the memory holds labels outside its heads' {classes} classes "
                    f"({int(points.y.min())}..{int(points.y.max())})"
                )
        learner.memory.check_holds(points)


#: Distribution parameters that must be positive (scales, concentrations, rates).
_POSITIVE = ("scale", "concentration1", "concentration0", "concentration", "rate")


def _net_matching_its_weights(spec: dict, weights: dict, path) -> torch.nn.Module:
    """The net ``spec`` describes, after checking (on the meta device, which allocates nothing)
    that it has exactly the saved weights' names and shapes: a file whose configuration was
    edited, e.g. to a hidden layer of 4e8 units, is refused before anything large is built.

    :raises CorruptFileError: naming the file and the first mismatch.
    """
    torch_distribution = torch.distributions.Distribution
    validate = torch_distribution._validate_args
    torch_distribution.set_default_validate_args(False)  # meta tensors hold no values to check
    try:
        with torch.device("meta"):
            skeleton = from_spec(spec, "net")
    finally:
        torch_distribution.set_default_validate_args(validate)
    expected = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    saved = {
        name: tuple(t.shape)
        for name, t in _loadable(skeleton, weights).items()
        if torch.is_tensor(t)
    }
    if expected != saved:
        mismatch = sorted(
            name for name in expected.keys() | saved.keys() if expected.get(name) != saved.get(name)
        )[0]
        raise CorruptFileError(
            f"{path}: the saved net configuration does not match the saved weights "
            f"({mismatch}: configuration {expected.get(mismatch)}, weights {saved.get(mismatch)})"
        )
    return from_spec(spec, "net")


class CheckpointMethods:
    """A :class:`~pyro_cl.ContinualLearner`'s parts, state and files (mixed into the learner,
    whose loop is its own file)."""

    #: Every learner class by the name a checkpoint records (:meth:`class_named`).
    _classes: ClassVar[dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        CheckpointMethods._classes[cls.__name__] = cls

    @classmethod
    def class_named(cls, name: str) -> type | None:
        """The learner class of this one's family called ``name`` (itself or an imported
        subclass; ``None`` for any other): what ``load`` rebuilds a checkpoint as, so that
        ``ContinualLearner.load`` reads back a ``VCL``."""
        found = cls if name == cls.__name__ else CheckpointMethods._classes.get(name)
        return found if found is not None and issubclass(found, cls) else None

    def parts(self) -> dict[str, object]:
        """Every part by role: guide family, fitter, transition, memory (if any), callbacks."""
        parts = {"guide": self.guide_family, "fitter": self.fitter, "transition": self.transition}
        if self.memory is not None:
            parts["memory"] = self.memory
        for i, callback in enumerate(self.callbacks):
            parts[f"callback {i}"] = callback
        return parts

    def part_states(self) -> dict:
        """Every part's state (fitter, transition, memory, callbacks), by role."""
        return {role: part.state_dict() for role, part in self.parts().items()}

    def load_part_states(self, states: dict) -> None:
        """Restore what :meth:`part_states` returned."""
        for role, part in self.parts().items():
            part.load_state_dict(tensors_to(states.get(role, {}), self.device))

    def state(self) -> dict:
        """Everything needed to continue exactly here, as tensors and plain containers (see
        :func:`pyro_cl.learner.checkpoint.learner_state`): a copy, read while no step runs (a
        call from another thread waits for a running ``observe``).

        :raises TypeError: if a part cannot be rebuilt from its spec; the message says how to
            register it.
        """
        with MODEL_LOCK:
            return copy.deepcopy(learner_state(self))

    #: ``learner.save(path, key=None)``: :func:`save_learner`.
    save = save_learner
    #: ``Learner.load(path, net=None, device=None, key=None)``: :func:`load_learner`, as ``cls``.
    load = classmethod(load_learner)
