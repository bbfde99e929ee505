"""benchmarks/drift_vs_river.py's refitted point net: its window, and its learner names."""

import argparse
import json

import numpy as np
import pytest
import torch

from pyro_cl.app.one_step_ahead import one_step_ahead
from pyro_cl.data.streams import OnlineStream, TimeStep
from tests.helpers import load_benchmark_script

drift_vs_river = load_benchmark_script("drift_vs_river")


def flipping_stream(before: int = 6, after: int = 4, rows: int = 100) -> OnlineStream:
    """Steps labelled by the sign of the first input, then by its opposite (an abrupt drift)."""
    generator = torch.Generator().manual_seed(0)
    steps = []
    for k in range(before + after):
        x = torch.randn(rows, 2, generator=generator)
        y = (x[:, 0] > 0).long()
        steps.append(TimeStep(k, float(k), x, y if k < before else 1 - y))
    return OnlineStream("flip", tuple(steps), None, 2, 2, False)


def refit(window: int | None) -> list[float]:
    net = drift_vs_river.RefitNet(flipping_stream(), (8,), window, 20, 50, learning_rate=1e-2)
    return one_step_ahead(net, flipping_stream()).accuracy


def test_a_window_follows_an_abrupt_drift_that_all_rows_cannot():
    """Refitted on the last 200 rows, the net has forgotten the old concept two steps after the
    flip; refitted on every row, the old concept's 600 rows outvote the new one's."""
    windowed, every_row = refit(200), refit(None)
    assert windowed[4] > 0.9 and every_row[4] > 0.9  # the first concept is learnt by both
    assert windowed[-1] > 0.9
    assert every_row[-1] < 0.5


@pytest.mark.parametrize("name", ["net-refit-0", "net-refit-", "net-refit-x", "forest"])
def test_learner_names_are_checked(name):
    with pytest.raises(argparse.ArgumentTypeError, match="unknown learner"):
        drift_vs_river._learner_name(name)
    assert drift_vs_river._learner_name("net-refit-250") == "net-refit-250"
    assert drift_vs_river._learner_name("river-arf") == "river-arf"


def test_probabilities_are_a_distribution():
    net = drift_vs_river.RefitNet(flipping_stream(), (4,), None, 1, 1)
    probabilities = net.predict_proba(np.zeros((3, 2)), 0.0)
    assert probabilities.shape == (3, 2)
    np.testing.assert_allclose(probabilities.sum(1), 1.0)


def test_the_variance_step_reaches_every_online_learner():
    """``--variance-learning-rate`` is the step of the learners' log-variances (the drift
    guide's setting); by default they take the learning rate's."""
    parse = drift_vs_river.build_parser().parse_args
    args = parse(["--hidden", "4", "--variance-learning-rate", "0.05"])
    learner = drift_vs_river._online_learner(flipping_stream(), args, 0, None)
    assert learner.config.optimisation.variance_learning_rate == 0.05
    learner = drift_vs_river._online_learner(flipping_stream(), parse(["--hidden", "4"]), 0, None)
    assert learner.config.optimisation.variance_learning_rate is None


def test_the_validation_choice_reads_only_the_steps_before_the_scored_half():
    """Of our learners, the best over the second quarter of the steps is chosen, however they
    do on the last half (scored) or the first quarter; the point nets and river's are not
    candidates."""

    def run(first_quarter, second_quarter, last_half):
        return {"log_likelihood": [first_quarter] * 5 + [second_quarter] * 5 + [last_half] * 10}

    runs = {
        "learned-wiener": {0: run(-0.1, -0.6, -0.1), 1: run(-0.1, -0.6, -0.1)},
        "wiener": {0: run(-0.9, -0.5, -0.9), 1: run(-0.9, -0.5, -0.9)},
        "online-vb": {0: run(-0.9, -0.55, -0.2), 1: run(-0.9, -0.55, -0.2)},
        "net-refit-all": {0: run(-0.1, -0.1, -0.1), 1: run(-0.1, -0.1, -0.1)},
        "river-arf": {0: run(-0.1, -0.1, -0.1), 1: run(-0.1, -0.1, -0.1)},
    }
    selection, chosen = drift_vs_river.validation_choice(runs)
    assert chosen == "wiener"
    assert selection["grid"] == ["learned-wiener", "online-vb", "wiener"]
    assert selection["validation"]["online-vb"][1] == pytest.approx(-0.55)
    assert drift_vs_river.validation_choice({"river-arf": runs["river-arf"]}) == ({}, None)


