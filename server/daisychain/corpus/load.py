"""The training text as token ids: the built-in corpus or a UTF-8 file, split 95/5.

A library used by ``daisychain train``, the server's ``/api/corpus/builtin``, the headless peer,
the demo, benchmarks and tests. What goes wrong is a ``CorpusError`` carrying a message and a hint;
the caller decides what to do with it (the CLI prints both and exits 2, the server answers 503).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from daisychain.corpus import load_builtin_text, split_train_val
from daisychain.tokenizer import Tokenizer
from daisychain.tokenizer.cache import encode_corpus_cached

__all__ = ["Corpus", "CorpusError", "TokenArray", "load_corpus"]

TokenArray = npt.NDArray[np.integer]


class CorpusError(Exception):
    """The training text cannot be loaded: ``message`` says what, ``hint`` what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message} ({hint})")
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Corpus:
    train: TokenArray
    val: TokenArray
    source: str


def load_corpus(text_path: str | None, tok: Tokenizer) -> Corpus:
    """Token ids of the training text, split 95/5 into train and validation (cached).

    ``text_path=None`` is the built-in corpus. Raises ``CorpusError`` for a missing or non-UTF-8
    file, and for a built-in corpus missing from or damaged in the install.
    """
    if text_path is None:
        try:
            text = load_builtin_text()
        except (OSError, ValueError) as exc:
            raise CorpusError(
                f"the built-in corpus could not be read: {exc}", "reinstall daisychain"
            ) from exc
        source = "builtin"
    else:
        path = Path(text_path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CorpusError(f"{path} does not exist", "pass a UTF-8 text file") from None
        except IsADirectoryError:
            raise CorpusError(f"{path} is a folder", "pass a UTF-8 text file") from None
        except UnicodeDecodeError as exc:
            raise CorpusError(
                f"{path} is not UTF-8 text ({exc})", "convert it to UTF-8 or pass another file"
            ) from None
        source = str(path)
    train_text, val_text = split_train_val(text)  # the built-in corpus's rule (MODEL.md)
    return Corpus(
        encode_corpus_cached(train_text, tok), encode_corpus_cached(val_text, tok), source
    )
