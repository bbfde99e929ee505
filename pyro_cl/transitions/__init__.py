"""Transitions: what happens to a posterior between two time steps before it is the next prior
(identity, no propagation, Bayesian forgetting, Ornstein-Uhlenbeck and Wiener diffusion, H-IBP's
concentration growth), and the combination of several posteriors into one prior. Subclass
:class:`Transition` to add one."""

from pyro_cl.transitions.base import (
    Chain,
    ChildConcentrationGrowth,
    Identity,
    NoPropagation,
    Transition,
    TransitionContext,
    check_prior_families,
    check_real_priors,
    initial_moments,
    map_gaussian_sites,
)
from pyro_cl.transitions.combination import COMBINATIONS, combine_posteriors
from pyro_cl.transitions.diffusion import OrnsteinUhlenbeck, Wiener
from pyro_cl.transitions.forgetting import BayesianForgetting
from pyro_cl.transitions.learned_strength import LearnedStrength

__all__ = [
    "COMBINATIONS",
    "BayesianForgetting",
    "Chain",
    "ChildConcentrationGrowth",
    "Identity",
    "LearnedStrength",
    "NoPropagation",
    "OrnsteinUhlenbeck",
    "Transition",
    "TransitionContext",
    "Wiener",
    "check_prior_families",
    "check_real_priors",
    "combine_posteriors",
    "initial_moments",
    "map_gaussian_sites",
]
