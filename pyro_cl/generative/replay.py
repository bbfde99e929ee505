"""Generated replay: a buffer of images drawn from a generative VCL model of every class seen,
fitted beside each step's new data, so a class-incremental learner keeps no image.

Deep generative replay (Shin et al. 2017, "Continual learning with deep generative replay")
pairs the learner with a generator of the old data and mixes its samples into every later fit.
Here the generator is the library's own generative VCL (Nguyen et al. 2018, section 4): a VAE
decoder with one head a class (:class:`~pyro_cl.nn.VAEDecoder`), whose weights are learnt by a
:class:`~pyro_cl.ContinualLearner` one class at a time, so it does not forget the old classes
either (VCL's figure 6) and each sample's label is the head that drew it (no classifier labels
them). Step ``k`` of the learner it belongs to fits ``D_k ∪ G_{k-1}``::

    for each class c of D_k:   generator.observe(x of D_k with label c, task_id=c)
    G_k = {(x, c) : c a class seen so far, x ~ p(x | z, θ_c), z ~ N(0, I)}, size in all

— the classes seen share ``size`` draws evenly, redrawn at every step — exactly as
:class:`~pyro_cl.memory.ExperienceReplay` fits its buffer: weighed as much as the new data with
a point estimate (``balanced``), and with a posterior in the likelihood of the fit that predicts
only; the posterior handed on as the next prior is a fit of ``D_k`` alone from the step's prior
(the old classes are in that prior already, and generated images are no evidence of them), the
first step's fit itself where no buffer was fitted.

What it keeps is the generator's weights (a posterior over the decoder and an encoder a class),
no data point. The generator must have a head for every class (``heads`` at least the number of
classes) and generate points of the classifier's size; its likelihood sets the inputs' range
(Bernoulli pixels: inputs in [0, 1]).
"""

from __future__ import annotations

import torch

from pyro_cl.generative.evaluation import generate
from pyro_cl.generative.model import GenerativeModel
from pyro_cl.infer.parts import Parts
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.learner.state import LearnerState
from pyro_cl.likelihoods import BernoulliLikelihood, CategoricalLikelihood
from pyro_cl.memory.experience_replay import ExperienceReplay
from pyro_cl.memory.model_view import ModelView
from pyro_cl.memory.protocol import MemoryUpdate
from pyro_cl.points import Points

__all__ = ["GeneratedReplay"]


