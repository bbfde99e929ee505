import importlib.util
from pathlib import Path

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
    spec.loader.exec_module(module)
    return module


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
