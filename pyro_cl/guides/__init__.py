"""Guides: the families a posterior is fitted in, each a part of the learner."""

from pyro_cl.guides.mean_field import (
    DEFAULT_INIT_LOG_VARIANCE,
    REINIT_POLICIES,
    MeanFieldGuide,
    task_id_key,
)

__all__ = ["DEFAULT_INIT_LOG_VARIANCE", "REINIT_POLICIES", "MeanFieldGuide", "task_id_key"]
