"""The pre-splitter: cuts UTF-8 bytes into chunks that BPE merges never cross.

Normative description: docs/TOKENIZER.md ("Pre-splitting"). The splitter looks only at ASCII
classes. Every byte >= 0x80 (so every non-ASCII character, whatever Unicode says about it, and
U+0085, U+00A0, U+FEFF included) counts as a letter, and whitespace is ONLY the six ASCII bytes
space, \\t, \\n, \\v (0x0B), \\f (0x0C), \\r. Since no rule depends on Unicode tables, Python, the
`tokenizers` library (Oniguruma) and JavaScript split identically by construction.

Five classes partition the 256 byte values:
    L  letters      A-Z a-z and 0x80-0xFF
    D  digits       0-9
    W  whitespace   0x09-0x0D and 0x20
    P  other ASCII  0x00-0x08, 0x0E-0x1F, 0x21-0x2F, 0x3A-0x40, 0x5B-0x60, 0x7B-0x7F

Alternatives, tried in order at each position (leftmost-first, like GPT-2's pattern):
    1. ` ?L+`          an optional single space, then a run of letters
    2. `D{1,3}`        one to three digits (longer numbers split left to right in threes)
    3. ` ?P+`          an optional single space, then a run of other ASCII
    4. `W+(?= [LP])`   a whitespace run that is followed by a space and then a letter or other
                       ASCII byte: the run stops before that space, which opens the next chunk
                       (alternatives 1 and 3) so " word" keeps its space
    5. `W+`            any other whitespace run, whole (so "\\n\\n" before a word stays one chunk)
"""

from __future__ import annotations

import re

# Written with hex escapes only, so the same text is a valid pattern for Python `re`,
# Oniguruma (the `tokenizers` library) and JavaScript (with the `u` flag on strings).
_L = r"[^\x00-\x40\x5B-\x60\x7B-\x7F]"
_D = r"[0-9]"
_W = r"[\x09-\x0D\x20]"
_L_OR_P = r"[^\x09-\x0D\x200-9]"
_P = r"[\x00-\x08\x0E-\x1F\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7F]"

SPLIT_PATTERN = rf"\x20?{_L}+|{_D}{{1,3}}|\x20?{_P}+|{_W}+(?=\x20{_L_OR_P})|{_W}+"
"""The pattern on characters (str), as stored in luts/tokenizer.json for the `tokenizers` oracle.
On UTF-8 bytes the same pattern gives the same chunks: every non-ASCII character is a letter, and
a letter run never ends inside a multi-byte character."""

_SPLIT_BYTES = re.compile(SPLIT_PATTERN.encode("ascii"))


def split_bytes(data: bytes) -> list[bytes]:
    """Cut ``data`` into pre-split chunks; their concatenation is ``data`` (no byte dropped)."""
    return _SPLIT_BYTES.findall(data)
