"""Task-specific FiLM layers (GVCL section 4): the identity at their prior, owned by one task,
per-example gradients that autograd agrees with, and checkpoints that resume."""

import pytest
import torch

from pyro_cl import IVON, VCL, ELBOFitter
from pyro_cl.infer.site_values import substitute_sites
from pyro_cl.nn import BayesianCNN, BayesianFiLM, BayesianMLP
from pyro_cl.posterior import sample_sites


def data(seed=0, n=60):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return x, (x[:, seed % 4] > 0).long()


def prior_means(net):
    return {
        name: module.prior(attribute).mean for name, (module, attribute) in _site_index(net).items()
    }


def _site_index(net):
    return {name: (module, attribute) for name, module, attribute in sample_sites(net)}


def test_film_starts_at_the_identity():
    torch.manual_seed(0)
    plain = BayesianMLP(4, [6, 5], 2)
    film = BayesianMLP(4, [6, 5], 2, film_tasks=3)
    film.hidden.load_state_dict(plain.hidden.state_dict())
    film.heads.load_state_dict(plain.heads.state_dict())
    means = prior_means(film)
    assert torch.equal(means["film.2.1.weight"], torch.ones(5))
    assert torch.equal(means["film.2.1.bias"], torch.zeros(5))
    shared = {
        name: torch.randn_like(value)
        for name, value in means.items()
        if not name.startswith("film")
    }
    means.update(shared)
    x = torch.randn(7, 4)
    with substitute_sites(plain, shared):
        expected = plain(x)
    with substitute_sites(film, means):
        torch.testing.assert_close(film(x, task_id=2), expected)
        # and a task's own scale moves its output only
        moved = dict(means, **{"film.1.0.weight": 2 * torch.ones(6)})
    with substitute_sites(film, moved):
        torch.testing.assert_close(film(x, task_id=2), expected)
        assert not torch.allclose(film(x, task_id=1), expected)


@pytest.mark.parametrize("fitter", [ELBOFitter(), IVON(learning_rate=0.05)])
def test_a_tasks_film_layers_are_left_alone_by_the_next_task(fitter):
    learner = VCL(
        BayesianMLP(4, [8], 2, film_tasks=2),
        fitter=fitter,
        epochs=5,
        batch_size=20,
        seed=0,
        progress=False,
    )
    learner.observe(data(0), task_id=0)
    film_0 = [name for name in learner.guide.site_names if name.startswith("film.0.")]
    assert len(film_0) == 2
    first = {
        name: [value.detach().clone() for value in pair]
        for name, pair in learner.guide.gaussian_parameters(film_0).items()
    }
    shared_before = learner.guide.locs(["hidden.0.weight"])["hidden.0.weight"].detach().clone()
    learner.observe(data(1), task_id=1)
    for name, pair in learner.guide.gaussian_parameters(film_0).items():
        for value, before in zip(pair, first[name], strict=True):
            assert torch.equal(value, before), name
    # the second task did train: its FiLM layers and the shared weights moved
    log_variance = learner.guide.gaussian_parameters(["film.1.0.weight"])["film.1.0.weight"][1]
    assert (log_variance != learner.guide.init_log_variance).all()
    assert not torch.equal(
        learner.guide.locs(["hidden.0.weight"])["hidden.0.weight"], shared_before
    )


@pytest.mark.parametrize("channels", [False, True])
def test_example_gradient_sums_equal_autograd(channels):
    torch.manual_seed(0)
    layer = BayesianFiLM(3, channels=channels).double()
    samples, points = 4, 5
    shape = (samples, points, 3, 2, 2) if channels else (samples, points, 3)
    x = torch.randn(shape, dtype=torch.float64)
    scale = torch.randn(samples, 3, dtype=torch.float64, requires_grad=True)
    shift = torch.randn(samples, 3, dtype=torch.float64, requires_grad=True)
    target = torch.randn(shape, dtype=torch.float64)
    weights = {"weight": torch.randn(samples, 3, dtype=torch.float64), "bias": None}
    with substitute_sites(layer, {"weight": scale, "bias": shift}):
        out = layer(x)
    output_gradient = torch.autograd.grad(((out - target) ** 2).sum(), out)[0]
    sums = layer.example_gradient_sums(x, output_gradient, weights)
    squared = layer.squared_gradient_sums(x, output_gradient)
    for n in range(points):
        loss = ((out[:, n] - target[:, n]) ** 2).sum()
        g_scale, g_shift = torch.autograd.grad(loss, [scale, shift], retain_graph=True)
        torch.testing.assert_close(sums["weight"][n], (g_scale * weights["weight"]).sum(0))
        torch.testing.assert_close(sums["bias"][n], g_shift.sum(0))
    per_example = [
        torch.autograd.grad(((out[s, n] - target[s, n]) ** 2).sum(), scale, retain_graph=True)[0][s]
        for s in range(samples)
        for n in range(points)
    ]
    torch.testing.assert_close(squared["weight"], torch.stack(per_example).square().sum(0))


