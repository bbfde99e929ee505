import gzip
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import torch


def two_class_data(n: int = 200, features: int = 4, column: int = 0, seed: int = 0):
    """Inputs ~ N(0, I) labelled by the sign of one coordinate."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = (x[:, column] > 0).long()
    return x, y


def load_benchmark_script(name: str):
    """The module ``benchmarks/<name>.py`` (the scripts are not a package)."""
    path = Path(__file__).parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def importable_benchmark_script(name: str):
    """``benchmarks/<name>.py`` with ``benchmarks/`` on ``sys.path`` while it is in use (for a
    script that imports another script): a fixture's body, ``yield from`` it."""
    folder = str(Path(__file__).parent.parent / "benchmarks")
    sys.path.insert(0, folder)
    try:
        yield load_benchmark_script(name)
    finally:
        sys.path.remove(folder)


def loss_and_gradients(loss_fn, module: torch.nn.Module):
    """``loss_fn()`` and the gradients it leaves on ``module``'s parameters (those it reaches)."""
    module.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in module.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def fixed_preactivation_noise(monkeypatch) -> torch.Generator:
    """Make local reparameterisation's noise come from a generator the caller reseeds, so a fast
    and a Pyro route can be run on the same draws."""
    import pyro_cl.nn.local_reparam as lrt_module

    generator = torch.Generator()
    monkeypatch.setattr(
        lrt_module,
        "standard_normal",
        lambda shape, like: torch.randn(shape, generator=generator, dtype=like.dtype),
    )
    return generator


def elbo_on_both_routes(model, guide, x, y, task: int, size: int, particles: int, monkeypatch):
    """The negative ELBO per point and its gradients on ``guide``, ``(loss, grads)`` on the Pyro
    route then on the fast route, both from the same weight draws and (with local
    reparameterisation) the same pre-activation noise. One particle: Pyro's own
    ``TraceMeanField_ELBO``; several: the Pyro route's particle plate."""
    import pyro
    from pyro.infer import TraceMeanField_ELBO

    from pyro_cl.infer.objectives import Minibatch, negative_elbo
    from pyro_cl.nn import local_reparameterization

    generator = fixed_preactivation_noise(monkeypatch)
    rows = Minibatch(x, y, task)

    def same_draws() -> None:
        generator.manual_seed(7)
        pyro.set_rng_seed(3)

    def pyro_loss():
        same_draws()
        if particles > 1:
            return negative_elbo(model, guide, rows, size, particles, fast=False)
        with local_reparameterization():
            elbo = TraceMeanField_ELBO()
            return (
                elbo.differentiable_loss(model, guide, x, y, task_id=task, dataset_size=size) / size
            )

    def fast_loss():
        same_draws()
        return negative_elbo(model, guide, rows, size, particles, fast=True)

    return loss_and_gradients(pyro_loss, guide), loss_and_gradients(fast_loss, guide)


