"""The peer libraries side by side with ours, through the results protocol (issue 71): every row
on the same tasks, net and schedule, its setting chosen on validation, the test sets read once,
the run kept as a record (``benchmarks/records/peers-<benchmark>.json``).

    pip install -e ".[peers]"      # laplace-torch 0.3, ivon-opt 0.1.3, avalanche-lib 0.6.0
    OMP_NUM_THREADS=1 python benchmarks/peers.py --seeds 0 1 2
    python benchmarks/peers.py --seeds 0 --tiny                 # a check, seconds

The stream is ``pyro-cl run``'s default (five permutations of scikit-learn's 8x8 digits, one
head, 40 epochs in minibatches of 64: the demo's) or another MLP task preset (``--benchmark``);
on a multi-head one (``split-mnist``: a head a task, the task label given at test time) every
peer's net has a head a task too (:class:`HeadPerTask`; Avalanche's strategies route each point,
replayed ones included, by its task label). Rows, each a grid chosen on the held-out tenth of
every task's training data:

* ours (:mod:`pyro_cl.app.selection` over benchmark runs): fine-tuning, VCL, Laplace
  propagation (``lp``, diagonal, and Kronecker-factored with :class:`KroneckerFactored`), IVON
  (``ivon``), function-space VI at the coreset's points (all of them at every step, or
  S-FSVI's 40 of each task's drawn at every step, and that at one draw of the likelihood and four
  of the context's moments, the draws that bring it nearest Avalanche Replay's time on the
  demo's stream, 1.7x timed alone: a row added after the first test readings, its draws fixed by
  that time, not chosen), each over Adam's learning rate (IVON: its own; function space: the
  KL's weighing) as declared below; Laplace propagation also over
  laplace-torch's prior precisions {1, 10} (a grid widened after the first reading of the test
  sets had shown the diagonal row behind laplace-torch, whose grid held them: still chosen on
  validation, but say so where the row is quoted; the KFAC row came later, with that grid);
* **laplace-torch**, online Laplace, diagonal and Kronecker-factored (KFAC) (its continual-learning
  recipe: after each task ``Laplace(..., hessian_structure="diag" or "kron").fit(task,
  override=False)`` adds the task's Gauss-Newton diagonal or Kronecker factors to the precision
  ``P`` (KFAC's factors summed factor by factor, laplace-torch's approximation), and the next task
  is fitted by Adam against ``½ (θ - μ)ᵀ P (θ - μ)``), predicting with the MAP as our ``lp``
  does; its prior precision chosen;
* **ivon-opt**, IVON carried over tasks (one optimiser, its Hessian estimate kept, the
  effective sample size each task's), predicting with 10 draws; its learning rate chosen;
* **Avalanche**: Naive (fine-tuning), Replay with a buffer of the points our coreset keeps over
  the stream (200 a task: 1,000 on the demo's five), EWC (λ chosen), LwF (α chosen), SI (λ
  chosen), DER++ with the same buffer (α chosen) and A-GEM with 200 points an experience, each
  strategy on the same tensors as its experiences, and GEM with the same points a task (its
  QP solved by quadprog, in the ``peers`` extra).

On a class-incremental stream (``--benchmark split-digits-class-incremental`` or
``split-mnist-class-incremental``: one head, no task label at test time) the rows are those that
keep points, at the same points in all: ours fine-tuning, experience replay (``finetune-er``)
and function-space VI, each over Adam's rate; Avalanche's Naive, Replay, DER++, iCaRL (herded exemplars, the nearest
mean of exemplars), A-GEM, GEM, and LwF (which keeps none, the classic baseline of the setting).
The regularisers that keep nothing (EWC, SI, the Laplace rows, IVON) predict only the last
task's classes there, as fine-tuning does, and are left out. On the conv net
(``split-cifar10-class-incremental``) function space runs one setting fixed before its runs, at
fewer draws (:func:`_conv_function_space`): a run is about half an hour here.

The peers run the preset's net in ``torch.nn`` at PyTorch's default initialisation: an MLP of its
widths, or on ``split-cifar10-class-incremental`` (Avalanche's rows only) the conv net of
:class:`~pyro_cl.nn.BayesianCNN` with one head over the ten classes; that stream is hours on a
2-core CPU (``--tiny`` on a small CIFAR file is the check).
Every row reports ACC, BWT, ECE (%), seconds and the bytes of data it keeps (none here but
function-space VI's context points; a posterior is not counted).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata as metadata
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pyro_cl.app.benchmark_run import BenchmarkRun
from pyro_cl.app.records import current_commit, load_record, make_record, write_record
from pyro_cl.app.result import RunResult
from pyro_cl.app.selection import (
    choose_and_test,
    fitter_option_grid,
    kept_bytes_by_row,
    kept_numbers,
    learning_rate_grid,
    restore_kept_runs,
    select_then_test,
    test_numbers,
    with_adam_carried,
    with_learning_rate,
)
from pyro_cl.guides import KroneckerFactored
from pyro_cl.metrics import expected_calibration_error

#: Adam's learning rates our rows and the Laplace row are scored at.
RATES = (1e-3, 3e-3)

#: Function space's row at fewer draws, timed to about replay's speed (:func:`ours`).
FAST_FUNCTION_SPACE = "function-space VI, fast: 40 kept points a task a step, 1 + 4 draws"
#: ... its draws: one of the likelihood (a training setting) and, of the fitter's, four of the
#: context's moments at 40 of each task's kept points a step.
FAST_TRAINING = {"num_particles": 1}
FAST_CONTEXT = {"context_draws": 40, "context_samples": 4}

#: Function space's row on a class-incremental conv net: one setting (:func:`_conv_function_space`).
CONV_FUNCTION_SPACE = "function-space VI at the kept points, one setting, 1 + 4 draws"

#: What a record's notes say of that row.
CONV_FUNCTION_SPACE_NOTE = (
    " Function space's row on this conv net runs one setting fixed before its runs (class-"
    "incremental split MNIST's validation choice, Adam 1e-3 and the functional KL x 100, at one "
    "draw of the likelihood and four of the moments, 40 of each task's kept points a step; a "
    "grid is hours a setting on this CPU), added on 2026-11-30 after the first reading of this "
    "record's other rows: nothing of it chosen on this stream."
)

#: What a record's notes say of function space's second rate (:func:`_function_space_grid`).
FASTER_FUNCTION_SPACE = (
    " Function space's rows also scored at Adam's 3e-3, as every other row of ours, a setting "
    "added on 2026-11-30 after the first readings of the peers' tables; its fast row (one draw "
    "of the likelihood, four of the context's moments) added after the same readings, its draws "
    "fixed by a time budget (1.7x Avalanche Replay's on the demo's stream, timed alone), not chosen."
)


def ours(
    training: dict,
    class_incremental: bool = False,
    base: BenchmarkRun | None = None,
    more: tuple[tuple[float, float], ...] = (),
    kept: int = 0,
) -> dict[str, dict[str, dict]]:
    """Our rows' grids (fields of :class:`BenchmarkRun`); on a class-incremental stream those
    that keep points (a row that keeps none predicts only the last task's classes there), with
    benchmarks/class_incremental.py's grids and labels (so its kept runs serve here too), and
    its ``--more-function-space`` settings (``kept``: the points a row keeps in all)."""
    if class_incremental:
        from class_incremental import grids

        if base is not None and base.architecture == "cnn":  # a setting is hours a run here
            rows = grids(["finetune", "finetune-er"], base, training, kept=kept, more=more)
            return rows | {CONV_FUNCTION_SPACE: _conv_function_space(training)}
        return grids(["finetune", "finetune-er", "fsvi"], base, training, kept=kept, more=more)
    return {
        # Adam carried: added after the first test reading showed Avalanche's Naive ahead
        "fine-tuning": with_adam_carried(learning_rate_grid("finetune", RATES, training)),
        "VCL": learning_rate_grid("vcl", RATES, training),
        "Laplace propagation (diagonal)": _laplace_grid(training),
        "Laplace propagation (KFAC)": _laplace_grid(training, guide=KroneckerFactored()),
        "function-space VI, the coreset's points": _function_space_grid(training),
        # S-FSVI's draws: a fifth of the context rows a step
        "function-space VI, 40 of each task's kept points a step": _function_space_grid(
            training, context_draws=40
        ),
        # the same at one draw of the likelihood and four of the context's moments, the fewest
        # measured, 1.7x Avalanche Replay's time on the demo's stream (timed alone on
        # validation: lab notes, speed); a row added after the first test readings
        FAST_FUNCTION_SPACE: _function_space_grid({**training, **FAST_TRAINING}, **FAST_CONTEXT),
        "IVON": fitter_option_grid("ivon", "learning_rate", (0.05, 0.2), "IVON lr", training),
    }


def _conv_function_space(training: dict) -> dict[str, dict]:
    """Function space's one setting on a class-incremental conv net, fixed before its runs (a
    grid is out of reach: a run is about an hour on a 2-core CPU): class-incremental split
    MNIST's choice on validation (Adam 10⁻³, the functional KL × 100) at the fast row's draws
    (one of the likelihood, four of the moments, 40 of each task's kept points a step), the old
    moments in chunks of bounded memory."""
    options = {"function_kl_weight": 100.0, **FAST_CONTEXT, "target_rows_at_once": 2048}
    return learning_rate_grid(
        "fsvi", (1e-3,), {**training, **FAST_TRAINING}, fitter_options=options
    )


def _function_space_grid(training: dict, **options) -> dict[str, dict]:
    """Function space's grid over the KL's weighing (``function_kl_scale``) with fitter
    ``options``, at Adam's default rate and at 3·10⁻³ (added after the first test readings of
    the peers' tables, as every other row of ours is scored at both of :data:`RATES`)."""
    grid = fitter_option_grid("fsvi", "function_kl_scale", ("sum", "per_point"), "KL", training)
    for fields in grid.values():
        fields["fitter_options"] |= options
    return with_learning_rate(grid, RATES[1])


def _laplace_grid(training: dict, **fields) -> dict[str, dict]:
    """Laplace propagation over Adam's rate and laplace-torch's prior precisions {1, 10} (10
    added after a first test reading of the diagonal row)."""
    return {
        **learning_rate_grid("lp", RATES, training, **fields),  # the preset's prior, precision 1
        **{
            f"{setting}, prior precision 10": options
            for setting, options in learning_rate_grid(
                "lp", RATES, training, net_options={"prior_scale": 10**-0.5}, **fields
            ).items()
        },
    }


def peers(memory: int, tasks: int, class_incremental: bool = False) -> dict[str, dict[str, dict]]:
    """The peer rows' grids: ``{row: {setting: options}}`` (``memory``: replay's buffer, the
    points our coreset keeps over the stream's ``tasks``); on a class-incremental stream
    Avalanche's rows that keep points, with iCaRL, LwF and Naive beside them."""
    naive = {"Avalanche Naive (fine-tuning)": _avalanche("naive", {})}
    replay = {
        f"Avalanche Replay, {memory:,} points in all": _avalanche("replay", {"mem_size": memory})
    }
    der = {f"Avalanche DER, {memory:,} points in all": _der(memory)}
    gems = {
        f"Avalanche A-GEM, {memory // tasks:,} points a task": _avalanche(
            "agem", {"patterns_per_exp": memory // tasks, "sample_size": 64}
        ),
        f"Avalanche GEM, {memory // tasks:,} points a task": _gem(memory // tasks),
    }
    lwf = {"Avalanche LwF": _lwf()}
    if class_incremental:
        icarl = {"memory_size": memory, "buffer_transform": None, "fixed_memory": True}
        return {
            **naive,
            **replay,
            **der,
            f"Avalanche iCaRL, {memory:,} points in all": _avalanche("icarl", icarl),
            **gems,
            **lwf,
        }
    return {
        **{
            f"laplace-torch, online {name} Laplace": {
                f"prior precision {p:g}, lr {r:g}": {
                    "library": "laplace",
                    "prior_precision": p,
                    "learning_rate": r,
                    **({"structure": "kron"} if name == "KFAC" else {}),
                }
                for p in (1.0, 10.0)
                for r in RATES
            }
            for name in ("diagonal", "KFAC")
        },  # fmt: skip
        "ivon-opt, IVON over the tasks": {
            f"lr {r:g}": {"library": "ivon", "learning_rate": r} for r in (0.05, 0.2)
        },
        "VCL written with posteriors (vi.diag)": {
            f"lr {r:g}": {"library": "posteriors", "learning_rate": r} for r in RATES
        },
        "TyXe VCL (its example; Pyro 1.9 needs a one-line patch)": {
            f"lr {r:g}": {"library": "tyxe", "learning_rate": r} for r in RATES
        },
        **naive,
        **replay,
        "Avalanche EWC": {
            f"λ {strength:g}": {
                "library": "avalanche",
                "kind": "ewc",
                "learning_rate": RATES[0],
                "ewc_lambda": strength,
            }
            for strength in (1.0, 100.0)
        },  # fmt: skip
        # Avalanche 0.6's SI stores the weights as flat views of the parameters on CPU
        # (``param.detach().cpu().flatten()`` is the parameter's own memory there), so the step
        # it measures is zero and so is every importance: the row above is Naive. This row
        # copies them (the plugin's one line, patched while it trains), as on a GPU.
        "Avalanche SI, stored weights copied": {
            f"λ {strength:g}": {
                "library": "avalanche",
                "kind": "si",
                "learning_rate": RATES[0],
                "si_lambda": strength,
                "copy_weights": True,
            }
            for strength in (1.0, 100.0, 10_000.0)
        },  # fmt: skip
        **lwf,
        "Avalanche SI": {
            f"λ {strength:g}": {
                "library": "avalanche",
                "kind": "si",
                "learning_rate": RATES[0],
                "si_lambda": strength,
            }
            for strength in (1.0, 100.0)
        },  # fmt: skip
        **der,
        **gems,
    }


def _der(memory: int) -> dict[str, dict]:
    """DER++'s grid over α (β 0.5) with a buffer of ``memory`` points (0.05 added after class-
    incremental split MNIST's first reading had chosen 0.1, the grid's end: a peer's grid as
    wide as its choice needs)."""
    return {
        f"α {alpha:g}": {
            "library": "avalanche",
            "kind": "der",
            "learning_rate": RATES[0],
            "mem_size": memory,
            "alpha": alpha,
            "beta": 0.5,
        }
        for alpha in (0.05, 0.1, 0.5)
    }


def _gem(points: int) -> dict[str, dict]:
    """GEM's grid over Adam's learning rate: ``points`` a task, its margin γ 0.5 (the paper's)."""
    return _avalanche("gem", {"patterns_per_exp": points, "memory_strength": 0.5})


def _lwf() -> dict[str, dict]:
    """LwF's grid over α (temperature 2)."""
    return {
        f"α {alpha:g}": {"library": "avalanche", "kind": "lwf", "learning_rate": RATES[0],
                         "alpha": alpha}
        for alpha in (0.5, 1.0)
    }  # fmt: skip


def _kind(grid: Mapping[str, Mapping]) -> str:
    """A peer row's strategy (Avalanche's) or library (the others)."""
    options = next(iter(grid.values()))
    return options.get("kind", options["library"])


def _avalanche(kind: str, options: dict) -> dict[str, dict]:
    """An Avalanche row's grid over Adam's learning rate."""
    return {
        f"lr {rate:g}": {"library": "avalanche", "kind": kind, "learning_rate": rate, **options}
        for rate in RATES
    }


def mlp(in_features: int, hidden: list[int], out_features: int) -> nn.Sequential:
    layers, width = [], in_features
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers, nn.Linear(width, out_features))


def cnn(
    input_shape: tuple[int, int, int],
    hidden: list[int],
    out_features: int,
    conv_blocks: tuple[tuple[int, int], ...] = ((32, 32), (64, 64)),
) -> nn.Sequential:
    """:class:`~pyro_cl.nn.BayesianCNN`'s net in ``torch.nn``: per block a padded and an unpadded
    3×3 convolution and a 2×2 max pool, ReLU throughout, then the dense layers and one head."""
    channels, height, width = input_shape
    layers = []
    for block in conv_blocks:
        for padding, size in zip((1, 0), block, strict=True):
            layers += [nn.Conv2d(channels, size, 3, padding=padding), nn.ReLU()]
            channels, height, width = size, height + 2 * padding - 2, width + 2 * padding - 2
        layers.append(nn.MaxPool2d(2))
        height, width = height // 2, width // 2
    return nn.Sequential(
        *layers, nn.Flatten(), *mlp(channels * height * width, hidden, out_features)
    )


def peer_net(base: BenchmarkRun, stream) -> nn.Module:
    """The preset's net in ``torch.nn``, at PyTorch's default initialisation: a head a task
    (:class:`HeadPerTask`) on a multi-head stream."""
    hidden = list(base.resolved_hidden_sizes)
    if base.architecture == "cnn":
        return cnn(stream.input_shape, hidden, stream.num_classes)
    if stream.multi_head:
        trunk = [*mlp(stream.in_features, hidden[:-1], hidden[-1]), nn.ReLU()]
        return HeadPerTask(trunk, hidden[-1], stream.num_classes, len(stream.tasks))
    return mlp(stream.in_features, hidden, stream.num_classes)


class HeadPerTask(nn.Sequential):
    """The trunk's layers, one linear layer of every task's outputs side by side and a slice of
    those of ``task`` (set before a task is learnt and before it is predicted): a head a task in
    layers BackPack knows (laplace-torch's curvature), each head initialised as a linear layer of
    its own would be (the same fan-in)."""

    def __init__(self, layers: list[nn.Module], width: int, classes: int, tasks: int) -> None:
        from backpack.custom_module.slicing import Slicing

        super().__init__(*layers, nn.Linear(width, classes * tasks), Slicing((slice(None),)))
        self.classes = classes
        self.task = 0

    @property
    def task(self) -> int:
        return self._task

    @task.setter
    def task(self, task: int) -> None:
        self._task = int(task)
        self[-1].slice_info = (slice(None), slice(task * self.classes, (task + 1) * self.classes))


_NOT_GIVEN = object()  # a forward called without task labels, not with None


def avalanche_heads(net: HeadPerTask) -> nn.Module:
    """``net`` as an Avalanche ``MultiTaskModule``: a minibatch's points each through the head
    of their own task label (replayed points through their task's; every seen head's outputs
    for LwF's distillation, labels ``None``); called without labels, the head of the task being
    learnt (``net.task``)."""
    from avalanche.models import MultiTaskModule

    class Heads(MultiTaskModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.max_class_label = net.classes  # the width of a mixed minibatch's outputs

        def forward(self, x: torch.Tensor, task_labels=_NOT_GIVEN) -> torch.Tensor:
            # DER's buffer takes the logits of the experience just learnt without its labels
            # (avalanche 0.6.0's ``compute_dataset_logits``): the head of the task learnt;
            # ``None`` keeps Avalanche's meaning, every head's outputs (LwF's distillation)
            if task_labels is _NOT_GIVEN:
                return self.net(x)
            return super().forward(x, task_labels)

        def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
            kept, self.net.task = self.net.task, task_label
            try:
                return self.net(x)
            finally:
                self.net.task = kept

    return Heads()


def batches(x: torch.Tensor, y: torch.Tensor, size: int | None, generator: torch.Generator):
    size = size or len(x)  # None: the whole task at once
    order = torch.randperm(len(x), generator=generator)
    for start in range(0, len(x), size):
        rows = order[start : start + size]
        yield x[rows], y[rows]


class OnlineLaplace:
    """laplace-torch's online Laplace over a stream (the module docstring), of a diagonal
    (``"diag"``) or Kronecker-factored (``"kron"``) precision."""

    def __init__(
        self, net: nn.Module, prior_precision: float, learning_rate: float, structure: str = "diag"
    ) -> None:
        from laplace import Laplace
        from laplace.curvature import BackPackGGN

        self.net, self.learning_rate = net, learning_rate
        # the diagonal from BackPack's exact GGN diagonal: the same precision as laplace-torch's
        # default (Curvlinops) to 1e-7, which took 600 times as long on this CPU (2,000 MNIST
        # points: 139 s against 0.23 s; hours a task of permuted MNIST); KFAC keeps the default
        backend = {"backend": BackPackGGN} if structure == "diag" else {}
        self.laplace = Laplace(
            net, "classification", subset_of_weights="all", hessian_structure=structure,
            prior_precision=prior_precision, **backend,
        )  # fmt: skip
        self.fitted = False

    def penalty(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``θ ↦ ½ (θ - μ)ᵀ P (θ - μ)`` at the posterior so far (fitted once at least)."""
        mean = self.laplace.mean.detach().clone()
        precision = self.laplace.posterior_precision  # a vector, or Kronecker factors
        if torch.is_tensor(precision):
            precision = precision.detach().clone()
            return lambda theta: 0.5 * (precision * (theta - mean) ** 2).sum()
        return lambda theta: 0.5 * (theta - mean) @ precision.bmm(theta - mean, exponent=1)

    def learn(self, index, x, y, epochs: int, batch: int, generator: torch.Generator) -> None:
        optimiser = torch.optim.Adam(self.net.parameters(), lr=self.learning_rate)
        penalty = self.penalty() if self.fitted else None
        for _ in range(epochs):
            for xb, yb in batches(x, y, batch, generator):
                optimiser.zero_grad()
                loss = F.cross_entropy(self.net(xb), yb)
                if penalty is not None:  # per training point
                    theta = nn.utils.parameters_to_vector(self.net.parameters())
                    loss = loss + penalty(theta) / len(x)
                loss.backward()
                optimiser.step()
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=256)
        self.laplace.fit(loader, override=not self.fitted)
        self.fitted = True

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.net(x).softmax(-1)


class IVONOverTasks:
    """ivon-opt's IVON with one optimiser over the stream (the module docstring)."""

    def __init__(self, net: nn.Module, learning_rate: float) -> None:
        self.net, self.learning_rate, self.optimiser = net, learning_rate, None

    def learn(self, index, x, y, epochs: int, batch: int, generator: torch.Generator) -> None:
        import ivon

        if self.optimiser is None:
            self.optimiser = ivon.IVON(self.net.parameters(), lr=self.learning_rate, ess=len(x))
        for group in self.optimiser.param_groups:
            group["ess"] = float(len(x))
        for _ in range(epochs):
            for xb, yb in batches(x, y, batch, generator):
                with self.optimiser.sampled_params(train=True):
                    self.optimiser.zero_grad()
                    F.cross_entropy(self.net(xb), yb).backward()
                self.optimiser.step()

    def probabilities(self, x: torch.Tensor, draws: int = 10) -> torch.Tensor:
        total = 0.0
        with torch.no_grad():
            for _ in range(draws):
                with self.optimiser.sampled_params():
                    total = total + self.net(x).softmax(-1)
        return total / draws


class PosteriorsVCL:
    """VCL written with posteriors' ``vi.diag`` (its continual-learning recipe): each task's
    diagonal Gaussian fitted by its NELBO against the previous task's as the prior (the first
    task's a unit Gaussian), Adam from torchopt on the means and log-scales, the log-posterior
    a minibatch's mean log-likelihood plus the prior's log-density over the task's size, at
    temperature ``1/N``; predictions average the softmax of ``draws`` weight samples."""

    def __init__(self, net: nn.Module, learning_rate: float, draws: int = 10) -> None:
        self.net, self.learning_rate, self.draws = net, learning_rate, draws
        self.mean = {k: v.detach().clone() for k, v in net.named_parameters()}
        self.prior = ({k: torch.zeros_like(v) for k, v in self.mean.items()},
                      {k: torch.ones_like(v) for k, v in self.mean.items()})  # fmt: skip
        self.state = None

    def learn(self, index, x, y, epochs: int, batch: int, generator: torch.Generator) -> None:
        import posteriors
        import torchopt

        prior_mean, prior_sd = self.prior
        size = len(x)

        def log_posterior(params, data):
            inputs, labels = data
            logits = torch.func.functional_call(self.net, params, (inputs,))
            prior = sum(
                torch.distributions.Normal(prior_mean[k], prior_sd[k]).log_prob(v).sum()
                for k, v in params.items()
            )
            return -F.cross_entropy(logits, labels) + prior / size, logits

        transform = posteriors.vi.diag.build(
            log_posterior, torchopt.adam(lr=self.learning_rate), temperature=1 / size,
            init_log_sds=-3.0,  # σ = e⁻³, the VCL reference code's start
        )  # fmt: skip
        self.state = transform.init(self.mean)
        for _ in range(epochs):
            for data in batches(x, y, batch, generator):
                self.state, _ = transform.update(self.state, data, inplace=False)
        self.mean = {k: v.detach().clone() for k, v in self.state.params.items()}
        scales = {k: v.detach().exp() for k, v in self.state.log_sd_diag.items()}
        self.prior = (self.mean, scales)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        import posteriors

        total = 0.0
        with torch.no_grad():
            for _ in range(self.draws):
                params = posteriors.vi.diag.sample(self.state)
                total = total + torch.func.functional_call(self.net, params, (x,)).softmax(-1)
        return total / self.draws


class TyXeVCL:
    """TyXe's VCL (its example): a ``VariationalBNN`` with a unit Gaussian prior and an
    ``AutoNormal`` guide (initial scale 1e-4), each task fitted by Pyro's Adam, the guide's
    posterior the next task's prior (a ``DictPrior``); predictions from ``draws`` draws. TyXe
    0.0.2 calls ``pyro.util.deep_getattr``, which Pyro 1.9 no longer has: the row gives it one
    (``functools.reduce(getattr, ...)``, one line)."""

    def __init__(self, net: nn.Module, learning_rate: float, draws: int = 10) -> None:
        import pyro

        if not hasattr(pyro.util, "deep_getattr"):  # the one-line patch
            pyro.util.deep_getattr = lambda obj, name: functools.reduce(
                getattr, name.split("."), obj
            )
        pyro.clear_param_store()  # TyXe keeps its guide's parameters in Pyro's global store
        self.net, self.learning_rate, self.draws, self.bnn = net, learning_rate, draws, None

    def learn(self, index, x, y, epochs: int, batch: int, generator: torch.Generator) -> None:
        import pyro
        import tyxe

        if self.bnn is None:
            self.bnn = tyxe.VariationalBNN(
                self.net,
                tyxe.priors.IIDPrior(pyro.distributions.Normal(0.0, 1.0)),
                tyxe.likelihoods.Categorical(dataset_size=len(x)),
                functools.partial(tyxe.guides.AutoNormal, init_scale=1e-4),
            )
        else:
            sites = tyxe.util.pyro_sample_sites(self.bnn)
            posterior = self.bnn.net_guide.get_detached_distributions(sites)
            self.bnn.update_prior(tyxe.priors.DictPrior(posterior))
            self.bnn.likelihood.dataset_size = len(x)
        data = torch.utils.data.TensorDataset(x, y)
        loader = torch.utils.data.DataLoader(
            data, batch_size=batch or len(x), shuffle=True, generator=generator
        )
        self.bnn.fit(loader, pyro.optim.Adam({"lr": self.learning_rate}), epochs)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.bnn.predict(x, num_predictions=self.draws).exp()  # log of the mean


class AvalancheStrategy:
    """One of Avalanche's strategies over the stream's tasks as its experiences (the same
    tensors; task label 0 throughout for one head, each experience's own for a head a task),
    trained with Adam; predictions from its model.

    :param kind: ``"naive"``, ``"replay"`` (a buffer of ``mem_size`` points over all
        experiences, balanced), ``"ewc"`` (``ewc_lambda``), ``"lwf"`` (``alpha``, temperature
        2), ``"si"`` (``si_lambda``), ``"der"`` (DER++: ``mem_size`` points with their logits,
        ``alpha`` and ``beta``), ``"agem"`` (``patterns_per_exp``, ``sample_size``), ``"gem"``
        (``patterns_per_exp``, ``memory_strength``; its QP solved by quadprog) or
        ``"icarl"`` (``memory_size`` exemplars in all, herded; the net's last layer its
        classifier while it trains, the nearest mean of exemplars its prediction, whose scores
        are negative distances: their softmax is what its ECE reads).
    """

    def __init__(self, net: nn.Module, stream, kind: str, learning_rate: float,
                 epochs: int, batch: int, **options) -> None:  # fmt: skip
        from avalanche.benchmarks import tensors_benchmark
        from avalanche.training import AGEM, DER, EWC, GEM, ICaRL, LwF, Naive, Replay
        from avalanche.training import SynapticIntelligence as SI
        from avalanche.training.plugins import EvaluationPlugin

        self.net = net
        if stream.multi_head:
            net = avalanche_heads(net)
        scenario = tensors_benchmark(
            [(t.x_train, t.y_train) for t in stream.tasks],
            [(t.x_test, t.y_test) for t in stream.tasks],
            # a head a task: each experience its own label, which replayed points keep
            task_labels=list(range(len(stream.tasks)))
            if stream.multi_head
            else [0] * len(stream.tasks),
        )
        if kind == "icarl":  # what its plugin reads of a class-incremental scenario
            classes = [sorted(set(t.y_train.tolist())) for t in stream.tasks]
            scenario.n_classes_per_exp = [len(c) for c in classes]
            scenario.classes_order = [c for group in classes for c in group]
        self.experiences = scenario.train_stream
        kinds = {
            "naive": Naive, "replay": Replay, "ewc": EWC, "lwf": LwF,
            "si": SI, "der": DER, "agem": AGEM, "gem": GEM,
        }  # fmt: skip
        if kind == "lwf":
            options.setdefault("temperature", 2.0)
        if kind == "ewc":
            options.setdefault("mode", "separate")
        if kind == "der":  # replays only once its buffer holds a replay minibatch (by default
            # the task's minibatch size, whole-task batches on split MNIST: never): the buffer
            options.setdefault("batch_size_mem", min(batch, options["mem_size"]))
        #: SI's stored weights copied, not views of the parameters (the row's comment).
        self.copy_weights = options.pop("copy_weights", False)
        common = {
            "optimizer": torch.optim.Adam(net.parameters(), lr=learning_rate),
            "train_mb_size": batch,
            "train_epochs": epochs,
            "evaluator": EvaluationPlugin(),
        }
        if kind == "icarl":  # its own loss, the net split into features and classifier
            self.strategy = ICaRL(
                feature_extractor=net[:-1], classifier=net[-1], **common, **options
            )
        else:
            self.strategy = kinds[kind](
                model=net, criterion=nn.CrossEntropyLoss(), **common, **options
            )

    def learn(self, index, x, y, epochs: int, batch: int, generator: torch.Generator) -> None:
        if not self.copy_weights:
            self.strategy.train(self.experiences[index])
            return
        from unittest import mock

        from avalanche.training.plugins import SynapticIntelligencePlugin

        with mock.patch.object(SynapticIntelligencePlugin, "extract_weights", _copied_weights):
            self.strategy.train(self.experiences[index])

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        model = self.strategy.model  # the net, or iCaRL's nearest-mean wrapper of it
        model.eval()
        with torch.no_grad():
            if isinstance(self.net, HeadPerTask):  # the head of the task predicted
                return model(x, self.net.task).softmax(-1)
            return model(x).softmax(-1)

    def kept_bytes(self) -> int:
        """The points the strategy keeps (Replay's and DER's buffers, A-GEM's and GEM's per
        experience, iCaRL's exemplars), each as held: its tensors' bytes (DER's logits too), 8 bytes an
        integer."""
        holders = [self.strategy, *getattr(self.strategy, "plugins", [])]
        kept = []
        for holder in holders:
            buffer = getattr(getattr(holder, "storage_policy", None), "buffer", None)
            kept += [buffer] if buffer is not None else []
            kept += list(getattr(holder, "buffers", []))  # A-GEM's
        exemplars = [
            _item_bytes(x) + 8 * len(x)  # iCaRL's: a tensor of a class's exemplars, a label each
            for holder in holders
            for x in getattr(holder, "x_memory", [])
        ]
        exemplars += [  # GEM's: tensors of an experience's points, labels and task labels
            _item_bytes(getattr(holder, name)[t])
            for holder in holders
            for name in ("memory_x", "memory_y", "memory_tid")
            for t in getattr(holder, name, {})
        ]
        return sum(exemplars) + sum(
            _item_bytes(dataset[i]) for dataset in kept for i in range(len(dataset))
        )


@torch.no_grad()
def _copied_weights(model: nn.Module, target, excluded_parameters) -> None:
    """Avalanche's ``SynapticIntelligencePlugin.extract_weights`` with ``clone()``: the stored
    weights are copies, not views that the optimiser's step moves too."""
    from avalanche.training.plugins import SynapticIntelligencePlugin

    for name, param in SynapticIntelligencePlugin.allowed_parameters(model, excluded_parameters):
        target[name].data = param.detach().cpu().flatten().clone()


def _item_bytes(item) -> int:
    """The bytes of one kept point: its tensors', 8 an integer."""
    if torch.is_tensor(item):
        return item.nelement() * item.element_size()
    if isinstance(item, (tuple, list)):
        return sum(_item_bytes(part) for part in item)
    return 8


def run_peer(
    options: Mapping, base: BenchmarkRun, training: dict, seed: int, validation: float | None
) -> dict:
    """One peer run over the stream of ``seed`` (its held-out share with ``validation``)."""
    stream = base.task_stream(seed)
    if validation is not None:
        stream = stream.validation(validation, seed)
    random.seed(seed)  # Avalanche's buffers draw from Python's and NumPy's generators too
    np.random.seed(seed)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    settings = {**base.resolved_training(), **training}
    net = peer_net(base, stream)
    library = options["library"]
    if library == "laplace":
        learner = OnlineLaplace(
            net,
            options["prior_precision"],
            options["learning_rate"],
            options.get("structure", "diag"),
        )
    elif library == "ivon":
        learner = IVONOverTasks(net, options["learning_rate"])
    elif library == "posteriors":
        learner = PosteriorsVCL(net, options["learning_rate"])
    elif library == "tyxe":
        learner = TyXeVCL(net, options["learning_rate"])
    else:  # avalanche
        extra = {k: v for k, v in options.items() if k not in ("library", "kind", "learning_rate")}
        learner = AvalancheStrategy(net, stream, options["kind"], options["learning_rate"],
                                    settings["epochs"], settings["batch_size"] or 10**9,
                                    **extra)  # fmt: skip
    tasks = stream.tasks
    accuracy = np.zeros((len(tasks), len(tasks)))
    calibration = np.full((len(tasks), len(tasks)), np.nan)  # after the last task only
    start = time.perf_counter()
    for i, task in enumerate(tasks):
        if stream.multi_head:
            net.task = i  # the head every library's net calls (HeadPerTask)
        learner.learn(i, task.x_train, task.y_train, settings["epochs"],
                      settings["batch_size"], generator)  # fmt: skip
        for j, seen in enumerate(tasks[: i + 1]):
            if stream.multi_head:
                net.task = j
            probabilities = learner.probabilities(seen.x_test)
            accuracy[i, j] = float((probabilities.argmax(-1) == seen.y_test).double().mean())
            if i == len(tasks) - 1:
                calibration[i, j] = expected_calibration_error(probabilities, seen.y_test)
    result = RunResult(
        options["library"], stream.name, [task.name for task in tasks],
        matrices={"accuracy": accuracy, "calibration_error": calibration},
        details={"kept_bytes": getattr(learner, "kept_bytes", lambda: 0)()},
    )  # fmt: skip
    return test_numbers(result, time.perf_counter() - start)


def resume(record: Mapping, folder: str, peer_rows: set[str]) -> int:
    """Keep a record's runs where this script keeps them (:func:`restore_kept_runs`): our rows'
    in ``folder``, the peers' in ``folder/peers``; the number of runs written."""
    written = 0
    for place, theirs in ((folder, False), (f"{folder}/peers", True)):
        selection = record["selection"].items()
        part = {**record, "selection": {r: c for r, c in selection if (r in peer_rows) == theirs}}
        written += restore_kept_runs(part, place)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--benchmark", default="permuted-digits")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--tiny", action="store_true", help="2 tasks, 1 epoch: a check")
    parser.add_argument(
        "--tasks", type=int, help="TASKS tasks instead of the preset's (a shortened stream)"
    )
    parser.add_argument(
        "--epochs", type=int, help="epochs a task instead of the preset's (a shortened schedule)"
    )
    parser.add_argument(
        "--folder", help="keep every run's numbers here, to resume (none: keep none)"
    )
    parser.add_argument(
        "--peers",
        nargs="+",
        metavar="KIND",
        help="only these peer rows, by Avalanche strategy or library (e.g. replay der icarl "
        "naive; default: every peer row)",
    )
    parser.add_argument(
        "--ours",
        nargs="+",
        metavar="METHOD",
        help="only our rows of these methods (e.g. finetune finetune-er; default: all of ours)",
    )
    parser.add_argument(
        "--resume-from",
        metavar="RECORD",
        help="first keep in --folder the runs of this committed record (rows or settings "
        "added since then run alone)",
    )
    parser.add_argument(
        "--part",
        choices=("ours", "peers"),
        help="run only our rows or only the peers' into --folder (two cores, two processes); "
        "no record: the same command without --part then reads both and writes it",
    )
    from class_incremental import add_more_function_space

    add_more_function_space(parser)
    args = parser.parse_args(argv)
    if args.more_function_space and not args.benchmark.endswith("-class-incremental"):
        parser.error("--more-function-space widens a class-incremental stream's grid")
    if args.tiny and (args.tasks or args.epochs):
        parser.error("--tiny sets its own tasks and epochs")
    for flag, value in (("--tasks", args.tasks), ("--epochs", args.epochs)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1, not {value}")
    training = {"epochs": 1, "num_predictive_samples": 4} if args.tiny else {}
    if args.epochs:
        training["epochs"] = args.epochs
    num_tasks = 2 if args.tiny else args.tasks
    base = BenchmarkRun(
        args.benchmark, data_root=args.data_root, num_tasks=num_tasks, progress=False
    )
    class_incremental = args.benchmark.endswith("-class-incremental")
    # the peers run the preset's net in torch.nn: an MLP, or a conv net for Avalanche's rows
    if not (base.architecture == "mlp" or (base.architecture == "cnn" and class_incremental)):
        parser.error(
            f"the peers run MLP presets and class-incremental conv-net presets; "
            f"{args.benchmark} builds a {base.architecture} net"
        )
    stream = base.task_stream(args.seeds[0])
    memory = base.resolved_coreset_size * len(stream)
    grids = peers(memory, len(stream), class_incremental)
    if args.peers:
        grids = {row: grid for row, grid in grids.items() if _kind(grid) in args.peers}
        if not grids:
            parser.error(f"no peer row is one of {args.peers}")
    if args.part and not args.folder:
        parser.error("--part keeps its runs in --folder for the run that writes the record")
    resumed = ""
    if args.resume_from:
        if not args.folder:
            parser.error("--resume-from keeps a record's runs in --folder: give --folder")
        try:
            every_peer = set(peers(memory, len(stream), class_incremental))
            earlier = load_record(args.resume_from)
            written = resume(earlier, args.folder, every_peer)
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
        print(f"kept {written} runs of record {args.resume_from!r} in {args.folder}")
        resumed = (
            f" The runs of record {args.resume_from} of {earlier['date']} were kept, not run "
            "again; the settings it does not hold ran anew, beside other loads of the machine, so "
            "seconds of runs from the two dates compare only roughly."
        )
    commit = current_commit()
    measured, selection = {}, {}
    our_grids = ours(training, class_incremental, base, args.more_function_space, memory)
    if args.ours:
        our_grids = {
            row: grid
            for row, grid in our_grids.items()
            if next(iter(grid.values()))["methods"][0] in args.ours
        }
        if not our_grids:
            parser.error(f"no row of ours runs one of {args.ours}")
    if args.part != "peers":
        measured, selection = select_then_test(base, our_grids, args.seeds, folder=args.folder)

    def run_one(row: str, setting: str, options: Mapping, seed: int, validation: float | None):
        def run(place):
            return run_peer(options, base, training, seed, validation)

        return kept_numbers(folder, row, setting, options, seed, validation, run)

    folder = None if args.folder is None else f"{args.folder}/peers"

    theirs, their_selection = {}, {}
    if args.part != "ours":
        theirs, their_selection = choose_and_test(grids, args.seeds, run_one)
    if args.part:
        print(f"kept the {args.part} rows' runs in {args.folder}; run without --part to record")
        return
    shortened = ""
    if args.tasks or args.epochs:
        epochs = base.preset.training["epochs"]
        run_epochs = training.get("epochs", epochs)
        shortened = (
            f" A shortened schedule for a 2-core CPU: {len(stream)} tasks and {run_epochs} "
            f"epoch{'' if run_epochs == 1 else 's'} a task where the preset has its own "
            f"number of tasks and {epochs} epochs; the preset's schedule is the same command "
            f"without --tasks and --epochs."
        )
    libraries = ("laplace-torch", "ivon-opt", "avalanche-lib", "posteriors", "tyxe", "torch")
    versions = {name: metadata.version(name) for name in libraries}
    record = make_record(
        f"peers-{args.benchmark}" + ("-tiny" if args.tiny else ""),
        command="python benchmarks/peers.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        seeds=args.seeds,
        schedule={"preset": args.benchmark, "tasks": len(stream), **training},
        data=stream.name,
        rows={**measured, **theirs},
        metrics=["ACC", "BWT", "ECE", "seconds"],
        selection={**selection, **their_selection},
        storage_bytes=kept_bytes_by_row({**measured, **theirs}),
        commit=commit,
        notes="ACC, BWT and ECE in %; seconds per run on the test sets; peers' versions "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + ". Every row's setting chosen on a tenth of each task's training data. Our "
        "fine-tuning (and replay) also scored with Adam's state carried across tasks, settings "
        "added on 2026-11-30 after the first reading of the peers' tables had shown Avalanche's "
        "Naive ahead (Avalanche keeps one Adam for the stream)."
        + ("" if class_incremental else FASTER_FUNCTION_SPACE)
        + (CONV_FUNCTION_SPACE_NOTE if CONV_FUNCTION_SPACE in measured else "")
        + shortened
        + resumed,
    )
    print(f"wrote {write_record(record)}")
    for row, per_seed in record["rows"].items():
        values = [numbers["ACC"] for numbers in per_seed.values()]
        print(f"{row}: ACC {statistics.mean(values):.2f}")


if __name__ == "__main__":
    main()
