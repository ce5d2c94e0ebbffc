"""Where ``bench cpu-tier`` finds TF.js 4.22, and how it installs it there on demand.

TF.js is a bench-only dependency: its manifest and lock file are ``bench/tfjs/package.json`` and
``package-lock.json`` (exact versions), and it is installed with ``npm ci`` into a cache folder
outside the repository (``~/.cache/daisychain/tfjs-4.22.0``, or ``--tfjs-dir``) the first time
the bench runs; never into static/ and never from a CDN at page time. Tests and CI never install
it (no network there): a folder without a complete, matching install is refused with
``TfjsMissing``, whose message says what is missing and whose hint says how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

TFJS_VERSION = "4.22.0"
# The pinned manifest lives beside the benchmark that uses it (package data of daisychain.bench).
MANIFEST_DIR = Path(__file__).resolve().parents[1] / "tfjs"
MANIFEST_FILES = ("package.json", "package-lock.json")
NPM_TIMEOUT_S = 900.0

# The files the bench loads, relative to the install folder: the Node entry points resolve from
# the packages; the page loads the browser bundles and the wasm backend's three binaries.
_MODULES = "node_modules/@tensorflow"
PACKAGES = ("tfjs", "tfjs-backend-wasm")
BROWSER_FILES: dict[str, str] = {
    "tf.min.js": f"{_MODULES}/tfjs/dist/tf.min.js",
    "tf-backend-wasm.min.js": f"{_MODULES}/tfjs-backend-wasm/dist/tf-backend-wasm.min.js",
    "tfjs-backend-wasm.wasm": f"{_MODULES}/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm",
    "tfjs-backend-wasm-simd.wasm": f"{_MODULES}/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm",
    "tfjs-backend-wasm-threaded-simd.wasm": (
        f"{_MODULES}/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm"
    ),
}


class TfjsMissing(RuntimeError):
    """TF.js is not usable from the folder; ``hint`` says how to get it there."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}"


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/daisychain/tfjs-4.22.0`` (``~/.cache`` when the variable is unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "daisychain" / f"tfjs-{TFJS_VERSION}"


def install_command(folder: Path) -> str:
    """What a person runs to install TF.js into ``folder`` by hand (the bench runs the same)."""
    files = " ".join(str(MANIFEST_DIR / name) for name in MANIFEST_FILES)
    return (
        f"mkdir -p {folder} && cp {files} {folder}/ && "
        f"npm ci --prefix {folder} --ignore-scripts --no-audit --no-fund"
    )


def problems(folder: Path) -> list[str]:
    """Why ``folder`` is not a complete TF.js 4.22 install (empty: it is one)."""
    found: list[str] = []
    for package in PACKAGES:
        manifest = folder / _MODULES / package / "package.json"
        try:
            version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
        except (OSError, ValueError):
            found.append(f"@tensorflow/{package} is not installed")
            continue
        if version != TFJS_VERSION:
            found.append(f"@tensorflow/{package} is {version}, not {TFJS_VERSION}")
    found.extend(
        f"{rel} is missing" for rel in BROWSER_FILES.values() if not (folder / rel).is_file()
    )
    return found


def _npm_ci(folder: Path, npm: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in MANIFEST_FILES:
        shutil.copyfile(MANIFEST_DIR / name, folder / name)
    # --ignore-scripts: nothing the bench loads needs an install script (the wasm binaries ship
    # in the packages), and none should run on the user's machine for a benchmark.
    cmd = [npm, "ci", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund"]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise TfjsMissing(
            f"`npm ci` into {folder} took more than {NPM_TIMEOUT_S:.0f} s",
            "is the npm registry reachable? Or install by hand: " + install_command(folder),
        ) from None
    if proc.returncode != 0:
        raise TfjsMissing(
            f"`npm ci` into {folder} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}",
            "the npm registry must be reachable to install TF.js once; or point --tfjs-dir at a "
            "folder where `" + install_command(Path("DIR")) + "` has run",
        )


def ensure_tfjs(folder: Path, *, install: bool, npm: str | None = None) -> Path:
    """``folder`` once it holds TF.js 4.22 (installing it there first when ``install``);
    TfjsMissing when it does not and cannot."""
    found = problems(folder)
    if not found:
        return folder
    if not install:
        raise TfjsMissing(
            f"TF.js {TFJS_VERSION} is not installed in {folder}: {'; '.join(found[:3])}",
            "run the bench without --no-install to install it there (npm ci, needs the npm "
            f"registry once), or by hand: {install_command(folder)}",
        )
    npm = npm or shutil.which("npm")
    if npm is None:
        raise TfjsMissing(
            f"TF.js {TFJS_VERSION} is not installed in {folder} and npm is not on PATH",
            "apt-get install npm (or use a Node.js that ships it), then run the bench again",
        )
    _npm_ci(folder, npm)
    found = problems(folder)
    if found:
        raise TfjsMissing(
            f"after `npm ci`, {folder} is still incomplete: {'; '.join(found[:3])}",
            f"remove {folder} and run the bench again",
        )
    return folder
