"""The moving bank (issue 72): a few learners at neighbouring strengths of a ladder, weighed by
their own paths' evidence, the window moved a rung toward an end member that leads."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import Wiener
from pyro_cl.learner.moving_bank import MovingBank
from tests.test_transitions_drift import assert_same_posterior, drift_data, drift_learner


def _twin(transition):
    """A learner whose net starts where every other's does."""
    torch.manual_seed(0)
    return drift_learner(transition)


def _bank(start: float, ratio: float = 10.0, members: int | None = 3, **options) -> MovingBank:
    return MovingBank(
        _twin, start=start, ratio=ratio,
        members=members, time_constant=1.0, **options,
    )  # fmt: skip


def _still_data(steps: int, n: int = 24, seed: int = 0):
    """One boundary at every step: no drift."""
    generator = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(steps):
        x = torch.randn(n, 2, generator=generator)
        data.append((x, (x[:, 0] + 0.5 * x[:, 1] > 0).long()))
    return data


def test_the_members_sit_on_consecutive_rungs_around_the_start():
    bank = _bank(0.01)
    assert bank.strengths == pytest.approx([0.001, 0.01, 0.1])
    assert list(bank.members) == ["wiener 0.001", "wiener 0.01", "wiener 0.1"]
    for strength, member in zip(bank.strengths, bank.members.values(), strict=True):
        assert isinstance(member.transition, Wiener)
        assert member.transition.diffusion == pytest.approx(strength)
    # near an end of the range the window starts inside it
    assert _bank(1e-4).strengths == pytest.approx([1e-4, 1e-3, 1e-2])
    assert _bank(100.0).strengths == pytest.approx([1.0, 10.0, 100.0])
    # by default every rung of the family's range, a decade apart
    whole = MovingBank(_twin, time_constant=1.0)
    assert whole.strengths == pytest.approx([1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0])


def _observe_and_check_the_move(bank: MovingBank, data, time: float) -> int:
    """Eq. 3 after one step: the other end's learner is reused for the leading end's copy, one
    rung further out, with its weight; the window's move (-1, 0 or 1) is returned."""
    bottom, before = bank.bottom, list(bank.members.values())
    bank.observe(data, time=time)
    learners = list(bank.members.values())
    if bank.bottom == bottom:
        assert learners == before
        return 0
    if bank.bottom == bottom + 1:  # the strongest led: the weakest's learner reused on top
        assert learners == [*before[1:], before[0]]
        new, end = -1, -2
    else:  # the weakest led: the strongest's learner reused below it
        assert bank.bottom == bottom - 1
        assert learners == [before[-1], *before[:-1]]
        new, end = 0, 1
    assert_same_posterior(learners[new], learners[end])  # the end member's copy
    assert learners[new].transition.diffusion == pytest.approx(bank.strengths[new])
    assert bank.strengths[new] == pytest.approx(bank.strengths[end] * bank.ratio ** (-1 - 2 * new))
    assert bank.log_weights[new] == bank.log_weights[end]
    assert float(bank.log_weights.exp().sum()) == pytest.approx(1.0)
    return bank.bottom - bottom


def test_the_first_step_ties_twins_and_a_tie_moves_nothing():
    bank = _bank(0.01)  # room to move either way
    bank.observe(drift_data(1, n=24)[0], time=0.0)
    assert bank.log_weights.unique().numel() == 1  # twins score the first step alike
    assert bank.bottom == -1


def test_the_window_climbs_on_a_drifting_stream_and_falls_on_a_still_one():
    rising = _bank(1e-3)
    moves = [
        _observe_and_check_the_move(rising, d, float(t)) for t, d in enumerate(drift_data(8, n=24))
    ]
    assert rising.strength >= 0.1
    assert 1 in moves and -1 not in moves  # the boundary rotates: up, a rung a step
    falling = _bank(10.0)
    moves = [
        _observe_and_check_the_move(falling, d, float(t)) for t, d in enumerate(_still_data(8))
    ]
    assert falling.strength <= 0.1
    assert sum(moves) < 0, moves


def test_a_bank_over_the_whole_range_never_moves():
    bank = _bank(0.1, members=None, low=1e-3, high=10.0)
    for time, data in enumerate(drift_data(4, n=24)):
        assert _observe_and_check_the_move(bank, data, float(time)) == 0
    assert bank.strengths == pytest.approx([1e-3, 1e-2, 0.1, 1.0, 10.0])


def test_the_window_stops_at_the_ladders_ends():
    bank = _bank(10.0, high=100.0)
    for time, data in enumerate(drift_data(6, n=24)):
        bank.observe(data, time=float(time))
    assert max(bank.strengths) <= 100.0 * (1 + 1e-9)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"members": 1}, "two or more members"),
        ({"ratio": 1.0}, "ratio"),
        ({"start": 1e3}, "start"),
        ({"family": "gravity"}, "family must be one of"),
        ({"family": "bayesian_forgetting", "high": 1.0}, "below 1"),
        ({"low": 0.1, "high": 0.2, "start": 0.1, "members": 3}, "do not fit"),
    ],
)
def test_bad_settings_are_refused_before_a_learner_is_built(options, message):
    built = []
    settings = {"start": 0.01, **options}
    with pytest.raises(ValueError, match=message):
        MovingBank(lambda t: built.append(t) or drift_learner(t), **settings)
    assert not built
