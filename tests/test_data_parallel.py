"""Data-parallel fits with torch.distributed (gloo, processes spawned by the test).

A 2-process run must give, after each task, the posterior a single process gets on the same
global minibatches (here a 1-process group, which draws the same seeds; tolerance below), every
rank must hold exactly the same posterior, only rank 0 writes, and a 1-process learner resumes
from what the 2-process run saved.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pyro_cl import VCL, SupervisedModel
from pyro_cl import CategoricalLikelihood as Categorical
from pyro_cl.fitters.ivon import IVON
from pyro_cl.fitters.natural_gradient import GradientSums
from pyro_cl.fitters.vogn import VOGN
from pyro_cl.infer.data_parallel import sharded_step
from pyro_cl.infer.packed_gaussians import site_views
from pyro_cl.infer.per_example import gradient_statistics
from pyro_cl.infer.row_gather import RowGather
from pyro_cl.nn import BayesianMLP
from pyro_cl.points import Points

#: 2 processes vs 1 differ only in the order floats are summed (shards, then the all-reduce).
TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}

FITS = {
    # 49 points in batches of 16: the last global minibatch has 1 point, so one rank's shard is
    # empty at that step
    "svi, local reparameterisation": dict(points=49, fitter=None, lrt=True),
    "svi, weight samples": dict(points=64, fitter=None, lrt=False),
    "vogn": dict(points=64, fitter="vogn", lrt=False),
    "ivon": dict(points=64, fitter="ivon", lrt=False),
}


def _task(points: int, task: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + task)
    x = torch.randn(points, 6, generator=generator)
    y = (x[:, task] > 0).long()
    return x, y


def _learner(fitter: str | None, lrt: bool) -> VCL:
    fitters = {None: None, "vogn": VOGN(1e-2, num_samples=2), "ivon": IVON(0.05, num_samples=2)}
    settings = {} if fitter is None else {"init_log_variance": -8.0, "ml_init_epochs": 0}
    return VCL(
        BayesianMLP(6, [8], 2, local_reparameterization=lrt),
        seed=0,
        epochs=3,
        batch_size=16,
        num_particles=2,
        progress=False,
        fitter=fitters[fitter],
        **settings,
    )


def _worker(rank: int, world: int, port: int, folder: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    import pyro_cl.learner.checkpoint as checkpoint_module

    writes = []
    original = checkpoint_module.atomic_save
    checkpoint_module.atomic_save = lambda state, path, *rest: (
        writes.append(str(path)),
        original(state, path, *rest),
    )
    results = {}
    for name, fit in FITS.items():
        learner = _learner(fit["fitter"], fit["lrt"])
        for task in range(2):
            learner.observe(_task(fit["points"], task))
            state = learner.guide.state_dict()
            results[f"{name}/task {task}"] = {k: v for k, v in state.items() if torch.is_tensor(v)}
        if name == "svi, local reparameterisation":
            learner.save(Path(folder) / f"world{world}.pt")
    results["writes"] = writes
    results["spread"] = _spread_statistics()
    torch.save(results, Path(folder) / f"world{world}-rank{rank}.pt")
    dist.destroy_process_group()


def _spread_problem():
    """A net, 4 weight samples of its sites and 10 points: one global minibatch."""
    model = SupervisedModel(BayesianMLP(6, [8], 2, local_reparameterization=False), Categorical())
    generator = torch.Generator().manual_seed(3)
    theta = {
        name: torch.randn(4, *module.prior_parameters(attribute)[0].shape, generator=generator)
        for name, (module, attribute) in model.site_index.items()
    }
    x, y = _task(10, 0)
    return model, theta, x, y


def _spread_statistics() -> dict[str, torch.Tensor]:
    """VOGN's minibatch statistics with the samples spread over the ranks."""
    model, theta, x, y = _spread_problem()
    update = VOGN(num_samples=4, spread_samples=True)
    shapes = {name: value.shape[1:] for name, value in theta.items()}
    sums = GradientSums(shapes, 4, curvature=True, like=x)
    data = Points.of_task(x, y, 0)
    with sharded_step(torch.arange(10)) as shard:
        loss, gradients, squared = update._statistics(
            model, theta, {0: list(theta)}, data, 0, shard, sums, RowGather(data.x)
        )
    return {
        "loss": loss,
        **{f"gradient {n}": g for n, g in site_views(gradients, shapes).items()},
        **{f"squared {n}": g for n, g in site_views(squared, shapes).items()},
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_ranks(worker, args: tuple, ranks: int) -> None:
    """``worker(rank, *args)`` in ``ranks`` processes, joined; forked from a server that has
    imported torch (and ``torch._dynamo``, which a process's first optimiser imports), Pyro and
    pyro_cl once, so a rank pays its own work and not the imports (about 7 s a process)."""
    mp.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch._dynamo", "torch.distributed", "pyro", "pyro_cl"]
    )
    mp.start_processes(worker, args=args, nprocs=ranks, join=True, start_method="forkserver")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data_parallel")
    for world in (1, 2):
        _start_ranks(_worker, (world, _free_port(), str(folder)), world)
    load = lambda world, rank: torch.load(folder / f"world{world}-rank{rank}.pt")  # noqa: E731
    return folder, load(1, 0), load(2, 0), load(2, 1)


