"""No host synchronisation per training step (issue 16): a fit reads a tensor's value back to
Python once per epoch (the epoch's mean loss), whatever the number of minibatches. On a GPU each
such read stalls the device; here every read is counted on CPU with a torch function mode."""

from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from pyro_cl import VCL
from pyro_cl.infer.ivon import IVON
from pyro_cl.infer.vogn import VOGN
from pyro_cl.nn import BayesianMLP

#: Tensor methods that hand a value (or a data-dependent size) to the host.
HOST_READS = {"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"}
HOST_READS |= {"nonzero", "unique", "_unique2", "equal", "allclose"}


class CountHostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.reads = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.reads[name] += 1
        return func(*args, **(kwargs or {}))


def _host_reads(fitter, epochs: int, batch_size: int) -> int:
    torch.manual_seed(0)
    x, y = torch.rand(512, 20), torch.randint(0, 3, (512,))
    learner = VCL(
        BayesianMLP(20, [8], 3),
        fitter=fitter,
        epochs=epochs,
        batch_size=batch_size,
        ml_init_epochs=0,
        progress=False,
    )
    with CountHostReads() as counter:
        learner.observe((x, y))
    return sum(counter.reads.values())


@pytest.mark.parametrize("fitter", [None, VOGN(), IVON()], ids=["svi", "vogn", "ivon"])
def test_a_fit_reads_the_host_once_per_epoch_not_per_step(fitter):
    base = _host_reads(fitter, epochs=1, batch_size=64)  # 8 steps: set-up, checks, one epoch
    assert _host_reads(fitter, epochs=1, batch_size=16) == base  # 32 steps, the same reads
    assert _host_reads(fitter, epochs=3, batch_size=64) == base + 2  # one more per epoch
