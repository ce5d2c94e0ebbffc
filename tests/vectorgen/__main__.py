"""``python tests/vectorgen --write|--check|--list [SET ...]`` from the repository root (or
``python -m vectorgen`` with tests/ on the path, as pytest has it)."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a folder: Python put tests/vectorgen/ itself first on the path, where its modules
    # would shadow others by their short names (wire, protocol, ...); tests/ is the root instead.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))

from vectorgen import main

sys.exit(main())
