"""Locate the shared asset folders (static/, kernels/, luts/) and the packaged data.

The same files serve the browser and the Python side. In a source checkout or an editable install
they sit at the repository top level; in a wheel they are copied into ``daisychain/_assets/`` by
setup.py. ``asset_dir`` hides the difference.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGED = _PACKAGE_DIR / "_assets"
_SOURCE_ROOT = _PACKAGE_DIR.parent.parent

ASSET_NAMES = ("static", "kernels", "luts")


def asset_dir(name: str) -> Path:
    """Return the folder for ``name`` (one of static, kernels, luts)."""
    if name not in ASSET_NAMES:
        raise ValueError(f"unknown asset folder {name!r}; expected one of {ASSET_NAMES}")
    for base in (_PACKAGED, _SOURCE_ROOT):
        candidate = base / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"asset folder {name!r} not found next to the package or in the source tree; "
        "reinstall daisychain (pip install .) so the wheel carries static/, kernels/ and luts/"
    )


def data_dir() -> Path:
    """Folder of data shipped inside the package (the built-in corpus)."""
    return _PACKAGE_DIR / "data"
