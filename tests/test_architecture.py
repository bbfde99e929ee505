"""The package's shape, checked: the library never imports the app, and no module imports itself
back through others (every import counts: module level, inside functions, and under
``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pyro_cl"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """``{module: modules of pyro_cl it imports}``; ``from package import name`` points at the
    submodule ``package.name`` when there is one, else at the package (as import-linter reads
    it); a parent package imported only implicitly is not an edge."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_reads_real_imports():
    graph = import_graph()
    assert "pyro_cl.learner.learner" in graph["pyro_cl.app.methods"]
    assert "pyro_cl.spec" in graph["pyro_cl.app.cli"]


def test_find_cycle_finds_a_planted_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_library_does_not_import_the_app():
    into_app = {
        module: sorted(t for t in targets if t.startswith("pyro_cl.app"))
        for module, targets in import_graph().items()
        if not module.startswith("pyro_cl.app")
    }
    offenders = {module: targets for module, targets in into_app.items() if targets}
    assert not offenders, f"the library imports the app: {offenders}"


def package_graph() -> dict[str, set[str]]:
    """The import graph folded to ``pyro_cl``'s top-level packages and modules (``pyro_cl.infer``,
    ``pyro_cl.memory``, ``pyro_cl.model``, ...); ``pyro_cl/__init__.py``, the public face that
    gathers them all, is left out."""
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        if module == "pyro_cl":
            continue
        top = ".".join(module.split(".")[:2])
        folded = {".".join(t.split(".")[:2]) for t in targets if t != "pyro_cl"}
        graph.setdefault(top, set()).update(folded - {top})
    return graph


def test_no_package_imports_itself_back_through_another():
    """The layering the architecture page draws: e.g. ``infer`` consumes the memory protocol it
    owns and never imports the memories above it, ``nn`` never imports ``generative``."""
    cycle = find_cycle(package_graph())
    assert cycle is None, "package circle: " + " -> ".join(cycle or [])


#: The part families as floors, lowest first: a package may import those on floors below it and
#: never one above (the picture in docs/architecture.md). The shared machinery is at the bottom,
#: the part families a user extends in the middle, the learner that composes them above, the
#: methods built on the learner and the app on top.
FLOORS = [
    {"pyro_cl.nn"},
    {"pyro_cl.guides", "pyro_cl.model"},
    {"pyro_cl.infer"},
    {"pyro_cl.transitions", "pyro_cl.fitters", "pyro_cl.memory"},
    {"pyro_cl.learner"},
    {"pyro_cl.baselines", "pyro_cl.generative", "pyro_cl.inspection"},
    {"pyro_cl.app"},
]


def floor_violations(graph: dict[str, set[str]], floors: list[set[str]]) -> list[str]:
    """Every import of ``graph`` from a package on a floor to one on the same floor or above."""
    level = {package: index for index, floor in enumerate(floors) for package in floor}
    return [
        f"{source} imports {target}"
        for source, targets in sorted(graph.items())
        for target in sorted(targets)
        if source in level and target in level and level[target] >= level[source]
    ]


def test_floor_violations_finds_an_import_upwards():
    floors = [{"a"}, {"b", "c"}, {"d"}]
    assert floor_violations({"a": set(), "b": {"a"}, "d": {"b", "c"}}, floors) == []
    assert floor_violations({"a": {"d"}, "b": {"c"}}, floors) == ["a imports d", "b imports c"]


def test_the_part_families_keep_their_floors():
    assert floor_violations(package_graph(), FLOORS) == []
