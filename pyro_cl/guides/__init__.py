"""Guides: the families a posterior is fitted in, each a part of the learner."""

from pyro_cl.guides.autoguides import guide_family_of
from pyro_cl.guides.family import MEAN_FIELD, GuideFamily, MeanField, supported_families
from pyro_cl.guides.full_covariance import FullCovariance
from pyro_cl.guides.joint_gaussian import (
    GAUSSIAN_FAMILIES,
    BlockCovariance,
    BlockSite,
    JointGaussianFamily,
    JointGaussianGuide,
    draw_joint_sites,
)
from pyro_cl.guides.kronecker import KroneckerFactored
from pyro_cl.guides.low_rank import LowRank
from pyro_cl.guides.mean_field import (
    DEFAULT_INIT_LOG_VARIANCE,
    REINIT_POLICIES,
    MeanFieldGuide,
    task_id_key,
)
from pyro_cl.guides.protocol import Guide

__all__ = [
    "DEFAULT_INIT_LOG_VARIANCE",
    "GAUSSIAN_FAMILIES",
    "MEAN_FIELD",
    "REINIT_POLICIES",
    "BlockCovariance",
    "BlockSite",
    "FullCovariance",
    "Guide",
    "GuideFamily",
    "JointGaussianFamily",
    "JointGaussianGuide",
    "KroneckerFactored",
    "LowRank",
    "MeanField",
    "MeanFieldGuide",
    "draw_joint_sites",
    "guide_family_of",
    "supported_families",
    "task_id_key",
]
