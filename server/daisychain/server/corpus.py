"""``GET /api/corpus/builtin``: the token ids a browser peer trains on for ``data: "builtin"``,
and with ``?split=val`` the validation ids it measures the validation loss on.

A run's config names its data as ``"builtin"`` (docs/PROTOCOL.md, "Config validation"): every peer
samples its batches from the same token array, the training split of the built-in corpus encoded
with the shipped tokenizer (``load_corpus(None, tokenizer).train`` of ``daisychain.corpus.load``,
what ``python -m daisychain.peer`` uses). A page cannot rebuild it cheaply (12 MB of text through a
JavaScript BPE), so the server hands out the ids it computes once: little-endian ``uint16`` (or
``uint32`` for vocabularies over 65536, named in ``X-DaisyChain-Token-Dtype``), with the SHA-256 of
the tokenizer file that made them in ``X-DaisyChain-Tokenizer-SHA256`` and the SHA-256 of the body
in ``X-DaisyChain-Tokens-SHA256``. The page checks the tokenizer hash against the tokenizer it
loaded itself; replicas built on other tokens would diverge and the sync guard would stop the run,
so a wrong body cannot go unnoticed.

``?split=val`` answers the validation split the same way (``load_corpus(None, tokenizer).val``:
the last 5 % of the text, docs/MODEL.md section 8), from which the page samples the batches of
the validation loss; ``?split=train`` (the default) the training split. Any other ``split`` is a
400 naming the two. Both splits are built together in a worker thread on the first request
(about 0.2 s with the on-disk token cache, seconds without) and kept: about 8.4 MB for the
shipped corpus.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from aiohttp import web


@dataclass(frozen=True)
class BuiltinTokens:
    body: bytes
    dtype: str
    count: int
    tokenizer_sha256: str
    sha256: str


SPLITS = ("train", "val")


def _as_tokens(ids: npt.NDArray[np.integer], tokenizer_sha256: str) -> BuiltinTokens:
    body = ids.astype(ids.dtype.newbyteorder("<"), copy=False).tobytes()
    return BuiltinTokens(
        body=body,
        dtype=ids.dtype.name,
        count=int(ids.size),
        tokenizer_sha256=tokenizer_sha256,
        sha256=hashlib.sha256(body).hexdigest(),
    )


def build_builtin_tokens() -> dict[str, BuiltinTokens]:
    """Both splits of the built-in corpus with the shipped tokenizer, as bytes, by split name."""
    from daisychain.corpus.load import load_corpus
    from daisychain.tokenizer import load_default

    tok = load_default()
    corpus = load_corpus(None, tok)
    return {
        "train": _as_tokens(corpus.train, tok.sha256),
        "val": _as_tokens(corpus.val, tok.sha256),
    }


def _unavailable(exc: Exception) -> str:
    """The 503's text: a ``CorpusError``'s message and hint (imported lazily with the corpus, so
    the class is recognised by its fields), or what else failed and to reinstall."""
    message, hint = getattr(exc, "message", None), getattr(exc, "hint", None)
    if isinstance(message, str) and isinstance(hint, str):
        return f"{message}; {hint}"
    return f"the built-in corpus could not be tokenized: {exc}; reinstall daisychain"


class BuiltinTokensEndpoint:
    """Serves ``build_builtin_tokens()``, computed once (concurrent first requests share it)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[dict[str, BuiltinTokens]] | None = None

    async def handle(self, request: web.Request) -> web.Response:
        split = request.query.get("split", "train")
        if split not in SPLITS:
            raise web.HTTPBadRequest(
                text=f"unknown split {split[:40]!r}: ask for ?split=train (the default) or "
                "?split=val",
                content_type="text/plain",
            )
        if self._task is None:
            self._task = asyncio.ensure_future(asyncio.to_thread(build_builtin_tokens))
        try:
            tokens = (await asyncio.shield(self._task))[split]
        except Exception as exc:  # the corpus or the tokenizer is missing or damaged
            self._task = None
            raise web.HTTPServiceUnavailable(
                text=_unavailable(exc), content_type="text/plain"
            ) from None
        return web.Response(
            body=tokens.body,
            content_type="application/octet-stream",
            headers={
                "X-DaisyChain-Token-Dtype": tokens.dtype,
                "X-DaisyChain-Token-Count": str(tokens.count),
                "X-DaisyChain-Tokenizer-SHA256": tokens.tokenizer_sha256,
                "X-DaisyChain-Tokens-SHA256": tokens.sha256,
                "Cache-Control": "no-cache",
            },
        )
