"""Any PyTorch net made Bayesian: its ``nn.Linear`` and ``nn.Conv2d`` layers become pyro_cl layers
with ``PyroSample`` weights, the rest of the module tree (its ``forward``, activations, pooling,
reshapes) stays as the user wrote it.

    net = make_bayesian(MyCNN(), prior_scale=1.0)     # a PyroModule, sites "conv1.weight", ...
    learner = pyro_cl.VCL(net, seed=0)

Each weight gets the prior ``N(prior_loc, prior_scale²)`` of the VCL paper's first task (its
later priors are the posteriors handed on), or per layer what a ``prior=``
(:mod:`pyro_cl.nn.priors`) gives it. The user's ``forward`` was written for one set of
weights and a batch ``(N, ...)``: it need not broadcast over a leading particle dimension
(``x.flatten(1)``, ``x.view(x.size(0), -1)``), so the net declares
``broadcasts_particles = False`` and the model runs it as a Pyro program, one Monte Carlo draw
at a time (:class:`~pyro_cl.model.SupervisedModel`). A net whose ``forward`` takes ``task_id``
is multi-head (the model passes the task on), as for any ``PyroModule``.

Layers with parameters that have no Bayesian counterpart here (batch norm, embeddings, grouped or
dilated convolutions, a bare ``nn.Parameter``) are refused by name, unless kept deterministic
(``deterministic=[paths]``: point values the learner fits beside the posterior). Batch norm is refused even without parameters
(``affine=False``): its batch statistics are neither a posterior nor handed on. Tied weights stay tied: a layer used at two places of the tree becomes
one Bayesian layer (one set of sites) used at both; one weight tensor shared by two different
layers is refused by name (share the layer instead).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence

from pyro.nn.module import PyroModule, to_pyro_module_
from torch import nn

from pyro_cl.checks import checked_real
from pyro_cl.nn.conv import BayesianConv2d
from pyro_cl.nn.film import TaskFiLM, TaskSlot, checked_film_settings
from pyro_cl.nn.linear import BayesianLinear
from pyro_cl.nn.priors import GaussianPrior, Prior, use_prior

__all__ = ["make_bayesian"]


def make_bayesian(
    module: nn.Module,
    prior_scale: float = 1.0,
    prior_loc: float = 0.0,
    prior: Prior | None = None,
    local_reparameterization: bool = True,
    film_tasks: int = 0,
    film_after: Sequence[str] = (),
    film_prior_scale: float = 1.0,
    deterministic: Sequence[str] = (),
) -> PyroModule:
    """A Bayesian copy of ``module`` (``module`` itself is left as it was).

    :param prior_scale: prior standard deviation of every weight and bias.
    :param prior_loc: prior mean of every weight and bias.
    :param prior: the first prior layer by layer instead (a :class:`~pyro_cl.nn.priors.Prior`,
        e.g. ``GaussianPrior(1.0, layers={"classifier": 0.1})``); not with ``prior_scale`` or
        ``prior_loc``.
    :param local_reparameterization: what the layers do when the fast route hands them Gaussian
        weights (see :mod:`pyro_cl.nn.local_reparam`); this net runs on Pyro's route, where each
        draw is a plain weight tensor.
    :param film_tasks: task-specific FiLM layers (GVCL, :mod:`pyro_cl.nn.film`) for this many
        tasks, after each layer named in ``film_after`` (paths as in ``named_modules``, e.g.
        ``"body.0"``; linear or convolutional layers). Such a layer's sites move under
        ``<path>.layer.``, its FiLM sites are ``<path>.film.<task>.weight`` and ``.bias``;
        the net's ``forward`` must take ``task_id``.
    :param film_prior_scale: the FiLM sites' prior standard deviation (around the identity).
    :param deterministic: paths of modules (as in ``named_modules``, e.g. ``"features"``) kept as
        they are: their parameters are point values that every step's fit trains beside the
        posterior and hands on as values, not priors — batch normalisation, an embedding, a
        pretrained feature extractor (freeze one with ``requires_grad_(False)`` before).
    :raises TypeError: if ``module`` is not an ``nn.Module``.
    :raises ValueError: naming every layer whose parameters cannot be made Bayesian, or if the
        net has no linear or convolutional layer at all; for FiLM layers after a path that is
        not such a layer, or a net whose ``forward`` takes no ``task_id``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"make_bayesian takes a torch.nn.Module, got {type(module).__name__}")
    prior_scale = checked_real(prior_scale, "prior_scale", low=0.0, low_open=True)
    prior_loc = checked_real(prior_loc, "prior_loc")
    if prior is None:
        prior = GaussianPrior(prior_scale, prior_loc)
    elif not isinstance(prior, Prior):
        raise TypeError(f"prior must be a pyro_cl.nn.priors.Prior, got {prior!r}")
    elif (prior_scale, prior_loc) != (1.0, 0.0):
        raise ValueError("give the prior as prior= or as prior_scale and prior_loc, not both")
    net = copy.deepcopy(module)
    options = {"prior": prior, "local_reparameterization": local_reparameterization}
    film_tasks, film_prior_scale = checked_film_settings(film_tasks, film_prior_scale)
    for name, paths in (("film_after", film_after), ("deterministic", deterministic)):
        if (
            isinstance(paths, str)
            or not isinstance(paths, Sequence)
            or not all(isinstance(p, str) for p in paths)
        ):
            raise TypeError(f"{name} takes a list of module paths, e.g. [{paths!r}], got {paths!r}")
    if isinstance(net, nn.Linear | nn.Conv2d):
        if film_tasks or film_after:
            raise ValueError("FiLM layers follow hidden layers of a net, not a single layer")
        net = _bayesian_layer(net, "", options)
        prior.check_layers([""])
    else:
        kept = _checked_paths(net, deterministic)
        refused = [*_tied_parameters(net), *_bare_parameters(net)]
        refused += _replace_layers(net, "", options, {}, kept)
        if refused:
            raise ValueError(
                "make_bayesian turns nn.Linear and nn.Conv2d layers into Bayesian ones; these "
                "have parameters it cannot: " + "; ".join(refused) + " (keep such modules as "
                "point values with deterministic=[their paths])"
            )
        prior.check_layers(
            [
                path
                for path, m in net.named_modules()
                if isinstance(m, BayesianLinear | BayesianConv2d)
            ]
        )
        if film_tasks or film_after:  # before the conversion, which would reorder a Sequential
            _add_film(net, film_tasks, list(film_after), film_prior_scale)
        to_pyro_module_(net)
    if not any(isinstance(m, BayesianLinear | BayesianConv2d) for m in net.modules()):
        raise ValueError(
            f"{type(module).__name__} has no nn.Linear or nn.Conv2d layer to make Bayesian"
        )
    net.broadcasts_particles = False
    return net


