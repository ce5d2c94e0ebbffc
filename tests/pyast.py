"""``ast.parse`` for the tests that read the project's own source (import scans, cycles).

CPython before 3.11.8 raises ``SystemError: AST constructor recursion depth mismatch`` when a
garbage collection runs Python finalizers in the middle of ``ast.parse`` (seen in the full
suite: an earlier mesh test's leftover aiortc task logged "Task exception was never retrieved"
from its ``__del__`` during the parse). So collect first and keep the collector off meanwhile.
"""

from __future__ import annotations

import ast
import gc


def parse(source: str) -> ast.Module:
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()
