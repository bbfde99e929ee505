"""Continual-learning metrics on the accuracy matrix (thesis of ../papers/vogn..., eq. 64-66),
and the calibration of a classifier's predictive.

``A[i, j]`` is the accuracy on task ``j`` after training on task ``i`` (0-based here); only
``j <= i`` is measured and entries above the diagonal are NaN.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "average_accuracy",
    "backward_transfer",
    "expected_calibration_error",
    "forward_transfer",
    "average_accuracy_curve",
    "sample_sd",
]


def sample_sd(values) -> float:
    """The sample standard deviation (ddof 1) of ``values`` over runs, 0 for a single run: the
    ± of every table (a spread over seeds estimates the population's, so it divides by n - 1)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def expected_calibration_error(
    probabilities: torch.Tensor, y: torch.Tensor, bins: int = 15
) -> float:
    """``ECE = Σ_b (n_b / N) |acc_b - conf_b|`` over ``bins`` equal-width bins of the confidence
    ``max_k p_k`` (Guo et al. 2017, eq. 3): how far the predicted confidence is from the accuracy
    it delivers. ``probabilities`` ``(N, K)``, labels ``y`` ``(N,)``; 0 for no points."""
    if y.numel() == 0:
        return 0.0
    confidence, predicted = probabilities.max(-1)
    correct = (predicted == y).double()
    index = (confidence.double() * bins).ceil().clamp(1, bins).long() - 1  # (b/B, (b+1)/B]
    counts = torch.bincount(index, minlength=bins).double()
    gap = torch.bincount(index, correct - confidence.double(), minlength=bins)
    return float(gap.abs().sum() / max(counts.sum().item(), 1.0))


def _square(accuracy) -> np.ndarray:
    a = np.asarray(accuracy, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"the accuracy matrix must be square and non-empty, got shape {a.shape}")
    if np.isnan(np.tril(a)).any():
        raise ValueError("the accuracy matrix has missing entries on or below the diagonal")
    return a


def average_accuracy(accuracy) -> float:
    """ACC (eq. 64): ``(1/K) Σ_i A[K, i]``, the mean accuracy over all tasks after the last."""
    a = _square(accuracy)
    return float(a[-1].mean())


def average_accuracy_curve(accuracy) -> np.ndarray:
    """Mean accuracy over the tasks seen so far after each task: ``(1/t) Σ_{j<=t} A[t, j]``."""
    a = _square(accuracy)
    return np.array([a[t, : t + 1].mean() for t in range(a.shape[0])])


def backward_transfer(accuracy) -> float:
    """BWT (eq. 65): ``(1/(K-1)) Σ_{i<K} (A[K, i] - A[i, i])``; negative means forgetting."""
    a = _square(accuracy)
    k = a.shape[0]
    if k < 2:
        raise ValueError("backward transfer needs at least two tasks")
    return float(np.mean([a[-1, i] - a[i, i] for i in range(k - 1)]))


def forward_transfer(accuracy, scratch_accuracy) -> float:
    """FWT (eq. 66): ``(1/(K-1)) Σ_{i>=2} (A[i, i] - s_i)``.

    :param scratch_accuracy: ``s_i``, the accuracy on task ``i`` of the same model trained on task
        ``i`` alone from scratch.
    """
    a = _square(accuracy)
    s = np.asarray(scratch_accuracy, dtype=float)
    k = a.shape[0]
    if s.shape != (k,):
        raise ValueError(f"need one scratch accuracy per task ({k}), got shape {s.shape}")
    if k < 2:
        raise ValueError("forward transfer needs at least two tasks")
    return float(np.mean([a[i, i] - s[i] for i in range(1, k)]))


def intransigence(accuracy, scratch_accuracy) -> float:
    """Intransigence (Chaudhry et al. 2018, eq. 9, with a fresh fit of each task alone as the
    reference): ``(1/K) Σ_i (s_i - A[i, i])``, how much less the learner learns of each task
    right after it than the same model trained on that task alone. Positive: it learns less
    (lost plasticity); negative: earlier tasks helped.

    :param scratch_accuracy: ``s_i``, as in :func:`forward_transfer`.
    """
    a = _square(accuracy)
    s = np.asarray(scratch_accuracy, dtype=float)
    if s.shape != (a.shape[0],):
        raise ValueError(f"need one scratch accuracy per task ({a.shape[0]}), got shape {s.shape}")
    return float(np.mean(s - np.diagonal(a)))
