"""A deep generative Pyro model ``p(x | z, θ) p(z)`` whose decoder weights ``θ`` are learnt by VCL."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch

from pyro_cl.generative.encoders import TaskEncoders, gaussian_kl_to_standard_normal
from pyro_cl.likelihoods import Likelihood, PixelBernoulliLikelihood
from pyro_cl.model import MODEL_CLASSES, SupervisedModel
from pyro_cl.nn.effects import CollectLocalKL, DataPlate, SubstituteSites, innermost, new_data_plate

__all__ = ["GenerativeModel"]


class GenerativeModel(SupervisedModel):
    """The VAE of VCL section 4 as a Pyro model, for one task ``t``::

        θ ~ prior                                   (the decoder's PyroSample sites)
        for n in plate("data"):
            z_n ~ N(0, I)                           (site "z", dimension net.latent_dim)
            x_n ~ p(x | f_θ(z_n; t))                (site "obs", e.g. Bernoulli pixels)

    ``net`` is the decoder ``f_θ`` (``forward(z, task_id=t)``, attributes ``latent_dim`` and
    ``out_features``), e.g. :class:`~pyro_cl.nn.VAEDecoder`. Its amortised local guide
    (:attr:`local_guide`, one encoder ``q_φt(z | x)`` per task, :class:`TaskEncoders`, hidden
    sizes from ``net.encoder_hidden_sizes``) is created here and given to the learner's
    :class:`~pyro_cl.guides.MeanFieldGuide`, which then covers ``θ`` and ``z`` together.

    The data are the observations: ``model(x, task_id=t, dataset_size=N)`` observes ``x``
    (a ``y``, where given, is observed instead, so the learner's ``(inputs, targets)`` calls
    work with ``y = x``).

    :meth:`net_outputs` is the fast route's fusion of model and local guide, as
    :class:`~pyro_cl.nn.effects.SubstituteSites` is for the global sites: it draws
    ``z ~ q_φt(z | x)`` by reparameterisation, reports the analytic ``KL(q_φt(z | x_n) ‖ p(z))``
    per point to :class:`~pyro_cl.nn.effects.CollectLocalKL` and returns the decoder's outputs.
    So everything built on ``net_outputs`` (the fast ELBO, maximum-likelihood and penalty fits,
    per-example gradients for the EWC Fisher) sees the VAE's per-point bound
    ``E_q[log p(x_n | z_n, θ)] − KL(q(z_n | x_n) ‖ p(z_n))`` (VCL section 4, the bracket of
    ``L_VCL``), and the Pyro route (``TraceMeanField_ELBO`` on this model and the guide) computes
    the same bound from the sample sites (tested equal on the same draws).

    Local reparameterisation (the decoder's default) is valid here: each point's term depends
    on ``θ`` only through that point's pre-activations, which are Gaussian given its ``z_n`` and
    the layer's input, so drawing them per point leaves every term's expectation, and so the
    bound, unchanged (only the variance of its estimate changes). What it cannot give is one
    coherent ``θ`` shared by several points; nothing here needs one.
    """

    default_likelihood = PixelBernoulliLikelihood

    def __init__(self, net: torch.nn.Module, likelihood: Likelihood, route: str = "auto") -> None:
        for attribute in ("latent_dim", "out_features"):
            if not isinstance(getattr(net, attribute, None), int):
                raise ValueError(
                    f"a generative model's net (the decoder) needs an integer `{attribute}`; "
                    f"{type(net).__name__} has none"
                )
        super().__init__(net, likelihood, route)
        self.latent_dim = net.latent_dim
        hidden = getattr(net, "encoder_hidden_sizes", None)
        hidden = [500, 500, 500] if hidden is None else list(hidden)
        # encoders are created per task on the data's device (TaskEncoders.prepare)
        self.local_guide = TaskEncoders(net.out_features, hidden, net.latent_dim)

    @property
    def in_features(self) -> int:
        """A data point's size: the decoder's outputs."""
        return self.net.out_features

    def example_input(self, device: torch.device | str) -> torch.Tensor:
        return torch.zeros(2, self.in_features, device=device)

    def split_data(self, data) -> tuple[torch.Tensor, None]:
        """The data of a step: the observations ``x`` alone (a tensor or an array)."""
        if isinstance(data, (tuple, list)):
            raise ValueError(
                "a generative model learns from observations x alone, not (inputs, targets) "
                "pairs: pass the images"
            )
        return data, None

    def prepare_data(self, x, y, task_id):
        """As :meth:`SupervisedModel.prepare_data`, with the observations as targets."""
        return super().prepare_data(x, x if y is None else y, task_id)

    def decode(self, z: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        """The decoder's outputs ``f_θ(z; t)`` (likelihood parameters, e.g. pixel logits)."""
        return super().net_outputs(z, task_id)

    def net_outputs(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        """Decoder outputs for ``z ~ q_φt(z | x)`` (reparameterised); reports the per-point
        ``KL(q_φt(z | x_n) ‖ N(0, I))`` to an active :class:`CollectLocalKL`.

        ``x`` may carry a leading particle dimension of size 1 on the fast route; ``z`` then
        gets one independent draw per particle.
        """
        q = self.local_guide.distribution(x, task_id)
        handler = innermost(SubstituteSites)
        particles = None if handler is None else handler.num_particles
        if particles is not None and x.dim() >= 3 and x.shape[0] == 1 and particles > 1:
            q = q.expand(torch.Size([particles, *q.batch_shape[1:]]))
        z = q.rsample()
        collector = innermost(CollectLocalKL)
        if collector is not None:
            collector.terms.append(gaussian_kl_to_standard_normal(q))
        return self.decode(z, task_id)

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        task_id: int = 0,
        dataset_size: int | None = None,
    ) -> torch.Tensor:
        observed = x if y is None else y
        plate = new_data_plate(x.shape[0], x.device, dataset_size)
        with DataPlate(plate):  # the likelihood enters the same plate again
            prior = dist.Normal(x.new_zeros(self.latent_dim), x.new_ones(self.latent_dim))
            with plate:
                z = pyro.sample(self.local_guide.site, prior.to_event(1))
            outputs = self.decode(z, task_id)
            self.likelihood.observe(outputs, observed, dataset_size)
        return outputs


MODEL_CLASSES["generative"] = GenerativeModel
