"""The layout's rules (docs/ARCHITECTURE.md), checked on the source with ``ast``.

1. No import cycles among the ``daisychain`` modules. Every import counts: at the top of a module,
   inside a function (a lazy import is a dependency too) or under ``TYPE_CHECKING``; relative
   imports are resolved; ``from package import name`` depends on ``package.name`` when that is a
   module, else on ``package``. A cycle fails with its path printed.
2. No module under ``server/daisychain`` is named like a standard-library module (``tokenize``
   shadowed the standard one when its folder came first on ``sys.path``).
3. Tests import no benchmark (``daisychain.bench``): what tests and benchmarks share is
   ``daisychain.bench.rig``. The benchmarks' own tests (``tests/test_bench_*.py``) are the
   exception: they exist to run them.
4. No test imports a private name (one starting with ``_``) from a ``daisychain`` module, whether
   a module (``daisychain.bench._hostile``) or a name in one (``from daisychain.x import _y``).
   Dunder names are not private: ``__init__``, ``__main__`` and ``__version__`` may be imported.
   Code under ``server/daisychain`` keeps the same rule across packages: a private name is
   imported only within its own package.

Each check is a function of plain inputs, and each is shown firing on a planted wrong input.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from importgraph import import_graph, module_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "server" / "daisychain"
TESTS = ROOT / "tests"


# --- the import graph ---------------------------------------------------------------------------


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        nonlocal counter
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(sorted(component), graph) for component in components]


def _cycle_in(component: list[str], graph: Mapping[str, Iterable[str]]) -> list[str]:
    """A shortest path from the component's first member back to itself, within it."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    return [*paths[node], start]
                if nxt in members and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


# --- names ------------------------------------------------------------------------------------


