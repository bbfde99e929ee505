"""benchmarks/peers.py: laplace-torch's online Laplace penalises a step away from the posterior
so far by its precision, diagonal or Kronecker-factored."""

import argparse

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import importable_benchmark_script, load_benchmark_script

pytest.importorskip("laplace")
peers = load_benchmark_script("peers")


@pytest.mark.parametrize("structure", ["diag", "kron"])
def test_the_online_laplace_penalty_is_the_precisions_quadratic_form(structure):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    x, y = torch.randn(60, 4), torch.randint(0, 3, (60,))
    learner = peers.OnlineLaplace(net, 1.0, 1e-2, structure)
    learner.learn(0, x, y, 1, 20, torch.Generator().manual_seed(0))
    precision = learner.laplace.posterior_precision
    dense = torch.diag(precision) if structure == "diag" else precision.to_matrix()
    mean = learner.laplace.mean.detach()
    theta = (mean + torch.randn_like(mean)).requires_grad_()
    penalty = learner.penalty()(theta)
    delta = theta.detach() - mean
    torch.testing.assert_close(penalty, 0.5 * delta @ dense @ delta)
    (gradient,) = torch.autograd.grad(penalty, theta)
    torch.testing.assert_close(gradient, dense @ delta, rtol=1e-4, atol=1e-4)
    assert torch.count_nonzero(dense - torch.diag(torch.diag(dense))) > 0 or structure == "diag"


def test_class_incremental_rows_are_class_incremental_py_s_so_kept_runs_serve_both(monkeypatch):
    from pathlib import Path

    from pyro_cl.app.benchmark_run import BenchmarkRun

    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "benchmarks"))
    base = BenchmarkRun("split-digits-class-incremental", progress=False)
    class_incremental = load_benchmark_script("class_incremental")
    ours = peers.ours({}, class_incremental=True, base=base, kept=200)
    theirs = class_incremental.grids(["finetune", "finetune-er", "fsvi"], base, {}, kept=200)
    assert ours == theirs and list(ours) == [
        "fine-tuning",
        "experience replay",
        "function-space VI at the kept points",
    ]
    more = class_incremental.more_settings(["0.001:10", "3e-4:100"])
    wider = peers.ours({}, class_incremental=True, base=base, more=more, kept=200)
    assert wider == class_incremental.grids(
        ["finetune", "finetune-er", "fsvi"], base, {}, more=more, kept=200
    )
    added = (
        wider["function-space VI at the kept points"].keys()
        - ours["function-space VI at the kept points"].keys()
    )  # the added settings, labelled as the grid's own are
    assert added == {"lr 0.001, function KL × 10", "lr 0.0003, function KL × 100"}
    setting = wider["function-space VI at the kept points"]["lr 0.0003, function KL × 100"]
    assert setting["training"]["learning_rate"] == 3e-4
    assert setting["fitter_options"]["function_kl_weight"] == 100
    assert wider["experience replay"] == ours["experience replay"]  # function space's only
    replay = ours["experience replay"]  # a fresh Adam a task or one carried; K a task or all
    carried = {"lr 0.001", "lr 0.003", "lr 0.001, Adam carried", "lr 0.003, Adam carried"}
    assert set(replay) == carried | {f"{setting}, 200 in all from the start" for setting in carried}
    whole = replay["lr 0.001, Adam carried, 200 in all from the start"]
    assert whole["memory_options"] == {"budget": "total"} and whole["coreset_size"] == 200
    assert "memory_options" not in replay["lr 0.001"]  # the method's K a task
    carried = replay["lr 0.003, Adam carried"]
    assert carried["training"] == {"learning_rate": 0.003, "carry_adam_state": True}
    assert {k: v for k, v in carried.items() if k != "training"} == {
        k: v for k, v in replay["lr 0.003"].items() if k != "training"
    }
    assert "carry_adam_state" not in replay["lr 0.003"]["training"]
    for bad in ("0.001", "0.001:-1", "a:b"):
        with pytest.raises(argparse.ArgumentTypeError):
            class_incremental.more_settings([bad])
    grids = peers.peers(200, 5, class_incremental=True)
    kinds = {row: peers._kind(grid) for row, grid in grids.items()}
    assert kinds["Avalanche Replay, 200 points in all"] == "replay"
    assert kinds["Avalanche DER, 200 points in all"] == "der"
    assert sorted(set(kinds.values())) == ["agem", "der", "gem", "icarl", "lwf", "naive", "replay"]


