"""No host synchronisation per training step (issue 16): a fit reads a tensor's value back to
Python once per epoch (the epoch's mean loss), whatever the number of minibatches, and makes no
tensor from Python numbers per step. On a GPU each read stalls the device, and so does each
tensor made from host data (a blocking host-to-device copy); here both are counted on CPU with
a torch function mode."""

from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from pyro_cl import VCL
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.nn import BayesianMLP, IndianBuffetMLP

#: Tensor methods that hand a value (or a data-dependent size) to the host, and factories that
#: copy host data to the device.
HOST_SYNCS = {"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"}
HOST_SYNCS |= {"nonzero", "unique", "_unique2", "equal", "allclose", "tensor", "as_tensor"}


class CountHostSyncs(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.syncs = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_SYNCS:
            self.syncs[name] += 1
        return func(*args, **(kwargs or {}))


def _host_syncs(fitter, epochs: int, batch_size: int, net=BayesianMLP) -> int:
    torch.manual_seed(0)
    x, y = torch.rand(512, 20), torch.randint(0, 3, (512,))
    learner = VCL(
        net(20, [8], 3),
        fitter=fitter,
        epochs=epochs,
        batch_size=batch_size,
        ml_init_epochs=0,
        progress=False,
    )
    with CountHostSyncs() as counter:
        learner.observe((x, y))
    return sum(counter.syncs.values())


@pytest.mark.parametrize("fitter", [None, VOGN(), IVON()], ids=["svi", "vogn", "ivon"])
def test_a_fit_syncs_with_the_host_once_per_epoch_not_per_step(fitter):
    base = _host_syncs(fitter, epochs=1, batch_size=64)  # 8 steps: set-up, checks, one epoch
    assert _host_syncs(fitter, epochs=1, batch_size=16) == base  # 32 steps, the same syncs
    assert _host_syncs(fitter, epochs=3, batch_size=64) == base + 2  # one more per epoch


@pytest.mark.parametrize("hierarchical", [False, True], ids=["ibnn", "h-ibp"])
def test_an_indian_buffet_fit_syncs_with_the_host_once_per_epoch(hierarchical):
    def net(*sizes):
        return IndianBuffetMLP(*sizes, hierarchical=hierarchical)

    base = _host_syncs(None, epochs=1, batch_size=64, net=net)
    assert _host_syncs(None, epochs=1, batch_size=16, net=net) == base
    assert _host_syncs(None, epochs=3, batch_size=64, net=net) == base + 2
