"""A WebAssembly module as this assembler builds it: the parts its binary encoding needs.

``text.parse_module`` produces it from the text format, ``binary.encode`` writes it out. Only the
subset DaisyChain's kernels use: at most one memory (defined and exported, or imported; shared
between threads or not),
functions, and exports of functions and the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

EXPORT_FUNC = 0x00
EXPORT_MEMORY = 0x02


@dataclass(frozen=True)
class FuncType:
    params: tuple[int, ...]  # value type bytes
    results: tuple[int, ...]


@dataclass(frozen=True)
class Memory:
    min_pages: int  # 64 KiB pages
    max_pages: int | None
    imported: tuple[str, str] | None  # (module, name) when the host provides it
    # Shared between threads (the threads proposal): the host hands one memory to several
    # instances, each in its own worker. A shared memory must declare its maximum.
    shared: bool = False


@dataclass(frozen=True)
class Function:
    type: FuncType
    locals: tuple[int, ...]  # value type bytes of the locals after the parameters
    body: bytes  # the encoded expression, ending with `end`


@dataclass(frozen=True)
class Export:
    name: str
    kind: int  # EXPORT_FUNC or EXPORT_MEMORY
    index: int


@dataclass(frozen=True)
class Module:
    memory: Memory | None
    functions: tuple[Function, ...]
    exports: tuple[Export, ...]
