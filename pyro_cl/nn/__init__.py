"""Bayesian neural network layers as Pyro modules."""

from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.local_reparam import (
    LocalReparameterizationMessenger,
    local_reparameterization,
)
from pyro_cl.nn.mlp import BayesianMLP

__all__ = [
    "BayesianLinear",
    "BayesianMLP",
    "LocalReparameterizationMessenger",
    "local_reparameterization",
]
