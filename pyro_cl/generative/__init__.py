"""Generative VCL (VCL section 4): continual learning of variational auto-encoders whose decoder
weights carry a posterior from task to task, with task-specific amortised encoders."""

from pyro_cl.generative.encoders import TaskEncoders
from pyro_cl.generative.evaluation import (
    classifier_uncertainty,
    generate,
    importance_log_likelihood,
)
from pyro_cl.generative.model import GenerativeModel

__all__ = [
    "GenerativeModel",
    "TaskEncoders",
    "classifier_uncertainty",
    "generate",
    "importance_log_likelihood",
]
