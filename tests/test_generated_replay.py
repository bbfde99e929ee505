"""Generated replay (issue 71): a generative VCL model of each class seen draws the buffer that
a class-incremental learner fits beside every step's data, so it keeps no image."""

from __future__ import annotations

import pytest
import torch

from pyro_cl import VCL, FineTuning
from pyro_cl.generative import GeneratedReplay, generate
from pyro_cl.likelihoods import GaussianLikelihood
from pyro_cl.nn import BayesianMLP, VAEDecoder
from pyro_cl.points import Points
from tests.test_experience_replay import fitted_sizes

SMALL = dict(epochs=1, batch_size=32, num_particles=1, num_predictive_samples=4, progress=False)
PIXELS = 12  # two bright pixels a class, six classes


def class_images(label: int, n: int, seed: int) -> torch.Tensor:
    """``n`` 12-pixel "images" of class ``label``: pixels ``2 label`` and ``2 label + 1`` bright
    (0.9), the others dark (0.1), with a little noise, in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.full((n, PIXELS), 0.1) + 0.05 * torch.rand(n, PIXELS, generator=generator)
    x[:, 2 * label : 2 * label + 2] = 0.9 - 0.05 * torch.rand(n, 2, generator=generator)
    return x


def class_incremental(tasks: int = 2, n: int = 60) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Tasks of two classes each (0-1, then 2-3, ...), every class its own bright pixels."""
    steps = []
    for task in range(tasks):
        labels = (2 * task, 2 * task + 1)
        x = torch.cat([class_images(c, n // 2, seed=10 * task + c) for c in labels])
        y = torch.tensor([c for c in labels for _ in range(n // 2)])
        steps.append((x, y))
    return steps


def generator(epochs: int = 1, heads: int = 6, seed: int = 0) -> VCL:
    decoder = VAEDecoder(
        PIXELS, latent_dim=2, hidden_size=16, representation_size=16, heads=heads, private="output"
    )
    return VCL(
        decoder, epochs=epochs, batch_size=32, learning_rate=1e-2, init_log_variance=-6.0,
        ml_init_epochs=0, progress=False, seed=seed,
    )  # fmt: skip


def classifier(memory, cls=FineTuning, **options) -> FineTuning:
    return cls(BayesianMLP(PIXELS, [16], 6), memory=memory, seed=0, **{**SMALL, **options})


def test_a_point_estimate_fits_each_step_beside_the_drawn_buffer_of_every_class_seen():
    replay = GeneratedReplay(generator(), 10)
    learner = classifier(replay)
    sizes = fitted_sizes(learner)
    for task, data in enumerate(class_incremental(3)):
        learner.observe(data, task_id=0, time=float(task))
        # the buffer is the classes seen so far, shared evenly (the first classes one more)
        counts = torch.bincount(learner.memory_points.y, minlength=6).tolist()
        expected = {0: [5, 5, 0, 0, 0, 0], 1: [3, 3, 2, 2, 0, 0], 2: [2, 2, 2, 2, 1, 1]}
        assert counts == expected[task]
    assert sizes == [60, 70, 70]  # D_k ∪ G_{k-1}, one fit a step
    # the generator learnt one task a class, each on its class's images alone
    assert sorted(learner.memory.classes) == [0, 1, 2, 3, 4, 5]
    assert learner.memory.seen == 180


def test_each_drawn_image_comes_from_its_own_class_head():
    """After the generator has learnt four classes, the images drawn for class c are nearest
    class c's mean image (labels from another head, or the heads' order swapped, would not)."""
    replay = GeneratedReplay(generator(epochs=100), 200)
    learner = classifier(replay)
    for task, data in enumerate(class_incremental(2)):
        learner.observe(data, task_id=0, time=float(task))
    drawn = learner.memory_points
    means = torch.stack([class_images(c, 100, seed=99).mean(0) for c in range(6)])
    nearest = torch.cdist(drawn.x, means).argmin(1)
    assert (nearest == drawn.y).float().mean() > 0.9
    # stamped with the task and time of the step that showed the class
    torch.testing.assert_close(drawn.times, (drawn.y >= 2).double())


def test_a_posterior_hands_on_a_fit_of_the_new_data_alone():
    learner = classifier(GeneratedReplay(generator(), 10), cls=VCL, ml_init_epochs=0)
    sizes = fitted_sizes(learner)
    for task, data in enumerate(class_incremental(3)):
        learner.observe(data, task_id=0, time=float(task))
    # step 1: the fit of D_1 is handed on as it is; later steps fit D_k ∪ G_{k-1} (it predicts)
    # and then D_k alone from the step's prior (generated images are no evidence of a class)
    assert sizes == [60, 70, 60, 70, 60]
    assert learner.prediction_posteriors


def test_generated_replay_keeps_the_old_classes_that_fine_tuning_forgets():
    def accuracy_on_first_classes(memory) -> float:
        learner = classifier(memory, epochs=30, learning_rate=1e-2)
        for task, data in enumerate(class_incremental(2)):
            learner.observe(data, task_id=0, time=float(task))
        x, y = class_incremental(1, n=200)[0]
        return (learner.predict(x).argmax(-1) == y).float().mean().item()

    assert accuracy_on_first_classes(None) < 0.1  # one head: the new classes' logits win
    assert accuracy_on_first_classes(GeneratedReplay(generator(epochs=100), 60)) > 0.9


def test_what_generated_replay_cannot_work_with_is_refused():
    with pytest.raises(TypeError, match="generative model"):
        GeneratedReplay(FineTuning(BayesianMLP(PIXELS, [4], 2), progress=False), 10)
    with pytest.raises(ValueError, match="out_features=5"):
        FineTuning(BayesianMLP(5, [4], 6), memory=GeneratedReplay(generator(), 10), **SMALL)
    with pytest.raises(ValueError, match="balanced=False"):
        VCL(BayesianMLP(PIXELS, [4], 6), memory=GeneratedReplay(generator(), 10, True), **SMALL)
    learner = classifier(GeneratedReplay(generator(heads=3), 10))
    x, y = class_incremental(2)[1]
    with pytest.raises(ValueError, match="3 heads .* class 3"):
        learner.observe((x, y), task_id=0)
    with pytest.raises(ValueError, match="integer class labels"):
        GeneratedReplay(generator(), 10).update(None, Points.of_task(x, y.double(), 0))
    with pytest.raises(ValueError, match="for a classifier.*GaussianLikelihood"):
        FineTuning(
            BayesianMLP(PIXELS, [4], 1), likelihood=GaussianLikelihood(1.0),
            memory=GeneratedReplay(generator(), 10), **SMALL,
        )  # fmt: skip


def test_a_learner_with_generated_replay_refuses_to_save_its_generator(tmp_path):
    learner = classifier(GeneratedReplay(generator(), 10))
    learner.observe(class_incremental(1)[0], task_id=0)
    with pytest.raises(TypeError, match="cannot save the memory GeneratedReplay"):
        learner.save(tmp_path / "learner.pt")
    assert not (tmp_path / "learner.pt").exists()
    state = learner.memory.state_dict()
    again = GeneratedReplay(generator(), 10)
    again.load_state_dict(state)
    assert again.classes == learner.memory.classes and again.seen == 60
    assert again.generator.tasks_seen == [0, 1]  # the generator's posterior came with it
    torch.testing.assert_close(  # the same posterior and random state draw the same images
        generate(again.generator, task_id=1, num_samples=4),
        generate(learner.memory.generator, task_id=1, num_samples=4),
    )


def test_a_step_that_fails_after_the_generator_learnt_puts_the_generator_back():
    """A posterior's step refits the new data after the generator has learnt the step's
    classes; when that refit fails, the learner's rollback restores the generator too, so a
    retried step does not teach it the classes twice."""
    learner = classifier(GeneratedReplay(generator(), 10), cls=VCL, ml_init_epochs=0)
    first, second = class_incremental(2)
    learner.observe(first, task_id=0, time=0.0)
    replay = learner.memory
    before = {n: p.detach().clone() for n, p in replay.generator.guide.named_parameters()}
    propagate = learner._propagate
    calls = []

    def failing_refit(context, data, task_id):
        calls.append(len(data))
        if len(calls) == 2:  # the refit of D_k alone, after the memory's update
            raise ValueError("the refit diverged")
        return propagate(context, data, task_id)

    learner._propagate = failing_refit
    with pytest.raises(ValueError, match="diverged"):
        learner.observe(second, task_id=0, time=1.0)
    assert calls == [70, 60]
    assert replay.generator.tasks_seen == [0, 1] and sorted(replay.classes) == [0, 1]
    assert replay.seen == 60
    for name, value in replay.generator.guide.named_parameters():
        torch.testing.assert_close(value.detach(), before[name])


def test_what_it_keeps_is_its_generator_not_the_drawn_images():
    from pyro_cl.app.task_benchmark import kept_bytes

    learner = classifier(GeneratedReplay(generator(), 10))
    learner.observe(class_incremental(1)[0], task_id=0)
    generator_learner = learner.memory.generator
    expected = sum(
        p.nelement() * p.element_size()
        for module in (generator_learner.guide, generator_learner.model.local_guide)
        for p in module.parameters()
    )
    assert len(learner.memory_points) == 10 and expected > 0
    assert kept_bytes(learner) == expected
