"""The S-expressions of the WebAssembly text format (core spec 6.2-6.3), with positions.

``read(text, source)`` returns the top-level nodes: an ``Atom`` is a keyword, number, ``$id`` or
string; an ``SList`` is a parenthesised list. Comments (``;; ...`` to the end of the line and
nested ``(; ... ;)`` blocks) are skipped. Every node keeps its position, so the assembler's
errors point at the line and column of the text that caused them.
"""

from __future__ import annotations

from dataclasses import dataclass

from daisychain.wasm.errors import Position, WatError

# Characters of an idchar (keywords, numbers, $ids): printable ASCII except space, quote,
# comma, semicolon, brackets and parentheses (core spec 6.3.5).
_IDCHARS = frozenset(chr(c) for c in range(0x21, 0x7F) if chr(c) not in ' "(),;[]{}')
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", '"': b'"', "'": b"'", "\\": b"\\"}


@dataclass(frozen=True)
class Atom:
    """A token: ``text`` as written; ``string`` holds the bytes of a string literal, else None."""

    text: str
    at: Position
    string: bytes | None = None


@dataclass(frozen=True)
class SList:
    """A parenthesised list of nodes."""

    items: tuple[Node, ...]
    at: Position

    @property
    def head(self) -> str | None:
        """The keyword the list starts with, if it starts with a plain atom."""
        first = self.items[0] if self.items else None
        return first.text if isinstance(first, Atom) and first.string is None else None


Node = Atom | SList


class _Reader:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.i = 0
        self.line = 1
        self.line_start = 0

    def here(self) -> Position:
        return Position(self.source, self.line, self.i - self.line_start + 1)

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.text[self.i] == "\n":
                self.line += 1
                self.line_start = self.i + 1
            self.i += 1

    def skip_space(self) -> None:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c in " \t\r\n":
                self.advance()
            elif text.startswith(";;", self.i):
                while self.i < len(text) and text[self.i] != "\n":
                    self.advance()
            elif text.startswith("(;", self.i):
                self.block_comment()
            else:
                return

    def block_comment(self) -> None:
        start = self.here()
        depth = 0
        while self.i < len(self.text):
            if self.text.startswith("(;", self.i):
                depth += 1
                self.advance(2)
            elif self.text.startswith(";)", self.i):
                depth -= 1
                self.advance(2)
                if depth == 0:
                    return
            else:
                self.advance()
        raise WatError("block comment never closed", start, "close it with ';)'")

    def string(self) -> Atom:
        start = self.here()
        begin = self.i
        self.advance()  # the opening quote
        out = bytearray()
        text = self.text
        while True:
            if self.i >= len(text) or text[self.i] == "\n":
                raise WatError("string never closed", start, 'end it with " on the same line')
            c = text[self.i]
            if c == '"':
                self.advance()
                return Atom(text[begin : self.i], start, bytes(out))
            if c == "\\":
                esc = text[self.i + 1 : self.i + 3]
                if esc[:1] in _ESCAPES:
                    out += _ESCAPES[esc[:1]]
                    self.advance(2)
                elif len(esc) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in esc):
                    out.append(int(esc, 16))
                    self.advance(3)
                else:
                    raise WatError(
                        f"unknown string escape \\{esc[:1]}",
                        self.here(),
                        'use \\n, \\t, \\\\, \\" or two hex digits',
                    )
            else:
                out += c.encode("utf-8")
                self.advance()

    def atom(self) -> Atom:
        start = self.here()
        begin = self.i
        while self.i < len(self.text) and self.text[self.i] in _IDCHARS:
            self.advance()
        if self.i == begin:
            raise WatError(f"unexpected character {self.text[self.i]!r}", start)
        return Atom(self.text[begin : self.i], start)

    def nodes(self, closing: Position | None) -> list[Node]:
        out: list[Node] = []
        while True:
            self.skip_space()
            if self.i >= len(self.text):
                if closing is not None:
                    raise WatError("'(' never closed", closing, "add the missing ')'")
                return out
            c = self.text[self.i]
            if c == "(":
                start = self.here()
                self.advance()
                out.append(SList(tuple(self.nodes(start)), start))
            elif c == ")":
                if closing is None:
                    raise WatError("')' without a matching '('", self.here())
                self.advance()
                return out
            elif c == '"':
                out.append(self.string())
            else:
                out.append(self.atom())


def read(text: str, source: str = "<wat>") -> list[Node]:
    """The top-level nodes of ``text``; ``source`` names it in error positions."""
    return _Reader(text, source).nodes(None)
