"""The binary format (core spec chapter 5): a ``Module`` -> the bytes of a .wasm file.

Sections in the order the spec requires (type 1, import 2, function 3, memory 5, export 7, code
10), each as its id, its byte size (unsigned LEB128) and its contents; vectors as their length
then their elements. Function types are listed once each, in the order functions first use them,
and a function's locals are written as runs of equal types. Nothing depends on anything but the
module, so the same text always assembles to the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from daisychain.wasm.leb128 import unsigned
from daisychain.wasm.module import FuncType, Memory, Module

MAGIC = b"\x00asm"
VERSION = b"\x01\x00\x00\x00"
FUNCTYPE = 0x60
SECTION_TYPE, SECTION_IMPORT, SECTION_FUNCTION = 1, 2, 3
SECTION_MEMORY, SECTION_EXPORT, SECTION_CODE = 5, 7, 10
IMPORT_MEMORY = 0x02


def vector(items: Iterable[bytes]) -> bytes:
    parts = list(items)
    return unsigned(len(parts)) + b"".join(parts)


def name(text: str) -> bytes:
    raw = text.encode("utf-8")
    return unsigned(len(raw)) + raw


def section(section_id: int, contents: bytes) -> bytes:
    return bytes([section_id]) + unsigned(len(contents)) + contents


def limits(memory: Memory) -> bytes:
    """The memory type's limits: flag 0 (a minimum), 1 (minimum and maximum) or, for a memory
    shared between threads (threads proposal), 3 (minimum and maximum: a maximum is required)."""
    if memory.max_pages is None:
        if memory.shared:
            raise ValueError("a shared memory needs a maximum")  # the text parser refuses it
        return b"\x00" + unsigned(memory.min_pages)
    flag = b"\x03" if memory.shared else b"\x01"
    return flag + unsigned(memory.min_pages) + unsigned(memory.max_pages)


def functype(t: FuncType) -> bytes:
    return (
        bytes([FUNCTYPE])
        + vector(bytes([v]) for v in t.params)
        + vector(bytes([v]) for v in t.results)
    )


def local_runs(types: tuple[int, ...]) -> bytes:
    runs: list[tuple[int, int]] = []
    for t in types:
        if runs and runs[-1][1] == t:
            runs[-1] = (runs[-1][0] + 1, t)
        else:
            runs.append((1, t))
    return vector(unsigned(count) + bytes([t]) for count, t in runs)


def encode(module: Module) -> bytes:
    types: list[FuncType] = []
    for f in module.functions:
        if f.type not in types:
            types.append(f.type)
    out = bytearray(MAGIC + VERSION)
    if module.functions:
        out += section(SECTION_TYPE, vector(functype(t) for t in types))
    memory = module.memory
    if memory is not None and memory.imported is not None:
        field, entry = memory.imported
        out += section(
            SECTION_IMPORT,
            vector([name(field) + name(entry) + bytes([IMPORT_MEMORY]) + limits(memory)]),
        )
    if module.functions:
        out += section(
            SECTION_FUNCTION, vector(unsigned(types.index(f.type)) for f in module.functions)
        )
    if memory is not None and memory.imported is None:
        out += section(SECTION_MEMORY, vector([limits(memory)]))
    if module.exports:
        out += section(
            SECTION_EXPORT,
            vector(name(e.name) + bytes([e.kind]) + unsigned(e.index) for e in module.exports),
        )
    if module.functions:
        bodies = (local_runs(f.locals) + f.body for f in module.functions)
        out += section(SECTION_CODE, vector(unsigned(len(b)) + b for b in bodies))
    return bytes(out)
