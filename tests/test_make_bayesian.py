"""Any PyTorch net made Bayesian (pyro_cl.nn.make_bayesian): a user's own modules go through
VCL, save, load and resume like pyro_cl's nets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyro_cl import VCL
from pyro_cl.data import split_digits
from pyro_cl.nn import BayesianConv2d, BayesianLinear, make_bayesian
from pyro_cl.posterior import read_priors

SMALL = {"epochs": 4, "ml_init_epochs": 0, "num_particles": 2, "num_predictive_samples": 3}
FAST = {**SMALL, "epochs": 30, "learning_rate": 1e-2, "batch_size": None}


class DigitCNN(nn.Module):
    """A user's CNN for 8x8 digits, one head per task, written for one batch (N, 64)."""

    def __init__(self, heads: int = 5) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.hidden = nn.Linear(4 * 4 * 4, 16)
        self.heads = nn.ModuleList(nn.Linear(16, 2) for _ in range(heads))

    def forward(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv(x.view(-1, 1, 8, 8))), 2)
        return self.heads[task_id](F.relu(self.hidden(x.flatten(1))))


def _assert_same_posterior(a: VCL, b: VCL) -> None:
    for name, prior in a.current_prior().items():
        other = b.current_prior()[name]
        assert torch.equal(prior.base_dist.loc, other.base_dist.loc), name
        assert torch.equal(prior.base_dist.scale, other.base_dist.scale), name


def test_linear_and_conv_layers_become_sites_named_by_their_path_with_the_chosen_prior():
    user = DigitCNN()
    before = {k: v.clone() for k, v in user.state_dict().items()}
    net = make_bayesian(user, prior_scale=0.5)
    assert isinstance(net.conv, BayesianConv2d) and isinstance(net.heads[3], BayesianLinear)
    assert (net.conv.kernel_size, net.conv.padding) == (3, 1)
    priors = read_priors(net)
    assert {"conv.weight", "conv.bias", "hidden.weight", "heads.4.bias"} <= set(priors)
    assert all(torch.all(p.base_dist.scale == 0.5) for p in priors.values())
    assert all(torch.all(p.base_dist.loc == 0) for p in priors.values())
    # the user's module is left as it was
    assert all(torch.equal(before[k], v) for k, v in user.state_dict().items())
    assert isinstance(user.conv, nn.Conv2d) and not isinstance(user.conv, BayesianConv2d)


def test_a_user_cnn_learns_a_split_digits_task_with_vcl():
    task = split_digits()[0]  # 0 against 1
    learner = VCL(make_bayesian(DigitCNN()), seed=0, **FAST)
    learner.observe(task.train, task_id=task.id)
    # a net that did not learn sits near 0.5
    assert learner.evaluate(task.test, task_id=task.id)["accuracy"] > 0.8


def test_a_user_cnn_saves_loads_and_resumes_identically(tmp_path):
    tasks = [(t.x_train[:40], t.y_train[:40], t.id) for t in list(split_digits())[:3]]
    straight = VCL(make_bayesian(DigitCNN()), seed=0, **SMALL)
    for x, y, task_id in tasks:
        straight.observe((x, y), task_id=task_id)

    first = VCL(make_bayesian(DigitCNN()), seed=0, **SMALL)
    for x, y, task_id in tasks[:2]:
        first.observe((x, y), task_id=task_id)
    first.save(tmp_path / "cnn.pt")
    torch.rand(100)  # other random work between stopping and resuming
    resumed = VCL.load(tmp_path / "cnn.pt", net=make_bayesian(DigitCNN()))
    _assert_same_posterior(first, resumed)
    x, y, task_id = tasks[2]
    resumed.observe((x, y), task_id=task_id)
    _assert_same_posterior(straight, resumed)


