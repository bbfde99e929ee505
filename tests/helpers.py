import torch


def two_class_data(n: int = 200, features: int = 4, column: int = 0, seed: int = 0):
    """Inputs ~ N(0, I) labelled by the sign of one coordinate."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = (x[:, column] > 0).long()
    return x, y
