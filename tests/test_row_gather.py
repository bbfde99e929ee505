"""RowGather: a minibatch's rows in one reused buffer, never a silently stale minibatch."""

import pytest
import torch

from pyro_cl.infer.row_gather import RowGather


def test_rows_equal_indexing_and_share_one_buffer():
    source = torch.randn(50, 3, 4)
    gather = RowGather(source)
    first = gather(torch.tensor([4, 0, 49, 4]))
    assert torch.equal(first, source[[4, 0, 49, 4]])
    pointer = first.data_ptr()
    second = gather(torch.tensor([7, 8]))  # a smaller (last) minibatch: the same memory
    assert torch.equal(second, source[[7, 8]])
    assert second.data_ptr() == pointer
    third = gather(torch.arange(10))  # a larger one: a larger buffer, right rows
    assert torch.equal(third, source[:10])


def test_backward_through_an_overwritten_minibatch_fails():
    weight = torch.randn(3, requires_grad=True)
    gather = RowGather(torch.randn(20, 3))
    loss = (gather(torch.arange(5)) * weight).square().sum()
    gather(torch.arange(5, 10))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
