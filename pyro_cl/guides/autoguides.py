"""Pyro's autoguides as guide families: ``guide=AutoNormal`` where the handoff is defined.

A Pyro user chooses a posterior by naming an autoguide. A continual learner needs one thing an
autoguide does not have: the handoff, how the fitted posterior becomes the next step's prior
(:mod:`pyro_cl.guides.family`). For the Gaussian autoguides that handoff is the Gaussian one our
families define, so the learner accepts them by family and fits the same variational family with
its own guide::

    ContinualLearner(net, guide=AutoNormal)                        # = MeanField()
    ContinualLearner(net, guide=AutoDiagonalNormal)                # = MeanField()
    ContinualLearner(net, guide=AutoMultivariateNormal)            # = FullCovariance()
    ContinualLearner(net, guide=partial(AutoLowRankMultivariateNormal, rank=4))   # = LowRank(4)

The class is passed, not an instance (the learner builds the guide for its own model), with
``rank`` as the only argument carried over; initial scales are the learner's
(``init_log_variance``), and ``AutoLowRankMultivariateNormal`` without a rank takes
:class:`~pyro_cl.guides.LowRank`'s default of 10, not Pyro's ``√D``. The others are refused by
name: ``AutoDelta`` is a point estimate (a :class:`~pyro_cl.fitters.PointEstimateFitter`), and a
flow, a Laplace approximation or a list of guides has no Gaussian handoff here.
"""

from __future__ import annotations

import functools

from pyro.infer import autoguide

from pyro_cl.guides.family import GuideFamily, MeanField
from pyro_cl.guides.full_covariance import FullCovariance
from pyro_cl.guides.low_rank import LowRank

__all__ = ["guide_family_of"]

#: Pyro's Gaussian autoguides and the family each one is.
FAMILY_OF_AUTOGUIDE = {
    autoguide.AutoNormal: MeanField,
    autoguide.AutoDiagonalNormal: MeanField,
    autoguide.AutoMultivariateNormal: FullCovariance,
    autoguide.AutoLowRankMultivariateNormal: LowRank,
}


def guide_family_of(guide: object) -> GuideFamily:
    """The guide family ``guide`` names: a :class:`GuideFamily` itself, or one of Pyro's
    Gaussian autoguide classes (module docstring); ``None`` gives the mean-field default.

    :raises TypeError: for anything else, naming why.
    """
    if guide is None:
        return MeanField()
    if isinstance(guide, GuideFamily):
        return guide
    options = {}
    if isinstance(guide, functools.partial):
        if guide.args:
            raise TypeError(f"give {guide.func.__name__}'s arguments by keyword, got {guide!r}")
        guide, options = guide.func, dict(guide.keywords)
    if isinstance(guide, autoguide.AutoGuide):
        raise TypeError(
            f"guide takes the class {type(guide).__name__}, not a guide built for a model: the "
            "learner builds the guide for its own model"
        )
    if not (isinstance(guide, type) and issubclass(guide, autoguide.AutoGuide)):
        raise TypeError(
            f"guide must be a GuideFamily (MeanField(), FullCovariance(), LowRank(rank)) or a "
            f"Gaussian Pyro autoguide class, got {guide!r}"
        )
    if issubclass(guide, autoguide.AutoDelta):
        raise TypeError(
            "AutoDelta is a point estimate, not a posterior to hand on: use "
            "fitter=PointEstimateFitter() (or a penalty's) with the default guide"
        )
    family = FAMILY_OF_AUTOGUIDE.get(guide)
    if family is None:
        raise TypeError(
            f"{guide.__name__} has no Gaussian handoff to the next prior here; the autoguides "
            f"accepted are {', '.join(sorted(g.__name__ for g in FAMILY_OF_AUTOGUIDE))}"
        )
    unknown = sorted(set(options) - ({"rank"} if family is LowRank else set()))
    if unknown:
        raise TypeError(
            f"{guide.__name__}'s {', '.join(unknown)} is not carried over (the learner's "
            "initialisation settings set initial scales); only a low-rank guide's rank is"
        )
    if family is LowRank and options.get("rank") is not None:
        return LowRank(options["rank"])
    return family()
