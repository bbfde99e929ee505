"""Fitters: how a task's posterior is fitted against the current prior — SVI on the ELBO, the
natural-gradient updates VOGN and IVON, function-space VI at context points, point estimates
with a penalty, and closed-form coordinate ascent. Subclass :class:`Fitter` (or :class:`Penalty`) to add one."""

from pyro_cl.fitters.context_points import (
    ContextPoints,
    CurrentInputs,
    FromMemory,
    GaussianInputs,
    UniformInputs,
)
from pyro_cl.fitters.coordinate_ascent import CoordinateAscent
from pyro_cl.fitters.elbo_fitter import ELBOFitter
from pyro_cl.fitters.fitter import Fitter
from pyro_cl.fitters.function_space import FunctionSpaceFitter
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.penalty import Penalty
from pyro_cl.fitters.point_estimate import PointEstimateFitter
from pyro_cl.fitters.vogn import VOGN

__all__ = [
    "IVON",
    "VOGN",
    "ContextPoints",
    "CoordinateAscent",
    "CurrentInputs",
    "ELBOFitter",
    "Fitter",
    "FromMemory",
    "FunctionSpaceFitter",
    "GaussianInputs",
    "Penalty",
    "PointEstimateFitter",
    "UniformInputs",
]
