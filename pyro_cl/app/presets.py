"""Named benchmark set-ups: a task stream plus the paper's net and training settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyro_cl.data import (
    generative_digits,
    generative_mnist,
    generative_notmnist,
    permuted_digits,
    permuted_mnist,
    split_cifar,
    split_cifar10,
    split_digits,
    split_mnist,
    split_notmnist,
)
from pyro_cl.data.tasks import TaskStream

__all__ = ["Preset", "PRESETS", "DEFAULT_PRESET"]

#: What ``pyro-cl run`` runs with no arguments: needs no download and no data folder.
DEFAULT_PRESET = "permuted-digits"


@dataclass(frozen=True)
class Preset:
    """A benchmark: how to build its stream and the defaults it is run with."""

    description: str
    stream: Callable[..., TaskStream]
    hidden_sizes: tuple[int, ...]
    training: dict = field(default_factory=dict)
    #: Points points per task for the coreset methods (the paper's choice for this benchmark).
    coreset_size: int = 40
    #: "mlp" (:class:`~pyro_cl.nn.BayesianMLP`), "cnn" (:class:`~pyro_cl.nn.BayesianCNN`), or
    #: "ibnn"/"hibnn" (:class:`~pyro_cl.nn.IndianBuffetMLP`, independent or hierarchical IBPs).
    architecture: str = "mlp"
    #: Further arguments of the net (e.g. its prior scale).
    net_options: dict = field(default_factory=dict)
    #: The methods ``pyro-cl run`` runs on this benchmark when none are named.
    methods: tuple[str, ...] = ("vcl", "finetune")
    #: Whether the number of tasks is a choice (permuted streams) rather than fixed by the
    #: classes (split streams).
    takes_num_tasks: bool = False
    #: Options of the methods' fitters (each fitter gets those it takes).
    fitter_options: dict = field(default_factory=dict)
    #: Generative benchmarks: how heads are scored
    #: (:class:`~pyro_cl.app.generative_metrics.GenerativeEvaluation`, plus ``classifier_epochs``).
    evaluation: dict = field(default_factory=dict)


#: VCL appendix E and its reference code: Adam at 1e-4, batches of 50, 10 Monte Carlo samples of
#: (z, θ) per point, no maximum-likelihood initialisation, each task starting at the last
#: posterior's means with log σ = -6 (log σ² = -12).
_GENERATIVE_TRAINING = {
    "learning_rate": 1e-4,
    "batch_size": 50,
    "num_particles": 10,
    "ml_init_epochs": 0,
    "init_log_variance": -12.0,
    "between_tasks": "reset_variance",
    "later_init_log_variance": -12.0,
}
#: The methods of VCL figure 7: VCL, naive online learning (fine-tuning), LP, EWC and SI.
_GENERATIVE_METHODS = ("vcl", "finetune", "ewc", "si", "lp")
#: One head, no task label at test time: fine-tuning and VCL, each with and without replay,
#: VCL's coreset and function-space VI.
CLASS_INCREMENTAL_METHODS = ("finetune", "finetune-er", "vcl", "vcl-er", "vcl-random", "fsvi")
#: LP on a VAE uses the Fisher of the bound, as EWC does (VCL section 5: "LP and EWC use the
#: same Σ_t"); the Gauss-Newton diagonal would need one backward pass per pixel.
_GENERATIVE_FITTER_OPTIONS = {"curvature": "fisher", "hessian_samples": 1000}

#: The H-IBP supplement's training settings common to its MNIST benchmarks (section 6).
_IBP_TRAINING = {
    "num_particles": 10,
    "ml_init_epochs": 100,
    "learning_rate_decay": 0.87,
    "learning_rate_decay_steps": 1000,
}


def _generative_preset(
    description: str,
    stream: Callable[..., TaskStream],
    training: dict,
    evaluation: dict,
    width: int = 500,
    latent_dim: int = 50,
) -> Preset:
    """A generative VCL benchmark: the VAE decoder ``z(latent_dim) -> width -> h(width) -> width
    -> pixels`` with private heads, the methods of figure 7, appendix E's settings under
    ``training``, and 5,000 importance samples and 100 generated images a head under
    ``evaluation``."""
    return Preset(
        description,
        stream,
        hidden_sizes=(width,),
        training={**_GENERATIVE_TRAINING, **training},
        architecture="vae",
        net_options={"latent_dim": latent_dim, "representation_size": width},
        methods=_GENERATIVE_METHODS,
        fitter_options=_GENERATIVE_FITTER_OPTIONS,
        evaluation={"test_samples": 5000, "generated": 100, **evaluation},
    )


PRESETS: dict[str, Preset] = {
    "generative-digits": _generative_preset(
        "embedded default for generative VCL: scikit-learn's 8x8 digits 0..9 as ten one-class "
        "tasks, VAE decoder z(8) -> 100 -> h(100) -> 100 -> 64 with private heads, 100 epochs",
        lambda root, seed, num_tasks, download: generative_digits(seed=seed),
        width=100,
        latent_dim=8,
        # 135 images a digit: Adam at 1e-3 and log σ² = -6 to start (measured: with the
        # paper's -12, 300 steps leave q's variances at their start and later digits unlearnt)
        training={
            "learning_rate": 1e-3,
            "epochs": 100,
            "init_log_variance": -6.0,
            "later_init_log_variance": -6.0,
        },
        evaluation={"test_samples": 500, "classifier_epochs": 50},
    ),
    "generative-mnist": _generative_preset(
        "VCL paper section 6.2: MNIST digits 0..9 as ten one-class tasks, VAE decoder "
        "z(50) -> 500 -> h(500) -> 500 -> 784 with private heads (architecture i), "
        "task-specific encoders, Adam 1e-4, 200 epochs",
        lambda root, seed, num_tasks, download: generative_mnist(root, download),
        training={"epochs": 200},
        evaluation={"classifier_epochs": 10},
    ),
    "generative-notmnist": _generative_preset(
        "VCL paper section 6.2: notMNIST letters A..J (10,000-letter subset) as ten one-class "
        "tasks, the generative MNIST net and settings, 400 epochs",
        lambda root, seed, num_tasks, download: generative_notmnist(root),
        training={"epochs": 400},
        evaluation={"classifier_epochs": 20},
    ),
    "split-digits": Preset(
        "split MNIST protocol on scikit-learn's 8x8 digits, multi-head 2x64",
        lambda root, seed, num_tasks, download: split_digits(seed=seed),
        hidden_sizes=(64, 64),
        training={"epochs": 60, "batch_size": 64, "num_particles": 10},
        coreset_size=40,
    ),
    "split-digits-class-incremental": Preset(
        "class-incremental split digits: the split MNIST protocol on the 8x8 digits with one "
        "head over the ten digits and no task label at test time, 2x64, 40 kept points a task",
        lambda root, seed, num_tasks, download: split_digits(seed=seed, class_incremental=True),
        hidden_sizes=(64, 64),
        training={"epochs": 60, "batch_size": 64, "num_particles": 10},
        coreset_size=40,
        methods=CLASS_INCREMENTAL_METHODS,
    ),
    "split-mnist-class-incremental": Preset(
        "class-incremental split MNIST: one head over the ten digits, no task label at test "
        "time, 2x256, minibatches of 128, 10 epochs, 200 kept points a task",
        lambda root, seed, num_tasks, download: split_mnist(root, download, class_incremental=True),
        hidden_sizes=(256, 256),
        training={"epochs": 10, "batch_size": 128, "num_particles": 1},
        coreset_size=200,
        methods=CLASS_INCREMENTAL_METHODS,
    ),
    "split-cifar10-class-incremental": Preset(
        "class-incremental split CIFAR-10: the stand-in's five pairs of classes and its conv "
        "net with one head over the ten classes, no task label at test time; minibatches of "
        "256, 5 epochs, 200 kept points a task",
        lambda root, seed, num_tasks, download: split_cifar10(
            root, download, class_incremental=True
        ),
        hidden_sizes=(512,),
        training={"epochs": 5, "batch_size": 256, "num_particles": 1},
        coreset_size=200,
        architecture="cnn",
        methods=CLASS_INCREMENTAL_METHODS,
        net_options={"prior_scale": 120**-0.5},
    ),
    "permuted-digits": Preset(
        "embedded default: permuted MNIST protocol on scikit-learn's 8x8 digits, 5 tasks, "
        "single-head 2x100",
        lambda root, seed, num_tasks, download: permuted_digits(num_tasks or 5, seed=seed),
        hidden_sizes=(100, 100),
        training={"epochs": 40, "batch_size": 64, "num_particles": 10},
        # 200 of a task's 1348 points: the memory that keeps old permutations (README, demo).
        coreset_size=200,
        # the recommended method for one shared head first, beside VCL, its coreset and
        # fine-tuning (how much the stream forgets): the demo shows the best the library does
        methods=("fsvi", "vcl-random", "vcl", "finetune"),
        takes_num_tasks=True,
    ),
    "split-mnist": Preset(
        "VCL paper: split MNIST, multi-head 2x256, whole-task batches, 120 epochs",
        lambda root, seed, num_tasks, download: split_mnist(root, download),
        hidden_sizes=(256, 256),
        training={"epochs": 120, "batch_size": None, "num_particles": 10},
        coreset_size=40,
    ),
    "split-notmnist": Preset(
        "VCL paper: split notMNIST (A/F, B/G, C/H, D/I, E/J) on the 10,000-letter subset, "
        "multi-head 4x150, whole-task batches, 120 epochs",
        lambda root, seed, num_tasks, download: split_notmnist(root),
        hidden_sizes=(150, 150, 150, 150),
        training={"epochs": 120, "batch_size": None, "num_particles": 10},
        coreset_size=40,
    ),
    "permuted-mnist": Preset(
        "VCL paper: permuted MNIST, 10 tasks, single-head 2x100, batch 256, 100 epochs",
        lambda root, seed, num_tasks, download: permuted_mnist(
            root, num_tasks or 10, seed, download=download
        ),
        hidden_sizes=(100, 100),
        training={"epochs": 100, "batch_size": 256, "num_particles": 10},
        coreset_size=200,
        takes_num_tasks=True,
    ),
    "split-mnist-ibp": Preset(
        "H-IBP supplement section 6: split MNIST, multi-head, one IBNN layer of K = 100, sticks "
        "Beta(5, 1), λ1 = λ2 = 0.7, weight prior N(0, 0.7), ML init 100 epochs, 600 epochs "
        "(720 on task 1), whole-task batches, Adam 1e-3 × 0.87 every 1000 steps",
        lambda root, seed, num_tasks, download: split_mnist(root, download),
        hidden_sizes=(100,),
        training={
            "epochs": 600,
            "first_epochs": 720,
            "batch_size": None,
            **_IBP_TRAINING,
        },
        coreset_size=40,
        architecture="ibnn",
        net_options={
            "prior_scale": 0.7**0.5,
            "alpha": 5.0,
            "beta": 1.0,
            "posterior_temperature": 0.7,
            "prior_temperature": 0.7,
        },
    ),
    "permuted-mnist-ibp": Preset(
        "H-IBP supplement section 6: permuted MNIST, 10 tasks, single head, one IBNN layer of "
        "K = 100, sticks Beta(5, 1), λ1 = λ2 = 1, ML init 100 epochs, 200 epochs, batch 256, "
        "Adam 1e-3 × 0.87 every 1000 steps",
        lambda root, seed, num_tasks, download: permuted_mnist(
            root, num_tasks or 10, seed, download=download
        ),
        hidden_sizes=(100,),
        training={
            "epochs": 200,
            "batch_size": 256,
            **_IBP_TRAINING,
        },
        coreset_size=200,
        architecture="ibnn",
        net_options={
            "alpha": 5.0,
            "beta": 1.0,
            "posterior_temperature": 1.0,
            "prior_temperature": 1.0,
        },
        takes_num_tasks=True,
    ),
    "split-cifar": Preset(
        "VOGN thesis: split CIFAR-10/100 (CIFAR-10, then 5 x 10 CIFAR-100 classes), conv net of "
        "Zenke et al. (2017), multi-head, batch 256, 60 epochs on task 1 and 600 on the others, "
        "prior precision 120",
        lambda root, seed, num_tasks, download: split_cifar(root, download),
        hidden_sizes=(512,),
        training={"epochs": 600, "first_epochs": 60, "batch_size": 256, "num_particles": 10},
        coreset_size=200,
        architecture="cnn",
        net_options={"prior_scale": 120**-0.5},
    ),
    "split-cifar10": Preset(
        "split CIFAR-10 (5 x 2 classes), the split CIFAR net, multi-head, batch 256, 60 epochs: "
        "runs where CIFAR-100 is missing",
        lambda root, seed, num_tasks, download: split_cifar10(root, download),
        hidden_sizes=(512,),
        training={"epochs": 60, "batch_size": 256, "num_particles": 10},
        coreset_size=200,
        architecture="cnn",
        net_options={"prior_scale": 120**-0.5},
    ),
}
