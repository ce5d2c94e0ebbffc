"""The built-in training corpus: public-domain English text shipped inside the package.

It serves users with no connection (the server's ``/data`` falls back to it) and every test and
benchmark that needs real text offline. The files live in ``daisychain/data/corpus/``: one
``<source>.jsonl.gz`` per source (one ``{"title", "text"}`` object per document), ``sources.json``
(licence, attribution, sizes, SHA-256 of each file) and ``SOURCES.md``. They are produced by
``daisychain.corpus.build`` from the upstream packages named there.

The documents of all sources are interleaved in a pinned order (sorted by the SHA-256 of
``"<source>/<index>"``) so that the tail used for validation mixes sources, then joined with
``DOCUMENT_SEPARATOR``. The result is identical on every machine and every run.

The training text as token ids (this corpus or a UTF-8 file, split 95/5, with a typed
``CorpusError``) is ``daisychain.corpus.load``.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daisychain.assets import data_dir

__all__ = [
    "BUILTIN_SOURCES",
    "DOCUMENT_SEPARATOR",
    "Document",
    "builtin_text_sha256",
    "corpus_dir",
    "load_builtin_documents",
    "load_builtin_text",
    "split_train_val",
]

DOCUMENT_SEPARATOR = "\n\n"


def corpus_dir() -> Path:
    """Folder holding the shipped corpus files."""
    return data_dir() / "corpus"


def _read_manifest() -> list[dict[str, Any]]:
    path = corpus_dir() / "sources.json"
    try:
        entries: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"built-in corpus manifest {path} is missing; reinstall daisychain "
            "(the wheel ships daisychain/data/corpus/) or rebuild it with "
            "python -m daisychain.corpus.build"
        ) from exc
    return entries


# One dict per source: name, licence, attribution, bytes (UTF-8 bytes of its text), plus file,
# documents, chars and sha256 (of the compressed file).
BUILTIN_SOURCES: list[dict[str, Any]] = _read_manifest()


@dataclass(frozen=True)
class Document:
    source: str
    index: int  # position within its source file
    title: str
    text: str


def _order_key(document: Document) -> str:
    return hashlib.sha256(f"{document.source}/{document.index}".encode()).hexdigest()


@functools.cache
def load_builtin_documents() -> tuple[Document, ...]:
    """All documents, in the pinned interleaved order, each file verified against its hash."""
    documents: list[Document] = []
    for entry in BUILTIN_SOURCES:
        path = corpus_dir() / entry["file"]
        payload = path.read_bytes()
        digest = hashlib.sha256(payload).hexdigest()
        if digest != entry["sha256"]:
            raise ValueError(
                f"built-in corpus file {path} has SHA-256 {digest}, expected {entry['sha256']} "
                "(sources.json); the file is damaged or was rebuilt without updating the "
                "manifest: reinstall daisychain or rerun python -m daisychain.corpus.build"
            )
        lines = gzip.decompress(payload).decode("utf-8").splitlines()
        for index, line in enumerate(lines):
            record = json.loads(line)
            documents.append(Document(entry["name"], index, record["title"], record["text"]))
    documents.sort(key=_order_key)
    return tuple(documents)


@functools.cache
def load_builtin_text() -> str:
    """The whole built-in corpus as one string (about 12 MB; cached after the first call)."""
    return DOCUMENT_SEPARATOR.join(document.text for document in load_builtin_documents())


@functools.cache
def builtin_text_sha256() -> str:
    """SHA-256 of the UTF-8 bytes of ``load_builtin_text()`` (a cache and checkpoint key)."""
    return hashlib.sha256(load_builtin_text().encode("utf-8")).hexdigest()


def split_train_val(text: str, val_fraction: float = 0.05) -> tuple[str, str]:
    """Split ``text`` into (train, validation): validation is the last ``val_fraction``.

    The cut is at character index ``len(text) - round(len(text) * val_fraction)``, so the
    split is deterministic and the two parts concatenate back to ``text``.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    cut = len(text) - round(len(text) * val_fraction)
    return text[:cut], text[cut:]
