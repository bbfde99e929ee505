"""Fused (torch.compile) natural-gradient updates equal the eager ones; failures fall back."""

import warnings

import pytest
import torch

import pyro_cl.infer.fusion as fusion
from pyro_cl import VCL
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data


def _posterior(fitter) -> dict[str, torch.Tensor]:
    x, y = two_class_data(40, 4)
    learner = VCL(
        BayesianMLP(4, [6], 2),
        fitter=fitter,
        seed=0,
        epochs=2,
        batch_size=16,
        ml_init_epochs=0,
        init_log_variance=-6.0,
        progress=False,
    )
    learner.observe((x, y))
    return {k: v.clone() for k, v in learner.guide.state_dict().items() if torch.is_tensor(v)}


def test_compiled_ivon_update_equals_the_eager_one():
    eager = _posterior(IVON(0.05, num_samples=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # it must really compile here
        compiled = _posterior(IVON(0.05, num_samples=2, compiled=True))
    for key, value in eager.items():
        torch.testing.assert_close(compiled[key], value, rtol=1e-5, atol=1e-6)


def test_an_update_that_cannot_compile_runs_eagerly_after_one_warning(monkeypatch):
    def broken_compile(function, **options):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler")

        return fail

    monkeypatch.setattr(fusion.torch, "compile", broken_compile)
    eager = _posterior(VOGN(0.05, num_samples=2))
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler") as caught:
        fallback = _posterior(VOGN(0.05, num_samples=2, compiled=True))
    assert len(caught) == 1
    for key, value in eager.items():
        torch.testing.assert_close(fallback[key], value)
