import math

import numpy as np
import pytest

from pyro_cl.metrics import (
    average_accuracy,
    average_accuracy_curve,
    backward_transfer,
    forward_transfer,
)

A = np.array([[0.9, np.nan, np.nan], [0.8, 0.95, np.nan], [0.7, 0.9, 0.85]])


def test_acc_bwt_fwt_by_hand():
    assert math.isclose(average_accuracy(A), (0.7 + 0.9 + 0.85) / 3)
    assert math.isclose(backward_transfer(A), ((0.7 - 0.9) + (0.9 - 0.95)) / 2)
    assert math.isclose(forward_transfer(A, [0.9, 0.9, 0.9]), ((0.95 - 0.9) + (0.85 - 0.9)) / 2)
    np.testing.assert_allclose(average_accuracy_curve(A), [0.9, 0.875, (0.7 + 0.9 + 0.85) / 3])


def test_metrics_reject_bad_matrices():
    with pytest.raises(ValueError, match="square"):
        average_accuracy(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="missing"):
        average_accuracy(np.array([[np.nan, np.nan], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="one scratch accuracy per task"):
        forward_transfer(A, [0.9, 0.9])


def test_expected_calibration_error_against_hand_counts():
    import torch

    from pyro_cl.metrics import expected_calibration_error

    # confidence 0.7 on class 0 for all ten points, seven of them class 0: calibrated
    probabilities = torch.tensor([[0.7, 0.3]]).expand(10, 2)
    labels = torch.tensor([0] * 7 + [1] * 3)
    assert expected_calibration_error(probabilities, labels) == pytest.approx(0.0, abs=1e-6)
    # certain of every answer, half of them right: the gap is 0.5
    certain = torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 1]), 2).float()
    assert expected_calibration_error(certain, torch.tensor([0, 0, 1, 1])) == pytest.approx(0.5)
    # two bins: 0.95 confident and right (gap 0.05), 0.6 confident and wrong (gap 0.6)
    mixed = torch.tensor([[0.95, 0.05], [0.6, 0.4]])
    expected = 0.5 * 0.05 + 0.5 * 0.6
    assert expected_calibration_error(mixed, torch.tensor([0, 1])) == pytest.approx(expected)