@pytest.mark.parametrize("fit", list(FITS))
def test_two_processes_give_the_single_process_posterior(runs, fit):
    _, single, rank0, rank1 = runs
    for task in range(2):
        key = f"{fit}/task {task}"
        assert rank0[key].keys() == single[key].keys()
        for name, value in rank0[key].items():
            assert torch.equal(value, rank1[key][name]), f"{key}: ranks differ in {name}"
            torch.testing.assert_close(value, single[key][name], **TOLERANCE)


def test_only_rank_zero_writes_and_one_process_resumes(runs):
    folder, single, rank0, rank1 = runs
    assert rank0["writes"] == [str(folder / "world2.pt")]
    assert rank1["writes"] == []
    resumed = VCL.load(folder / "world2.pt")
    saved = rank0["svi, local reparameterisation/task 1"]
    for name, value in resumed.guide.state_dict().items():
        if torch.is_tensor(value):
            assert torch.equal(value, saved[name])
    resumed.observe(_task(49, 2))  # a third task, in a plain single process
    assert all(p.isfinite().all() for p in resumed.guide.parameters())


def test_spread_samples_give_each_rank_its_samples_on_its_shard(runs):
    """Osawa et al. 2019's scheme: with 2 ranks, samples 0 and 2 see the first 5 points, samples
    1 and 3 the last 5, each scaled by M/M_r = 2 to stand for the minibatch."""
    _, single, rank0, rank1 = runs
    model, theta, x, y = _spread_problem()
    expected = {"loss": torch.zeros(())}
    for s in range(4):
        rows = slice(0, 5) if s % 2 == 0 else slice(5, 10)
        sample = {n: v[s : s + 1] for n, v in theta.items()}
        stats = gradient_statistics(model, sample, x[rows], y[rows], 0, "fisher")
        expected["loss"] = expected["loss"] + 2 * stats.loss
        for n in theta:
            gradient = expected.setdefault(f"gradient {n}", torch.zeros_like(theta[n]))
            gradient[s] = 2 * stats.gradients[n][0]
            squared = expected.setdefault(f"squared {n}", torch.zeros_like(theta[n][0]))
            squared += 2 * stats.squared[n]
    for key, value in expected.items():
        assert torch.equal(rank0["spread"][key], rank1["spread"][key])
        torch.testing.assert_close(rank0["spread"][key], value, rtol=1e-5, atol=1e-6)
    # without a process group (here: a 1-process group) nothing is spread
    full = gradient_statistics(model, theta, x, y, 0, "fisher")
    torch.testing.assert_close(single["spread"]["loss"], full.loss, rtol=1e-5, atol=1e-6)


def test_pyro_cl_run_under_torchrun_writes_one_result(tmp_path):
    """`pyro-cl run` unchanged under torchrun: two ranks train, rank 0 writes results.json."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(_free_port()),
        "-m",
        "pyro_cl.app.cli",
        "run",
        "--benchmark",
        "permuted-digits",
        "--methods",
        "vcl",
        "--epochs",
        "1",
        "--num-tasks",
        "2",
        "--output",
        str(tmp_path / "out"),
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "results.json").is_file()
    assert done.stdout.count("ACC") >= 1


def _faulty_rank_worker(rank: int, world: int, port: int, folder: str, fault: str) -> None:
    """Rank 1 is given other inputs of the same size (``fault="inputs"``) or labels outside
    the net's two outputs (``"labels"``); each rank records what ``observe`` did."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    learner = _learner(None, True)
    x, y = _task(32, 0)
    if rank == 1:
        x, y = (x + 0.5, y) if fault == "inputs" else (x, y + 5)
    start = time.perf_counter()
    try:
        learner.observe((x, y))
        outcome = "fitted"
    except ValueError as error:
        outcome = str(error)
    seconds = time.perf_counter() - start
    Path(folder, f"rank{rank}.txt").write_text(f"{outcome}|{seconds:.1f}|{learner.tasks_seen}")
    dist.destroy_process_group()


def _faulty_run(tmp_path, fault: str) -> list[list[str]]:
    _start_ranks(_faulty_rank_worker, (2, _free_port(), str(tmp_path), fault), 2)
    return [(tmp_path / f"rank{rank}.txt").read_text().split("|") for rank in (0, 1)]


def test_ranks_given_different_data_refuse_the_step_on_every_rank(tmp_path):
    for outcome, _, seen in _faulty_run(tmp_path, "inputs"):
        assert outcome.startswith("the ranks' step data differ"), outcome
        assert "nothing was fitted" in outcome and seen == "[]"


def test_one_ranks_refused_input_is_every_ranks_error_at_once(tmp_path):
    (outcome0, seconds0, seen0), (outcome1, _, seen1) = _faulty_run(tmp_path, "labels")
    assert outcome0 == "rank 1 refused its input for this step; nothing was fitted"
    assert outcome1 != "fitted" and "rank" not in outcome1  # rank 1 gets its own message
    assert float(seconds0) < 10 and seen0 == seen1 == "[]"
