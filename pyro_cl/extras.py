"""The optional dependencies, imported where they are needed with an error that says what to
install.

The library proper needs torch, Pyro, numpy and tqdm. Plots (matplotlib), the embedded digits and
the two-moons toy (scikit-learn) and downloads of MNIST and CIFAR (torchvision) are the ``app``
extra: ``pip install -e ".[app]"`` from a clone (``make demo`` installs it).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require"]

#: The package that provides each optional module.
PACKAGES = {"matplotlib": "matplotlib", "sklearn": "scikit-learn", "torchvision": "torchvision"}


class MissingExtra(ImportError):
    """An optional dependency is not installed (the message says what to install)."""


def require(module: str, needed_for: str) -> ModuleType:
    """``import module``, or a :class:`MissingExtra` naming what needs it and what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = PACKAGES.get(module.split(".")[0], module.split(".")[0])
        raise MissingExtra(
            f"{needed_for} needs {package}, which is not installed: "
            f'pip install -e ".[app]" in a clone of pyro_cl (or pip install {package})'
        ) from error
