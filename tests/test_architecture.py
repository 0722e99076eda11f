"""The package's shape: no import cycles, a client-neutral engine, public client APIs only."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hopchain"
CORE = "hopchain._core"
"""The compiled core, built from ``core/`` (its types in ``_core.pyi``): the package's own
extension module, named with an underscore because users reach it through the codec."""
MAX_PUBLIC_NAMES = 45
"""What ``hopchain.__all__`` may hold: what a service writes, not every class it meets."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every hopchain module and the hopchain modules it imports (at any depth)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules[CORE] = PACKAGE / "_core.pyi"
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    targets.add(candidate if candidate in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:  # noqa: C901 - Tarjan, as written
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_the_package() -> None:
    assert _cycles(_imports()) == []


def test_the_engine_imports_no_client_and_no_adapter() -> None:
    graph = _imports()
    engine = {name: targets for name, targets in graph.items() if ".middleware.engine" in name}
    assert engine
    for name, targets in engine.items():
        clients = {
            t for t in targets if t.split(".")[0] in {"faststream", "aiokafka", "confluent_kafka"}
        }
        adapters = {
            t
            for t in targets
            if t.startswith(
                (
                    "hopchain.middleware.faststream",
                    "hopchain.middleware.aiokafka",
                    "hopchain.middleware.confluent",
                )
            )
        }
        assert not clients, f"{name} imports {clients}"
        assert not adapters, f"{name} imports {adapters}"


def test_the_dead_letter_service_imports_no_middleware() -> None:
    graph = _imports()
    for name, targets in graph.items():
        if name.startswith("hopchain.consumers"):
            used = {t for t in targets if t.startswith("hopchain.middleware")}
            assert not used, f"{name} imports {used}"


def test_importing_the_dead_letter_service_loads_no_adapter() -> None:
    code = (
        "import sys, hopchain.consumers.service;"
        "print(sorted(m for m in sys.modules if m.startswith('hopchain.middleware')))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_triage_commands_load_neither_the_service_nor_its_http_stack() -> None:
    # `hopchain dlq list --index` answers in a fresh process: what it imports is its cost.
    code = (
        "import sys, hopchain.cli.dlq_actions, hopchain.consumers;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')"
        " or m in ('hopchain.consumers.service', 'hopchain.consumers.http_server')))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_dead_letter_package_exports_each_name_from_one_table() -> None:
    import hopchain.consumers as package  # noqa: PLC0415 - the package under test

    table = vars(package)["_WHERE"]
    assert sorted(package.__all__) == sorted(table)
    for name in package.__all__:
        assert (
            getattr(package, name)
            is vars(importlib.import_module(f"{package.__name__}.{table[name]}"))[name]
        )


def test_hopchain_exports_each_name_from_one_table() -> None:
    import hopchain as package  # noqa: PLC0415 - the package under test

    table = vars(package)["_EXPORTS"]
    assert package.__all__ == list(table)
    assert len(package.__all__) <= MAX_PUBLIC_NAMES
    for name in package.__all__:
        assert getattr(package, name) is vars(importlib.import_module(table[name]))[name]


def test_what_type_checkers_see_of_hopchain_is_its_table() -> None:
    # Type checkers cannot follow the lazy __getattr__: they read the TYPE_CHECKING imports,
    # which must name exactly the table's modules, each name re-exported as itself.
    import hopchain as package  # noqa: PLC0415 - the package under test

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    (guard,) = (
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {}
    for node in guard.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            assert alias.asname == alias.name, f"re-export {alias.name} as itself"
            seen[alias.name] = node.module
    assert seen == vars(package)["_EXPORTS"]


def test_importing_the_engine_loads_no_kafka_client() -> None:
    # The engine's own imports (and what they import) must not pull a client in: a process
    # that only validates records, or an adapter for another client, pays for none of them.
    code = (
        "import sys, hopchain.middleware.engine;"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'faststream', 'aiokafka', 'confluent_kafka'}))"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, a fixed program
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


_PRIVATE = re.compile(
    r"faststream\._internal|_outer_config|_producer\._producer|"
    r"(consumer|client|producer|subscriber)\._[a-z]|\.running = False|\"handler_\""
)


def test_no_private_attribute_of_faststream_or_aiokafka_is_used() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _PRIVATE.search(line)
    ]
    assert offenders == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(tree: ast.Module, modules: set[str]) -> tuple[list[str], set[str]]:
    """Underscore names imported from hopchain modules, and the local names of those modules."""
    found: list[str] = []
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level or f"{node.module}".startswith("hopchain")
        ):
            for alias in node.names:
                if f"{node.module}.{alias.name}" == CORE:
                    bound.add(alias.asname or alias.name)
                elif _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                elif f"{node.module}.{alias.name}" in modules:
                    bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            bound.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if alias.name.startswith("hopchain")
            )
    return found, bound


def _private_names_taken(path: Path, modules: set[str]) -> list[str]:
    """Underscore names ``path`` takes from another hopchain module.

    Both ``from hopchain.x import _name`` and ``module._name`` on a hopchain module bound by
    an import count; dunder names (``__version__``) do not.
    """
    tree = ast.parse(path.read_text())
    found, bound = _private_imports(tree, modules)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_takes_a_private_name_from_another() -> None:
    # A name two modules need is public inside the package (STYLE.md).
    modules = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _private_names_taken(path, modules)
    ]
    assert offenders == []
