"""Coreset selection: exact farthest-first order, no repeats, sizes, and the C_t update."""

import pytest
import torch

from pyro_cl.memory import (
    KCenterCoreset,
    Memory,
    RandomCoreset,
    farthest_first,
)
from pyro_cl.points import Points
from pyro_cl.spec import from_spec


def naive_farthest_first(x, k, first=0):
    """Gonzalez (1985) written as plainly as possible: Python loops, exact distances."""
    chosen = [first]
    while len(chosen) < k:
        best, best_distance = None, -1.0
        for i in range(len(x)):
            if i in chosen:
                continue
            distance = min(float(((x[i] - x[c]) ** 2).sum()) for c in chosen)
            if distance > best_distance:
                best, best_distance = i, distance
        chosen.append(best)
    return chosen


def test_kcenter_order_on_hand_made_points():
    # On a line at 0, 1, 10, 4, 7: from 0 the farthest is 10; then 4 (4 from 0, 6 from 10);
    # then 7 (3 from 4 and 10); then 1.
    x = torch.tensor([[0.0], [1.0], [10.0], [4.0], [7.0]])
    assert farthest_first(x, 5).tolist() == [0, 2, 3, 4, 1]
    assert farthest_first(x, 3, first=2).tolist() == [2, 0, 3]
    # A 2D square with its centre: corners first (opposite corner, then the two others).
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]])
    assert farthest_first(square, 5).tolist() == [0, 3, 1, 2, 4]


def test_kcenter_matches_the_naive_algorithm():
    x = torch.randn(60, 5, generator=torch.Generator().manual_seed(0))
    assert farthest_first(x, 15, first=4).tolist() == naive_farthest_first(x, 15, first=4)


def test_kcenter_never_repeats_a_point_even_among_duplicates():
    x = torch.cat([torch.zeros(5, 3), torch.ones(3, 3)])
    chosen = farthest_first(x, 8)
    assert sorted(chosen.tolist()) == list(range(8))


@pytest.mark.parametrize("selector", [RandomCoreset(7), KCenterCoreset(7)])
def test_selection_respects_k_and_never_repeats(selector):
    torch.manual_seed(0)
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    previous = Points.of_task(torch.randn(5, 4), torch.zeros(5, dtype=torch.long), task_id=0)
    update = selector.update(previous, Points.of_task(x, y, 1))
    chosen = update.points.select(update.points.task_ids == 1)
    assert len(chosen) == 7 and len(update.points) == 12
    assert torch.unique(chosen.x, dim=0).shape[0] == 7
    # C_{t-1} is kept whole and first; the remaining indices are exactly D_t minus the chosen.
    torch.testing.assert_close(update.points.x[:5], previous.x)
    assert update.points.task_ids.tolist() == [0] * 5 + [1] * 7
    assert len(update.dropped) == 0
    remaining = x[update.remaining]
    assert remaining.shape[0] == 43
    together = torch.cat([remaining, chosen.x])
    assert torch.unique(together, dim=0).shape[0] == 50


def test_random_selection_is_reproducible_from_the_seed():
    x, y = torch.randn(100, 2), torch.zeros(100, dtype=torch.long)
    torch.manual_seed(3)
    a = RandomCoreset(10).select(Points.of_task(x, y, 0), 10, None)
    torch.manual_seed(3)
    b = RandomCoreset(10).select(Points.of_task(x, y, 0), 10, None)
    assert a.tolist() == b.tolist()


def test_bad_sizes_have_clear_errors():
    with pytest.raises(ValueError, match="positive integer"):
        RandomCoreset(0)
    with pytest.raises(ValueError, match="positive integer"):
        KCenterCoreset(-3)
    x, y = torch.randn(4, 2), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="larger than task 2, which has 4 points"):
        RandomCoreset(5).update(None, Points.of_task(x, y, 2))
    # K equal to the task's size is allowed: everything goes into the coreset.
    update = KCenterCoreset(4).update(None, Points.of_task(x, y, 0))
    assert len(update.points) == 4 and update.remaining.numel() == 0


def test_a_custom_selector_that_repeats_points_is_refused():
    class Repeating(Memory):
        def select(self, candidates, size, view):
            return torch.zeros(size, dtype=torch.long)

    x, y = torch.randn(10, 2), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match="picked a point twice"):
        Repeating(3).update(None, Points.of_task(x, y, 0))


def test_selectors_round_trip_through_their_spec():
    selector = from_spec(KCenterCoreset(12, first="random").spec())
    assert isinstance(selector, KCenterCoreset) and selector.size == 12
    assert selector.first == "random"
    with pytest.raises(ValueError, match="unknown memory 'mine'"):
        from_spec({"kind": "memory", "name": "mine", "size": 3})


def test_random_selection_is_uniform():
    """Every point of a task is chosen with probability ``K/N``: over 2,000 seeded draws of 10 of
    50 points the counts pass a χ² test at a false-alarm rate of 10⁻⁴ (χ²₄₉ quantile 94.6, from
    ``scipy.stats.chi2.ppf(1 - 1e-4, 49)``), and a selection that favours some points (the first
    K, say) fails it by orders of magnitude."""
    x, y = torch.randn(50, 2), torch.zeros(50, dtype=torch.long)
    points = Points.of_task(x, y, 0)
    counts = torch.zeros(50)
    for seed in range(2000):
        torch.manual_seed(seed)
        counts[RandomCoreset(10).select(points, 10, None)] += 1
    expected = 2000 * 10 / 50
    statistic = ((counts - expected).square() / (expected * (1 - 10 / 50))).sum()
    assert statistic < 94.6, statistic
