"""``GET /api/corpus/builtin``: the token ids a browser peer samples its batches from.

They must be exactly what ``python -m daisychain.peer`` trains on (``load_corpus(None, tok)
.train``), or a tab's replica would fork from the Python peers' at its first step; the headers
name the tokenizer that made them (the page refuses others) and the body's SHA-256.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import numpy as np
import pytest
from aiohttp import ClientSession

from daisychain.server.app import serve_local
from mesh_helpers import corpus
from server_fixtures import ByteTokenizer, config


async def test_builtin_tokens_are_the_python_peers_training_tokens() -> None:
    tokens, sha, _vocab = corpus()
    async with (
        serve_local(config(), tokenizer=ByteTokenizer) as url,
        ClientSession() as session,
    ):

        async def fetch() -> bytes:
            async with session.get(f"{url}/api/corpus/builtin") as response:
                assert response.status == 200
                assert response.headers["Content-Type"] == "application/octet-stream"
                assert response.headers["X-DaisyChain-Tokenizer-SHA256"] == sha
                assert response.headers["X-DaisyChain-Token-Dtype"] == "uint16"
                assert int(response.headers["X-DaisyChain-Token-Count"]) == tokens.size
                body = await response.read()
                digest = hashlib.sha256(body).hexdigest()
                assert response.headers["X-DaisyChain-Tokens-SHA256"] == digest
                return body

        # Two requests at once share one build; both get the whole array.
        bodies = await asyncio.gather(fetch(), fetch())
    assert bodies[0] == bodies[1]
    got = np.frombuffer(bodies[0], dtype="<u2")
    assert np.array_equal(got, tokens)


async def test_a_failed_build_is_a_503_with_a_hint_and_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise FileNotFoundError("corpus manifest missing")

    monkeypatch.setattr("daisychain.server.corpus.build_builtin_tokens", broken)
    async with (
        serve_local(config(), tokenizer=ByteTokenizer) as url,
        ClientSession() as session,
    ):
        for _ in range(2):
            async with session.get(f"{url}/api/corpus/builtin") as response:
                assert response.status == 503
                text = await response.text()
                assert "corpus manifest missing" in text and "reinstall" in text
        async with session.get(f"{url}/healthz") as response:
            assert response.status == 200, "the server stays up"
    assert len(calls) == 2, "a failed build is not cached"


async def test_the_validation_split_is_the_python_validation_tokens() -> None:
    """``?split=val``: the ids ``daisychain train`` measures its validation loss on
    (``load_corpus(None, tok).val``), with the same headers; ``?split=train`` is the default's
    body; any other split is a 400 that names the two."""
    from daisychain.corpus.load import load_corpus
    from daisychain.tokenizer import load_default

    tok = load_default()
    val = load_corpus(None, tok).val
    train, sha, _vocab = corpus()
    async with (
        serve_local(config(), tokenizer=ByteTokenizer) as url,
        ClientSession() as session,
    ):
        async with session.get(f"{url}/api/corpus/builtin?split=val") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert response.headers["X-DaisyChain-Tokenizer-SHA256"] == sha
            assert response.headers["X-DaisyChain-Token-Dtype"] == "uint16"
            assert int(response.headers["X-DaisyChain-Token-Count"]) == val.size
            body = await response.read()
            digest = hashlib.sha256(body).hexdigest()
            assert response.headers["X-DaisyChain-Tokens-SHA256"] == digest
        assert np.array_equal(np.frombuffer(body, dtype="<u2"), val)
        assert not np.array_equal(val[:1000], train[:1000]), "a different split"
        async with session.get(f"{url}/api/corpus/builtin?split=train") as response:
            assert np.array_equal(np.frombuffer(await response.read(), dtype="<u2"), train)
        for bad in ("test", "VAL", ""):
            async with session.get(f"{url}/api/corpus/builtin", params={"split": bad}) as response:
                assert response.status == 400, bad
                text = await response.text()
                assert "?split=train" in text and "?split=val" in text, text


async def test_an_unreadable_corpus_is_a_typed_error_on_the_server_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The library raises ``CorpusError(message, hint)``, never ``SystemExit`` (which would pass
    the endpoint's ``except Exception`` and end the server's worker thread), and the endpoint
    answers the message and the hint as a 503."""
    from daisychain.corpus import load
    from daisychain.server.corpus import build_builtin_tokens

    tok = ByteTokenizer()
    missing = tmp_path / "missing.txt"
    with pytest.raises(load.CorpusError) as exc:
        load.load_corpus(str(missing), tok)
    assert exc.value.message == f"{missing} does not exist"
    assert exc.value.hint == "pass a UTF-8 text file"
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café".encode("latin-1"))
    with pytest.raises(load.CorpusError, match="is not UTF-8 text"):
        load.load_corpus(str(latin), tok)

    def damaged() -> str:
        raise ValueError("built-in corpus file x.jsonl.gz has SHA-256 0, expected 1")

    monkeypatch.setattr(load, "load_builtin_text", damaged)
    with pytest.raises(load.CorpusError) as exc:
        build_builtin_tokens()
    assert "has SHA-256 0" in exc.value.message and exc.value.hint == "reinstall daisychain"
    async with (
        serve_local(config(), tokenizer=ByteTokenizer) as url,
        ClientSession() as session,
        session.get(f"{url}/api/corpus/builtin") as response,
    ):
        assert response.status == 503
        text = await response.text()
        assert text == f"{exc.value.message}; reinstall daisychain"
