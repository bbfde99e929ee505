"""One benchmark run as a Python value: a preset, methods, seeds and what differs from defaults.

``pyro-cl run`` parses its command line into a :class:`BenchmarkRun` and calls
:func:`~pyro_cl.app.runner.run_benchmark`; the scripts under ``benchmarks/`` build one directly::

    from pyro_cl.app.benchmark_run import BenchmarkRun
    from pyro_cl.app.runner import run_benchmark

    run = BenchmarkRun("permuted-mnist", methods=("vcl", "vcl-kcenter"), training={"epochs": 5})
    results = run_benchmark(run)

Every field left at ``None`` (or an empty dict) means "the preset's choice";
:meth:`BenchmarkRun.with_defaults` fills those from a script's schedule, so options a user gives
win over the schedule's.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pyro_cl.app.methods import METHODS, method_names
from pyro_cl.app.part_options import accepted, check_taken
from pyro_cl.app.presets import DEFAULT_PRESET, PRESETS, Preset
from pyro_cl.data.tasks import TaskStream
from pyro_cl.guides import MEAN_FIELD, GuideFamily
from pyro_cl.infer.config import TrainingConfig
from pyro_cl.learner.learner import ContinualLearner
from pyro_cl.nn import BayesianCNN, BayesianMLP, IndianBuffetMLP, VAEDecoder
from pyro_cl.spec import REGISTRIES
from pyro_cl.transitions.base import Transition

__all__ = [
    "ARCHITECTURES",
    "BenchmarkRun",
    "IBP_OPTIONS",
    "check_device",
    "check_positive",
    "check_writable",
    "fill_unset",
]

#: The nets a run can use: ``mlp``, ``cnn``, MLPs with IBP (``ibnn``) or H-IBP (``hibnn``)
#: masks on every hidden layer, and the continual VAE's decoder (``vae``, generative benchmarks
#: only).
ARCHITECTURES = ("mlp", "cnn", "ibnn", "hibnn", "vae")

#: Net options only Indian Buffet nets take (read off the two constructors).
IBP_OPTIONS = frozenset(accepted(IndianBuffetMLP) - accepted(BayesianMLP))


@dataclass(frozen=True)
class BenchmarkRun:
    """What to run; ``None`` and empty dicts mean the preset's (or the library's) default.

    :ivar benchmark: a name in :data:`~pyro_cl.app.presets.PRESETS`.
    :ivar methods: names in :data:`~pyro_cl.app.methods.METHODS` (default: the preset's).
    :ivar seeds: one run of every method per seed (default: seed 0).
    :ivar net: one of :data:`ARCHITECTURES` (default: the preset's).
    :ivar net_options: constructor arguments of the net over the preset's (prior scale, IBP
        options, ...); IBP options are dropped for plain MLPs.
    :ivar training: :class:`~pyro_cl.infer.config.TrainingConfig` settings over the preset's.
    :ivar fitter_options: arguments of the methods' fitters (``learning_rate``, ``beta``, ...);
        each fitter gets those it takes.
    :ivar penalty_options: arguments of the methods' penalties (EWC's and SI's ``strength``,
        ...); each penalty gets those it takes.
    :ivar memory_options: arguments of the methods' memories besides their size (``budget``,
        ...), for the methods that keep points.
    :ivar task_free: a batch size: each task's training data reaches the learner in batches of
        it, one ``observe`` each, with no task label and no task boundary
        (:func:`~pyro_cl.app.task_metrics.task_free_steps`; one-head streams only); measured at
        the end of each task as a task stream is.
    :ivar transition: the transition between tasks (default: each method's).
    :ivar guide: the guide family (default mean-field; labels ``<method>-<family>`` otherwise).
    :ivar single_head: one head for every task of a multi-head stream (labels ``<method>-single-head``).
    :ivar validation: score on a held-out share of each task's training data instead of its
        test set (:meth:`~pyro_cl.data.tasks.TaskStream.validation`), to choose settings.
    :ivar film: task-specific FiLM layers in an MLP or CNN, one set per task (GVCL section 4;
        labels ``<method>-film``).
    :ivar output: folder for ``results.json`` and ``accuracy.png`` (nothing written if None).
    :ivar log_dir: a CSV log of losses, timings and metrics per run (``<method>_seed<k>.csv``),
        and with ``tensorboard`` TensorBoard event files beside it.
    :ivar resumable: save each task benchmark run after every task in
        ``output/checkpoint-<method>-seed<k>/`` and resume it from there when started again
        (:class:`~pyro_cl.app.run_checkpoint.RunCheckpoint`): a run of hours in pieces. With
        ``forward_transfer`` each task's fresh fit (made first) is kept there as it ends
        (:func:`~pyro_cl.app.task_metrics.fresh_fits`).
    :ivar evaluation: for generative benchmarks, the scoring settings over the preset's
        (:class:`~pyro_cl.app.generative_metrics.GenerativeEvaluation`: ``test_samples``, ``test_points``,
        ``generated``, ``grid``, and ``classifier_epochs``).
    """

    benchmark: str = DEFAULT_PRESET
    methods: Sequence[str] | None = None
    seeds: Sequence[int] | None = None
    data_root: str | Path = "data"
    download: bool = False
    device: str | None = None
    output: str | Path | None = None
    net: str | None = None
    hidden_sizes: Sequence[int] | None = None
    num_tasks: int | None = None
    coreset_size: int | None = None
    net_options: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)
    fitter_options: dict = field(default_factory=dict)
    penalty_options: dict = field(default_factory=dict)
    memory_options: dict = field(default_factory=dict)
    transition: Transition | None = None
    guide: GuideFamily | None = None
    local_reparameterization: bool = True
    single_head: bool = False
    film: bool = False
    validation: float | None = None
    task_free: int | None = None
    forward_transfer: bool = False
    progress: bool = True
    evaluation: dict = field(default_factory=dict)
    log_dir: str | Path | None = None
    tensorboard: bool = False
    resumable: bool = False

    def __post_init__(self) -> None:
        """Check everything that can be checked before any training, so that a mistake in a
        later seed or method does not surface after minutes of work.

        :raises ValueError: naming the problem.
        """
        if self.tensorboard and self.log_dir is None:
            raise ValueError("tensorboard needs a log_dir to write to (--log-dir)")
        if self.resumable and self.output is None:
            raise ValueError("a resumable run saves its checkpoints in its output: give an output")
        if self.benchmark not in PRESETS:
            raise ValueError(f"unknown benchmark {self.benchmark!r}; choose from {sorted(PRESETS)}")
        known = method_names("tasks")
        unknown = [m for m in self.method_names if m not in known]
        if unknown:
            online = [m for m in unknown if m in method_names("online")]
            hint = f" ({', '.join(online)}: online methods, for pyro-cl stream)" if online else ""
            raise ValueError(f"unknown methods {unknown}; choose from {known}{hint}")
        if self.methods is not None and not self.method_names:
            raise ValueError("no methods given; choose from " + ", ".join(known))
        keeping = [m for m in self.method_names if METHODS[m].keeps_points]
        if self.coreset_size is not None and not keeping:
            with_memory = [name for name in known if METHODS[name].keeps_points]
            raise ValueError(
                f"a coreset size is given, but none of the methods {', '.join(self.method_names)} "
                f"keeps points; choose one that does ({', '.join(with_memory)})"
            )
        check_seeds(self.seeds or ())
        if self.validation is not None and not 0.0 < self.validation < 1.0:
            raise ValueError(f"the validation share must be in (0, 1), got {self.validation!r}")
        for name in ("coreset_size", "num_tasks", "task_free"):
            check_positive(getattr(self, name), name)
        if self.memory_options:
            bare = [m for m in self.method_names if METHODS[m].memory is None]
            if bare:
                raise ValueError(
                    f"memory options {sorted(self.memory_options)} given, but {', '.join(bare)} "
                    "keeps no memory to take them"
                )
        if self.hidden_sizes is not None and not all(
            isinstance(width, int) and width >= 1 for width in self.hidden_sizes
        ):
            raise ValueError(f"hidden sizes must be positive integers, got {self.hidden_sizes}")
        check_device(self.device)
        try:
            TrainingConfig().replace(**self.resolved_training())
        except TypeError as error:
            raise ValueError(str(error)) from error
        if self.net is not None and self.net not in ARCHITECTURES:
            raise ValueError(f"unknown net {self.net!r}; choose from {ARCHITECTURES}")
        if (self.architecture == "vae") != (self.preset.architecture == "vae"):
            raise ValueError(
                f"net {self.architecture} does not fit {self.benchmark}: the generative "
                "benchmarks take the vae net and only it"
            )
        if self.evaluation and self.architecture != "vae":
            raise ValueError(
                f"{sorted(self.evaluation)}: scoring options of the generative benchmarks only"
            )
        if self.architecture == "vae":
            from pyro_cl.app.generative_metrics import GenerativeEvaluation

            settings = dict(self.resolved_evaluation())
            check_positive(settings.pop("classifier_epochs", None), "classifier_epochs")
            try:
                GenerativeEvaluation(**settings)
            except TypeError as error:
                raise ValueError(f"unknown scoring option: {error}") from error
        if self.indian_buffet and self.preset.architecture == "cnn":
            raise ValueError(
                f"net {self.net} needs an MLP benchmark; {self.benchmark} is a conv net"
            )
        # Options only some of the methods' fitters take go to those (a schedule may set VOGN's
        # beta and still run IVON); a name no registered fitter takes is a mistake.
        check_taken(self.fitter_options, "fitter", REGISTRIES["fitter"].values())
        check_taken(self.penalty_options, "penalty", REGISTRIES["penalty"].values())

    def with_defaults(self, **defaults) -> BenchmarkRun:
        """A copy in which ``defaults`` fill the fields left unset (None, or missing dict keys);
        what this run sets wins."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return BenchmarkRun(**fill_unset(fields, defaults))

    @property
    def preset(self) -> Preset:
        return PRESETS[self.benchmark]

    @property
    def method_names(self) -> list[str]:
        return list(self.methods) if self.methods is not None else list(self.preset.methods)

    @property
    def architecture(self) -> str:
        return self.net or self.preset.architecture

    @property
    def indian_buffet(self) -> bool:
        """Whether the net has IBP (``ibnn``) or H-IBP (``hibnn``) masks."""
        return self.architecture in ("ibnn", "hibnn")

    @property
    def resolved_hidden_sizes(self) -> tuple[int, ...]:
        return tuple(self.hidden_sizes or self.preset.hidden_sizes)

    @property
    def resolved_coreset_size(self) -> int:
        return self.coreset_size if self.coreset_size is not None else self.preset.coreset_size

    def resolved_net_options(self) -> dict:
        """The preset's net options, this run's over them, and only what the net takes."""
        options = {**self.preset.net_options, **self.net_options}
        if self.indian_buffet:
            options["hierarchical"] = self.architecture == "hibnn"
        else:
            options = {key: value for key, value in options.items() if key not in IBP_OPTIONS}
        return options

    def resolved_training(self) -> dict:
        return {**self.preset.training, "progress": self.progress, **self.training}

    def resolved_fitter_options(self) -> dict:
        """The preset's fitter options with this run's over them."""
        return {**self.preset.fitter_options, **self.fitter_options}

    def resolved_evaluation(self) -> dict:
        """The preset's generative scoring settings with this run's over them."""
        return {**self.preset.evaluation, **self.evaluation}

    def build_net(self, stream) -> torch.nn.Module:
        """A fresh net of this run's architecture for ``stream``."""
        heads = len(stream) if stream.multi_head and not self.single_head else 1
        hidden = self.resolved_hidden_sizes
        common = {
            "heads": heads,
            "local_reparameterization": self.local_reparameterization,
            **self.resolved_net_options(),
        }
        if self.architecture == "vae":
            return VAEDecoder(
                stream.in_features,
                hidden_size=hidden[0],
                heads=len(stream),
                local_reparameterization=self.local_reparameterization,
                **self.resolved_net_options(),
            )
        if self.film:
            if self.architecture not in ("mlp", "cnn"):
                raise ValueError(
                    f"FiLM layers are built for mlp and cnn nets, not {self.architecture}"
                )
            common["film_tasks"] = len(stream)
        if self.architecture == "cnn":
            return BayesianCNN(
                stream.input_shape, hidden_sizes=hidden, out_features=stream.num_classes, **common
            )
        net_class = IndianBuffetMLP if self.indian_buffet else BayesianMLP
        return net_class(stream.in_features, hidden, stream.num_classes, **common)

    def task_stream(self, seed: int) -> TaskStream:
        """The benchmark's stream for ``seed``: ``num_tasks`` tasks of a permuted stream, or the
        first ``num_tasks`` of a fixed one (a quick run)."""
        stream = self.preset.stream(str(self.data_root), seed, self.num_tasks, self.download)
        if self.num_tasks is not None and not self.preset.takes_num_tasks:
            stream = stream.first(self.num_tasks)
        return stream

    @property
    def resolved_device(self) -> str:
        """The device asked for, else CUDA where there is one, else the CPU."""
        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def make_learner(self, method: str, stream, seed: int, device: str) -> ContinualLearner:
        """A fresh learner of ``method`` on a fresh net for ``stream``: the run's training
        settings and transition, and those of its fitter and penalty options the method's parts
        take. Parts given in the run (a transition, a guide family, a context source) are copied
        for each learner: one learner's state never reaches the next seed's."""
        spec = METHODS[method]
        fitter_options = {
            k: v for k, v in self.resolved_fitter_options().items() if k in spec.fitter_parameters()
        }
        penalty = {k: v for k, v in self.penalty_options.items() if k in spec.penalty_parameters()}
        return spec.build(
            self.build_net(stream),
            self.resolved_coreset_size,
            device,
            seed,
            fitter_options=copy.deepcopy(fitter_options) if spec.fitter is not None else None,
            transition=copy.deepcopy(self.transition),
            penalty_options=penalty or None,
            memory_options=dict(self.memory_options) or None,
            guide=copy.deepcopy(self.guide),
            **self.resolved_training(),
        )

    def label(self, method: str) -> str:
        """The method's name in results: ``vcl``, ``vcl-ibnn`` for an Indian Buffet net,
        ``ewc-single-head`` for a single head on a multi-head stream."""
        label = f"{method}-{self.architecture}" if self.indian_buffet else method
        label = f"{label}-film" if self.film else label
        if self.guide is not None and self.guide.name != MEAN_FIELD:
            label = f"{label}-{self.guide.name}"
        return f"{label}-single-head" if self.single_head else label


def fill_unset(fields: dict, defaults: dict) -> dict:
    """``fields`` with ``defaults`` in the places left unset: a None value takes the default, a
    dict takes the default's keys it lacks.

    :raises ValueError: for a default that names no field of :class:`BenchmarkRun`.
    """
    names = {f.name for f in dataclasses.fields(BenchmarkRun)}
    unknown = sorted(set(defaults) - names)
    if unknown:
        raise ValueError(f"{unknown} are not fields of BenchmarkRun; choose from {sorted(names)}")
    filled = dict(fields)
    for name, value in defaults.items():
        current = filled.get(name)
        if isinstance(current, dict):
            filled[name] = {**value, **current}
        elif current is None:
            filled[name] = value
    return filled


def check_seeds(seeds: Sequence[int]) -> None:
    """``seeds`` are distinct integers in ``0..2**32-1``: a seed given twice would count one run
    twice in a mean ± sd over "runs".

    :raises ValueError: naming the seed at fault."""
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise ValueError(f"seeds must be integers in 0..2**32-1, got {seed!r}")
    repeated = sorted({seed for seed in seeds if list(seeds).count(seed) > 1})
    if repeated:
        raise ValueError(f"seeds must be distinct: {repeated} given more than once")


def check_positive(value, what: str) -> None:
    """``value`` is ``None`` (unset) or a positive integer (not a bool), else a ``ValueError``
    naming ``what``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


def check_device(device: str | None) -> None:
    """``device`` is ``None``, or a device torch knows and can use here, else a ``ValueError``."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"unknown device {device!r} (use cpu or cuda)") from error
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA GPU here")


def check_writable(output: Path) -> None:
    """Create ``output`` and make sure a file can be written in it, before any training."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=output).close()
    except OSError as error:
        raise ValueError(f"cannot write results to {output}: {error.strerror or error}") from error
