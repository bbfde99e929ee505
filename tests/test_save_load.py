import hashlib
import os
import pickle
import random
import re
import stat
from pathlib import Path

import pytest
import torch

from pyro_cl import VCL
from pyro_cl.memory import RandomCoreset
from pyro_cl.nn import BayesianMLP
from pyro_cl.serialization import MAGIC, CorruptFileError, atomic_save, safe_load
from tests.helpers import two_class_data

SMALL = dict(epochs=2, batch_size=16, num_particles=1, num_predictive_samples=4, progress=False)


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
    x = two_class_data(20, 4, seed=5)[0]
    learner.predictive_samples(x, task_id=0)  # prediction's stream moves on, and is saved
    path = tmp_path / "state.pt"
    learner.save(path)
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
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_loading_refuses_arbitrary_pickled_objects(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"format": "pyro_cl.learner/2", "payload": _Exploit(str(marker))})
    digest = hashlib.sha256(payload).hexdigest().encode()
    path = tmp_path / "evil.pt"
    path.write_bytes(MAGIC + digest + b"\n" + payload)  # a valid digest over a malicious pickle
    with pytest.raises(CorruptFileError, match="evil.pt holds no readable") as error:
        VCL.load(path)
    assert isinstance(error.value.__cause__, pickle.UnpicklingError)
    assert not marker.exists()
    path.write_bytes(payload)  # no header at all
    with pytest.raises(CorruptFileError, match="not a pyro_cl state file"):
        VCL.load(path)


def test_flipped_bits_and_truncation_are_reported_as_corruption_naming_the_file(tmp_path):
    learner = _learner()
    learner.observe(two_class_data(50, 4), task_id=0)
    path = tmp_path / "state.pt"
    learner.save(path)
    original = path.read_bytes()
    generator = random.Random(0)
    for _trial in range(60):
        data = bytearray(original)
        for _ in range(4):
            position = generator.randrange(len(data))
            data[position] ^= 1 << generator.randrange(8)
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptFileError, match="state.pt"):
            VCL.load(path)
    for length in (0, 5, len(MAGIC) + 10, len(original) // 2, len(original) - 1):
        path.write_bytes(original[:length])
        with pytest.raises(CorruptFileError, match="state.pt (is|is not)"):
            VCL.load(path)
    path.write_bytes(original)
    assert VCL.load(path).tasks_seen == [0]


def test_an_edited_net_configuration_is_refused_before_building_the_net(tmp_path):
    learner = _learner()
    learner.observe(two_class_data(50, 4), task_id=0)
    state = learner.state()
    state["net"]["hidden_sizes"] = [400_000_000]  # ~100 GB if it were built
    path = tmp_path / "crafted.pt"
    atomic_save(state, path)
    with pytest.raises(CorruptFileError, match="does not match the saved weights"):
        VCL.load(path)


def test_saving_keeps_the_mode_and_symlink_and_removes_stale_temporary_files(tmp_path):
    learner = _learner()
    real = tmp_path / "real.pt"
    learner.save(real)
    os.chmod(real, 0o640)
    link = tmp_path / "link.pt"
    link.symlink_to(real)
    stale = tmp_path / ".real.pt.999999999.abc.tmp"  # from a process that no longer runs
    stale.write_bytes(b"half")
    learner.save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.pt", "real.pt"]
    assert VCL.load(link).tasks_seen == []


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


def _resave_with_valid_digest(path, edit):
    """What a plain digest cannot stop: edit the payload, write a new digest."""
    state = safe_load(path)
    edit(state)
    atomic_save(state, path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s["state"]["guide"]["loc.hidden/0/weight"].fill_(float("nan")),
            "not finite",
        ),
        (
            lambda s: s["state"]["guide"]["loc.hidden/0/weight"].fill_(1e30),
            "leaves [-1e+06, 1e+06]",
        ),
        (lambda s: s["state"].__setitem__("times", [0.0, -1.0]), "finite and increasing"),
        (lambda s: s["state"].__setitem__("times", [0.0, float("nan")]), "finite and increasing"),
        (lambda s: s["state"]["memory_points"]["task_ids"].fill_(7), "tasks never observed: [7]"),
        (lambda s: s["parts"]["memory"].__setitem__("size", 1), "where its size allows 1"),
        (
            lambda s: s["state"]["memory_points"]["y"].fill_(7),
            "labels outside its heads' 2 classes",
        ),
    ],
)
def test_an_edited_checkpoint_with_a_recomputed_digest_is_refused_naming_the_file(
    tmp_path, edit, message
):
    learner = VCL(BayesianMLP(4, [8], 2, heads=2), memory=RandomCoreset(3), seed=0, **SMALL)
    learner.observe(two_class_data(32, 4), task_id=0)
    learner.observe(two_class_data(32, 4, column=1), task_id=1)
    path = tmp_path / "state.pt"
    learner.save(path)
    _resave_with_valid_digest(path, edit)
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        VCL.load(path)
    assert str(path) in str(error.value)


