"""The golden-vector format (tests/vectors/README.md): a case is named inputs and outputs, each a
small inline JSON value or an array stored as a little-endian blob with its dtype, shape, byte
count and SHA-256, listed in one ``manifest.json``.

The product writes it once: the server's ``/vectors/`` (server/trainvectors.py) serves the
``train_run`` case the ``/train-check`` page trains, in the same bytes as the committed vectors.
The generators of every other set live with the tests (tests/vectorgen/).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.numerics import CONTRACT_VERSION

FORMAT = "daisychain-vectors"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BLOB_DIR = "blobs"

# A field value: an array (stored as a little-endian blob) or a small JSON integer / int list.
Array = npt.NDArray[Any]
Inline = int | tuple[int, ...] | tuple[str, ...]
Value = Array | Inline
Fields = dict[str, Value]
Params = dict[str, Any]
DTYPES = {"float32": np.float32, "int32": np.int32, "uint32": np.uint32, "int8": np.int8}


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    inputs: Fields
    params: Params = field(default_factory=dict)


def blob_bytes(a: Array) -> bytes:
    """Canonical bytes: little-endian, C order."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def field_entry(case: str, fname: str, v: Value) -> tuple[dict[str, Any], bytes | None]:
    """One field's manifest entry, and its blob when it is an array."""
    if isinstance(v, np.ndarray):
        dtype = v.dtype.name
        if dtype not in DTYPES:
            raise TypeError(f"{case}.{fname}: dtype {dtype} not in the vector format")
        data = blob_bytes(v)
        entry = {
            "dtype": dtype,
            "shape": list(v.shape),
            "blob": f"{BLOB_DIR}/{case}.{fname}.bin",
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        return entry, data
    return {"value": list(v) if isinstance(v, tuple) else v}, None


def manifest(
    cases: list[tuple[Case, Fields]],
    kinds: dict[str, str],
    *,
    generated_by: str,
    external: list[dict[str, str]] | None = None,
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest of ``cases`` (each with its outputs) and their blobs by relative path.
    ``kinds`` names each case kind with its one-line description."""
    blobs: dict[str, bytes] = {}
    entries = []
    for case, outputs in cases:
        fields: dict[str, dict[str, Any]] = {"inputs": {}, "outputs": {}}
        for section, values in (("inputs", case.inputs), ("outputs", outputs)):
            for fname, v in values.items():
                entry, data = field_entry(case.name, fname, v)
                fields[section][fname] = entry
                if data is not None:
                    blobs[entry["blob"]] = data
        entries.append({"name": case.name, "kind": case.kind, "params": case.params, **fields})
    out = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "contract_version": CONTRACT_VERSION,
        "generated_by": generated_by,
        "kinds": kinds,
        "cases": entries,
        "external": external or [],
    }
    return out, blobs
