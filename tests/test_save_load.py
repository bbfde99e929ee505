import os
import pickle

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.nn import BayesianMLP
from tests.helpers import two_class_data


def _learner(seed=0):
    net = BayesianMLP(4, [8], 2, heads=3)
    return VCL(
        net,
        epochs=4,
        batch_size=32,
        num_particles=2,
        num_predictive_samples=7,
        progress=False,
        seed=seed,
    )


def test_save_load_predict_gives_identical_outputs(tmp_path):
    learner = _learner()
    learner.observe(two_class_data(100, 4, column=0), task_id=0)
    path = tmp_path / "state.pt"
    learner.save(path)
    x = two_class_data(20, 4, seed=5)[0]
    torch.manual_seed(11)
    expected = learner.predictive_samples(x, task_id=0)
    restored = VCL.load(path)
    torch.manual_seed(11)
    torch.testing.assert_close(restored.predictive_samples(x, task_id=0), expected, rtol=0, atol=0)
    assert restored.tasks_seen == [0]
    assert restored.config == learner.config


def test_continuing_after_reload_gives_the_same_posterior_as_never_stopping(tmp_path):
    task0, task1 = two_class_data(100, 4, column=0), two_class_data(100, 4, column=1, seed=1)
    straight = _learner(seed=3)
    straight.observe(task0, task_id=0)
    straight.observe(task1, task_id=1)

    first = _learner(seed=3)
    first.observe(task0, task_id=0)
    first.save(tmp_path / "week1.pt")
    torch.rand(1000)  # the process goes on doing other random things before stopping
    resumed = VCL.load(tmp_path / "week1.pt")
    resumed.observe(task1, task_id=1)

    for name, prior in straight.current_prior().items():
        other = resumed.current_prior()[name]
        assert torch.equal(prior.base_dist.loc, other.base_dist.loc), name
        assert torch.equal(prior.base_dist.scale, other.base_dist.scale), name
    for (key, a), (_, b) in zip(
        straight.guide.state_dict().items(), resumed.guide.state_dict().items(), strict=True
    ):
        if torch.is_tensor(a):
            assert torch.equal(a, b), key


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_loading_refuses_arbitrary_pickled_objects(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"format": "pyro_cl.learner/1", "payload": _Exploit()}, f)
    with pytest.raises(pickle.UnpicklingError):
        VCL.load(path)


def test_a_crash_while_saving_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    learner = _learner()
    learner.observe(two_class_data(50, 4), task_id=0)
    path = tmp_path / "state.pt"
    learner.save(path)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        learner.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]