def _add_film(net: nn.Module, tasks: int, paths: list[str], prior_scale: float) -> None:
    """A :class:`~pyro_cl.nn.film.TaskFiLM` at each of ``paths``, told the task by a
    :class:`~pyro_cl.nn.film.TaskSlot` hook on ``net``."""
    if not tasks or not paths:
        raise ValueError("FiLM layers need both film_tasks and the film_after layers they follow")
    if "task_id" not in inspect.signature(net.forward).parameters:
        raise ValueError(
            "FiLM layers are per task: the net's forward must take task_id (forward(x, task_id))"
        )
    modules = dict(net.named_modules())
    slot = TaskSlot()
    for path in paths:
        layer = modules.get(path)
        if not isinstance(layer, BayesianLinear | BayesianConv2d):
            raise ValueError(f"film_after names {path!r}, which is not a linear or conv layer")
        parent_path, _, name = path.rpartition(".")
        parent = modules[parent_path] if parent_path else net
        convolutional = isinstance(layer, BayesianConv2d)
        features = layer.out_channels if convolutional else layer.out_features
        film = TaskFiLM(layer, features, tasks, slot, convolutional, prior_scale)
        setattr(parent, name, film)
    net.register_forward_pre_hook(slot, with_kwargs=True)


def _checked_paths(net: nn.Module, paths: Sequence[str]) -> set[str]:
    """``paths`` as a set, each the path of a module of ``net``.

    :raises ValueError: naming a path that is not one."""
    if isinstance(paths, str):
        raise TypeError(f"deterministic takes a list of module paths, got the string {paths!r}")
    modules = dict(net.named_modules())
    for path in paths:
        if not path or path not in modules:
            children = ", ".join(name for name, _ in net.named_children())
            raise ValueError(
                f"deterministic names no module {path!r} of the net (its children: {children})"
            )
    return set(paths)


def _replace_layers(
    parent: nn.Module, prefix: str, options: dict, done: dict, kept: set[str]
) -> list[str]:
    """Swap every linear and convolutional child of ``parent`` (recursively) for its Bayesian
    layer, the same one wherever a layer appears twice (``done``: id of a replaced layer → its
    Bayesian layer), leaving the modules at the paths in ``kept`` as they are; return a
    description of each child that cannot be swapped."""
    refused = []
    for name, child in list(parent._modules.items()):  # named_children skips a repeat
        path = f"{prefix}{name}"
        if child is None or path in kept:
            continue
        if id(child) in done:
            setattr(parent, name, done[id(child)])
        elif isinstance(child, nn.Linear | nn.Conv2d):
            try:
                done[id(child)] = _bayesian_layer(child, path, options)
                setattr(parent, name, done[id(child)])
            except ValueError as error:
                refused.append(str(error))
        elif isinstance(child, nn.modules.batchnorm._BatchNorm):
            refused.append(f"{path} ({type(child).__name__}: batch statistics)")
        elif next(child.parameters(recurse=False), None) is not None:
            refused.append(f"{path} ({type(child).__name__})")
        else:
            refused += _replace_layers(child, f"{path}.", options, done, kept)
    return refused


