"""A guide family: the part of a learner that says how its posterior is parametrised.

``ContinualLearner(net, guide=family)`` takes a :class:`GuideFamily`. A family does three things
(the learner calls nothing else of it):

* :meth:`GuideFamily.build` makes the guide module for a model — an ordinary Pyro guide, created
  lazily site by site as the model's tasks arrive, that follows the
  :class:`~pyro_cl.guides.protocol.Guide` protocol (:class:`~pyro_cl.guides.MeanFieldGuide`
  and the joint Gaussian guide do);
* the guide reads its fitted posterior as distributions (``guide.posterior(names)``, one
  per site: the site's marginal) and, where it couples sites, as joint draws and the KL of the
  coupled block (``guide.joint_terms(names)``, see :mod:`pyro_cl.guides.joint_gaussian`);
* the handoff, ``guide.hand_off(names)`` after a step's fit: the posterior becomes the next
  prior. A mean-field posterior is handed over as the net's per-site priors (the learner installs
  them; the guide's hand-off does nothing); a family that couples sites keeps their joint prior
  itself and installs only the marginals in the net.

Every other part states the families it works with in ``guide_families`` (default: mean-field
only; ``None``: any family, as the ELBO fitter and the identity transition, which ask nothing of
a family beyond this protocol; a family's subclasses go where it goes,
:meth:`GuideFamily.lineage`), and :meth:`GuideFamily.check_parts` refuses the others by name when
the learner is built: a Gaussian transition's step that a family's covariance form is not closed
under, a memory that refits, a natural-gradient fitter that updates diagonal precisions. A
family whose posterior is one distribution per site (:attr:`GuideFamily.per_site`) keeps no
joint prior for a transition to carry: the learner carries it site by site, so a transition's
``guide_families`` does not restrict it (a fitter's and a memory's still do).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import ClassVar

from pyro_cl.guides.mean_field import MeanFieldGuide
from pyro_cl.guides.protocol import Guide
from pyro_cl.spec import Registrable

__all__ = ["MEAN_FIELD", "GuideFamily", "MeanField", "supported_families"]

#: The name of the mean-field family, which every part supports.
MEAN_FIELD = "mean-field"


def supported_families(part: object) -> tuple[str, ...] | None:
    """The guide families ``part`` states it works with (``guide_families``; mean-field only
    where it states none; ``None``: any)."""
    families = getattr(part, "guide_families", (MEAN_FIELD,))
    return None if families is None else tuple(families)


class GuideFamily(Registrable, kind="guide"):
    """Base class: builds a learner's guide (see the module docstring). Subclass it, give it a
    ``name`` (it then saves and loads like the built-ins) and implement :meth:`build`."""

    #: True when the posterior is one distribution per site (its guide's ``mean_field``): the
    #: net's per-site priors hold all of it, so any transition carries it site by site.
    per_site: ClassVar[bool] = False

    def check_parts(self, parts: object) -> None:
        """Refuse, when the learner is built, parts that do not work with this family: each of
        the fitter, transition and memory states the families it supports in ``guide_families``,
        and the configuration's re-initialisation policy must be one :meth:`check_initialisation`
        takes.

        :param parts: the learner's :class:`~pyro_cl.infer.parts.Parts`.
        :raises ValueError: naming the part and the family.
        """
        for role in ("fitter", "transition", "memory"):
            part = getattr(parts, role)
            if role == "transition" and self.per_site:
                continue  # carried site by site: nothing of the family's own to carry
            families = None if part is None else supported_families(part)
            if families is not None and not set(self.lineage()) & set(families):
                raise ValueError(
                    f"the {role} {type(part).__name__} works with the guide families "
                    f"{', '.join(families)}, not {self.name!r}"
                )
        config = parts.config
        if config is not None:
            initialisation = config.initialisation
            self.check_initialisation(initialisation.between_tasks, initialisation.init_means)

    def lineage(self) -> tuple[str, ...]:
        """This family's name and those of the families it derives from: a part that supports a
        family supports its subclasses (a user's last-layer family built on
        :class:`~pyro_cl.guides.FullCovariance` goes wherever a full covariance does)."""
        return tuple(cls.__dict__["name"] for cls in type(self).__mro__ if "name" in cls.__dict__)

    @abstractmethod
    def build(self, model: Callable, init_log_variance: float, init_loc_std: float) -> Guide:
        """The guide of ``model``, a :class:`~pyro_cl.guides.protocol.Guide` (its amortised local
        guide, if any, included), new sites starting at ``log σ² = init_log_variance`` and means at the prior's plus noise of scale
        ``init_loc_std`` (the learner's :class:`~pyro_cl.infer.config.Initialisation`)."""

    def check_initialisation(self, between_tasks: str, init_means: str) -> None:  # noqa: B027
        """Refuse a re-initialisation policy this family cannot apply (default: any works).

        :raises ValueError: naming the policy.
        """


class MeanField(GuideFamily):
    """``q(θ) = ∏_sites N(μ_site, diag σ²_site)`` (Beta and Gamma sites likewise factorised):
    :class:`~pyro_cl.guides.MeanFieldGuide`, the default and VCL's own family."""

    name = MEAN_FIELD
    per_site = True

    def build(
        self, model: Callable, init_log_variance: float, init_loc_std: float
    ) -> MeanFieldGuide:
        return MeanFieldGuide(
            model,
            init_log_variance=init_log_variance,
            init_loc_std=init_loc_std,
            local_guide=getattr(model, "local_guide", None),
        )
