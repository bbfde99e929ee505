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