def test_the_elec2_demand_stream_predicts_new_south_wales_demand_from_the_other_columns(tmp_path):
    """The regression stream's target is elec2's nswdemand column, out of the inputs; a net
    refitted on it is scored by RMSE and log-density, and a classifier's name is refused."""
    rng = np.random.default_rng(0)
    rows = 1300
    data = rng.uniform(size=(rows, 8))  # date, day, period, nswprice, nswdemand, vicprice, ...
    data[:, 4] = 0.5 * data[:, 6] + 0.01 * rng.normal(size=rows)  # demand follows Victoria's
    folder = tmp_path / "elec2"
    folder.mkdir()
    np.savetxt(folder / "elec2_data.dat", data)
    np.savetxt(folder / "elec2_label.dat", rng.integers(0, 2, rows), fmt="%d")
    stream = drift_vs_river.make_stream("elec2-demand", str(tmp_path), 0, None)
    assert stream.regression and stream.in_features == 5 and len(stream) == 4
    first = data[:1000, 4]
    np.testing.assert_allclose(
        stream[1].y.numpy(), (data[1000:1100, 4] - first.mean()) / first.std(), rtol=1e-4
    )
    net = drift_vs_river.RefitNet(stream, (8,), None, 5, 20, learning_rate=1e-2)
    scores = one_step_ahead(net, stream)
    assert len(scores.rmse) == 3 and scores.rmse[-1] < 0.5  # the demand is Victoria's, halved
    assert scores.accuracy == [] and np.isfinite(scores.log_likelihood).all()
    with pytest.raises(SystemExit, match="river-logistic does not run on a regression stream"):
        drift_vs_river.river_learner("river-logistic", 0, regression=True)
    with pytest.raises(SystemExit, match="river-linear does not run on a classification"):
        drift_vs_river.river_learner("river-linear", 0)


def test_a_tempered_run_gives_our_learners_the_kl_weight_and_folders_of_their_own():
    parse = drift_vs_river.build_parser().parse_args
    args = parse(["--hidden", "4", "--kl-weight", "0.5"])
    learner = drift_vs_river._online_learner(flipping_stream(), args, 0, None)
    assert learner.fitter.kl_weight == 0.5
    plain = drift_vs_river._online_learner(flipping_stream(), parse(["--hidden", "4"]), 0, None)
    assert plain.fitter.kl_weight == 1.0
    assert drift_vs_river._variant(args) == "-tempered-0.5"
    assert drift_vs_river._variant(parse([])) == ""
    stepped = parse(["--kl-weight", "0.5", "--variance-learning-rate", "0.01"])
    assert drift_vs_river._variant(stepped) == "-tempered-0.5-variance-step-0.01"
    assert drift_vs_river._variant(parse(["--discount", "0.98"])) == "-discount-0.98"
    assert drift_vs_river._split_variant("moving-wiener-discount-0.98") == (
        "moving-wiener",
        "-discount-0.98",
    )
    assert drift_vs_river._is_ours("moving-wiener-discount-0.98")
    assert drift_vs_river._split_variant("learned-wiener-variance-step-0.01") == (
        "learned-wiener",
        "-variance-step-0.01",
    )
    assert drift_vs_river._is_ours("wiener-0.1-tempered-0.5-variance-step-0.05")
    for ours in (
        "learned-wiener-tempered-0.5",
        "wiener-0.1-tempered-0.5",
        "online-vb-tempered-0.5",
    ):
        assert drift_vs_river._is_ours(ours)
    assert not drift_vs_river._is_ours("net-finetune")
    assert drift_vs_river._row_label("wiener-tempered-0.5").endswith("(bank)")
    assert drift_vs_river._split_variant("wiener-0.1-tempered-0.5") == (
        "wiener-0.1",
        "-tempered-0.5",
    )


def test_a_tempered_bank_is_held_against_its_own_tempered_members_in_hindsight():
    def runs(value):
        return [{"seed": "seed0", "summary": {"log_likelihood": value}}]

    rows = {
        "wiener": runs(-0.40), "wiener-0.1": runs(-0.39), "online-vb": runs(-0.41),
        "wiener-tempered-0.5": runs(-0.36), "wiener-0.1-tempered-0.5": runs(-0.35),
        "online-vb-tempered-0.5": runs(-0.30),
    }  # fmt: skip
    lines = drift_vs_river._hindsight(rows)
    assert any("wiener bank -0.4000" in line and "(wiener-0.1)" in line for line in lines)
    assert any(
        "wiener-tempered-0.5 bank -0.3600" in line and "(online-vb-tempered-0.5)" in line
        for line in lines
    )


