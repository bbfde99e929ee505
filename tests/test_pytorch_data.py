"""Data as PyTorch gives it: a ``Dataset`` or ``DataLoader`` of (input, target) pairs is learnt and
evaluated exactly as the two tensors it holds."""

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from pyro_cl import VCL
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data


class Pairs(Dataset):
    """A map-style dataset of its own, item by item."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Records(Pairs):
    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


def fitted(data):
    learner = VCL(BayesianMLP(4, [6], 2), epochs=3, batch_size=16, seed=0, progress=False)
    learner.observe(data)
    return learner


@pytest.mark.parametrize(
    "wrap",
    [
        lambda x, y: TensorDataset(x, y),
        lambda x, y: Pairs(x, y),
        lambda x, y: DataLoader(TensorDataset(x, y), batch_size=7, shuffle=False),
    ],
    ids=["TensorDataset", "Dataset", "DataLoader"],
)
def test_a_dataset_or_loader_gives_the_posterior_of_its_tensors(wrap):
    x, y = two_class_data(40)
    reference, other = fitted((x, y)), fitted(wrap(x, y))
    for name, q in reference.current_prior().items():
        assert torch.equal(q.base_dist.loc, other.current_prior()[name].base_dist.loc), name
    assert other.evaluate(wrap(x, y)) == reference.evaluate((x, y))


def test_items_that_are_not_pairs_are_refused_in_the_users_terms():
    x, y = two_class_data(10)
    with pytest.raises(ValueError, match=r"Records's items must be \(input, target\) pairs"):
        fitted(Records(x, y))
    with pytest.raises(ValueError, match="got dict"):
        fitted({"x": x, "y": y})
