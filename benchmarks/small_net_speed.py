"""The small-net many-sample regime: one Adam iteration of online VB on Kurle et al.'s
nets, pyro_cl against a hand-written loop, side by side in one process.

Rows (Kurle et al. 2020, table 2's sizes):

* **UCI step** — tanh net 8-16-16-2, 35 points, 1000 Monte Carlo samples, heteroscedastic
  Gaussian likelihood, full batch;
* **weather step** — tanh net 8-16-16-2, 125 points, 100 samples, categorical likelihood;
* **MNIST epoch** — relu net 784-100-100-10, 10,000 random MNIST-shaped inputs in minibatches of
  256, one sample, local reparameterisation: ``VCL.observe`` of one epoch against
  ``benchmarks/speed.py``'s hand-written Bayes by backprop (the same loop with a ``(μ, log σ²)``
  pair of tensors per weight and bias and torch's fused Adam).

Each row runs with both estimators of the expected log-likelihood: one weight draw per Monte Carlo
sample (``W ~ N(μ, σ²)``, shape ``(S, in, out)``, batched matrix products) and the local
reparameterisation that Kurle et al. use (section 4: pre-activations ``N(hμ, h²σ²)``, a draw per
sample and point). The hand-written loop is the least a library must do: that estimator, the
closed-form KL to the ``N(0, s²)`` prior, Adam on ``(μ, log σ²)``. pyro_cl runs
``ContinualLearner.observe`` with the same settings (the net's ``local_reparameterization``, no
maximum-likelihood start, full batch), so its time includes the step's set-up and commit,
spread over the iterations. Each row
alternates the two, ``--repeats`` times, and reports the medians; the machine should be idle.

    python benchmarks/small_net_speed.py [--iterations 200] [--repeats 5] [--threads 2] [--mnist-only]
        [--floor]

``--floor`` adds a row beside the MNIST epoch: the least a library step can cost here, a loop
with no library around it — the sites packed in two flat tensors, pyro_cl's
``SampledGaussianLinear`` layers, the KL's gradient written out and added inside one Adam update
that ``torch.compile`` fuses (tens of seconds to compile, outside the timing).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import torch
from speed import HandWrittenBayesByBackprop

from pyro_cl import VCL, ContinualLearner
from pyro_cl.infer.packed_gaussians import site_views
from pyro_cl.likelihoods import CategoricalLikelihood, HeteroscedasticGaussianLikelihood
from pyro_cl.nn import BayesianMLP
from pyro_cl.nn.local_reparam import VARIANCE_FLOOR, SampledGaussianLinear

REGIMES = {
    "UCI step (35 points, 1000 samples)": {"points": 35, "samples": 1000, "regression": True},
    "weather step (125 points, 100 samples)": {"points": 125, "samples": 100, "regression": False},
}
HIDDEN, FEATURES, OUTPUTS, PRIOR_SCALE = (16, 16), 8, 2, 1.0


class HandWritten:
    """Mean-field Gaussian weights of a tanh MLP, trained by Bayes by backprop with one weight
    draw per Monte Carlo sample."""

    def __init__(self, regression: bool, local_reparameterization: bool = False) -> None:
        sizes = [FEATURES, *HIDDEN, OUTPUTS]
        self.regression = regression
        self.local_reparameterization = local_reparameterization
        self.layers = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            loc = (torch.randn(fan_in + 1, fan_out) / math.sqrt(fan_in)).requires_grad_()
            log_var = torch.full((fan_in + 1, fan_out), -6.0, requires_grad=True)
            self.layers.append((loc, log_var))
        self.optimiser = torch.optim.Adam([p for pair in self.layers for p in pair], lr=1e-3)

    def loss(self, x: torch.Tensor, y: torch.Tensor, samples: int) -> torch.Tensor:
        h = x.expand(samples, *x.shape)
        kl = 0.0
        for i, (loc, log_var) in enumerate(self.layers):
            scale = torch.exp(0.5 * log_var)
            if self.local_reparameterization:  # pre-activations ~ N(h μ + b, h² σ² + s²)
                rows = x if i == 0 else h.reshape(-1, h.shape[-1])  # the inputs: shared at first
                mean = torch.addmm(loc[-1], rows, loc[:-1])
                var = torch.addmm(log_var[-1].exp(), rows.square(), log_var[:-1].exp())
                lead = (samples, x.shape[0])
                noise = torch.randn(*lead, loc.shape[1])
                h = (
                    mean.reshape(-1, *lead[1:], loc.shape[1])
                    + var.sqrt().reshape(-1, *lead[1:], loc.shape[1]) * noise
                )
            else:
                w = loc + scale * torch.randn(samples, *loc.shape)
                h = torch.baddbmm(w[:, -1:, :], h, w[:, :-1, :])
            if i < len(self.layers) - 1:
                h = torch.tanh(h)
            variance = scale.square() / PRIOR_SCALE**2
            kl = kl + 0.5 * (variance + loc.square() / PRIOR_SCALE**2 - 1 - variance.log()).sum()
        if self.regression:
            mean, noise = h[..., 0], torch.nn.functional.softplus(h[..., 1]) + 1e-3
            log_likelihood = torch.distributions.Normal(mean, noise).log_prob(y)
        else:
            log_likelihood = -torch.nn.functional.cross_entropy(
                h.reshape(-1, OUTPUTS), y.repeat(samples), reduction="none"
            ).reshape(samples, -1)
        return kl / x.shape[0] - log_likelihood.mean(0).sum() / x.shape[0]

    def run(self, x: torch.Tensor, y: torch.Tensor, samples: int, iterations: int) -> None:
        for _ in range(iterations):
            self.optimiser.zero_grad(set_to_none=True)
            self.loss(x, y, samples).backward()
            self.optimiser.step()


def library_learner(
    regression: bool, samples: int, iterations: int, local_reparameterization: bool
) -> ContinualLearner:
    net = BayesianMLP(
        FEATURES,
        list(HIDDEN),
        OUTPUTS,
        activation="tanh",
        prior_scale=PRIOR_SCALE,
        local_reparameterization=local_reparameterization,
    )
    likelihood = HeteroscedasticGaussianLikelihood() if regression else CategoricalLikelihood()
    return ContinualLearner(
        net,
        likelihood,
        epochs=iterations,
        batch_size=None,
        num_particles=samples,
        ml_init_epochs=0,
        progress=False,
        seed=0,
    )


def ms_per_iteration(fn, iterations: int) -> float:
    start = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - start) / iterations


def time_regime(
    regime: dict, iterations: int, repeats: int, local_reparameterization: bool
) -> tuple[float, float]:
    """Median ms per iteration of the hand-written loop and of ``observe`` with the same
    estimator, alternating."""
    lrt = local_reparameterization
    x = torch.randn(regime["points"], FEATURES)
    if regime["regression"]:
        y = torch.randn(regime["points"])
    else:
        y = torch.randint(0, OUTPUTS, (regime["points"],))
    samples = regime["samples"]
    hand = HandWritten(regime["regression"], lrt)
    hand.run(x, y, samples, 5)  # warm-up
    library_learner(regime["regression"], samples, 5, lrt).observe((x, y))
    hand_times, library_times = [], []
    for _ in range(repeats):  # alternate, so both see the same machine
        hand_times.append(ms_per_iteration(lambda: hand.run(x, y, samples, iterations), iterations))
        learner = library_learner(regime["regression"], samples, iterations, lrt)
        library_times.append(ms_per_iteration(lambda: learner.observe((x, y)), iterations))  # noqa: B023
    return statistics.median(hand_times), statistics.median(library_times)


def time_mnist_epoch(repeats: int, floor: bool = False) -> tuple[float, float, float | None]:
    """Median ms per epoch of the hand-written loop, of a one-epoch ``observe`` and (with
    ``floor``) of :class:`PackedFloor`, alternating (one warm-up round first)."""
    x, y = torch.rand(10_000, 784), torch.randint(0, 10, (10_000,))
    hand = HandWrittenBayesByBackprop([784, 100, 100, 10], torch.device("cpu"))
    net = BayesianMLP(784, [100, 100], 10)
    vcl = VCL(net, epochs=1, ml_init_epochs=0, batch_size=256, num_particles=1, progress=False)
    packed = PackedFloor([784, 100, 100, 10], x.shape[0]) if floor else None
    hand_times, library_times, floor_times = [], [], []
    for _ in range(repeats + 1):
        hand_times.append(ms_per_iteration(lambda: hand.epoch(x, y, 256), 1))
        library_times.append(ms_per_iteration(lambda: vcl.observe((x, y)), 1))
        if packed is not None:
            floor_times.append(ms_per_iteration(lambda: packed.epoch(x, y, 256), 1))
    floor_ms = statistics.median(floor_times[1:]) if floor else None
    return statistics.median(hand_times[1:]), statistics.median(library_times[1:]), floor_ms


class PackedFloor:
    """The MNIST epoch with nothing around the arithmetic: ``(μ, log σ²)`` of every weight in two
    flat tensors, pyro_cl's fused local-reparameterisation layers, the cross-entropy's gradient
    from autograd and the KL's (``(μ - μ_p)/σ_p²``, ``½(σ²/σ_p² - 1)`` per point) added inside
    one compiled Adam update of both tensors."""

    def __init__(self, sizes: list[int], dataset_size: int) -> None:
        self.shapes = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            self.shapes += [(fan_out, fan_in), (fan_out,)]
        size = sum(math.prod(shape) for shape in self.shapes)
        self.loc = 0.1 * torch.randn(size)
        self.log_variance = torch.full((size,), -6.0)
        self.moments = [torch.zeros(size) for _ in range(4)]
        self.steps = torch.zeros(())
        self.scale = 1.0 / dataset_size
        self.update = torch.compile(_adam_with_kl, fullgraph=True)

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(site_views(flat, dict(enumerate(self.shapes))).values())

    def epoch(self, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> None:
        for index in torch.randperm(x.shape[0]).split(batch_size):
            with torch.no_grad():
                variance = self.log_variance.exp()
            loc = self.loc.detach().requires_grad_()
            variance.requires_grad_()
            locs, variances = self.views(loc), self.views(variance)
            hidden = x.index_select(0, index)
            for layer in range(len(self.shapes) // 2):
                w, b = 2 * layer, 2 * layer + 1
                noise = torch.randn(hidden.shape[0], self.shapes[w][0])
                floor = variances[b] + VARIANCE_FLOOR
                hidden = SampledGaussianLinear.apply(
                    hidden, locs[w], variances[w], locs[b], floor, noise
                )
                if layer < len(self.shapes) // 2 - 1:
                    hidden = torch.relu(hidden)
            torch.nn.functional.cross_entropy(hidden, y[index]).backward()
            with torch.no_grad():
                self.update(self.loc, self.log_variance, variance, loc.grad, variance.grad,
                            *self.moments, self.steps, self.scale)  # fmt: skip


def _adam_with_kl(loc, log_variance, variance, grad_loc, grad_variance, m_loc, v_loc, m_var,
                  v_var, steps, scale: float, lr: float = 1e-3) -> None:  # fmt: skip
    """Adam on ``(μ, log σ²)`` with the N(0, 1) prior's KL gradient (times ``scale``) added."""
    steps.add_(1)
    first, second = 1 - 0.9**steps, 1 - 0.999**steps
    gradients = (grad_loc + scale * loc, grad_variance * variance + scale * 0.5 * (variance - 1))
    for p, g, m, v in (
        (loc, gradients[0], m_loc, v_loc),
        (log_variance, gradients[1], m_var, v_var),
    ):
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.sub_(lr * (m / first) / ((v / second).sqrt() + 1e-8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mnist-only", action="store_true", help="only the MNIST epoch row")
    parser.add_argument("--floor", action="store_true", help="the packed, compiled floor row too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{args.threads} threads, {args.iterations} iterations per timing, median of "
          f"{args.repeats}")  # fmt: skip
    print("| regime | estimator | hand-written loop | pyro_cl | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, regime in ({} if args.mnist_only else REGIMES).items():
        for lrt, estimator in ((False, "a weight draw per sample"), (True, "local reparam.")):
            hand, library = time_regime(regime, args.iterations, args.repeats, lrt)
            print(
                f"| {label} | {estimator} | {hand:.1f} ms/iter | {library:.1f} ms/iter | "
                f"{library / hand:.2f}x |",
                flush=True,
            )
    hand, library, floor = time_mnist_epoch(2 * args.repeats, args.floor)
    print(
        f"| MNIST epoch (10,000 inputs, batch 256, 1 sample) | local reparam. | {hand:.0f} ms | "
        f"{library:.0f} ms | {library / hand:.2f}x |"
    )
    if floor is not None:
        print(
            f"| MNIST epoch, the floor: packed, KL and Adam in one compiled update | local "
            f"reparam. | {hand:.0f} ms | {floor:.0f} ms | {floor / hand:.2f}x |"
        )


if __name__ == "__main__":
    main()