def test_the_rbf_stream_has_many_features_and_classes_and_river_softmax_scores_them():
    pytest.importorskip("river")
    stream = drift_vs_river.make_stream("rbf", "unused", 0, 3)
    assert stream.in_features == drift_vs_river.RBF_FEATURES == 128
    assert stream.num_outputs == drift_vs_river.RBF_CLASSES == 6 and not stream.regression
    labels = torch.cat([step.y for step in stream])
    assert set(labels.tolist()) == set(range(6))  # every class appears in the first steps
    again = drift_vs_river.make_stream("rbf", "unused", 0, 3)
    torch.testing.assert_close(again[2].x, stream[2].x)  # the seed makes the stream
    assert not torch.equal(drift_vs_river.make_stream("rbf", "unused", 1, 3)[2].x, stream[2].x)
    model = drift_vs_river.RiverOnStream(
        drift_vs_river.river_learner("river-softmax", 0, classes=6), 6
    )
    scores = one_step_ahead(model, stream)
    assert len(scores.accuracy) == 2 and scores.accuracy[-1] > 1 / 6  # above chance
    with pytest.raises(SystemExit, match="river-logistic takes two classes, this stream has 6"):
        drift_vs_river.river_learner("river-logistic", 0, classes=6)


def _fake_runs(
    folder, learners: dict[str, tuple[float, float]], seeds=(0, 1), steps=20, settings=None
):
    """Runs as drift_vs_river keeps them: each learner's log-likelihood over the validation
    steps (the second quarter) and over the scored last half."""
    for learner, (validation, scored) in learners.items():
        for seed in seeds:
            ll = [-9.0] * (steps // 4) + [validation] * (steps // 4) + [scored] * (steps // 2)
            summary = {"accuracy": 0.5, "log_likelihood": scored, "calibration_error": 0.1}
            run = {
                "summary": {**summary, "seconds_per_step": 1.0},
                "log_likelihood": ll,
                "steps": steps + 1,  # the first step is learnt, not scored
                "settings": settings or {"hidden": [4]},
                "command": f"run {learner}",
                "commit": f"commit-{learner}",
            }
            place = folder / "s" / learner / f"seed{seed}"
            place.mkdir(parents=True)
            (place / "scores.json").write_text(json.dumps(run))


def test_rows_added_to_a_stream_run_alone_and_the_choice_is_made_over_the_record_s_too(
    tmp_path, monkeypatch
):
    """``--resume-from``: a committed stream record's rows with no runs in the folder are kept
    from it with their validation scores; the choice is made over the old and the new
    candidates (here an old one, though a new one scores best on the last half); a record of
    other seeds or steps is refused."""
    from pyro_cl.app import records

    written = {}

    def keep(record, folder=None):
        written[record["name"]] = record
        return tmp_path / f"{record['name']}.json"

    monkeypatch.setattr(records, "write_record", keep)
    _fake_runs(tmp_path / "first", {"wiener": (-0.3, -0.4), "river-arf": (-0.1, -0.2)})
    drift_vs_river.write_stream_record(tmp_path / "first", "s", "old", "first command")
    old = json.loads(json.dumps(written["old"]))  # as committed
    assert old["selection"]["ours, chosen on validation"]["chosen"] == "wiener"

    _fake_runs(tmp_path / "second", {"online-vb-tempered-0.5": (-0.5, -0.01)})
    drift_vs_river.write_stream_record(tmp_path / "second", "s", "new", "second command", old)
    new = written["new"]
    bank = "wiener: strength chosen online (bank)"
    assert set(new["rows"]) == {"ours, chosen on validation", bank, "river-arf",
                                "online-vb-tempered-0.5"}  # fmt: skip
    assert new["rows"][bank] == old["rows"][bank]
    selection = new["selection"]["ours, chosen on validation"]
    assert selection["grid"] == ["online-vb-tempered-0.5", "wiener"]
    assert selection["validation"]["wiener"][1] == pytest.approx(-0.3)
    assert selection["chosen"] == "wiener"  # the validation steps choose, not the scored ones
    assert new["rows"]["ours, chosen on validation"] == new["rows"][bank]
    assert "commit-wiener" in new["commit"] and "commit-online-vb-tempered-0.5" in new["commit"]
    assert new["command"] == "run river-arf; then run wiener; then run online-vb-tempered-0.5"

    _fake_runs(tmp_path / "seeds", {"online-vb": (-0.5, -0.5)}, seeds=(0, 1, 2))
    with pytest.raises(ValueError, match="seeds"):
        drift_vs_river.write_stream_record(tmp_path / "seeds", "s", "x", "c", old)
    _fake_runs(tmp_path / "steps", {"online-vb": (-0.5, -0.5)}, steps=40)
    with pytest.raises(ValueError, match="41 steps"):
        drift_vs_river.write_stream_record(tmp_path / "steps", "s", "x", "c", old)
    _fake_runs(tmp_path / "net", {"online-vb": (-0.5, -0.5)}, settings={"hidden": [8]})
    with pytest.raises(ValueError, match="other \\['hidden'\\]"):
        drift_vs_river.write_stream_record(tmp_path / "net", "s", "x", "c", old)
    tempered = {"hidden": [4], "kl_weight": 0.5}  # the variant's name says its β
    _fake_runs(tmp_path / "named", {"online-vb-tempered-0.5": (-0.5, -0.5)}, settings=tempered)
    drift_vs_river.write_stream_record(tmp_path / "named", "s", "y", "c", old)
