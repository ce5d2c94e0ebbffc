"""Where a WebAssembly text source is wrong, and the error that says so."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Position:
    """A place in a source text: its name, 1-based line and column."""

    source: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"


class WatError(ValueError):
    """A text the assembler cannot encode: the place, what is wrong, and what to do about it."""

    def __init__(self, message: str, at: Position | None = None, hint: str | None = None) -> None:
        self.message = message
        self.at = at
        self.hint = hint
        where = f"{at}: " if at is not None else ""
        tail = f" (hint: {hint})" if hint else ""
        super().__init__(f"{where}{message}{tail}")
