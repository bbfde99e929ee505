"""One self-registering spec protocol for every part a learner is built from.

A part (net, likelihood, memory, fitter, transition, penalty, callback) is rebuilt on load from
its *spec*: a plain dict ``{"kind": ..., "name": ..., **constructor arguments}`` that
``torch.load(weights_only=True)`` can read. Classes register themselves by defining ``name``::

    class Tempered(Transition):
        name = "tempered"                       # registers it as a "transition"

        def __init__(self, power: float) -> None:
            self.power = power                  # stored under the argument's name

        ...

The family base declares the registry with ``class Transition(Registrable, kind="transition")``.
:meth:`Registrable.spec` reads each constructor argument back from the attribute of the same
name (override :meth:`Registrable.hyperparameters` where that does not hold), and
:func:`from_spec` looks the class up by kind and name. Arguments that are parts themselves are
saved as nested specs. Parts with tensors beyond their arguments (EWC's Fisher, a memory's
running state) save them with ``state_dict``/``load_state_dict``.

A part that cannot be rebuilt (no ``name``, arguments that are not plain data, or a spec that
does not rebuild an equal part) is refused by :func:`check_rebuildable`, which ``save`` calls
before writing anything.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import torch

__all__ = ["REGISTRIES", "Registrable", "check_rebuildable", "from_spec", "registered"]

#: ``{kind: {name: class}}`` of every registered part.
REGISTRIES: dict[str, dict[str, type]] = {}

_PLAIN = (str, int, float, bool, type(None))


class Registrable:
    """Base of every part that saves and loads as a spec (see the module docstring)."""

    #: The registry of the family (set once on the family's base class).
    kind: ClassVar[str]
    #: The name the class is registered under (set on each concrete class).
    name: ClassVar[str]

    def __init_subclass__(cls, kind: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
            REGISTRIES.setdefault(kind, {})
        if "name" in cls.__dict__ and getattr(cls, "kind", None) is not None:
            registry = REGISTRIES[cls.kind]
            holder = registry.get(cls.name)
            if holder is not None and _where(holder) != _where(cls):
                raise TypeError(
                    f"{cls.__module__}.{cls.__qualname__} cannot register as {cls.kind} "
                    f"{cls.name!r}: {_where(holder)} holds that name; choose another name"
                )
            registry[cls.name] = cls  # a class defined again (a re-run cell) replaces itself

    # ------------------------------------------------------------------ description
    def hyperparameters(self) -> dict[str, Any]:
        """The constructor arguments, read from the attributes of the same names."""
        arguments = {}
        for parameter in _constructor_parameters(type(self)):
            if not hasattr(self, parameter):
                raise TypeError(
                    f"{type(self).__name__} cannot describe itself: it does not keep its "
                    f"constructor argument {parameter!r} as an attribute of that name; store it, "
                    "or override hyperparameters()"
                )
            arguments[parameter] = getattr(self, parameter)
        return arguments

    def spec(self) -> dict[str, Any]:
        """``{"kind", "name", **hyperparameters}`` with nested parts as nested specs."""
        return {
            "kind": self.kind,
            "name": getattr(type(self), "name", type(self).__name__),
            **{key: _encode(value) for key, value in self.hyperparameters().items()},
        }

    def state_dict(self) -> dict[str, Any]:
        """State beyond the constructor arguments: tensors and plain containers (none here)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        try:
            arguments = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        except TypeError:
            arguments = "..."
        return f"{type(self).__name__}({arguments})"


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _constructor_parameters(cls: type) -> list[str]:
    signature = inspect.signature(cls.__init__)
    return [
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def _encode(value: Any) -> Any:
    if isinstance(value, Registrable):
        return value.spec()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "kind" in value and "name" in value:
        return from_spec(value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def registered(kind: str) -> dict[str, type]:
    """``{name: class}`` of the registered parts of ``kind``."""
    return dict(REGISTRIES.get(kind, {}))


def from_spec(spec: dict[str, Any], kind: str | None = None) -> Any:
    """Rebuild a part from its :meth:`Registrable.spec`."""
    spec = dict(spec)
    spec_kind = spec.pop("kind")
    name = spec.pop("name")
    if kind is not None and spec_kind != kind:
        raise ValueError(f"expected a {kind} spec, got a {spec_kind} spec ({name!r})")
    classes = REGISTRIES.get(spec_kind, {})
    if name not in classes:
        raise ValueError(
            f"unknown {spec_kind} {name!r}; registered: {sorted(classes)}. Import the module that "
            f"defines it before loading (a class with a `name` registers itself)."
        )
    return classes[name](**{key: _decode(value) for key, value in spec.items()})


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def check_rebuildable(part: Registrable, role: str) -> dict[str, Any]:
    """``part.spec()`` if :func:`from_spec` rebuilds an equal part from it, else a ``TypeError``
    saying how to make ``part`` (the learner's ``role``) saveable."""
    cls = type(part)
    how = (
        f'give {cls.__name__} a class attribute `name = "..."` (it then registers itself as a '
        f"{getattr(cls, 'kind', 'part')}), keep each constructor argument as an attribute of the "
        "same name (or override hyperparameters()), and import its module before loading"
    )
    name = cls.__dict__.get("name")
    if name is None or REGISTRIES.get(cls.kind, {}).get(name) is not cls:
        raise TypeError(f"cannot save the {role} {cls.__name__}: it is not registered; {how}")
    try:
        spec = part.spec()
    except TypeError as error:
        raise TypeError(f"cannot save the {role} {cls.__name__}: {error}") from None
    if not _is_plain(spec):
        raise TypeError(
            f"cannot save the {role} {cls.__name__}: its arguments are not plain data "
            f"(numbers, strings, lists, dicts, parts): {spec}"
        )
    try:
        rebuilt = from_spec(spec).spec()
    except Exception as error:  # noqa: BLE001 (any failure means the spec does not rebuild)
        raise TypeError(
            f"cannot save the {role} {cls.__name__}: its spec does not rebuild it ({error}); {how}"
        ) from None
    if rebuilt != spec:
        raise TypeError(f"cannot save the {role} {cls.__name__}: its spec does not round-trip")
    return spec


def tensors_to(state: Any, device: torch.device | str) -> Any:
    """``state`` with every tensor moved to ``device``."""
    if torch.is_tensor(state):
        return state.to(device)
    if isinstance(state, dict):
        return {k: tensors_to(v, device) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(tensors_to(v, device) for v in state)
    return state
