"""``daisychain luts``: the verified unit tables in ``luts/`` and their manifest.

The LUT kernel path reads exact integer results from tables instead of computing them. A table
is only trusted after an exhaustive check: every entry is compared with plain integer
arithmetic (Python ints, independent of numpy and of the generator), and the file must match the
SHA-256 in ``luts/manifest.json``. Spec of each table: docs/LUTS.md.

    mul_i8       int16 (256, 256)    [a + 128, b + 128] = a * b             for a, b in -128..127
    requant_i16  int8  (9, 65536)    [s, v + 32768] = clamp(rne(v / 2^s), -127, 127)
                                                                     for s in 0..8, v in int16
    relu_i8      int8  (256,)        [x + 128] = max(0, x)                  for x in -128..127

(rne: round to nearest, ties to even.) Files are raw little-endian, row-major, no header; the
manifest carries shape, dtype and hash.

    daisychain luts --check         # verify files, hashes and every entry (the default)
    daisychain luts --regenerate    # rewrite the files and the manifest
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.assets import asset_dir

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
REQUANT_SHIFTS = 9  # s = 0..8


@dataclass(frozen=True)
class TableSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype string, explicitly little-endian
    formula: str
    generate: Callable[[], npt.NDArray[Any]]
    reference: Callable[[], list[int]]  # every entry, row-major, from Python int arithmetic
    describe_index: Callable[[tuple[int, ...]], str]


# --- generators (numpy, vectorised) ---------------------------------------------------------


def _generate_mul() -> npt.NDArray[np.int16]:
    values = np.arange(-128, 128, dtype=np.int32)
    return (values[:, None] * values[None, :]).astype("<i2")  # (256, 256)


def _generate_requant() -> npt.NDArray[np.int8]:
    v = np.arange(-32768, 32768, dtype=np.float64)
    rows = [np.clip(np.round(v / 2.0**s), -127, 127) for s in range(REQUANT_SHIFTS)]
    # v / 2^s is exact in float64 and np.round rounds half to even.
    return np.stack(rows).astype("<i1")  # (9, 65536)


def _generate_relu() -> npt.NDArray[np.int8]:
    return np.maximum(np.arange(-128, 128, dtype=np.int32), 0).astype("<i1")  # (256,)


# --- references (pure Python integers, written independently of the generators) -------------


def _round_shift_half_even(v: int, s: int) -> int:
    """rne(v / 2^s) in integers: floor quotient, then round up past half or at half when odd."""
    if s == 0:
        return v
    quotient, remainder = divmod(v, 1 << s)  # floor division: 0 <= remainder < 2^s
    half = 1 << (s - 1)
    if remainder > half or (remainder == half and quotient % 2 == 1):
        quotient += 1
    return quotient


def _reference_mul() -> list[int]:
    return [a * b for a in range(-128, 128) for b in range(-128, 128)]


def _reference_requant() -> list[int]:
    return [
        max(-127, min(127, _round_shift_half_even(v, s)))
        for s in range(REQUANT_SHIFTS)
        for v in range(-32768, 32768)
    ]


def _reference_relu() -> list[int]:
    return [x if x > 0 else 0 for x in range(-128, 128)]


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            name="mul_i8",
            shape=(256, 256),
            dtype="<i2",
            formula="[a+128][b+128] = a*b for int8 a, b (exact; range -16256..16384)",
            generate=_generate_mul,
            reference=_reference_mul,
            describe_index=lambda i: f"a={i[0] - 128}, b={i[1] - 128}",
        ),
        TableSpec(
            name="requant_i16",
            shape=(REQUANT_SHIFTS, 65536),
            dtype="<i1",
            formula=(
                "[s][v+32768] = clamp(round_half_to_even(v / 2^s), -127, 127) "
                "for s in 0..8, int16 v"
            ),
            generate=_generate_requant,
            reference=_reference_requant,
            describe_index=lambda i: f"s={i[0]}, v={i[1] - 32768}",
        ),
        TableSpec(
            name="relu_i8",
            shape=(256,),
            dtype="<i1",
            formula="[x+128] = max(0, x) for int8 x",
            generate=_generate_relu,
            reference=_reference_relu,
            describe_index=lambda i: f"x={i[0] - 128}",
        ),
    )
}


def _spec(name: str) -> TableSpec:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; the tables are {', '.join(TABLES)}")
    return TABLES[name]


def check_table(name: str, array: npt.NDArray[Any]) -> None:
    """Compare every entry of ``array`` with integer arithmetic; raise ValueError on the first
    wrong entry (row-major order), naming the table, the index, the operands and both values."""
    spec = _spec(name)
    if array.shape != spec.shape:
        raise ValueError(f"table {name}: shape {array.shape}, expected {spec.shape}")
    if array.dtype != np.dtype(spec.dtype):
        raise ValueError(f"table {name}: dtype {array.dtype}, expected {np.dtype(spec.dtype)}")
    expected = np.array(spec.reference(), dtype=np.int64).reshape(spec.shape)
    wrong = np.argwhere(array.astype(np.int64) != expected)
    if len(wrong):
        index = tuple(int(i) for i in wrong[0])
        raise ValueError(
            f"table {name}: entry {list(index)} ({spec.describe_index(index)}) is "
            f"{int(array[index])}, expected {int(expected[index])} ({len(wrong)} wrong entries "
            f"in all); regenerate with `daisychain luts --regenerate`"
        )


def _directory(directory: Path | None) -> Path:
    return asset_dir("luts") if directory is None else directory


def read_manifest(directory: Path | None = None) -> dict[str, Any]:
    path = _directory(directory) / MANIFEST_NAME
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{path} not found; create the tables with `daisychain luts --regenerate`"
        ) from exc
    if manifest.get("version") != MANIFEST_VERSION:
        raise ValueError(
            f"{path}: manifest version {manifest.get('version')!r}, expected {MANIFEST_VERSION}"
        )
    return manifest


def load_table(name: str, directory: Path | None = None) -> npt.NDArray[Any]:
    """The table ``name`` from its file, after checking size and SHA-256 against the manifest."""
    spec = _spec(name)
    folder = _directory(directory)
    entry = read_manifest(folder)["tables"].get(name)
    if entry is None:
        raise ValueError(f"table {name} is missing from {folder / MANIFEST_NAME}")
    if tuple(entry["shape"]) != spec.shape or entry["dtype"] != spec.dtype:
        raise ValueError(
            f"table {name}: manifest says shape {entry['shape']} dtype {entry['dtype']}, this "
            f"code expects {list(spec.shape)} {spec.dtype}; regenerate with "
            "`daisychain luts --regenerate`"
        )
    path = folder / entry["file"]
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != entry["sha256"]:
        raise ValueError(
            f"table {name}: {path} has SHA-256 {digest}, the manifest expects {entry['sha256']}; "
            "the file is damaged or stale: run `daisychain luts --regenerate`"
        )
    expected_size = int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
    if len(raw) != expected_size:
        raise ValueError(f"table {name}: {path} has {len(raw)} bytes, expected {expected_size}")
    return np.frombuffer(raw, dtype=spec.dtype).reshape(spec.shape)


def regenerate(directory: Path | None = None) -> dict[str, Any]:
    """Write every table and the manifest; each table is checked before it is written."""
    folder = _directory(directory)
    folder.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Any] = {}
    for name, spec in TABLES.items():
        array = np.ascontiguousarray(spec.generate())
        check_table(name, array)
        raw = array.tobytes(order="C")
        file_name = f"{name}.bin"
        (folder / file_name).write_bytes(raw)
        tables[name] = {
            "file": file_name,
            "shape": list(spec.shape),
            "dtype": spec.dtype,
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "description": spec.formula,
        }
    manifest = {
        "version": MANIFEST_VERSION,
        "layout": "raw little-endian, row-major (C order), no header; spec: docs/LUTS.md",
        "tables": tables,
    }
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def check_all(directory: Path | None = None) -> list[str]:
    """Problems found in the folder (empty when every table is present, intact and exact)."""
    problems: list[str] = []
    try:
        listed = set(read_manifest(directory)["tables"])
    except (OSError, ValueError) as exc:
        return [str(exc)]
    for name in TABLES:
        if name not in listed:
            problems.append(f"table {name} is missing from the manifest")
            continue
        try:
            check_table(name, load_table(name, directory))
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--regenerate", action="store_true", help="write the tables and manifest")
    mode.add_argument("--check", action="store_true", help="verify hashes and every entry")
    parser.add_argument("--dir", type=Path, default=None, help="table folder (default: luts/)")


def run(args: argparse.Namespace) -> int:
    if args.regenerate:
        manifest = regenerate(args.dir)
        for name, entry in manifest["tables"].items():
            print(f"{name}: {entry['file']} {entry['shape']} {entry['dtype']} {entry['sha256']}")
        return 0
    problems = check_all(args.dir)
    for problem in problems:
        print(f"luts check FAILED: {problem}", file=sys.stderr)
    if not problems:
        print(f"luts check passed: {', '.join(TABLES)} match their hashes and every entry")
    return 1 if problems else 0
