"""The judge of generated images: a small deterministic classifier of every class, trained once
on the full training set (VCL section 6.2's "classifier uncertainty" needs one)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn
from tqdm import tqdm  # plain bars: tqdm.auto warns in notebooks without ipywidgets

from pyro_cl.infer.training import make_adam
from pyro_cl.serialization import CorruptFileError, atomic_save, safe_load

__all__ = [
    "classifier_accuracy",
    "load_classifier",
    "make_classifier",
    "save_classifier",
    "train_classifier",
]

_FORMAT = "pyro_cl.classifier/1"


def make_classifier(in_features: int, num_classes: int, hidden_sizes: Sequence[int]) -> nn.Module:
    """An MLP ``in → hidden... → classes`` with ReLUs."""
    sizes = [in_features, *hidden_sizes]
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], num_classes))
    net = nn.Sequential(*layers)
    net.config = {
        "in_features": in_features,
        "num_classes": num_classes,
        "hidden_sizes": list(hidden_sizes),
    }
    return net


def train_classifier(
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    hidden_sizes: Sequence[int] = (256, 256),
    epochs: int = 10,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> nn.Module:
    """A classifier of ``x`` into ``num_classes`` classes trained with Adam on cross-entropy,
    in evaluation mode on ``device``. The seed fixes its initialisation and batches."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = make_classifier(x.shape[1], num_classes, hidden_sizes)
    net = net.to(device)
    x, y = x.to(device), y.to(device)
    optimiser = make_adam(list(net.parameters()), learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    for _ in tqdm(
        range(epochs), desc="classifier", disable=None if progress else True, leave=False
    ):
        order = torch.randperm(x.shape[0], generator=generator).to(device)
        for start in range(0, x.shape[0], batch_size):
            rows = order[start : start + batch_size]
            optimiser.zero_grad(set_to_none=True)
            loss_fn(net(x[rows]), y[rows]).backward()
            optimiser.step()
    return net.eval()


@torch.no_grad()
def classifier_accuracy(classifier: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of ``x`` classified as ``y``."""
    return (classifier(x).argmax(-1) == y).float().mean().item()


def save_classifier(classifier: nn.Module, path: str | os.PathLike, accuracy: float) -> None:
    """Write the classifier's configuration, weights and test accuracy (tensors and plain
    containers only, atomically)."""
    state = {
        "format": _FORMAT,
        "config": classifier.config,
        "weights": classifier.state_dict(),
        "accuracy": float(accuracy),
    }
    atomic_save(state, path)


def load_classifier(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[nn.Module, float]:
    """A classifier written by :func:`save_classifier` and its test accuracy.

    :raises CorruptFileError: for a file that is not one, or whose weights do not match its
        configuration.
    """
    state = safe_load(path, map_location=device)
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise CorruptFileError(f"{path} is not a pyro_cl classifier file ({_FORMAT})")
    config = state["config"]
    net = make_classifier(config["in_features"], config["num_classes"], config["hidden_sizes"])
    try:
        net.load_state_dict(state["weights"])
    except RuntimeError as error:
        raise CorruptFileError(f"{path}: the weights do not match the configuration") from error
    return net.to(device).eval(), float(state["accuracy"])