def stdlib_shadows(
    names: Iterable[str], stdlib: Iterable[str] = sys.stdlib_module_names
) -> list[str]:
    """The dotted names whose last part is a standard-library module's top-level name."""
    stdlib = set(stdlib)
    return sorted(name for name in names if name.rpartition(".")[2] in stdlib)


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _imports(source: str) -> Iterable[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import in ``source`` (a test or a
    module outside the package imported from: relative imports are skipped)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def bench_imports(source: str) -> list[str]:
    """``line: module`` of every import of a benchmark: ``daisychain.bench`` or a module in it,
    except ``daisychain.bench.rig`` (the stage benchmarks and tests share)."""
    found = []
    for line, module, names in _imports(source):
        if module == "daisychain.bench.rig" or module.startswith("daisychain.bench.rig."):
            continue
        if module == "daisychain.bench":
            if set(names or ["*"]) - {"rig"}:
                found.append(f"{line}: {module}")
        elif module.startswith("daisychain.bench."):
            found.append(f"{line}: {module}")
        elif module == "daisychain" and "bench" in names:
            found.append(f"{line}: daisychain.bench")
    return found


def private_imports(source: str, own_package: str | None = None) -> list[str]:
    """``line: module[.name]`` of every private ``daisychain`` module or name imported from
    outside its package (``own_package``: the importer's package, None for a test)."""
    found = []
    for line, module, names in _imports(source):
        if module != "daisychain" and not module.startswith("daisychain."):
            continue
        for name in names or [None]:
            full = module if name is None else f"{module}.{name}"
            parts = full.split(".")
            private = [i for i, part in enumerate(parts) if _is_private(part)]
            if not private:
                continue
            home = ".".join(parts[: private[0]])  # the package the private name belongs to
            if own_package is not None and (
                own_package == home or own_package.startswith(home + ".")
            ):
                continue
            hit = f"{line}: {'.'.join(parts[: private[0] + 1])}"
            if hit not in found:
                found.append(hit)
    return found


PEER_SIDE = ("daisychain.p2p", "daisychain.peer")


def peer_side_server_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """``module -> imported`` for every import of the server package by the peer side (what a
    headless peer and the server both speak lives in ``wire/``)."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if any(module == p or module.startswith(p + ".") for p in PEER_SIDE)
        for target in targets
        if target == "daisychain.server" or target.startswith("daisychain.server.")
    )


def imports_of_test_modules(source: str) -> list[str]:
    """``line: module`` of every import of a test module (``test_*``) by a test: what tests
    share lives in the helpers at the top of tests/."""
    return [
        f"{line}: {module}"
        for line, module, _names in _imports(source)
        if module.startswith("test_") and "." not in module  # tests are imported by file name
    ]


def _test_sources() -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for path in sorted(TESTS.rglob("*.py"))
        # not the npm packages of tests/jscheck/ (one ships a .py file of its own)
        if not {"vectors", "node_modules"} & set(path.relative_to(TESTS).parts)
    }


# --- the checks on the project ----------------------------------------------------------------


def test_no_import_cycles_among_daisychain_modules() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 100 and "daisychain.server.app" in graph
    assert "daisychain.corpus.load" in graph["daisychain.server.corpus"], "lazy imports count"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_is_named_like_a_standard_library_module() -> None:
    names = module_names(PACKAGE)
    assert "daisychain.tokenizer.fast" in names
    assert stdlib_shadows(names) == []


def test_no_test_imports_a_benchmark() -> None:
    found = {
        path.name: hits
        for path, source in _test_sources().items()
        if not path.name.startswith("test_bench_") and (hits := bench_imports(source))
    }
    assert found == {}, "tests import daisychain.bench.rig, not daisychain.bench"


def test_no_test_imports_a_private_daisychain_name() -> None:
    found = {
        path.name: hits
        for path, source in _test_sources().items()
        if (hits := private_imports(source))
    }
    assert found == {}


def test_no_module_imports_a_private_name_of_another_package() -> None:
    found = {}
    for name, path in module_names(PACKAGE).items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        if hits := private_imports(path.read_text(encoding="utf-8"), package):
            found[name] = hits
    assert found == {}


def test_the_peer_side_imports_nothing_from_the_server_package() -> None:
    graph = import_graph(PACKAGE)
    assert "daisychain.wire.ice" in graph["daisychain.p2p.signaling"]
    assert peer_side_server_imports(graph) == []


def test_no_test_imports_another_test_module() -> None:
    found = {
        path.name: hits
        for path, source in _test_sources().items()
        if (hits := imports_of_test_modules(source))
    }
    assert found == {}


# --- each check fires on a planted wrong input -------------------------------------------------


def test_a_planted_cycle_is_found_and_printed() -> None:
    graph = {
        "daisychain.a": {"daisychain.b"},
        "daisychain.b": {"daisychain.c", "daisychain.d"},
        "daisychain.c": {"daisychain.a"},
        "daisychain.d": set(),
        "daisychain.e": {"daisychain.e"},
    }
    assert find_cycles(graph) == [
        ["daisychain.a", "daisychain.b", "daisychain.c", "daisychain.a"],
        ["daisychain.e", "daisychain.e"],
    ]
    del graph["daisychain.c"]
    assert find_cycles({k: v for k, v in graph.items() if k != "daisychain.e"}) == []


def test_a_lazy_relative_import_cycle_in_a_planted_package_is_found(tmp_path: Path) -> None:
    package = tmp_path / "daisychain"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import left\n")
    (package / "sub" / "left.py").write_text("from daisychain import top\n")
    (package / "sub" / "right.py").write_text("X = 1\n")
    (package / "top.py").write_text(
        "import json\n\n\ndef f():\n    from .sub.right import X\n    from .sub import left\n"
    )
    graph = import_graph(package)
    assert graph["daisychain.sub"] == {"daisychain.sub.left"}
    assert graph["daisychain.top"] == {"daisychain.sub.right", "daisychain.sub.left"}
    assert find_cycles(graph) == [["daisychain.sub.left", "daisychain.top", "daisychain.sub.left"]]


def test_a_planted_stdlib_name_is_found() -> None:
    names = ["daisychain.server.tokenize", "daisychain.tokenizer.fast", "daisychain.wire.json"]
    assert stdlib_shadows(names) == ["daisychain.server.tokenize", "daisychain.wire.json"]
    assert stdlib_shadows(["daisychain.x.statistics"], stdlib={"statistics"}) != []
    assert stdlib_shadows(["daisychain.tokenizer"]) == []


def test_a_planted_test_importing_a_benchmark_is_found() -> None:
    source = (
        "from daisychain.bench.browser import CHROMIUM\n"
        "from daisychain import bench, numerics\n"
        "import daisychain.bench.data\n"
        "from daisychain.bench.rig.chromium import OFFLINE_FLAGS\n"
        "def f():\n    from daisychain.bench import converge\n"
        "from daisychain.bench import rig\n"
        "import daisychain.bench.rig.netns\n"
    )
    assert bench_imports(source) == [
        "1: daisychain.bench.browser",
        "2: daisychain.bench",
        "3: daisychain.bench.data",
        "6: daisychain.bench",
    ]
    assert bench_imports("from daisychain.benchmarks_elsewhere import x\n") == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from daisychain.bench._hostile import run_hostile\n", ["1: daisychain.bench._hostile"]),
        ("from daisychain.p2p.mesh import _Peer, Mesh\n", ["1: daisychain.p2p.mesh._Peer"]),
        ("import daisychain._private.thing\n", ["1: daisychain._private"]),
        ("def f():\n    from daisychain.bench import _attacks\n", ["2: daisychain.bench._attacks"]),
        ("from daisychain.peer.__main__ import main\nfrom daisychain import __init__\n", []),
        ("from mesh_helpers import _local_helper\nfrom json import _default_decoder\n", []),
    ],
)
def test_a_planted_private_import_is_found(source: str, expected: list[str]) -> None:
    assert private_imports(source) == expected


def test_a_private_name_may_be_imported_inside_its_own_package() -> None:
    source = "from daisychain.bench._torch_model import make_trainer\n"
    assert private_imports(source, own_package="daisychain.bench") == []
    assert private_imports(source, own_package="daisychain.benchmarks") == [
        "1: daisychain.bench._torch_model"
    ]
    assert private_imports(source, own_package="daisychain.p2p") != []


def test_a_planted_server_import_on_the_peer_side_is_found() -> None:
    graph = {
        "daisychain.p2p.signaling": {"daisychain.wire.ice", "daisychain.server.ice"},
        "daisychain.peer.main": {"daisychain.server"},
        "daisychain.server.app": {"daisychain.server.rooms"},
        "daisychain.peers_elsewhere": {"daisychain.server.app"},
    }
    assert peer_side_server_imports(graph) == [
        "daisychain.p2p.signaling -> daisychain.server.ice",
        "daisychain.peer.main -> daisychain.server",
    ]


def test_a_planted_test_importing_a_test_module_is_found() -> None:
    source = (
        "from test_browser_peer import Tab\n"
        "import tab_helpers\n"
        "def f():\n    import test_browser_mesh as bm\n"
        "from latest_thing import x\n"
        "from aiohttp.test_utils import TestServer\n"
    )
    assert imports_of_test_modules(source) == ["1: test_browser_peer", "4: test_browser_mesh"]
