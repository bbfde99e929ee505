"""benchmarks/chain_protocol.py: the chain's strengths are chosen on held-out source digits that
read no test label and no target, and the gap to a fresh fit has the sign its page says."""

import dataclasses

import pytest
import torch

from pyro_cl.app.domain_benchmark import SETTINGS, rotating_digits
from tests.helpers import importable_benchmark_script
from tests.test_records import _Unreadable


@pytest.fixture(scope="module")
def script():
    yield from importable_benchmark_script("chain_protocol")


def unreadable_tests(domains):
    """``domains`` whose every test label raises when read."""
    data = {
        d: (x, y, x_test, y_test.clone().as_subclass(_Unreadable))
        for d, (x, y, x_test, y_test) in domains.data.items()
    }
    return dataclasses.replace(domains, data=data)


def test_validation_domains_hold_out_source_digits_and_drop_the_targets(script):
    domains = rotating_digits(0, per_domain=50)
    held = domains.held_out(0, seed=3, share=0.2)
    assert held.targets == [] and held.sources == domains.sources
    for source in domains.sources:
        x, y = domains.data[source][:2]
        fit_x, fit_y, score_x, score_y = held.data[source]
        assert len(score_y) == 10 and len(fit_y) == 40
        rows = {tuple(r.tolist()) for r in x}
        fitted, scored = {tuple(r.tolist()) for r in fit_x}, {tuple(r.tolist()) for r in score_x}
        assert (
            fitted | scored <= rows and not fitted & scored
        )  # two disjoint parts of the train set
    again = domains.held_out(0, seed=3, share=0.2)
    assert torch.equal(again.data[0][2], held.data[0][2])  # drawn from the seed


def test_a_validation_chain_reads_no_test_label_and_a_test_chain_does(script, monkeypatch):
    for key, value in {"epochs": 2, "ml_init_epochs": 1, "num_predictive_samples": 2}.items():
        monkeypatch.setitem(SETTINGS, key, value)
    domains = unreadable_tests(rotating_digits(0, per_domain=30))
    fields = {"variant": "vcl", "wiener": 0.3}
    numbers = script.chain_numbers(domains.held_out(0, 0, share=0.2), 0, fields)
    assert 0 <= numbers["ACC"] <= 100 and len(numbers["just fitted"]) == len(domains.sources)
    assert not [k for k in numbers if k.endswith("°")]  # no target scored
    with pytest.raises(AssertionError, match="a test label was read"):
        script.chain_numbers(domains, 0, fields)


def test_gap_to_fresh_is_the_fresh_fit_minus_the_chain(script):
    measured = {
        script.FRESH: {0: {"just fitted": [90.0, 80.0]}},
        "VCL": {0: {"just fitted": [90.0, 70.0]}},  # learns less on the second source
        "fine-tuning": {0: {"just fitted": [92.0, 82.0]}},
    }
    script.add_gap_to_fresh(measured)
    assert measured["VCL"][0]["gap to fresh"] == pytest.approx(5.0)
    assert measured["fine-tuning"][0]["gap to fresh"] == pytest.approx(-2.0)
    assert measured[script.FRESH][0]["gap to fresh"] == 0.0
    assert measured["VCL"][0]["just fitted"] == 80.0  # the mean; the sources' own kept beside
    assert measured["VCL"][0]["per source"] == [90.0, 70.0]


def test_every_grid_builds_the_learner_parts_it_names(script):
    for row, grid in script.rows().items():
        for setting, fields in grid.items():
            if fields["variant"] == "fresh":
                continue
            parts = {
                name: make()
                for name, make in script.variant(fields).items()
                if callable(make) and name != "learner"
            }
            if "kl_weight" in fields:
                assert parts["fitter"].kl_weight == fields["kl_weight"], (row, setting)
            if "wiener" in fields:
                assert parts["transition"].diffusion == fields["wiener"], (row, setting)
            if "strength" in fields:
                assert parts["fitter"].penalty.strength == fields["strength"], (row, setting)
