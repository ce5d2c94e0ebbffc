"""Token ids of a corpus, computed once and kept on disk.

Tokenizing the 12 MB built-in corpus takes seconds; training runs start often, so the ids are
stored in ``$DAISYCHAIN_CACHE`` (default ``~/.cache/daisychain``) as ``tokens-<key>.npy``, where
the key hashes the corpus text and the tokenizer file. A changed corpus or tokenizer gets a new
key, so a stale file is never read. Files are written to a temporary name and renamed, so a
crashed or concurrent run never leaves a half-written file under the final name.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from daisychain.tokenizer.bpe import Tokenizer

CACHE_ENV = "DAISYCHAIN_CACHE"


def cache_dir() -> Path:
    """``$DAISYCHAIN_CACHE`` if set, else ``~/.cache/daisychain``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "daisychain"


def token_dtype(vocab_size: int) -> type[np.unsignedinteger[Any]]:
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def encode_corpus_cached(
    text: str, tokenizer: Tokenizer | None = None, directory: Path | None = None
) -> npt.NDArray[np.unsignedinteger[Any]]:
    """Ids of ``text`` (uint16 when the vocabulary allows, else uint32), cached on disk."""
    if tokenizer is None:
        from daisychain.tokenizer.shipped import load_default

        tokenizer = load_default()
    directory = cache_dir() if directory is None else directory
    text_hash = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    key = hashlib.sha256(f"{text_hash}:{tokenizer.sha256}".encode()).hexdigest()[:32]
    path = directory / f"tokens-{key}.npy"
    dtype = token_dtype(tokenizer.vocab_size)
    if path.is_file():
        try:
            cached = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            cached = None  # unreadable: recompute and overwrite below
        if cached is not None and cached.dtype == dtype and cached.ndim == 1:
            return cast("npt.NDArray[np.unsignedinteger[Any]]", cached)
    ids = np.asarray(tokenizer.encode(text), dtype=dtype)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tokens-", suffix=".npy")
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, ids, allow_pickle=False)
        os.replace(temporary, path)
    except OSError:
        # A read-only or full cache folder only costs the re-tokenization next time.
        pass
    return ids
