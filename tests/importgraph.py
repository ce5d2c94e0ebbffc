"""The import graph of a package's source, read with ``ast`` (no module is imported): which
modules each module imports, lazily or not, and which it names in a string (``"daisychain.x"``:
a command table, ``python -m``, a worker's entry). test_architecture.py checks the graph for
cycles; test_packaging.py checks that every module of the wheel is reached from an entry point.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package`` (a package is its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_modules(source: str, name: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports anywhere in ``source``."""
    known = set(known)

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(resolve(alias.name) or "")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join([*base, *([node.module] if node.module else [])])
            else:
                parent = node.module or ""
            for alias in node.names:
                child = f"{parent}.{alias.name}"
                found.add(child if child in known else (resolve(parent) or ""))
    found.discard("")
    found.discard(name)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    names = module_names(package)
    return {
        name: imported_modules(
            path.read_text(encoding="utf-8"), name, path.stem == "__init__", names
        )
        for name, path in names.items()
    }


_DOTTED = re.compile(r"\b[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+")


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes (a docstring says what code is; it does not use anything)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def named_modules(source: str, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that code in ``source`` names in a string (docstrings aside):
    ``importlib.import_module("daisychain.bench.gemm")``, ``["-m", "daisychain.peer"]``, a child
    process's script text ``"from daisychain.bench._torch_model import make_trainer"``, a hint
    ``"rerun python -m daisychain.corpus.build"``. A dotted name counts as its longest known
    prefix."""
    known = set(known)
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for match in _DOTTED.finditer(node.value):
                name = match.group(0)
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if "." in name:
                    found.add(name)
    return found


def reachable(graph: Mapping[str, Iterable[str]], roots: Iterable[str]) -> set[str]:
    """Every module reached from ``roots`` along the graph's edges (roots included), with the
    packages above each (importing ``a.b.c`` runs ``a`` and ``a.b`` first)."""
    seen: set[str] = set()
    todo = [r for r in roots if r in graph]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
            parent = name.rpartition(".")[0]
            if parent in graph:
                todo.append(parent)
    return seen


def usage_graph(package: Path) -> dict[str, set[str]]:
    """``import_graph`` plus the modules each module names in a string."""
    names = module_names(package)
    graph = import_graph(package)
    for name, path in names.items():
        graph[name] |= named_modules(path.read_text(encoding="utf-8"), names) - {name}
    return graph