def test_the_diagonal_from_backpack_is_laplace_torchs_default_diagonal():
    """peers.py asks laplace-torch for BackPack's exact GGN diagonal (Curvlinops, the default,
    is hundreds of times slower on a CPU): the precision must be the default's."""
    from laplace import Laplace

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    x, y = torch.randn(60, 4), torch.randint(0, 3, (60,))
    learner = peers.OnlineLaplace(net, 1.0, 1e-2, "diag")
    learner.learn(0, x, y, 1, 20, torch.Generator().manual_seed(0))
    fresh = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))  # not BackPack's
    fresh.load_state_dict(net.state_dict())
    default = Laplace(
        fresh, "classification", subset_of_weights="all", hessian_structure="diag",
        prior_precision=1.0,
    )  # fmt: skip
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=256)
    default.fit(loader)
    torch.testing.assert_close(
        learner.laplace.posterior_precision, default.posterior_precision, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "0"], "--tasks must be at least 1"),
        (["--epochs", "-2"], "--epochs must be at least 1"),
        (["--tiny", "--epochs", "2"], "--tiny sets its own"),
        (["--part", "ours"], "--part keeps its runs in --folder"),
        (["--resume-from", "peers-permuted-digits"], "--resume-from keeps a record's runs"),
        (["--resume-from", "nowhere", "--folder", "x"], "nowhere"),
        (["--ours", "nothing"], "no row of ours runs one of"),
    ],
)
def test_a_shortened_or_split_run_checks_its_arguments_first(argv, message, capsys):
    with pytest.raises(SystemExit):
        peers.main(["--seeds", "0", *argv])
    assert message in capsys.readouterr().err


def test_a_record_s_runs_are_kept_where_our_rows_and_the_peers_are_read(tmp_path):
    """``--resume-from``: our rows' runs in the folder, the peers' in ``folder/peers``, each at
    the path :func:`kept_numbers` reads, with the grid's fields (so a changed setting is refused
    there and an added one runs alone)."""
    import json

    from pyro_cl.app.selection import kept_numbers

    def chosen(grid):
        return {
            "grid": grid,
            "validation": {setting: {"0": 50.0} for setting in grid},
            "chosen": next(iter(grid)),
            "scored at": [0],
        }

    ours = {"lr 0.001": {"methods": ["finetune"], "training": {"learning_rate": 0.001}}}
    naive = {"lr 0.001": {"library": "avalanche", "kind": "naive", "learning_rate": 0.001}}
    test = {"ACC": 61.0, "seconds": 1.0, "kept bytes": 0}
    record = {
        "name": "peers-check",
        "commit": "abc",
        "rows": {"fine-tuning": {"0": test}, "Avalanche Naive (fine-tuning)": {"0": test}},
        "selection": {
            "fine-tuning": chosen(ours),
            "Avalanche Naive (fine-tuning)": chosen(naive),
        },
    }
    folder = str(tmp_path)
    assert peers.resume(record, folder, {"Avalanche Naive (fine-tuning)"}) == 4

    def never(place):
        raise AssertionError("a kept run ran again")

    for place, row, grid in (
        (folder, "fine-tuning", ours),
        (f"{folder}/peers", "Avalanche Naive (fine-tuning)", naive),
    ):
        fields = grid["lr 0.001"]
        assert kept_numbers(place, row, "lr 0.001", fields, 0, 0.1, never)["ACC"] == 50.0
        assert kept_numbers(place, row, "lr 0.001", fields, 0, None, never)["ACC"] == 61.0
    assert not (tmp_path / "peers" / "fine-tuning").exists()
    kept = next((tmp_path / "fine-tuning").rglob("test-seed0.json"))
    assert json.loads(kept.read_text())["numbers"]["commit"] == "abc"


