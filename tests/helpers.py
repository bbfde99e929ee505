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
