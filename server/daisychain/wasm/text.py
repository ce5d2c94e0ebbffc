"""The module fields of the text format (core spec 6.6) -> a ``Module``.

The subset: ``(module ...)`` (or its fields alone) with

- ``(memory $id? (export "name")* MIN MAX?)`` or ``(memory $id? (import "mod" "name") MIN MAX?)``
  or ``(import "mod" "name" (memory $id? MIN MAX?))``: at most one memory; ``MIN MAX shared``
  makes it shared between threads (the threads proposal; a shared memory needs its maximum);
- ``(func $id? (export "name")* (param $id? t ...)* (result t ...)* (local $id? t ...)* instr*)``;
- ``(export "name" (func $f))`` and ``(export "name" (memory $m))``.

Anything else (types, tables, globals, data segments, function imports, start) is refused with
its position: an assembler that skipped a field it does not understand would write a module
that is not the one the text describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daisychain.wasm.errors import Position, WatError
from daisychain.wasm.instructions import BodyEncoder, valtype
from daisychain.wasm.literals import integer
from daisychain.wasm.module import (
    EXPORT_FUNC,
    EXPORT_MEMORY,
    Export,
    Function,
    FuncType,
    Memory,
    Module,
)
from daisychain.wasm.sexpr import Atom, Node, SList

MAX_PAGES = 65536  # 4 GiB of 64 KiB pages: the 32-bit address space
_SUBSET_HINT = "docs/KERNELS.md 'The WebAssembly assembler' lists the supported subset"


@dataclass
class _FuncHeader:
    at: Position
    type: FuncType
    local_names: dict[str, int]
    local_types: list[int]
    body: list[Node]
    exports: list[str] = field(default_factory=list)


def _id(items: tuple[Node, ...], i: int) -> tuple[str | None, int]:
    """An optional ``$id`` at items[i]: (the id or None, the index after it)."""
    node = items[i] if i < len(items) else None
    if isinstance(node, Atom) and node.string is None and node.text.startswith("$"):
        return node.text, i + 1
    return None, i


def _string(node: Node, what: str) -> str:
    if not isinstance(node, Atom) or node.string is None:
        raise WatError(f"{what}: expected a string", node.at)
    try:
        return node.string.decode("utf-8")
    except UnicodeDecodeError:
        raise WatError(f"{what}: not valid UTF-8", node.at) from None


def _inline_export(node: Node) -> str | None:
    if isinstance(node, SList) and node.head == "export":
        if len(node.items) != 2:
            raise WatError('an inline export is (export "name")', node.at)
        return _string(node.items[1], "export name")
    return None


def _limits(items: tuple[Node, ...], at: Position) -> tuple[int, int | None, bool]:
    """``MIN``, ``MIN MAX`` or ``MIN MAX shared`` (threads proposal): (min, max, shared)."""
    shared = bool(items) and isinstance(items[-1], Atom) and items[-1].text == "shared"
    if shared:
        items = items[:-1]
    numbers = [
        integer(n, 0, MAX_PAGES, "memory pages") if isinstance(n, Atom) else None for n in items
    ]
    if not 1 <= len(numbers) <= 2 or None in numbers:
        raise WatError("memory limits are MIN, MIN MAX or MIN MAX shared pages", at)
    lo = numbers[0]
    hi = numbers[1] if len(numbers) == 2 else None
    assert lo is not None
    if hi is not None and hi < lo:
        raise WatError(f"memory maximum {hi} is below its minimum {lo}", at)
    if shared and hi is None:
        raise WatError(
            "a shared memory needs a maximum", at, "write MIN MAX shared (the threads proposal)"
        )
    return lo, hi, shared


class _ModuleBuilder:
    def __init__(self) -> None:
        self.memory: Memory | None = None
        self.memory_name: str | None = None
        self.memory_at: Position | None = None
        self.memory_exports: list[str] = []
        self.funcs: list[_FuncHeader] = []
        self.func_names: dict[str, int] = {}
        self.exports: list[tuple[str, str, Node]] = []  # (name, kind, reference)

    def field(self, node: Node) -> None:
        if not isinstance(node, SList) or node.head is None:
            raise WatError("expected a module field in parentheses", node.at)
        handler = {
            "memory": self.memory_field,
            "func": self.func_field,
            "export": self.export_field,
            "import": self.import_field,
        }.get(node.head)
        if handler is None:
            raise WatError(
                f"module field ({node.head} ...) is not supported", node.at, _SUBSET_HINT
            )
        handler(node)

    def set_memory(
        self, node: SList, items: tuple[Node, ...], imported: tuple[str, str] | None, start: int
    ) -> None:
        if self.memory is not None:
            raise WatError("a second memory", node.at, "a module has at most one memory")
        name, i = _id(items, start)
        while i < len(items) and (export := _inline_export(items[i])) is not None:
            self.memory_exports.append(export)
            i += 1
        inner = items[i] if i < len(items) else None
        if isinstance(inner, SList) and inner.head == "import":
            if imported is not None or len(inner.items) != 3:
                raise WatError('an inline import is (import "module" "name")', inner.at)
            imported = (
                _string(inner.items[1], "import module"),
                _string(inner.items[2], "import name"),
            )
            i += 1
        lo, hi, shared = _limits(items[i:], node.at)
        self.memory = Memory(lo, hi, imported, shared)
        self.memory_name = name
        self.memory_at = node.at

    def memory_field(self, node: SList) -> None:
        self.set_memory(node, node.items, None, 1)

    def import_field(self, node: SList) -> None:
        items = node.items
        desc = items[3] if len(items) == 4 else None
        if not isinstance(desc, SList) or desc.head != "memory":
            raise WatError("only a memory can be imported", node.at, _SUBSET_HINT)
        imported = (_string(items[1], "import module"), _string(items[2], "import name"))
        self.set_memory(desc, desc.items, imported, 1)

    def func_field(self, node: SList) -> None:
        items = node.items
        name, i = _id(items, 1)
        exports: list[str] = []
        while i < len(items) and (export := _inline_export(items[i])) is not None:
            exports.append(export)
            i += 1
        params: list[int] = []
        results: list[int] = []
        local_types: list[int] = []
        local_names: dict[str, int] = {}
        section = "param"
        order = {"param": 0, "result": 1, "local": 2}
        while i < len(items):
            decl = items[i]
            if not isinstance(decl, SList) or decl.head not in order:
                break
            assert decl.head is not None
            if order[decl.head] < order[section]:
                raise WatError(
                    f"({decl.head} ...) after ({section} ...)",
                    decl.at,
                    "declare params, then results, then locals",
                )
            section = decl.head
            names, k = _id(decl.items, 1)
            types = [valtype(t) for t in decl.items[k:]]
            if names is not None and len(types) != 1:
                raise WatError(f"a named {decl.head} declares exactly one type", decl.at)
            if decl.head == "result":
                if names is not None:
                    raise WatError("results have no names", decl.at)
                results.extend(types)
                i += 1
                continue
            if names is not None:
                if names in local_names:
                    raise WatError(f"{names} is declared twice", decl.at)
                local_names[names] = len(params) + len(local_types)
            (params if decl.head == "param" else local_types).extend(types)
            i += 1
        if len(results) > 1:
            raise WatError("more than one result", node.at, _SUBSET_HINT)
        if name is not None:
            if name in self.func_names:
                raise WatError(f"function {name} is defined twice", node.at)
            self.func_names[name] = len(self.funcs)
        self.funcs.append(
            _FuncHeader(
                node.at,
                FuncType(tuple(params), tuple(results)),
                local_names,
                local_types,
                list(items[i:]),
                exports,
            )
        )

    def export_field(self, node: SList) -> None:
        items = node.items
        ref = items[2] if len(items) == 3 else None
        if not isinstance(ref, SList) or ref.head not in ("func", "memory") or len(ref.items) != 2:
            raise WatError('an export is (export "name" (func $f)) or (memory $m)', node.at)
        self.exports.append((_string(items[1], "export name"), ref.head, ref.items[1]))

    def build(self) -> Module:
        functions = []
        for header in self.funcs:
            encoder = BodyEncoder(
                header.local_names,
                len(header.type.params) + len(header.local_types),
                self.func_names,
                len(self.funcs),
            )
            body = encoder.encode(header.body, header.at)
            functions.append(Function(header.type, tuple(header.local_types), body))
        exports: list[Export] = []
        for index, header in enumerate(self.funcs):
            exports += [Export(e, EXPORT_FUNC, index) for e in header.exports]
        exports += [Export(e, EXPORT_MEMORY, 0) for e in self.memory_exports]
        for name, kind, ref in self.exports:
            exports.append(self.resolve_export(name, kind, ref))
        seen: set[str] = set()
        for e in exports:
            if e.name in seen:
                raise WatError(f"export {e.name!r} is declared twice", self.memory_at)
            seen.add(e.name)
        return Module(self.memory, tuple(functions), tuple(exports))

    def resolve_export(self, name: str, kind: str, ref: Node) -> Export:
        if not isinstance(ref, Atom):
            raise WatError("an export names its function or memory", ref.at)
        if kind == "memory":
            if self.memory is None or ref.text not in ("0", self.memory_name):
                raise WatError(f"no memory {ref.text}", ref.at)
            return Export(name, EXPORT_MEMORY, 0)
        if ref.text in self.func_names:
            return Export(name, EXPORT_FUNC, self.func_names[ref.text])
        index = integer(ref, 0, len(self.funcs) - 1, "exported function") if self.funcs else -1
        if index < 0:
            raise WatError(f"no function {ref.text}", ref.at)
        return Export(name, EXPORT_FUNC, index)


def parse_module(nodes: list[Node]) -> Module:
    """The module the top-level ``nodes`` describe (one ``(module ...)`` or its bare fields)."""
    fields: tuple[Node, ...] = tuple(nodes)
    if len(nodes) == 1 and isinstance(nodes[0], SList) and nodes[0].head == "module":
        fields = nodes[0].items[1:]
        _name, start = _id(fields, 0)
        fields = fields[start:]
    builder = _ModuleBuilder()
    for node in fields:
        builder.field(node)
    return builder.build()