def write_idx(path, array, type_code=0x08) -> None:
    """Write ``array`` as a gzipped IDX file (MNIST's layout)."""
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_fake_mnist(root, num_train: int = 60, num_test: int = 20):
    """Random 28x28 images with labels cycling through 0..9, in torchvision's MNIST layout
    under ``root``; returns ``root``."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", num_train), ("t10k", num_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return root


#: The tiny-settings override of the executed docs and tutorials: every schedule and sample count
#: becomes small (nothing else in the code changes).
TINY_SETTINGS = [
    (r"\b(\w*epochs)=[\d_]+", r"\1=1"),
    (r"\bnum_particles=[\d_]+", "num_particles=2"),
    (r"\bnum_term_samples=[\d_]+", "num_term_samples=10"),
    (r"\bnum_predictive_samples=[\d_]+", "num_predictive_samples=5"),
    (r"\bnum_samples=(?:[2-9]\d|\d{3,})\b", "num_samples=5"),  # not a figure's 16 images
    (r"\bnum_steps=\d{2,}", "num_steps=8"),
    (r"\brange\(\d{3,}\)", "range(3)"),
]


def with_tiny_settings(code: str) -> str:
    """``code`` with its schedules and sample counts shrunk by :data:`TINY_SETTINGS`."""
    for pattern, replacement in TINY_SETTINGS:
        code = re.sub(pattern, replacement, code)
    return code


def float32_tolerance(terms: int) -> dict[str, float]:
    """``rtol``/``atol`` for comparing values derived from float32 arithmetic with an exact or
    float64 route: a sum of ``terms`` float32 numbers is off by up to about ``terms`` ulps of its
    size, whatever the machine's summation order (threads, vector width). A bare 1e-7 on such
    values passes on one machine and fails on another (docs/testing.md)."""
    eps = torch.finfo(torch.float32).eps
    return {"rtol": 4 * terms * eps, "atol": 4 * terms * eps}


def check_monte_carlo_kl_against_quadrature(mu: float, sigma: float, prior) -> float:
    """The mean of the KL term the ELBO takes for ``N(mu, sigma²)`` against ``prior`` (a
    scalar float64 distribution without a registered closed form: one reparameterised draw per
    element, 400,000 draws) within four standard errors of ``∫ q log(q/p)`` by the trapezoidal
    rule; a flipped sign or a dropped term is far off. Returns the integral."""
    from pyro.distributions import Normal

    from pyro_cl.diagonal_gaussian import DiagonalGaussian
    from pyro_cl.kl import site_kl

    double = {"dtype": torch.float64}
    w = torch.linspace(mu - 14 * sigma, mu + 14 * sigma, 200_001, **double)
    q = Normal(torch.tensor(mu, **double), sigma)
    integral = float(torch.trapezoid(q.log_prob(w).exp() * (q.log_prob(w) - prior.log_prob(w)), w))
    torch.manual_seed(0)
    loc = torch.full((50_000,), mu, **double)
    variance = torch.full_like(loc, sigma**2)
    batch = prior.expand(loc.shape)
    terms = [float(site_kl(DiagonalGaussian(loc, variance), batch)) / loc.numel() for _ in range(8)]
    q_draws = q.sample((400_000,))
    spread = float((q.log_prob(q_draws) - prior.log_prob(q_draws)).std())
    assert abs(sum(terms) / len(terms) - integral) < 4 * spread / 400_000**0.5
    return integral


def exact_map_settings() -> dict:
    """The settings under which Laplace propagation's MAP fit reaches a linear-Gaussian model's
    exact posterior mean (whole-batch Adam, 1,500 steps): tests/test_baselines.py and
    tests/test_kronecker_laplace.py."""
    return {
        "epochs": 1500,
        "batch_size": None,
        "learning_rate": 0.02,
        "ml_init_epochs": 0,
        "seed": 0,
        "progress": False,
    }


def exact_regression_settings(epochs: int = 600, learning_rate: float = 0.05) -> dict:
    """The settings under which a joint Gaussian guide reaches a linear-Gaussian model's exact
    posterior (whole-batch Adam with a decaying rate, 32 particles): tests/test_guide_families.py
    and tests/test_kronecker_guide.py."""
    return {
        "epochs": epochs,
        "batch_size": None,
        "learning_rate": learning_rate,
        "learning_rate_decay": 0.3,
        "learning_rate_decay_steps": max(1, epochs // 4),
        "num_particles": 32,
        "ml_init_epochs": 0,
        "seed": 0,
        "progress": False,
    }


def coreset_and_wiener_vcl(net):
    """VCL with a random coreset of 20 and a Wiener(0.1) transition, 30 epochs at 0.02: the run a
    first prior's family is put through (tests/test_*_prior.py)."""
    import pyro_cl

    return pyro_cl.VCL(
        net,
        memory=pyro_cl.memory.RandomCoreset(20),
        transition=pyro_cl.Wiener(0.1),
        epochs=30,
        learning_rate=0.02,
        seed=0,
        progress=False,
    )
