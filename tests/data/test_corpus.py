"""The built-in corpus: shipped files, licences, pinned order, the train/validation split."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from daisychain import corpus


def test_sources_have_licence_attribution_and_size() -> None:
    names = [source["name"] for source in corpus.BUILTIN_SOURCES]
    assert names == ["shakespeare", "milton", "kjv", "jargon", "devil"]
    for source in corpus.BUILTIN_SOURCES:
        assert source["licence"] and source["attribution"]
        assert source["bytes"] > 300_000
    total = sum(source["bytes"] for source in corpus.BUILTIN_SOURCES)
    assert 10_000_000 < total < 15_000_000
    assert (corpus.corpus_dir() / "SOURCES.md").is_file()


def test_shipped_files_stay_small() -> None:
    shipped = sum(path.stat().st_size for path in corpus.corpus_dir().iterdir())
    assert shipped < 6_000_000


def test_text_size_and_manifest_agree() -> None:
    text = corpus.load_builtin_text()
    separators = len(corpus.load_builtin_documents()) - 1
    expected = sum(source["bytes"] for source in corpus.BUILTIN_SOURCES)
    assert len(text.encode("utf-8")) == expected + separators * len(corpus.DOCUMENT_SEPARATOR)
    assert corpus.load_builtin_text() is text  # cached


def test_text_is_clean() -> None:
    text = corpus.load_builtin_text()
    assert "\r" not in text and "\ufeff" not in text
    lowered = text.lower()
    for marker in (
        "project gutenberg ebook",
        "end of the project gutenberg",
        "end of project gutenberg",
        "*** start",
        "*** end",
        "00-database",
        "wiretap.area",
    ):
        assert marker not in lowered, marker
    assert "To be, or not to be" in text
    assert "In the beginning God created" in text
    assert "zorkmid" in text and "ABASEMENT, n." in text


def test_order_is_pinned_and_mixed() -> None:
    documents = corpus.load_builtin_documents()
    keys = [hashlib.sha256(f"{d.source}/{d.index}".encode()).hexdigest() for d in documents]
    assert keys == sorted(keys)
    _, val = corpus.split_train_val(corpus.load_builtin_text())
    in_val = {d.source for d in documents if d.text[:2000] in val}
    assert len(in_val) >= 2, "the validation tail should mix sources"


def test_hash_is_stable() -> None:
    # Changing the corpus changes every cached token file and every measurement: on purpose only.
    digest = corpus.builtin_text_sha256()
    assert digest == hashlib.sha256(corpus.load_builtin_text().encode()).hexdigest()


def test_damaged_file_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    for path in corpus.corpus_dir().iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    devil = folder / "devil.jsonl.gz"
    lines = gzip.decompress(devil.read_bytes()).decode().splitlines()
    record = json.loads(lines[0])
    record["text"] = record["text"].replace("DEVIL", "ANGEL")
    lines[0] = json.dumps(record)
    devil.write_bytes(gzip.compress("\n".join(lines).encode()))
    monkeypatch.setattr(corpus, "corpus_dir", lambda: folder)
    corpus.load_builtin_documents.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"devil\.jsonl\.gz has SHA-256"):
            corpus.load_builtin_documents()
    finally:
        corpus.load_builtin_documents.cache_clear()


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.1, 0.5])
def test_split_is_deterministic_tail(fraction: float) -> None:
    text = "abcdefghij" * 101
    train, val = corpus.split_train_val(text, fraction)
    assert train + val == text
    assert len(val) == round(len(text) * fraction)
    assert corpus.split_train_val(text, fraction) == (train, val)


def test_split_default_is_five_percent() -> None:
    train, val = corpus.split_train_val("x" * 1000)
    assert (len(train), len(val)) == (950, 50)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 2.0])
def test_split_rejects_bad_fraction(fraction: float) -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        corpus.split_train_val("text", fraction)
