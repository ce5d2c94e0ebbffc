"""The tokenizer ``/data`` serves with: the ``tokenizers`` library reading ``luts/tokenizer.json``.

Our pure-Python encoder (``daisychain.tokenizer``) is the contract's reference, but it holds the
interpreter lock for its whole run: a ``max_tokens=131072`` request tokenizes ~1 MB of text, and
twenty of them in worker threads starved the event loop for seconds (``/healthz`` waited 2.6 s).
The library's ``encode_batch`` runs in Rust with the lock released, so the loop keeps answering
while a worker thread tokenizes (its ``encode`` keeps the lock: only ``encode_batch`` is used).

The ids are the same by construction (docs/TOKENIZER.md makes the library the oracle) and are
checked twice: the file must be one our encoder accepts (the same pipeline checks, so a foreign
tokenizer.json is refused here as well), and on loading both encoders must agree on a probe text
that covers every pre-splitter class and the end-of-text token. ``tests/test_server_data.py``
compares them on the corpus and on hard inputs, with our encoder as the oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daisychain.tokenizer import EOT_TOKEN, Tokenizer, default_path

# Letters, digits, whitespace runs, other ASCII, non-ASCII letters, an astral character and the
# end-of-text token: one text that walks through every branch of the pre-splitter.
PROBE_TEXT = (
    "The 12345 cats' naps\t\t(2024-10)   end\n\n  x  y {a: [1, 2]};\r\n"
    f"naïve café 日本語 😀👍🏽 \u00a0\u3000 tail{EOT_TOKEN}next doc !!  ?? \x00\x7f end"
)


class TokenizerMismatch(ValueError):
    """The ``tokenizers`` library and our encoder disagree on this file: do not serve its ids."""


class ServingTokenizer:
    """``encode`` releases the interpreter lock; ``sha256`` and ``vocab_size`` are the file's."""

    def __init__(self, reference: Tokenizer, library: Any) -> None:
        self.sha256: str = reference.sha256
        self.vocab_size: int = reference.vocab_size
        self._library = library
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
        (encoding,) = self._library.encode_batch([text])  # lock released while Rust runs
        ids: list[int] = encoding.ids
        return ids


def load_serving_tokenizer() -> ServingTokenizer:
    return ServingTokenizer.from_file(default_path())
