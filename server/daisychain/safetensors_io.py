"""A small reader/writer for the safetensors file format, with strict validation.

Format (https://huggingface.co/docs/safetensors): 8 bytes little-endian u64 header length N,
N bytes of JSON header ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}``, then the raw little-endian tensor bytes. DaisyChain writes and reads
it itself (the browser does the same in JS), and the tests use the ``safetensors`` library as the
oracle. Everything read from a file is checked before use: header size, JSON shape, dtypes,
offsets inside the file, contiguous non-overlapping buffers, byte counts matching shapes.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAX_HEADER_BYTES = 16 * 1024 * 1024

_DTYPES: dict[str, np.dtype[np.generic]] = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "I64": np.dtype("<i8"),
}
_NAMES = {dt: name for name, dt in _DTYPES.items()}


class CheckpointFormatError(ValueError):
    """The file is not a valid safetensors file (truncated, corrupted or not a checkpoint)."""


def encode(tensors: dict[str, npt.NDArray[np.generic]], metadata: dict[str, str]) -> bytes:
    """Serialize ``tensors`` (in the given order) and string ``metadata`` to safetensors bytes."""
    header: dict[str, object] = {"__metadata__": dict(metadata)}
    chunks: list[bytes] = []
    offset = 0
    for name, arr in tensors.items():
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in "|" else arr.dtype
        if dt not in _NAMES:
            raise TypeError(f"tensor {name!r}: unsupported dtype {arr.dtype}")
        data = np.ascontiguousarray(arr, dtype=dt).tobytes()
        header[name] = {
            "dtype": _NAMES[dt],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes, as the library does
    return struct.pack("<Q", len(raw)) + raw + b"".join(chunks)


def save(
    path: str | Path, tensors: dict[str, npt.NDArray[np.generic]], metadata: dict[str, str]
) -> None:
    """Write atomically: a crash mid-write never leaves a truncated file under ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode(tensors, metadata))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def decode(
    blob: bytes, source: str = "checkpoint"
) -> tuple[dict[str, npt.NDArray[np.generic]], dict[str, str]]:
    """Parse and validate safetensors bytes; raises CheckpointFormatError with what is wrong."""
    hint = "the file is damaged or not a safetensors checkpoint; download or save it again"
    if len(blob) < 8:
        raise CheckpointFormatError(f"{source}: file is {len(blob)} bytes, too short; {hint}")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(blob):
        raise CheckpointFormatError(
            f"{source}: header length {n} exceeds the file ({len(blob)} bytes); "
            f"the file is truncated; {hint}"
        )
    try:
        header = json.loads(blob[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFormatError(f"{source}: header is not valid JSON ({exc}); {hint}") from exc
    if not isinstance(header, dict):
        raise CheckpointFormatError(f"{source}: header is not a JSON object; {hint}")
    meta_raw = header.pop("__metadata__", {})
    if not isinstance(meta_raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta_raw.items()
    ):
        raise CheckpointFormatError(f"{source}: __metadata__ must map strings to strings")
    data = memoryview(blob)[8 + n :]
    spans: list[tuple[int, int, str]] = []
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointFormatError(f"{source}: tensor {name!r}: malformed entry")
        dt = _DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        shape, offs = info["shape"], info["data_offsets"]
        if dt is None:
            raise CheckpointFormatError(
                f"{source}: tensor {name!r}: unsupported dtype {info['dtype']!r}"
            )
        if not (
            isinstance(shape, list)
            and all(isinstance(d, int) and d >= 0 for d in shape)
            and isinstance(offs, list)
            and len(offs) == 2
            and all(isinstance(o, int) for o in offs)
        ):
            raise CheckpointFormatError(f"{source}: tensor {name!r}: malformed shape or offsets")
        begin, end = offs
        expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if not 0 <= begin <= end <= len(data):
            raise CheckpointFormatError(
                f"{source}: tensor {name!r}: data [{begin}, {end}) lies outside the "
                f"{len(data)}-byte data section; the file is truncated; {hint}"
            )
        if end - begin != expected:
            raise CheckpointFormatError(
                f"{source}: tensor {name!r}: {end - begin} bytes for shape {shape} "
                f"{info['dtype']} (needs {expected})"
            )
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(shape).copy()
    spans.sort()
    cursor = 0
    for begin, end, name in spans:
        if begin != cursor:
            raise CheckpointFormatError(
                f"{source}: tensor {name!r} overlaps or leaves a gap in the data section"
            )
        cursor = end
    if cursor != len(data):
        raise CheckpointFormatError(
            f"{source}: {len(data) - cursor} trailing bytes after the last tensor; {hint}"
        )
    return tensors, dict(meta_raw)


def load(path: str | Path) -> tuple[dict[str, npt.NDArray[np.generic]], dict[str, str]]:
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"checkpoint {path} does not exist; check the path (checkpoints end in .safetensors)"
        ) from None
    return decode(blob, source=str(path))
