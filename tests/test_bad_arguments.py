"""Arguments are checked where they are given (issue 70): generated bad values at the public entry
points end in the library's own ``ValueError``/``TypeError`` naming the argument, and leave the
learner unchanged — never a torch or Pyro traceback, never a hang."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyro_cl import VCL
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data

SMALL = dict(epochs=1, batch_size=32, num_particles=1, num_predictive_samples=2, progress=False)

#: Values no count accepts: zero and below, fractions, non-finite numbers, booleans, text.
BAD_COUNTS = st.one_of(
    st.integers(max_value=0),
    st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda v: not (math.isfinite(v) and v == int(v) and v >= 1)
    ),
    st.booleans(),
    st.text(max_size=3),
    st.just([1]),
)
#: Values no positive rate accepts.
BAD_RATES = st.one_of(
    st.floats(max_value=0.0),
    st.just(math.nan),
    st.just(math.inf),
    st.booleans(),
    st.text(max_size=3),
)
COUNT_SETTINGS = ["batch_size", "num_particles", "num_predictive_samples"]
#: Counts of which 0 means none.
OPTIONAL_COUNTS = ["epochs", "first_epochs", "ml_init_epochs", "refit_epochs"]


@pytest.fixture(scope="module")
def trained():
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    learner.observe(two_class_data(64))
    return learner


def snapshot(learner) -> dict[str, torch.Tensor]:
    values = {k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)}
    values.update({f"random.{k}": v.clone() for k, v in learner.random.state().items()})
    return values


def assert_refused_and_unchanged(learner, call, name: str) -> None:
    before = snapshot(learner)
    times = list(learner.times)
    with pytest.raises((ValueError, TypeError)) as error:
        call()
    assert name in str(error.value), error.value
    after = snapshot(learner)
    assert before.keys() == after.keys() and learner.times == times
    assert all(torch.equal(before[k], after[k]) for k in before)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(COUNT_SETTINGS), value=BAD_COUNTS)
def test_a_bad_count_setting_is_refused_at_construction(name, value):
    with pytest.raises((ValueError, TypeError), match=name):
        VCL(BayesianMLP(4, [8], 2), **{**SMALL, name: value})


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(OPTIONAL_COUNTS), value=BAD_COUNTS.filter(lambda v: v != 0))
def test_a_bad_optional_count_is_refused_at_construction(name, value):
    # these take 0 (none); all but epochs take None (the default)
    with pytest.raises((ValueError, TypeError), match=name):
        VCL(BayesianMLP(4, [8], 2), **{**SMALL, name: value})


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["learning_rate", "variance_learning_rate"]), value=BAD_RATES)
def test_a_bad_rate_is_refused_at_construction(name, value):
    with pytest.raises((ValueError, TypeError), match=name):
        VCL(BayesianMLP(4, [8], 2), **{**SMALL, name: value})


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["num_samples", "chunk"]),
    value=BAD_COUNTS,
    entry=st.sampled_from(["predict", "evaluate", "predictive_samples"]),
)
def test_bad_prediction_arguments_are_refused_and_change_nothing(trained, name, value, entry):
    x, y = two_class_data(8)

    def call():
        if entry == "evaluate":
            return trained.evaluate((x, y), **{name: value})
        return getattr(trained, entry)(x, **{name: value})

    assert_refused_and_unchanged(trained, call, name)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    time=st.one_of(
        st.floats(max_value=0.0),  # not after the first step's time 0
        st.just(math.nan),
        st.just(math.inf),
        st.text(max_size=3),
        st.booleans(),
    )
)
def test_a_bad_time_is_refused_and_changes_nothing(trained, time):
    assert_refused_and_unchanged(
        trained, lambda: trained.observe(two_class_data(8), time=time), "time"
    )