def test_a_head_a_task_picks_its_own_outputs_for_every_library():
    """Split MNIST with heads: ``net.task`` picks the task's block of the shared output layer
    (what laplace-torch, IVON, posteriors and TyXe call), Avalanche's wrapper routes each point
    by its own task label, and a loss on one task's head leaves the others' weights alone."""
    pytest.importorskip("avalanche")
    torch.manual_seed(0)
    net = peers.HeadPerTask([nn.Linear(3, 4), nn.ReLU()], width=4, classes=2, tasks=3)
    x = torch.randn(5, 3)
    features = net[1](net[0](x))
    every = net[2](features)  # the three heads' outputs side by side
    for task in range(3):
        net.task = task
        torch.testing.assert_close(net(x), every[:, 2 * task : 2 * task + 2])
    heads = peers.avalanche_heads(net)
    labels = torch.tensor([2, 0, 1, 2, 0])
    mixed = heads(x, labels)
    for row, task in enumerate(labels.tolist()):
        torch.testing.assert_close(mixed[row], every[row, 2 * task : 2 * task + 2])
    assert net.task == 2  # the wrapper leaves the head set for prediction as it was
    # without labels (DER's buffer logits of the experience just learnt): the task set; with
    # labels None (LwF's distillation), every head's outputs as Avalanche gives them
    torch.testing.assert_close(heads(x), every[:, 4:6])
    heads.known_train_tasks_labels = {0, 1, 2}  # what adapting to three experiences records
    every_head = heads(x, None)
    for task in range(3):
        torch.testing.assert_close(every_head[task], every[:, 2 * task : 2 * task + 2])
    net.zero_grad()
    net.task = 1
    net(x).sum().backward()
    grad = net[2].weight.grad
    assert grad[2:4].abs().sum() > 0
    assert grad[:2].abs().sum() == 0 and grad[4:].abs().sum() == 0


def test_der_replays_when_a_minibatch_is_larger_than_its_buffer():
    """Whole-task batches (split MNIST with heads): Avalanche's DER replays only once its buffer
    holds ``batch_size_mem`` points, by default the task's minibatch, so it never did and scored
    Naive's numbers to the digit. The row's replay minibatch is at most its buffer; its second
    task then moves the first task's head through the replayed logits, which Naive leaves be."""
    pytest.importorskip("avalanche")
    from pyro_cl.data.tasks import split_tasks

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(120, 5)).astype("float32"), np.repeat(np.arange(4), 30)
    stream = split_tasks("toy", (x, y), (x, y), [(0, 1), (2, 3)])
    heads = {}
    for kind, options in (("naive", {}), ("der", {"mem_size": 20, "alpha": 0.1, "beta": 0.5})):
        torch.manual_seed(0)
        net = peers.HeadPerTask([nn.Linear(5, 4), nn.ReLU()], width=4, classes=2, tasks=2)
        learner = peers.AvalancheStrategy(net, stream, kind, 1e-2, 2, 10**9, **options)
        for i, task in enumerate(stream.tasks):
            net.task = i
            learner.learn(i, task.x_train, task.y_train, 2, None, torch.Generator())
        heads[kind] = net[2].weight[:2].detach().clone()  # the first task's head
    assert learner.strategy.batch_size_mem == 20
    assert not torch.equal(heads["der"], heads["naive"])


@pytest.fixture
def speed():
    yield from importable_benchmark_script("fsvi_vs_replay_speed")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--record", "nowhere"], "nowhere"),
        (["--rows", "no such row"], "no row of peers-permuted-digits starts with"),
    ],
)
def test_the_speed_check_refuses_what_it_cannot_time(speed, argv, message, capsys):
    with pytest.raises(SystemExit):
        speed.main(argv)
    assert message in capsys.readouterr().err
