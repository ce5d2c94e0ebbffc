"""``ast.parse`` for the tests that read the project's own source (import scans, cycles).

CPython before 3.11.8 raises ``SystemError: AST constructor recursion depth mismatch`` when a
garbage collection runs Python finalizers in the middle of ``ast.parse`` (seen in the full
suite: an earlier mesh test's leftover aiortc task logged "Task exception was never retrieved"
from its ``__del__`` during the parse). So collect first and keep the collector off meanwhile.
"""

from __future__ import annotations

import ast
import gc
from typing import Any

_ast_parse = ast.parse  # the interpreter's own, kept before conftest.py replaces ast.parse


def parse_without_collector(source: Any, *args: Any, **kwargs: Any) -> Any:
    """``ast.parse`` with the collector off (conftest.py installs it as ``ast.parse`` on an
    affected interpreter, so pytest's own parses are covered too)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _ast_parse(source, *args, **kwargs)
    finally:
        if enabled:
            gc.enable()


def parse(source: str) -> ast.Module:
    gc.collect()
    tree = parse_without_collector(source)
    assert isinstance(tree, ast.Module)
    return tree