def _tied_parameters(net: nn.Module) -> list[str]:
    """One parameter tensor held by two different layers (``b.weight = a.weight``)."""
    holders: dict[int, list[tuple[str, nn.Module]]] = {}
    for path, module in net.named_modules(remove_duplicate=False):
        for name, parameter in module.named_parameters(recurse=False):
            holders.setdefault(id(parameter), []).append((f"{path}.{name}".lstrip("."), module))
    refused = []
    for places in holders.values():
        modules = {id(module) for _, module in places}
        if len(modules) > 1:
            names = " and ".join(path for path, _ in places)
            refused.append(f"{names} (one weight tied between two layers: share the layer instead)")
    return refused


def _bare_parameters(net: nn.Module) -> list[str]:
    return [
        f"{name} (an nn.Parameter of the net)" for name, _ in net.named_parameters(recurse=False)
    ]


def _own_behaviour(layer: nn.Module) -> list[str]:
    """What a subclass of ``nn.Linear``/``nn.Conv2d`` adds that a Bayesian layer would drop: its
    own ``forward`` and parameters beyond ``weight`` and ``bias``."""
    base = nn.Linear if isinstance(layer, nn.Linear) else nn.Conv2d
    added = []
    if type(layer).forward is not base.forward:
        added.append("its own forward")
    extra = [name for name, _ in layer.named_parameters() if name not in ("weight", "bias")]
    if extra:
        added.append("parameters " + ", ".join(extra))
    return added


def _bayesian_layer(layer: nn.Module, path: str, options: dict) -> nn.Module:
    """The Bayesian layer for ``layer`` at ``path`` ("" for a net that is one layer), with the
    prior ``options["prior"]`` gives that path."""
    added = _own_behaviour(layer)
    where = path or "the net"
    if added:
        raise ValueError(
            f"{where} ({type(layer).__name__}, a subclass of {type(layer).__mro__[1].__name__} "
            f"with {' and '.join(added)}, which a Bayesian layer would drop)"
        )
    bias = layer.bias is not None
    fan_in = layer.weight[0].numel()  # inputs per output unit (in_channels × kernel for a conv)
    loc, scale = options["prior"].layer_prior(path, fan_in)
    settings = {
        "prior_loc": loc,
        "prior_scale": scale,
        "local_reparameterization": options["local_reparameterization"],
    }
    if isinstance(layer, nn.Linear):
        bayesian = BayesianLinear(layer.in_features, layer.out_features, bias, **settings)
    else:
        kernel, stride, padding = layer.kernel_size, layer.stride, layer.padding
        square = len(set(kernel)) == 1 and len(set(stride)) == 1
        if not square or isinstance(padding, str) or len(set(padding)) != 1:
            raise ValueError(f"{where} (Conv2d with a non-square kernel, stride or padding)")
        if layer.groups != 1 or set(layer.dilation) != {1} or layer.padding_mode != "zeros":
            raise ValueError(f"{where} (Conv2d with groups, dilation or non-zero padding mode)")
        bayesian = BayesianConv2d(
            layer.in_channels,
            layer.out_channels,
            kernel[0],
            stride[0],
            padding[0],
            bias,
            **settings,
        )
    use_prior([bayesian], options["prior"])
    _carry_hooks(layer, bayesian)
    return bayesian


#: The hook tables of an ``nn.Module`` that a Bayesian layer takes over from the layer it
#: replaces, so a hook the user registered (a feature recorder, an input check) still runs.
_HOOK_TABLES = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
)


def _carry_hooks(layer: nn.Module, bayesian: nn.Module) -> None:
    """``layer``'s forward hooks and pre-hooks onto ``bayesian`` (the tables themselves, so a
    handle taken on the copy removes from the Bayesian layer). Backward hooks see gradients of
    the weights' draws, not of parameters the layer holds: they are refused.

    :raises ValueError: for a layer with backward hooks."""
    if layer._backward_hooks or layer._backward_pre_hooks:
        raise ValueError(
            f"{type(layer).__name__} has backward hooks, which a Bayesian layer (whose weights "
            "are draws) cannot keep"
        )
    for table in _HOOK_TABLES:
        if hasattr(layer, table):
            setattr(bayesian, table, getattr(layer, table))
