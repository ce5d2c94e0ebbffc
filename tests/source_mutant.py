"""Planted bugs as source mutations: a module's text with one expression changed, loaded as a
fresh module (the original stays as it is), so a planted copy goes through the same checks as
the real one and must fail them."""

from __future__ import annotations

import sys
import types
from pathlib import Path


def mutant(module: types.ModuleType, old: str, new: str) -> types.ModuleType:
    """``module`` with the one occurrence of ``old`` in its source replaced by ``new``."""
    path = Path(str(module.__file__))
    source = path.read_text(encoding="utf-8")
    assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times in {path.name}"
    name = f"{module.__name__}_mutant"
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    try:
        exec(compile(source.replace(old, new), str(path), "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod
