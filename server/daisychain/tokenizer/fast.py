"""The tokenizer ``/data`` serves with: the ``tokenizers`` library reading ``luts/tokenizer.json``.

The server's ``/data`` and the headless peer's data feed (``daisychain.p2p.datafeed``) both
encode with it, so it lives with the tokenizer rather than in either side's package.

Our pure-Python encoder (``daisychain.tokenizer``) is the contract's reference, but it holds the
interpreter lock for its whole run: a ``max_tokens=131072`` request tokenizes ~1 MB of text, and
twenty of them in worker threads starved the event loop for seconds (``/healthz`` waited 2.6 s).
The library's batch encoders run in Rust with the lock released, so the loop keeps answering
while a worker thread tokenizes (its ``encode`` keeps the lock: only the batch calls are used).
``encode_batch_fast`` (tokenizers 0.20 on) skips the character offsets we never read and takes
about half the time of ``encode_batch``, the fallback on older versions.

The ids are the same by construction (docs/TOKENIZER.md makes the library the oracle) and are
checked twice: the file must be one our encoder accepts (the same pipeline checks, so a foreign
tokenizer.json is refused here as well), and on loading both encoders must agree on a probe text
that covers every pre-splitter class and the end-of-text token. ``tests/server/test_server_data.py``
compares them on the corpus and on hard inputs, with our encoder as the oracle.

``encode_prefix`` encodes a long text piece by piece and stops once it has the tokens asked for.
The library's memory for one call grows with its text and stays with the process after it is
freed: whole 1 MB calls left a process 173 MB larger after five of them. Measured over forty
131072-token requests in one thread, pieces of 256 K characters cost +47 MB, 64 K +20 MB, 16 K
+9 MB and 4 K (``PIECE_CHARS``) +7 MB, with no loss of speed. Stopping early skips the text
beyond the budget (``/data`` samples 8 characters per token; this tokenizer averages under 3).

The pieces are cut only where the ids cannot change: after a whitespace character other than
the space, before a character that is not whitespace. There every pre-splitter chunk ends (no
chunk holds a whitespace run and what follows it, and the only lookahead, rule 4's "a space,
then a letter or other", cannot see past a non-space whitespace character); the end-of-text
literal holds no whitespace, so it is never cut; and BPE works chunk by chunk
(docs/TOKENIZER.md). So the ids of the pieces, concatenated, are the ids of the whole.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daisychain.tokenizer import EOT_TOKEN, Tokenizer, default_path

# Letters, digits, whitespace runs, other ASCII, non-ASCII letters, an astral character and the
# end-of-text token: one text that walks through every branch of the pre-splitter.
PROBE_TEXT = (
    "The 12345 cats' naps\t\t(2024-10)   end\n\n  x  y {a: [1, 2]};\r\n"
    f"naïve café 日本語 😀👍🏽 \u00a0\u3000 tail{EOT_TOKEN}next doc !!  ?? \x00\x7f end"
)


# A cut point: after \t \n \v \f \r, before anything but those and the space (see above).
_CUT_RE = re.compile(r"[\t\n\x0b\x0c\r](?=[^\t\n\x0b\x0c\r ])")
PIECE_CHARS = 4 * 1024  # ~1500 ids a call; the module docstring says why this size


def encode_prefix(
    encode: Callable[[str], list[int]],
    text: str,
    max_tokens: int,
    *,
    typecode: str = "I",
    piece_chars: int = PIECE_CHARS,
) -> array[int]:
    """``encode(text)[:max_tokens]`` as an ``array`` of ``typecode`` (2 or 4 bytes an id, not
    the ~36 of a list of ints), encoding pieces of about ``piece_chars`` characters at a time
    and stopping once ``max_tokens`` ids are in (a text without cut points is one piece)."""
    assert piece_chars >= 1 and max_tokens >= 0, f"bad {piece_chars=} {max_tokens=}"
    ids: array[int] = array(typecode)
    start = 0
    while start < len(text) and len(ids) < max_tokens:
        cut = None
        if start + piece_chars < len(text):
            cut = _CUT_RE.search(text, start + piece_chars - 1)
        end = cut.end() if cut else len(text)
        ids.extend(encode(text[start:end])[: max_tokens - len(ids)])
        start = end
    return ids


class TokenizerMismatch(ValueError):
    """The ``tokenizers`` library and our encoder disagree on this file: do not serve its ids."""


class ServingTokenizer:
    """``encode`` releases the interpreter lock; ``sha256`` and ``vocab_size`` are the file's."""

    def __init__(self, reference: Tokenizer, library: Any) -> None:
        self.sha256: str = reference.sha256
        self.vocab_size: int = reference.vocab_size
        self._library = library
        self._encode_batch = getattr(library, "encode_batch_fast", library.encode_batch)
        expected = reference.encode(PROBE_TEXT)
        got = self.encode(PROBE_TEXT)
        if got != expected:
            first = next(
                (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                min(len(got), len(expected)),
            )
            raise TokenizerMismatch(
                f"the tokenizers library and daisychain.tokenizer disagree on {reference.origin} "
                f"at token {first} of the probe text; reinstall tokenizers>=0.19 or check the file"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> ServingTokenizer:
        import tokenizers

        reference = Tokenizer.from_file(path)  # also refuses a pipeline our encoder cannot match
        library = tokenizers.Tokenizer.from_file(str(path))
        return cls(reference, library)

    def encode(self, text: str) -> list[int]:
        (encoding,) = self._encode_batch([text])  # the lock is released while Rust runs
        ids: list[int] = encoding.ids
        return ids


def load_serving_tokenizer() -> ServingTokenizer:
    return ServingTokenizer.from_file(default_path())
