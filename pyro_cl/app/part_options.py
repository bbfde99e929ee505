"""Command-line options read off the constructors of registered parts.

Every registered class of a kind (fitters, transitions, penalties; see :mod:`pyro_cl.spec`)
contributes one ``--<kind>-<parameter>`` option per constructor parameter of a plain type (int,
float, str, bool). ``--fitter-learning-rate 0.05`` therefore reaches whichever fitter the chosen
method uses, and a new fitter's options appear on the command line by registering it: nothing
here names a class or a parameter.
"""

from __future__ import annotations

import argparse
import inspect
import typing
from collections.abc import Iterable

from pyro_cl.spec import REGISTRIES

__all__ = [
    "PartOption",
    "accepted",
    "add_part_options",
    "check_taken",
    "command_line_parts",
    "constructor_parameters",
    "given_part_options",
    "part_options",
]

_PLAIN = {"int": int, "float": float, "str": str, "bool": bool}


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


class PartOption:
    """One ``--<kind>-<parameter>`` option: its type and the registered classes that take it."""

    def __init__(self, kind: str, parameter: str, value_type: type) -> None:
        self.kind, self.parameter, self.value_type = kind, parameter, value_type
        self.takers: list[str] = []

    @property
    def flag(self) -> str:
        return f"--{self.kind}-{self.parameter.replace('_', '-')}"

    @property
    def dest(self) -> str:
        return f"{self.kind}_{self.parameter}"


def _plain_type(parameter: inspect.Parameter) -> type | None:
    """int, float, str or bool from the annotation (``float | None`` counts as float, written
    as a string or not); None for anything else (nested parts, sequences), which the command
    line does not offer."""
    annotation = parameter.annotation
    if isinstance(annotation, str):
        names = {part.strip() for part in annotation.split("|")} - {"None"}
        return _PLAIN.get(names.pop()) if len(names) == 1 else None
    members = set(typing.get_args(annotation) or (annotation,)) - {type(None)}
    if len(members) != 1:
        return None
    (member,) = members
    return member if member in _PLAIN.values() else None


def constructor_parameters(cls: type) -> list[inspect.Parameter]:
    """The keyword-passable constructor parameters of ``cls`` (without ``self``)."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def accepted(cls: type) -> set[str]:
    """Names of the keyword arguments ``cls``'s constructor takes."""
    return {p.name for p in constructor_parameters(cls)}


def part_options(kind: str) -> list[PartOption]:
    """The options of every registered part of ``kind``, one per parameter name.

    :raises TypeError: when two parts give the same parameter name different types (the option
        could not parse for both).
    """
    options: dict[str, PartOption] = {}
    for name, cls in sorted(REGISTRIES.get(kind, {}).items()):
        for parameter in constructor_parameters(cls):
            value_type = _plain_type(parameter)
            if value_type is None:
                continue
            option = options.setdefault(
                parameter.name, PartOption(kind, parameter.name, value_type)
            )
            if option.value_type is not value_type:
                raise TypeError(
                    f"{kind} parts disagree on the type of {parameter.name!r}: "
                    f"{option.value_type.__name__} ({', '.join(option.takers)}) and "
                    f"{value_type.__name__} ({name}); rename one of them"
                )
            option.takers.append(name)
    return list(options.values())


def command_line_parts(kind: str) -> list[str]:
    """Names of the registered parts of ``kind`` that the command line can build: every
    required constructor argument has a plain type (:class:`~pyro_cl.transitions.base.Chain`,
    which takes other parts, cannot)."""
    return [
        name
        for name, cls in sorted(REGISTRIES.get(kind, {}).items())
        if all(
            _plain_type(p) is not None
            for p in constructor_parameters(cls)
            if p.default is inspect.Parameter.empty
        )
    ]


def add_part_options(parser: argparse.ArgumentParser, kind: str, title: str) -> None:
    """Add an argument group with ``kind``'s options to ``parser`` (default None: not given)."""
    group = parser.add_argument_group(title)
    for option in part_options(kind):
        group.add_argument(
            option.flag,
            dest=option.dest,
            type=_parse_bool if option.value_type is bool else option.value_type,
            metavar=option.value_type.__name__.upper(),
            help=f"taken by: {', '.join(option.takers)}",
        )


def given_part_options(args: argparse.Namespace, kind: str) -> dict:
    """``{parameter: value}`` for the ``kind`` options given on the command line."""
    return {
        option.parameter: getattr(args, option.dest)
        for option in part_options(kind)
        if getattr(args, option.dest, None) is not None
    }


def check_taken(options: dict, kind: str, classes: Iterable[type | None]) -> None:
    """Refuse options that none of ``classes`` takes (a typo, or the wrong method), naming them.

    :raises ValueError: naming each unused option and who would take it.
    """
    classes = [cls for cls in classes if cls is not None]
    taken = set().union(*(accepted(cls) for cls in classes))
    unused = sorted(set(options) - taken)
    if unused:
        flags = ", ".join(f"--{kind}-{name.replace('_', '-')}" for name in unused)
        names = sorted({getattr(cls, "name", cls.__name__) for cls in classes})
        takers = sorted(
            getattr(cls, "name", cls.__name__)
            for cls in REGISTRIES.get(kind, {}).values()
            if set(unused) <= accepted(cls)
        )
        plural = f"{kind[:-1]}ies" if kind.endswith("y") else f"{kind}s"
        if names:
            problem = f"not an option of the chosen {plural} ({', '.join(names)})"
        else:
            problem = f"not an option of the chosen methods (none names a {kind})"
        taken_by = f"; the {plural} {', '.join(takers)} take it" if takers else ""
        raise ValueError(f"{flags}: {problem}{taken_by} (`pyro-cl list` shows each part's options)")
