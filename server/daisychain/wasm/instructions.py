"""One function body: instructions in flat or folded form -> the bytes of its expression.

Flat form is a sequence (``local.get $x  i32.const 1  i32.add``) with ``block``/``loop``/``if``
closed by ``end``; folded form nests operands inside the instruction that uses them (``(i32.add
(local.get $x) (i32.const 1))``, core spec 6.5.9): the operands are emitted first, then the
instruction with its immediates. Both may be mixed. Names resolve here: ``$local`` to its index,
``$label`` to its branch depth (0 = the innermost enclosing block), ``$func`` to its index.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from daisychain.wasm.errors import Position, WatError
from daisychain.wasm.leb128 import signed, unsigned
from daisychain.wasm.literals import float32_bits, float64_bits, integer, is_int, wrap_signed
from daisychain.wasm.opcodes import OPS, VALTYPES, Imm, Op
from daisychain.wasm.sexpr import Atom, Node, SList

_EMPTY_BLOCK = 0x40
# v128.const shapes: lane count, bytes per lane (core spec 6.5.9 "Vector instructions").
_SHAPES = {"i8x16": (16, 1), "i16x8": (8, 2), "i32x4": (4, 4), "i64x2": (2, 8), "f32x4": (4, 4)}


class BodyEncoder:
    """Encodes the instructions of one function; ``locals`` and ``funcs`` map names to indices."""

    def __init__(
        self, locals_: Mapping[str, int], n_locals: int, funcs: Mapping[str, int], n_funcs: int
    ) -> None:
        self.locals = locals_
        self.n_locals = n_locals
        self.funcs = funcs
        self.n_funcs = n_funcs
        self.labels: list[str | None] = []  # enclosing blocks, innermost last
        self.out = bytearray()

    def encode(self, nodes: Sequence[Node], at: Position) -> bytes:
        """The body's expression: its instructions and the final ``end``."""
        self.sequence(nodes)
        if self.labels:
            raise WatError(f"{len(self.labels)} block(s) never closed with 'end'", at)
        self.out += OPS["end"].code
        return bytes(self.out)

    # --- sequences -------------------------------------------------------------------------

    def sequence(self, nodes: Sequence[Node]) -> None:
        i = 0
        while i < len(nodes):
            node = nodes[i]
            if isinstance(node, SList):
                self.folded(node)
                i += 1
            else:
                i = self.flat(nodes, i)

    def flat(self, nodes: Sequence[Node], i: int) -> int:
        """Encodes the flat instruction at nodes[i]; returns the index after its immediates."""
        name = nodes[i]
        assert isinstance(name, Atom)
        op = self.op(name)
        rest = nodes[i + 1 :]
        if name.text in ("end", "else"):
            if not self.labels:
                raise WatError(f"'{name.text}' outside any block", name.at)
            used = self.closing_label(rest)
            if name.text == "end":
                self.labels.pop()
            self.out += op.code
            return i + 1 + used
        used = self.immediates(name, op, rest, folded=False)
        if op.imm is Imm.BLOCK:
            self.labels.append(self.block_label(rest))
        return i + 1 + used

    def folded(self, node: SList) -> None:
        head = node.items[0] if node.items else None
        if not isinstance(head, Atom) or head.string is not None:
            raise WatError("expected an instruction in parentheses", node.at)
        op = self.op(head)
        items = node.items[1:]
        if head.text in ("block", "loop"):
            used = self.immediates(head, op, items, folded=True)
            self.labels.append(self.block_label(items))
            self.sequence(items[used:])
            self.labels.pop()
            self.out += OPS["end"].code
        elif head.text == "if":
            self.folded_if(head, op, items)
        elif head.text in ("end", "else"):
            raise WatError(f"'{head.text}' cannot be folded", head.at)
        else:
            code = self.out
            self.out = bytearray()  # the instruction with its immediates, emitted after operands
            used = self.immediates(head, op, items, folded=True)
            instr, self.out = self.out, code
            for operand in items[used:]:
                if not isinstance(operand, SList):
                    raise WatError(
                        f"unexpected {operand.text!r} after the immediates of {head.text}",
                        operand.at,
                        "operands of a folded instruction are themselves in parentheses",
                    )
                self.folded(operand)
            self.out += instr

    def folded_if(self, head: Atom, op: Op, items: Sequence[Node]) -> None:
        code = self.out
        self.out = bytearray()
        used = self.immediates(head, op, items, folded=True)
        instr, self.out = self.out, code
        label = self.block_label(items)
        rest = list(items[used:])
        branches = [n for n in rest if isinstance(n, SList) and n.head in ("then", "else")]
        for cond in rest[: len(rest) - len(branches)]:
            if not isinstance(cond, SList) or cond.head in ("then", "else"):
                raise WatError("(if ...) takes conditions, then (then ...) and (else ...)", cond.at)
            self.folded(cond)
        if not branches or branches[0].head != "then" or len(branches) > 2:
            raise WatError("(if ...) needs one (then ...) and at most one (else ...)", head.at)
        self.out += instr
        self.labels.append(label)
        self.sequence(branches[0].items[1:])
        if len(branches) == 2:
            self.out += OPS["else"].code
            self.sequence(branches[1].items[1:])
        self.labels.pop()
        self.out += OPS["end"].code

    # --- immediates ------------------------------------------------------------------------

    def op(self, name: Atom) -> Op:
        op = OPS.get(name.text)
        if op is None or name.string is not None:
            raise WatError(
                f"unknown or unsupported instruction {name.text!r}",
                name.at,
                "daisychain.wasm.opcodes lists the instructions this assembler encodes",
            )
        return op

    def immediates(self, name: Atom, op: Op, rest: Sequence[Node], folded: bool) -> int:
        """Appends the opcode and its immediates read from ``rest``; returns how many it used."""
        self.out += op.code
        atoms: list[Atom] = []
        for node in rest:
            if not isinstance(node, Atom):
                break
            atoms.append(node)
        kind = op.imm
        if kind is Imm.NONE:
            return 0
        if kind is Imm.BLOCK:
            return self.block_type(rest)
        if kind is Imm.MEMIDX:
            self.out.append(0x00)
            return 0
        if kind is Imm.MEMARG:
            return self.memarg(name, op, atoms)
        if not atoms:
            raise WatError(f"{name.text} needs an immediate", name.at)
        first = atoms[0]
        if kind is Imm.LOCAL:
            self.out += unsigned(self.index(first, self.locals, self.n_locals, "local"))
        elif kind is Imm.FUNC:
            self.out += unsigned(self.index(first, self.funcs, self.n_funcs, "function"))
        elif kind is Imm.LABEL:
            self.out += unsigned(self.depth(first))
        elif kind is Imm.I32:
            self.out += signed(wrap_signed(integer(first, -(2**31), 2**32 - 1, name.text), 32))
        elif kind is Imm.I64:
            self.out += signed(wrap_signed(integer(first, -(2**63), 2**64 - 1, name.text), 64))
        elif kind is Imm.F32:
            self.out += struct.pack("<I", float32_bits(first))
        elif kind is Imm.F64:
            self.out += struct.pack("<Q", float64_bits(first))
        elif kind is Imm.LANE:
            self.out.append(integer(first, 0, op.lanes - 1, f"{name.text} lane"))
        elif kind is Imm.SHUFFLE:
            if len(atoms) < 16:
                raise WatError(f"{name.text} needs 16 lane indices", name.at)
            self.out += bytes(integer(a, 0, 31, f"{name.text} lane") for a in atoms[:16])
            return 16
        elif kind is Imm.V128:
            return self.v128(name, atoms)
        return 1

    def memarg(self, name: Atom, op: Op, atoms: Sequence[Atom]) -> int:
        offset, align, used = 0, 1 << op.align, 0
        for atom in atoms:
            key, _, value = atom.text.partition("=")
            if key not in ("offset", "align") or not value:
                break
            number = integer(Atom(value, atom.at), 0, 2**32 - 1, f"{name.text} {key}")
            if key == "offset":
                offset = number
            else:
                align = number
            used += 1
        if align & (align - 1) or align > 1 << op.align:
            raise WatError(
                f"{name.text}: align={align} must be a power of two <= {1 << op.align}",
                name.at,
            )
        self.out += unsigned(align.bit_length() - 1) + unsigned(offset)
        return used

    def v128(self, name: Atom, atoms: Sequence[Atom]) -> int:
        shape = atoms[0].text
        if shape not in _SHAPES:
            raise WatError(
                f"v128.const needs a shape ({', '.join(_SHAPES)}), got {shape!r}", atoms[0].at
            )
        lanes, width = _SHAPES[shape]
        values = atoms[1 : 1 + lanes]
        if len(values) < lanes:
            raise WatError(f"v128.const {shape} needs {lanes} values", name.at)
        for atom in values:
            if shape == "f32x4":
                self.out += struct.pack("<I", float32_bits(atom))
            else:
                bits = 8 * width
                value = integer(atom, -(2 ** (bits - 1)), 2**bits - 1, f"v128.const {shape}")
                self.out += (value & ((1 << bits) - 1)).to_bytes(width, "little")
        return 1 + lanes

    def block_type(self, rest: Sequence[Node]) -> int:
        """Encodes ``$label? (result t)?`` of block/loop/if; returns the nodes used."""
        used = 1 if rest and isinstance(rest[0], Atom) and rest[0].text.startswith("$") else 0
        result = rest[used] if len(rest) > used else None
        if isinstance(result, SList) and result.head in ("result", "param", "type"):
            if result.head != "result" or len(result.items) != 2:
                raise WatError(
                    "a block type here is at most one (result t)",
                    result.at,
                    "multi-value and typed blocks are not in this assembler's subset",
                )
            self.out.append(valtype(result.items[1]))
            return used + 1
        self.out.append(_EMPTY_BLOCK)
        return used

    def block_label(self, rest: Sequence[Node]) -> str | None:
        first = rest[0] if rest else None
        return first.text if isinstance(first, Atom) and first.text.startswith("$") else None

    def closing_label(self, rest: Sequence[Node]) -> int:
        """``end $l`` / ``else $l`` may repeat the block's label; returns 1 when it does."""
        first = rest[0] if rest else None
        if isinstance(first, Atom) and first.text.startswith("$"):
            if first.text != self.labels[-1]:
                raise WatError(
                    f"{first.text} does not match the open block {self.labels[-1] or '(unnamed)'}",
                    first.at,
                )
            return 1
        return 0

    def depth(self, atom: Atom) -> int:
        if atom.text.startswith("$"):
            for depth, label in enumerate(reversed(self.labels)):
                if label == atom.text:
                    return depth
            raise WatError(f"no enclosing block is labelled {atom.text}", atom.at)
        depth = integer(atom, 0, 2**32 - 1, "branch depth")
        if depth >= len(self.labels):
            raise WatError(
                f"branch depth {depth} but only {len(self.labels)} blocks enclose it", atom.at
            )
        return depth

    def index(self, atom: Atom, names: Mapping[str, int], count: int, what: str) -> int:
        if atom.text.startswith("$"):
            if atom.text not in names:
                raise WatError(f"unknown {what} {atom.text}", atom.at)
            return names[atom.text]
        if not is_int(atom.text):
            raise WatError(f"expected a {what} name or index, got {atom.text!r}", atom.at)
        value = integer(atom, 0, 2**32 - 1, f"{what} index")
        if value >= count:
            raise WatError(f"{what} index {value} but there are {count}", atom.at)
        return value


def valtype(node: Node) -> int:
    """The byte of a value type keyword (i32, i64, f32, f64, v128)."""
    if not isinstance(node, Atom) or node.text not in VALTYPES:
        text = node.text if isinstance(node, Atom) else "(...)"
        raise WatError(f"expected a value type ({', '.join(VALTYPES)}), got {text!r}", node.at)
    return VALTYPES[node.text]
