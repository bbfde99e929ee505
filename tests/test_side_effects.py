"""No global side effects: a seeded learner draws from its own stream and leaves the process's
generator alone; registries refuse a name twice; scoped effects stay in their thread; the
command line restores standard output."""

import sys
import threading

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.app.cli import silenced
from pyro_cl.app.methods import METHODS, Method, register_method
from pyro_cl.infer.callbacks import ProgressBar
from pyro_cl.memory import Memory, RandomCoreset
from pyro_cl.nn import BayesianMLP
from pyro_cl.nn.effects import RecordLayers, innermost
from tests.helpers import two_class_data

SMALL = dict(epochs=2, batch_size=32, num_particles=1, num_predictive_samples=4, progress=False)


def _learner(seed=0):
    return VCL(BayesianMLP(4, [8], 2), memory=RandomCoreset(5), seed=seed, **SMALL)


def test_a_seeded_learner_leaves_the_process_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    learner = _learner()
    learner.observe(two_class_data(64, 4))
    learner.evaluate(two_class_data(16, 4, seed=1))
    assert torch.equal(torch.rand(3), expected)


def test_a_seeded_learners_draws_do_not_depend_on_the_callers():
    data = [two_class_data(64, 4, column=c, seed=c) for c in range(2)]

    def run(interfere: bool):
        learner = _learner(seed=7)
        for task in data:
            if interfere:
                torch.rand(1000)  # the caller draws between the learner's calls
            learner.observe(task)
        return learner.guide.locs(), learner.memory_points.x

    (locs, kept), (locs_again, kept_again) = run(False), run(True)
    assert torch.equal(kept, kept_again)
    for name in locs:
        assert torch.equal(locs[name], locs_again[name])


def test_evaluating_between_steps_changes_nothing_training_draws():
    data = [two_class_data(64, 4, column=c, seed=c) for c in range(3)]
    test = two_class_data(40, 4, seed=9)

    def run(evaluations: list[dict]):
        learner = _learner(seed=7)
        for task, settings in zip(data, evaluations, strict=True):
            learner.observe(task)
            if settings:  # on other inputs, with other sample counts and pass sizes
                learner.evaluate((test[0][: settings["n"]], test[1][: settings["n"]]))
                learner.predictive_samples(test[0], num_samples=settings["s"], chunk=3)
        return learner.guide.locs(), learner.memory_points.x, learner.predict(test[0])

    never = run([{}, {}, {}])
    often = run([{"n": 40, "s": 3}, {"n": 7, "s": 50}, {"n": 1, "s": 1}])
    for name in never[0]:
        assert torch.equal(never[0][name], often[0][name]), name
    assert torch.equal(never[1], often[1])
    # prediction's own stream moved on: the last predictions drew other samples
    assert not torch.equal(never[2], often[2])


def test_a_seeded_learners_predictions_repeat_from_its_seed_and_draw_afresh_each_call():
    task, test = two_class_data(64, 4), two_class_data(16, 4, seed=1)[0]
    first, second = _learner(seed=3), _learner(seed=3)
    first.observe(task)
    second.observe(task)
    once = first.predictive_samples(test)
    assert torch.equal(once, second.predictive_samples(test))
    assert not torch.equal(once, first.predictive_samples(test))


def test_an_unseeded_learner_draws_from_the_process_generator():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    VCL(BayesianMLP(4, [8], 2), **SMALL).observe(two_class_data(64, 4))
    assert not torch.equal(torch.rand(3), expected)


def test_a_part_named_like_a_built_in_is_refused_at_registration():
    with pytest.raises(TypeError, match="RandomCoreset holds that name"):

        class Mine(Memory):
            name = "random"

            def select(self, candidates, size, view):
                return torch.arange(size)


def test_a_method_named_twice_is_refused():
    with pytest.raises(ValueError, match="'vcl' is registered already"):
        register_method(Method("vcl", VCL))
    assert METHODS["vcl"].learner is VCL


def test_scoped_effects_are_invisible_to_other_threads():
    seen = []
    with RecordLayers():
        assert innermost(RecordLayers) is not None
        thread = threading.Thread(target=lambda: seen.append(innermost(RecordLayers)))
        thread.start()
        thread.join()
    assert seen == [None] and innermost(RecordLayers) is None


def test_a_silent_rank_restores_standard_output():
    before = sys.stdout
    with silenced(True):
        print("dropped")
        assert sys.stdout is not before
    assert sys.stdout is before


def test_progress_bars_show_only_on_a_terminal_unless_forced():
    quiet, forced = ProgressBar(), ProgressBar(force=True)
    for bar in (quiet, forced):
        bar.on_fit_start("fit", 3)  # under pytest standard error is not a terminal
    assert quiet._bar.disable and not forced._bar.disable
    for bar in (quiet, forced):
        bar.on_fit_end()