def test_a_user_module_tree_runs_on_pyros_route_one_draw_at_a_time():
    net = make_bayesian(nn.Sequential(nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10)))
    learner = VCL(net, seed=0, **SMALL)
    assert not learner.model.fast and not learner.model.vectorized_particles
    with pytest.raises(ValueError, match="broadcasts over a leading particle dimension"):
        VCL(make_bayesian(nn.Linear(4, 2)), elbo="fast")
    x, y = torch.randn(20, 64), torch.randint(0, 10, (20,))
    learner.observe((x, y))
    assert learner.predict(x).shape == (20, 10)


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), r"1 \(BatchNorm1d"),
        (nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4, affine=False)), "batch statistics"),
        (nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)), r"0 \(Conv2d with groups"),
        (nn.Sequential(nn.Conv2d(1, 2, (3, 5))), r"0 \(Conv2d with a non-square"),
        (nn.Sequential(nn.ReLU()), "no nn.Linear or nn.Conv2d layer"),
    ],
)
def test_layers_that_cannot_be_made_bayesian_are_refused_by_name(module, message):
    with pytest.raises(ValueError, match=message):
        make_bayesian(module)


def test_bad_arguments_are_refused_in_the_users_terms():
    with pytest.raises(TypeError, match="takes a torch.nn.Module"):
        make_bayesian("not a net")
    with pytest.raises(ValueError, match="prior_scale"):
        make_bayesian(nn.Linear(2, 2), prior_scale=0.0)


class WideCNN(nn.Module):
    """A user's net whose widest activation is 16×8×8 = 1,024 elements a row."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.head = nn.Linear(16 * 8 * 8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.conv(x.view(-1, 1, 8, 8))).flatten(1))


def test_a_net_run_one_draw_at_a_time_predicts_whole_minibatches_per_draw():
    """Its passes hold one draw, so they are sized for one: 600 inputs at 40 draws in
    ⌈600/256⌉ = 3 passes a draw (120 forward calls, and one probe), not ⌈600/51⌉ = 12 passes a
    draw as a budget divided by the 40 draws a vectorised pass would hold gives."""
    learner = VCL(make_bayesian(WideCNN()), seed=0, **SMALL)
    x = torch.randn(600, 64)
    learner.observe((x[:20], torch.zeros(20, dtype=torch.long)))
    rows = []
    hook = learner.net.head.register_forward_hook(lambda m, i, o: rows.append(o.shape[-2]))
    try:
        samples = learner.predictive_samples(x, num_samples=40)
    finally:
        hook.remove()
    assert samples.shape == (40, 600, 2)
    assert len(rows) == 3 * 40 + 1 and max(rows) == 256
    # and a caller's chunk is taken as given
    rows.clear()
    hook = learner.net.head.register_forward_hook(lambda m, i, o: rows.append(o.shape[-2]))
    try:
        learner.evaluate((x, torch.zeros(600, dtype=torch.long)), num_samples=2, chunk=600)
    finally:
        hook.remove()
    assert rows == [600, 600]


class TiedNet(nn.Module):
    """One hidden layer applied twice (tied weights), and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.again = self.first
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.again(torch.relu(self.first(x)))))


def test_a_layer_used_twice_stays_one_bayesian_layer():
    net = make_bayesian(TiedNet())
    assert net.first is net.again and isinstance(net.first, BayesianLinear)
    learner = VCL(net, seed=0, **SMALL)
    x = torch.randn(30, 4)
    learner.observe((x, (x[:, 0] > 0).long()))
    tied = [name for name in learner.current_prior() if name.endswith(".weight")]
    assert len(tied) == 2  # the tied layer's and the head's, not three


def test_one_weight_shared_by_two_layers_is_refused_by_name():
    user = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    user[2].weight = user[0].weight
    with pytest.raises(ValueError, match=r"0.weight and 2.weight \(one weight tied"):
        make_bayesian(user)


class _BatchStandardised(nn.Module):
    """A forward that takes statistics over the batch (a functional batch norm, no module)."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = F.batch_norm(self.hidden(x), None, None, training=True)
        return self.out(h.relu())


def test_sites_are_found_for_a_forward_that_needs_more_than_one_input():
    """Site discovery runs the net on two inputs: one would make the batch statistics fail."""
    torch.manual_seed(0)
    x = torch.randn(40, 4)
    y = (x[:, 0] > 0).long()
    learner = VCL(make_bayesian(_BatchStandardised()), epochs=2, batch_size=20, seed=0)
    learner.observe((x, y))
    assert set(learner.posterior(0)) == {"hidden.weight", "hidden.bias", "out.weight", "out.bias"}
    assert learner.evaluate((x, y))["accuracy"] > 0.0
