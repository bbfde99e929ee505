"""Generative VCL (VCL section 4): continual learning of variational auto-encoders whose decoder
weights carry a posterior from task to task, with task-specific amortised encoders; and generated
replay, a classifier's memory drawn from such a model."""

from pyro_cl.generative.encoders import TaskEncoders
from pyro_cl.generative.evaluation import (
    classifier_uncertainty,
    generate,
    importance_log_likelihood,
)
from pyro_cl.generative.model import GenerativeModel
from pyro_cl.generative.replay import GeneratedReplay

__all__ = [
    "GeneratedReplay",
    "GenerativeModel",
    "TaskEncoders",
    "classifier_uncertainty",
    "generate",
    "importance_log_likelihood",
]
