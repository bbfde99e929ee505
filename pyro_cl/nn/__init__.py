"""Bayesian neural network layers as Pyro modules."""

from pyro_cl.nn.cnn import BayesianCNN
from pyro_cl.nn.conv import BayesianConv2d
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.local_reparam import (
    LocalReparameterizationMessenger,
    local_reparameterization,
)
from pyro_cl.nn.mlp import BayesianMLP

__all__ = [
    "BayesianCNN",
    "BayesianConv2d",
    "BayesianLinear",
    "BayesianMLP",
    "LocalReparameterizationMessenger",
    "local_reparameterization",
]
