"""Checkpoints: a learner as a file of tensors and plain containers, and back.

A checkpoint holds every part's spec (rebuilt from the registry on load, :mod:`pyro_cl.spec`),
the net's weights, the priors, the guide, every part's state, the bookkeeping, the memory's
points, the prediction posteriors and the random stream, so a loaded learner continues exactly
where the saved one stopped. Files are written atomically and read without unpickling code
(:mod:`pyro_cl.serialization`).
"""

from __future__ import annotations

import os
from typing import TypeVar

import torch

from pyro_cl.infer.config import TrainingConfig
from pyro_cl.infer.data_parallel import is_writer, writer_barrier
from pyro_cl.infer.learner_state import LearnerStores
from pyro_cl.nn.exclusive import MODEL_LOCK
from pyro_cl.points import Points
from pyro_cl.posterior import install_prior, posterior_from_state, posterior_to_state
from pyro_cl.serialization import CorruptFileError, atomic_save, safe_load
from pyro_cl.spec import check_rebuildable, from_spec

__all__ = ["FORMAT", "learner_state", "load_learner", "save_learner"]

#: The format written in every checkpoint (a file of another format is refused).
FORMAT = "pyro_cl.learner/2"

LearnerType = TypeVar("LearnerType", bound=LearnerStores)


def learner_state(learner: LearnerStores) -> dict:
    """Everything needed to continue exactly here: tensors and plain containers only.

    :raises TypeError: if a part (net, likelihood, fitter, transition, memory, callback)
        cannot be rebuilt from its spec; the message says how to register it.
    """
    specs = {role: check_rebuildable(part, role) for role, part in learner.parts().items()}
    net_spec = None
    if hasattr(learner.net, "spec"):
        net_spec = check_rebuildable(learner.net, "net")
    return {
        "format": FORMAT,
        "learner": type(learner).__name__,
        "net": net_spec,
        "net_state": learner.net.state_dict(),
        "likelihood": check_rebuildable(learner.model.likelihood, "likelihood"),
        "parts": {
            "fitter": specs["fitter"],
            "transition": specs["transition"],
            "memory": specs.get("memory"),
            "callbacks": [specs[f"callback {i}"] for i in range(len(learner.callbacks.callbacks))],
        },
        "part_states": learner.part_states(),
        "refit_per_task": learner.refit_per_task,
        "config": learner.config.state(),
        "prior": posterior_to_state(learner.current_prior()),
        "initial_prior": posterior_to_state(learner.initial_prior),
        "trained_sites": list(learner.trained_sites),
        "guide_state": learner.guide.state_dict(),
        "tasks_seen": list(learner.tasks_seen),
        "times": list(learner.times),
        "coreset": None if learner.memory_points is None else learner.memory_points.state(),
        "prediction_posteriors": [
            [key, posterior_to_state(posterior)]
            for key, posterior in learner.prediction_posteriors.items()
        ],
        "seed": learner.seed,
        "rng": learner.random.state(),
    }


def save_learner(learner: LearnerStores, path: str | os.PathLike) -> None:
    """Save the whole learner atomically (see :func:`pyro_cl.serialization.atomic_save`);
    in a data-parallel run rank 0 writes and every rank waits until it has.

    The state is read and written under :data:`~pyro_cl.nn.exclusive.MODEL_LOCK`, which a step
    holds from start to end: a save from another thread waits for a running ``observe`` and
    writes the state before or after it, never half of it.

    :raises TypeError: before writing anything, if a part cannot be rebuilt on load.
    """
    with MODEL_LOCK:
        state = learner_state(learner)  # every rank takes part (its random state)
        if is_writer():  # rank 0 writes
            atomic_save(state, path)
    writer_barrier()


def load_learner(
    cls: type[LearnerType],
    path: str | os.PathLike,
    net: torch.nn.Module | None = None,
    device: str | torch.device | None = None,
) -> LearnerType:
    """Rebuild a learner saved with :meth:`save` and restore the random number generator.

    :param net: a freshly built net of the same architecture; required unless the saved net
        is one of pyro_cl's (rebuilt from its spec).
    """
    state = safe_load(path, map_location=device or "cpu")
    if state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a pyro_cl learner file of format {FORMAT}")
    if state["learner"] != cls.__name__:
        raise TypeError(f"{path} holds a {state['learner']}, not a {cls.__name__}")
    if net is None:
        if state["net"] is None:
            raise ValueError("this learner's net is not a pyro_cl net: pass net=...")
        net = _net_matching_its_weights(state["net"], state["net_state"], path)
    parts = state["parts"]
    learner = cls(
        net,
        from_spec(state["likelihood"], "likelihood"),
        TrainingConfig.from_state(state["config"]),
        device=device,
        fitter=from_spec(parts["fitter"], "fitter"),
        transition=from_spec(parts["transition"], "transition"),
        memory=None if parts["memory"] is None else from_spec(parts["memory"], "memory"),
        callbacks=[from_spec(spec, "callback") for spec in parts["callbacks"]],
        refit_per_task=state["refit_per_task"],
        seed=state["seed"],
    )
    learner.net.load_state_dict(state["net_state"])
    install_prior(learner.net, posterior_from_state(state["prior"], learner.device))
    learner.initial_prior = posterior_from_state(state["initial_prior"], learner.device)
    learner.guide.load_state_dict(state["guide_state"])
    learner.guide.to(learner.device)
    learner.load_part_states(state["part_states"])
    learner.trained_sites = list(state["trained_sites"])
    learner.tasks_seen = list(state["tasks_seen"])
    learner.times = [float(t) for t in state["times"]]
    if state["coreset"] is not None:
        learner.memory_points = Points.from_state(state["coreset"], learner.device)
    learner.prediction_posteriors = {
        int(key): posterior_from_state(posterior, learner.device)
        for key, posterior in state["prediction_posteriors"]
    }
    learner.random.load_state(state["rng"])
    return learner


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
    saved = {name: tuple(t.shape) for name, t in weights.items() if torch.is_tensor(t)}
    if expected != saved:
        mismatch = sorted(
            name for name in expected.keys() | saved.keys() if expected.get(name) != saved.get(name)
        )[0]
        raise CorruptFileError(
            f"{path}: the saved net configuration does not match the saved weights "
            f"({mismatch}: configuration {expected.get(mismatch)}, weights {saved.get(mismatch)})"
        )
    return from_spec(spec, "net")