def test_a_signed_checkpoint_loads_only_with_its_key(tmp_path):
    learner = VCL(BayesianMLP(4, [8], 2), seed=0, **SMALL)
    learner.observe(two_class_data(32, 4))
    signed, plain = tmp_path / "signed.pt", tmp_path / "plain.pt"
    learner.save(signed, key=b"secret")
    learner.save(plain)
    restored = VCL.load(signed, key=b"secret")
    assert restored.tasks_seen == [0]
    with pytest.raises(ValueError, match="signed: pass the key"):
        VCL.load(signed)
    with pytest.raises(ValueError, match="signature under the key given"):
        VCL.load(signed, key=b"another")
    with pytest.raises(ValueError, match="is not signed"):
        VCL.load(plain, key=b"secret")
    state = safe_load(signed, key=b"secret")  # an edit re-signed without the key cannot pass
    atomic_save(state, signed, key=b"guess")
    with pytest.raises(ValueError, match="signature under the key given"):
        VCL.load(signed, key=b"secret")


def test_a_single_head_memory_of_two_steps_of_one_task_saves_and_loads(tmp_path):
    """Two ``observe`` calls without ``task_id`` keep 10 points each under task 0: the budget is
    per step, as the memory's update applies it, so the load check must agree."""
    learner = VCL(BayesianMLP(4, [8], 2), memory=RandomCoreset(10), epochs=2, seed=0)
    x, y = two_class_data(50)
    learner.observe((x, y))
    learner.observe((x, y))
    assert len(learner.memory_points) == 20 and learner.memory_points.tasks() == [0]
    learner.save(tmp_path / "two_steps.pt")
    loaded = VCL.load(tmp_path / "two_steps.pt")
    assert torch.equal(loaded.memory_points.x, learner.memory_points.x)


def test_a_memory_over_its_budget_is_never_written_and_never_loaded(tmp_path):
    learner = VCL(BayesianMLP(4, [8], 2), memory=RandomCoreset(10), epochs=2, seed=0)
    x, y = two_class_data(50)
    learner.observe((x, y))
    good = learner.memory_points
    learner.memory_points = good.concat(good.select(torch.arange(1)))  # 11 points of one step
    with pytest.raises(ValueError, match="11 points of one step where its size allows 10"):
        learner.save(tmp_path / "over.pt")
    assert not (tmp_path / "over.pt").exists()
    learner.memory_points = good
    learner.save(tmp_path / "ok.pt")
    state = safe_load(tmp_path / "ok.pt")
    points = state["state"]["memory_points"]
    for name in ("x", "y", "task_ids", "times"):
        points[name] = torch.cat([points[name], points[name][:1]])
    atomic_save(state, tmp_path / "edited.pt")
    with pytest.raises(CorruptFileError, match="size allows 10"):
        VCL.load(tmp_path / "edited.pt")


def test_a_loaded_learner_starts_from_the_saved_prior_of_every_site(tmp_path):
    """The handed-on prior is part of the file: after a load every site's prior — the Gaussian
    weights' and the noise precision's Gamma — is the one saved, not the net's initial one."""
    from pyro_cl import ContinualLearner, CoordinateAscent, PrecisionGaussianLikelihood
    from pyro_cl.nn import BayesianLinearRegression

    def learner():
        net = BayesianLinearRegression(3, prior_scale=2.0, concentration=2.0, rate=1.0)
        return ContinualLearner(
            net, PrecisionGaussianLikelihood(), fitter=CoordinateAscent(), ml_init_epochs=0
        )

    x = torch.randn(30, 3)
    fitted = learner()
    fitted.observe((x, x @ torch.tensor([1.0, -1.0, 0.5]) + 0.3 * torch.randn(30)))
    fitted.save(tmp_path / "regression.pt")
    loaded = ContinualLearner.load(tmp_path / "regression.pt", net=learner().net)
    saved, restored = fitted.current_prior(), loaded.current_prior()
    assert saved.keys() == restored.keys() == {"weight", "noise_precision"}
    for name in saved:
        for parameter in ("mean", "variance"):
            assert torch.equal(getattr(saved[name], parameter), getattr(restored[name], parameter))


def test_a_base_class_load_rebuilds_the_subclass_a_file_was_saved_from(tmp_path):
    """``ContinualLearner.load`` reads back a ``VCL`` as a ``VCL``; a class outside the file's
    family is still refused."""
    from pyro_cl import ContinualLearner
    from pyro_cl.baselines import FineTuning

    learner = VCL(BayesianMLP(4, [8], 2), epochs=2, seed=0)
    learner.observe(two_class_data(20))
    learner.save(tmp_path / "vcl.pt")
    assert type(ContinualLearner.load(tmp_path / "vcl.pt")) is VCL
    with pytest.raises(CorruptFileError, match="holds a VCL, not a FineTuning"):
        FineTuning.load(tmp_path / "vcl.pt")


def test_a_checkpoint_of_the_earlier_format_loads_and_resumes_as_saved():
    """tests/data/learner_format2.pt was written by the format-2 code (a multi-head VCL with a
    random coreset after two steps); the expected file holds its posterior and the posterior
    after one more step, taken by the format-2 code from that file."""
    data = Path(__file__).parent / "data"
    expected = torch.load(data / "learner_format2_expected.pt")
    learner = VCL.load(data / "learner_format2.pt")
    for when in ("before", "after"):
        for name, (loc, scale) in expected[when].items():
            q = learner.current_prior()[name].base_dist
            assert torch.equal(q.loc, loc) and torch.equal(q.scale, scale), (when, name)
        if when == "before":
            x = expected["x"]
            learner.observe((x, (x[:, 2] > 0).long()), task_id=1)
    assert learner.times == expected["times"] and len(learner.memory_points) == expected["memory"]
