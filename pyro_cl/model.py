"""A supervised Pyro model: a Bayesian net's outputs scored by a likelihood."""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import torch

from pyro_cl.finite import all_finite
from pyro_cl.likelihoods import CategoricalLikelihood, Likelihood
from pyro_cl.nn.effects import DataPlate, ParticlePlate, innermost, new_data_plate
from pyro_cl.nn.heads import normalised_task_id
from pyro_cl.nn.substitution import SubstitutableModule
from pyro_cl.posterior import sample_sites

__all__ = ["MODEL_CLASSES", "ROUTES", "SupervisedModel", "gathered_pairs", "model_class_of"]

#: How losses, predictions and gradient statistics are computed: ``"fast"`` hands pyro_cl layers
#: their site values directly (:mod:`pyro_cl.infer.site_values`), ``"pyro"`` runs model and guide
#: as Pyro programs, ``"auto"`` takes the fast route whenever every site is in a pyro_cl layer.
ROUTES = ("auto", "fast", "pyro")


def gathered_pairs(
    data: torch.utils.data.Dataset | torch.utils.data.DataLoader,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(input, target)`` items of a ``Dataset`` (``TensorDataset``'s tensors as they
    are) or the batches of a ``DataLoader``, as two tensors in their order.

    :raises ValueError: for items that are not ``(input, target)`` pairs, or an empty set.
    """
    if isinstance(data, torch.utils.data.TensorDataset) and len(data.tensors) == 2:
        return data.tensors[0], data.tensors[1]
    if isinstance(data, torch.utils.data.DataLoader):
        parts = _read_all(data, data.dataset)
        stack = torch.cat
    elif isinstance(data, torch.utils.data.IterableDataset):
        parts = _read_all(data, data)
        stack = torch.stack
    else:
        parts = [data[i] for i in range(len(data))]
        stack = torch.stack
    if not parts:
        raise ValueError(f"the {type(data).__name__} is empty: it has no data points")
    if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in parts):
        raise ValueError(f"the {type(data).__name__}'s items must be (input, target) pairs")
    inputs, targets = zip(*parts, strict=True)
    return stack([torch.as_tensor(v) for v in inputs]), stack([torch.as_tensor(v) for v in targets])


#: The most bytes of items read from a data source that cannot say its length (an
#: ``IterableDataset``): one that never ends is refused here rather than read until memory runs out.
UNSIZED_READ_LIMIT = 4 * 2**30


def _read_all(source, dataset) -> list:
    """Every item or batch of ``source``; a source over an ``IterableDataset`` is read up to
    :data:`UNSIZED_READ_LIMIT` bytes.

    :raises ValueError: for one that does not end by then."""
    if not isinstance(dataset, torch.utils.data.IterableDataset):
        return list(source)
    parts, read = [], 0
    for part in source:
        parts.append(part)
        if isinstance(part, (tuple, list)):
            read += sum(t.numel() * t.element_size() for t in part if torch.is_tensor(t))
        if read > UNSIZED_READ_LIMIT:
            raise ValueError(
                f"the {type(dataset).__name__} has not ended after {read / 2**30:.1f} GiB: a step "
                "is a finite set of points; give a sized Dataset, or cut the stream into steps "
                "(itertools.islice)"
            )
    return parts


class SupervisedModel:
    """The Pyro model ``θ ~ prior; y_n ~ p(y | net(x_n; θ))`` for one task.

    Call it as ``model(x, y=None, task_id=0, dataset_size=None)``. It runs ``net`` (a
    ``PyroModule`` whose latent weights are ``PyroSample`` sites), then observes ``y`` in a
    ``pyro.plate("data")`` whose log-likelihood is scaled by ``dataset_size / len(x)``, so a
    minibatch gives an unbiased estimate of the whole task's log-likelihood. It returns the net's
    outputs. ``task_id`` is passed to the net only if the net's ``forward`` takes it.

    It is not an ``nn.Module`` on purpose: sample site names stay exactly those of ``net``.
    It has no local latent sites, so no amortised :attr:`local_guide` (a
    :class:`~pyro_cl.generative.GenerativeModel` has one).

    The model makes two decisions once, for everything that runs it: which route computes
    losses and predictions (:attr:`fast`, from ``route``, one of :data:`ROUTES`) and which sites a
    task uses (:meth:`sites`).
    """

    #: The likelihood a learner uses when none is given.
    default_likelihood: type[Likelihood] = CategoricalLikelihood
    #: The guide of the model's local latent sites (``None``: it has none).
    local_guide: torch.nn.Module | None = None

    def __init__(self, net: torch.nn.Module, likelihood: Likelihood, route: str = "auto") -> None:
        self.net = net
        self.likelihood = likelihood
        self.net_takes_task_id = "task_id" in inspect.signature(net.forward).parameters
        sites = list(sample_sites(net))
        if not sites:
            raise ValueError(f"{type(net).__name__} has no PyroSample sites: nothing to learn")
        #: ``{site name: (module, attribute)}`` for every latent site of the net.
        self.site_index = {name: (module, attribute) for name, module, attribute in sites}
        # a net may declare that its forward does not broadcast over a leading particle
        # dimension (pyro_cl.nn.make_bayesian's nets: the user's forward, e.g. x.flatten(1))
        library_layers_only = all(
            isinstance(m, SubstitutableModule) for _, m, _ in sites
        ) and getattr(net, "broadcasts_particles", True)
        if route not in ROUTES:
            raise ValueError(f"elbo must be one of {ROUTES}, got {route!r}")
        if route == "fast" and not library_layers_only:
            raise ValueError(
                "elbo='fast' needs a net built from pyro_cl layers only, whose forward "
                "broadcasts over a leading particle dimension"
            )
        #: True when losses, predictions and gradient statistics take the fast route.
        self.fast = route != "pyro" and library_layers_only
        #: True when the Pyro route runs all Monte Carlo particles in one pass (a
        #: :class:`~pyro_cl.nn.effects.ParticlePlate`): pyro_cl layers broadcast over a leading
        #: particle dimension; an arbitrary ``PyroModule`` need not, so a net with sites outside
        #: pyro_cl layers is run once per particle, as Pyro's ELBOs do by default.
        self.vectorized_particles = library_layers_only
        #: The shape of one input of the data prepared last (the example input of a net that
        #: does not declare its own).
        self.seen_input_shape: tuple[int, ...] | None = None

    @property
    def multi_head(self) -> bool:
        """Whether the task id picks part of the net (a head): the net's own ``multi_head``
        where it says, else whether its ``forward`` takes ``task_id``."""
        return bool(getattr(self.net, "multi_head", self.net_takes_task_id))

    def task_argument(self, data) -> int | torch.Tensor:
        """The ``task_id`` to run ``data`` (a :class:`~pyro_cl.points.Points`) with: its one
        task, or one id per point when it mixes the tasks of a multi-head net."""
        tasks = data.tasks()
        if len(tasks) == 1 or not self.multi_head:
            return tasks[0]
        return data.task_ids

    def sites(self, guide, example: torch.Tensor, tasks: Iterable[int]) -> list[str]:
        """The latent sites the model samples for any of ``tasks``, in order, each once.

        Discovery traces the model through ``guide`` (which creates the parameters of sites it
        has not seen; :meth:`~pyro_cl.guides.MeanFieldGuide.sites_for`) on the first two inputs of
        ``example``, a batch: two, not one, so a ``forward`` that takes statistics over the batch
        (a functional batch norm, a standardisation) runs as it does in training.
        """
        batch = example[:2]
        names = (
            guide.sites_for(batch, None, task_id=task, dataset_size=len(batch)) for task in tasks
        )
        return list(dict.fromkeys(name for group in names for name in group))

    def point_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The net's own trainable parameters (``{name: parameter}``): the deterministic parts of
        a Bayesian net, which every fit trains as point values beside the guide (none in
        pyro_cl's nets)."""
        return {name: p for name, p in self.net.named_parameters() if p.requires_grad}

    def example_input(self, device: torch.device | str) -> torch.Tensor:
        """A batch of two all-zero inputs of the net's input shape (for site discovery, which
        runs the net on two inputs: :meth:`sites`)."""
        shape = getattr(self.net, "input_shape", None)
        if shape is None and self.in_features is not None:
            shape = (self.in_features,)
        shape = shape if shape is not None else self.seen_input_shape
        if shape is None:
            raise ValueError(
                f"{type(self.net).__name__} does not say its input shape (an `input_shape` or "
                "`in_features` attribute) and has seen no data yet: observe a task first"
            )
        return torch.zeros(2, *shape, device=device)

    @property
    def in_features(self) -> int | None:
        return getattr(self.net, "in_features", None)

    @property
    def out_features(self) -> int | None:
        return getattr(self.net, "out_features", None)

    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the net's weights (inputs are converted to it)."""
        for tensor in (*self.net.parameters(), *self.net.buffers()):
            if tensor.dtype.is_floating_point:
                return tensor.dtype
        return torch.get_default_dtype()

    def checked_task_id(self, task_id) -> int:
        """``task_id`` as a Python int: integers, numpy integers and one-element integer
        tensors are accepted; a multi-head net must have that head.

        ``None`` means head 0 on a single-head net; a multi-head net must be told which head.

        :raises ValueError: for booleans, non-integers, negative ids and unknown heads, and
            ``None`` on a multi-head net.
        """
        if task_id is None:
            if self.multi_head:
                raise ValueError(
                    "this net has several heads: pass task_id= to say which task (head) the "
                    "data belongs to"
                )
            task_id = 0
        task_id = normalised_task_id(task_id)
        if hasattr(self.net, "check_task_id"):
            self.net.check_task_id(task_id)
        return task_id

    def split_data(self, data) -> tuple:
        """A step's ``data`` as ``(inputs, targets)``: that pair, or a PyTorch ``Dataset`` or
        ``DataLoader`` of ``(input, target)`` items (gathered into two tensors in their order:
        the fitters draw their own minibatches)."""
        if isinstance(data, (torch.utils.data.Dataset, torch.utils.data.DataLoader)):
            data = gathered_pairs(data)
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ValueError(
                "data must be a pair (inputs, targets), or a torch Dataset or DataLoader of such "
                f"pairs; got {type(data).__name__}"
            )
        return data[0], data[1]

    def prepare_data(self, x, y, task_id) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``(x, y, task_id)`` checked and converted for this model, or a ``ValueError`` naming
        the problem.

        Inputs may be tensors or numpy arrays of any floating dtype (float64, float16,
        bfloat16, ...): they are converted to the net's dtype (:attr:`dtype`); integer inputs
        are refused (scale integer images to floats first). Targets are converted by the
        likelihood (class labels of any integer dtype become int64).
        """
        x = torch.as_tensor(x)
        if not x.dtype.is_floating_point:
            raise ValueError(
                f"inputs must be floating point, got dtype {x.dtype} (scale integer data, e.g. "
                "uint8 pixels, to floats first)"
            )
        if x.dim() == 0 or x.shape[0] == 0:
            task = "the step" if task_id is None else f"task {task_id}"
            raise ValueError(f"{task} is empty: it has no data points")
        if self.in_features is not None and (x.dim() != 2 or x.shape[1] != self.in_features):
            raise ValueError(
                f"inputs have shape {tuple(x.shape)} but the net expects (N, {self.in_features})"
            )
        input_shape = getattr(self.net, "input_shape", None)
        if input_shape is not None and tuple(x.shape[1:]) != tuple(input_shape):
            raise ValueError(
                f"inputs have shape {tuple(x.shape)} but the net expects (N, "
                f"{', '.join(map(str, input_shape))})"
            )
        task_id = self.checked_task_id(task_id)
        self.seen_input_shape = tuple(x.shape[1:])
        x = x.to(self.dtype)
        if not all_finite(x):
            raise ValueError(
                f"inputs of task {task_id} contain NaN or inf (after conversion to {self.dtype})"
            )
        if y is not None:
            y = torch.as_tensor(y)
            if y.dim() == 0 or y.shape[0] != x.shape[0]:
                raise ValueError(f"{x.shape[0]} inputs but {y.shape[0] if y.dim() else 0} targets")
            self.likelihood.check_targets(y, self.out_features)
            y = self.likelihood.converted_targets(y, self.dtype)
        return x, y, task_id

    def net_outputs(self, x: torch.Tensor, task_id: int = 0) -> torch.Tensor:
        if self.net_takes_task_id:
            return self.net(x, task_id=task_id)
        return self.net(x)

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        task_id: int = 0,
        dataset_size: int | None = None,
    ) -> torch.Tensor:
        # one data plate for the whole run: the observations and any local latent sites
        with DataPlate(new_data_plate(x.shape[0], x.device, dataset_size)):
            if innermost(ParticlePlate) is not None:  # the particles' leading dimension
                x = x.unsqueeze(0)
            outputs = self.net_outputs(x, task_id)
            self.likelihood.observe(outputs, y, dataset_size)
        return outputs


#: Model classes by the name a net gives as its ``model_class`` (a net may also give the class
#: itself): a net low in the package (a decoder in :mod:`pyro_cl.nn`) names a model defined above
#: it (:class:`~pyro_cl.generative.GenerativeModel` registers as ``"generative"``) without
#: importing it.
MODEL_CLASSES: dict[str, type[SupervisedModel]] = {"supervised": SupervisedModel}


def model_class_of(net: torch.nn.Module) -> type[SupervisedModel]:
    """The Pyro model class ``net`` is part of: its ``model_class`` (a class, or a name in
    :data:`MODEL_CLASSES`), :class:`SupervisedModel` by default.

    :raises ValueError: for a name no model class is registered under.
    """
    model_class = getattr(net, "model_class", SupervisedModel)
    if isinstance(model_class, str):
        if model_class not in MODEL_CLASSES:
            raise ValueError(
                f"{type(net).__name__} names the model class {model_class!r}, which is not "
                f"registered; known: {sorted(MODEL_CLASSES)}"
            )
        return MODEL_CLASSES[model_class]
    return model_class