def test_a_film_cnn_learns_task_by_task():
    net = BayesianCNN((1, 8, 8), conv_blocks=[(2, 3)], hidden_sizes=[4], out_features=2, heads=2)
    film = BayesianCNN(
        (1, 8, 8), conv_blocks=[(2, 3)], hidden_sizes=[4], out_features=2, heads=2, film_tasks=2
    )
    names = {name for name, _, _ in sample_sites(film)}
    plain = {name for name, _, _ in sample_sites(net)}
    assert names - plain == {
        f"film.{t}.{i}.{p}" for t in range(2) for i in range(3) for p in ("weight", "bias")
    }
    learner = VCL(film, epochs=2, seed=0, progress=False)
    x = torch.randn(20, 1, 8, 8)
    y = (x.mean((1, 2, 3)) > 0).long()
    learner.observe((x, y), task_id=0)
    learner.observe((x, y), task_id=1)
    assert learner.evaluate((x, y), task_id=1)["accuracy"] >= 0.5


def test_film_refuses_tasks_it_has_no_layers_for_and_inputs_of_the_wrong_width():
    net = BayesianMLP(4, [8], 2, film_tasks=2)
    with pytest.raises(ValueError, match="FiLM layers for tasks 0..1"):
        net(torch.randn(3, 4), task_id=2)
    with pytest.raises(ValueError, match="FiLM layer of 8 units"):
        BayesianFiLM(8)(torch.randn(3, 5))


def test_a_film_learner_saves_and_resumes_identically(tmp_path):
    runs = []
    for stop in (False, True):
        learner = VCL(BayesianMLP(4, [8], 2, film_tasks=2), epochs=3, seed=2, progress=False)
        learner.observe(data(0), task_id=0)
        if stop:
            learner.save(tmp_path / "film.pt")
            learner = VCL.load(tmp_path / "film.pt")
            assert learner.net.num_film_tasks == 2
        learner.observe(data(1), task_id=1)
        runs.append({k: v.mean for k, v in learner.current_prior().items()})
    for name in runs[0]:
        torch.testing.assert_close(runs[0][name], runs[1][name], rtol=0, atol=0)


class UserNet(torch.nn.Module):
    """A user's multi-head net, to be made Bayesian with FiLM after its hidden layer."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.heads = torch.nn.ModuleList(torch.nn.Linear(8, 2) for _ in range(2))

    def forward(self, x, task_id=0):
        return self.heads[task_id](self.body(x))


def test_film_after_a_user_layer_is_the_identity_at_its_prior_and_owned_by_its_task():
    from pyro_cl.nn import make_bayesian

    net = make_bayesian(UserNet(), film_tasks=2, film_after=["body.0"])
    plain = make_bayesian(UserNet())
    means = prior_means(net)
    assert torch.equal(means["body.0.film.1.weight"], torch.ones(8))
    assert torch.equal(means["body.0.film.1.bias"], torch.zeros(8))
    # at the FiLM prior means the net is the plain one with the same shared weights
    shared = {name: torch.randn_like(v) for name, v in means.items() if ".film." not in name}
    values = {**shared, **{n: v for n, v in means.items() if ".film." in n}}
    renamed = {name.replace("body.0.layer.", "body.0."): v for name, v in shared.items()}
    x = torch.randn(5, 4)
    with substitute_sites(net, values):
        with_film = net(x, task_id=1)
    with substitute_sites(plain, renamed):
        assert torch.allclose(with_film, plain(x, task_id=1))
    # task 1's FiLM layers are not touched by task 0's step, and the other way round
    learner = VCL(net, epochs=5, batch_size=20, seed=0, progress=False)
    learner.observe(data(0), task_id=0)
    trained = set(learner.guide.site_names)
    assert {"body.0.film.0.weight", "body.0.film.0.bias"} <= trained
    assert not any(name.startswith("body.0.film.1.") for name in trained)
    before = learner.guide.locs(["body.0.film.0.weight"])["body.0.film.0.weight"].clone()
    learner.observe(data(1), task_id=1)
    assert torch.equal(learner.guide.locs(["body.0.film.0.weight"])["body.0.film.0.weight"], before)


def test_film_on_a_user_net_is_refused_where_it_cannot_work():
    from pyro_cl.nn import make_bayesian

    with pytest.raises(ValueError, match="not a linear or conv layer"):
        make_bayesian(UserNet(), film_tasks=2, film_after=["body.1"])
    with pytest.raises(ValueError, match="must take task_id"):
        make_bayesian(torch.nn.Sequential(torch.nn.Linear(4, 2)), film_tasks=2, film_after=["0"])
    with pytest.raises(ValueError, match="not a single layer"):
        make_bayesian(torch.nn.Linear(4, 2), film_tasks=2, film_after=["x"])
    with pytest.raises(ValueError, match="both film_tasks and"):
        make_bayesian(UserNet(), film_after=["body.0"])
    net = make_bayesian(UserNet(), film_tasks=1, film_after=["body.0"])
    with pytest.raises(ValueError, match="task 1 has no FiLM layer"):
        net(torch.randn(2, 4), task_id=1)