class GeneratedReplay(ExperienceReplay):
    """A replay buffer of ``size`` images drawn from ``generator``, a generative VCL learner
    with a head a class, after it has learnt each step's classes (module docstring).

    :param generator: a :class:`~pyro_cl.ContinualLearner` of a
        :class:`~pyro_cl.generative.GenerativeModel` (e.g. ``pyro_cl.VCL(VAEDecoder(...))``),
        fitted here, one class a task.
    :param size: images in the buffer, shared evenly by the classes seen.
    :param balanced: as :class:`~pyro_cl.memory.ExperienceReplay`'s.
    :param mean: replay the likelihood's mean (pixel probabilities, default) rather than a draw.
    """

    name = "generated_replay"

    def __init__(
        self,
        generator: ContinualLearner,
        size: int,
        balanced: bool | None = None,
        mean: bool = True,
    ) -> None:
        if not isinstance(getattr(generator, "model", None), GenerativeModel):
            raise TypeError(
                "GeneratedReplay's generator is a learner of a generative model, e.g. "
                f"pyro_cl.VCL(pyro_cl.nn.VAEDecoder(...)); got {type(generator).__name__}"
            )
        if not isinstance(mean, bool):
            raise TypeError(f"mean must be True or False, got {mean!r}")
        super().__init__(size, "total", balanced)
        self.generator = generator
        self.mean = mean
        #: ``{class: (task id, time)}`` of the step that last showed each class.
        self.classes: dict[int, tuple[int, float]] = {}

    def check_parts(self, parts: Parts) -> None:
        super().check_parts(parts)
        if not isinstance(parts.model.likelihood, (CategoricalLikelihood, BernoulliLikelihood)):
            raise ValueError(
                "GeneratedReplay draws images of each class, for a classifier; the learner's "
                f"likelihood is {type(parts.model.likelihood).__name__}"
            )
        size = self.generator.model.in_features
        learner_size = parts.model.in_features
        if learner_size is not None and learner_size != size:
            raise ValueError(
                f"the generator draws {size}-feature points and the learner's net takes "
                f"{learner_size}: give the VAEDecoder out_features={learner_size}"
            )

    def select(self, candidates: Points, size: int, view: ModelView | None) -> torch.Tensor:
        """Nothing of the candidates is kept (the buffer is drawn, :meth:`update`)."""
        return torch.zeros(0, dtype=torch.long, device=candidates.x.device)

    def update(
        self, memory: Points | None, new: Points, view: ModelView | None = None
    ) -> MemoryUpdate:
        """The generator learns each class of ``new``, then ``G_k`` is drawn for every class
        seen (module docstring); the new points all go to the posterior handed on."""
        if new.y.dtype.is_floating_point or new.y.dim() != 1:
            raise ValueError(
                "GeneratedReplay draws images of each class: the targets must be integer "
                f"class labels, got {new.y.dtype} of shape {tuple(new.y.shape)}"
            )
        heads = self.generator.model.net.num_heads
        labels = [int(c) for c in torch.unique(new.y)]
        if labels and (labels[0] < 0 or labels[-1] >= heads):
            raise ValueError(
                f"the generator has {heads} heads (one a class) and the step shows class "
                f"{labels[-1] if labels[-1] >= heads else labels[0]}: give the VAEDecoder "
                "heads= the number of classes"
            )
        for label in labels:  # one generator task a class, in the order of the labels
            rows = new.y == label
            self.generator.observe(new.x[rows].to(self.generator.device), task_id=label)
            last = rows.nonzero()[-1, 0]
            self.classes[label] = (int(new.task_ids[last]), float(new.times[last]))
        self.seen += len(new)
        drawn = self.draw(new.x, new.y)
        # a posterior's fit with a buffer is refitted on D_k alone; without one it is that fit
        refit = not self._point_estimate and memory is not None and len(memory) > 0
        remaining = torch.arange(len(new) if refit else 0, device=new.x.device)
        update = MemoryUpdate(drawn, remaining, Points.empty(new.x, new.y))
        self.check_holds(update.points)
        return update

    def draw(self, like_x: torch.Tensor, like_y: torch.Tensor) -> Points:
        """``size`` images shared evenly by the classes seen (the first classes one more where
        they do not divide), labelled, stamped with the task and time that last showed them."""
        labels = sorted(self.classes)
        share, extra = divmod(self.size, len(labels))
        parts = []
        for index, label in enumerate(labels):
            count = share + (index < extra)
            if not count:
                continue
            x = generate(self.generator, task_id=label, num_samples=count, mean=self.mean)
            task_id, time = self.classes[label]
            parts.append(
                Points(
                    x.to(like_x),
                    torch.full((count,), label, dtype=like_y.dtype, device=like_x.device),
                    torch.full((count,), task_id, dtype=torch.long, device=like_x.device),
                    torch.full((count,), time, dtype=torch.float64, device=like_x.device),
                )
            )
        drawn = Points.empty(like_x, like_y)
        for part in parts:
            drawn = drawn.concat(part)
        return drawn

    def kept_state(self, points: Points | None) -> dict[str, torch.Tensor]:
        """The generator's posterior parameters and encoders: the drawn images are not kept."""
        generator = self.generator
        return {
            **{f"guide.{n}": p.detach() for n, p in generator.guide.named_parameters()},
            **{
                f"encoders.{n}": p.detach()
                for n, p in generator.model.local_guide.named_parameters()
            },
        }

    def state_dict(self) -> dict:
        """The classes seen and the generator's whole state: a step of the learner that fails
        after the generator has learnt its classes puts the generator back too."""
        generator = LearnerState.of(self.generator).to_state()
        return {**super().state_dict(), "classes": dict(self.classes), "generator": generator}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.classes = {int(c): (int(t), float(s)) for c, (t, s) in state["classes"].items()}
        generator = LearnerState.from_state(state["generator"], self.generator.device)
        generator.restore_into(self.generator)
