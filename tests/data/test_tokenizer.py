"""Our byte-level BPE tokenizer against the `tokenizers` library (the oracle), same file."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tokenizers

from daisychain.corpus import load_builtin_text
from daisychain.tokenizer import (
    EOT_TOKEN,
    SPLIT_PATTERN,
    Tokenizer,
    TokenizerFileError,
    default_path,
    encode_corpus_cached,
    load_default,
    split_bytes,
)
from daisychain.tokenizer import train as train_module
from vectorgen.tokenizer import CASE_TEXTS, VECTORS_PATH, make_cases, render


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return load_default()


@pytest.fixture(scope="module")
def oracle() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(default_path())


def random_texts(seed: int, count: int) -> list[str]:
    """Strings drawn from every class the splitter distinguishes, plus awkward code points."""
    rng = np.random.default_rng(seed)
    pools = [
        "abcxyzABCXYZ",
        "0123456789",
        " \t\n\r\x0b\x0c",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\x00\x01\x1b\x7f",
        "éüßçñÆØ日本語中文한국어😀👍🏽\u200d\u0085\u00a0\ufeff\u2028\u3000\u0301",
    ]
    texts = []
    for _ in range(count):
        length = int(rng.integers(0, 40))
        chars = []
        for _ in range(length):
            pool = pools[int(rng.integers(0, len(pools)))]
            chars.append(pool[int(rng.integers(0, len(pool)))])
        if rng.random() < 0.2:  # arbitrary non-surrogate code points, astral included
            point = int(rng.integers(0x80, 0x110000 - 0x800))
            chars.append(chr(point + 0x800 if point >= 0xD800 else point))
        texts.append("".join(chars))
    return texts


def test_layout(ours: Tokenizer) -> None:
    assert ours.vocab_size == 2048 and ours.vocab_size % 64 == 0
    assert ours.eot_id == ours.vocab_size - 1
    assert ours.token_bytes(ours.eot_id) == EOT_TOKEN.encode()
    single_bytes = {ours.token_bytes(i) for i in range(256)}
    assert single_bytes == {bytes([b]) for b in range(256)}
    assert ours.sha256 == hashlib.sha256(Path(default_path()).read_bytes()).hexdigest()


@pytest.mark.parametrize("name", list(CASE_TEXTS))
def test_named_cases_match_oracle(name: str, ours: Tokenizer, oracle: tokenizers.Tokenizer) -> None:
    text = CASE_TEXTS[name]
    ids = ours.encode(text)
    assert ids == oracle.encode(text).ids
    assert ours.decode(ids) == text


def test_random_strings_match_oracle(ours: Tokenizer, oracle: tokenizers.Tokenizer) -> None:
    texts = random_texts(seed=1234, count=2000)
    expected = [encoding.ids for encoding in oracle.encode_batch(texts)]
    for text, ids in zip(texts, expected, strict=True):
        assert ours.encode(text) == ids, repr(text)
        assert ours.decode(ids) == text


def test_splitter_matches_oracle_pre_tokenizer() -> None:
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(SPLIT_PATTERN), behavior="isolated")
    for text in random_texts(seed=99, count=500):
        chunks = split_bytes(text.encode())
        assert b"".join(chunks) == text.encode()
        assert [c.decode() for c in chunks] == [piece for piece, _ in split.pre_tokenize_str(text)]


def test_whitespace_is_ascii_only() -> None:
    # U+0085, U+00A0, U+FEFF are letters: they join the letter run around them.
    assert split_bytes("a\u0085b\u00a0c\ufeffd e".encode()) == [
        "a\u0085b\u00a0c\ufeffd".encode(),
        b" e",
    ]
    assert split_bytes(b"\n\nx  y  7") == [b"\n\n", b"x", b" ", b" y", b"  ", b"7"]
    assert split_bytes(b"12345") == [b"123", b"45"]


def test_corpus_lines_match_oracle(ours: Tokenizer, oracle: tokenizers.Tokenizer) -> None:
    lines = load_builtin_text().splitlines(keepends=True)
    rng = np.random.default_rng(7)
    sample = [lines[int(i)] for i in rng.integers(0, len(lines), 3000)]
    expected = [encoding.ids for encoding in oracle.encode_batch(sample)]
    assert [ours.encode(line) for line in sample] == expected


def test_long_inputs_match_oracle(ours: Tokenizer, oracle: tokenizers.Tokenizer) -> None:
    text = load_builtin_text()
    start = len(text) // 3
    for long_text in (
        text[start : start + 200_000],
        "".join(random_texts(seed=5, count=10_000))[:200_000],
        "a" * 200_000,
        " " * 50_000 + "x",
    ):
        ids = ours.encode(long_text)
        assert ids == oracle.encode(long_text).ids
        assert ours.decode(ids) == long_text


def test_eot_literal_is_the_special_token(ours: Tokenizer, oracle: tokenizers.Tokenizer) -> None:
    text = f"a{EOT_TOKEN}{EOT_TOKEN} b{EOT_TOKEN}"
    ids = ours.encode(text)
    assert ids.count(ours.eot_id) == 3
    assert ids == oracle.encode(text).ids
    assert ours.decode(ids) == text


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff", "x\udbff\udbffy"])
def test_lone_surrogate_is_rejected(ours: Tokenizer, text: str) -> None:
    with pytest.raises(ValueError, match=r"lone surrogate U\+D[89AB-F]"):
        ours.encode(text)


def test_invalid_utf8_decodes_with_replacement(
    ours: Tokenizer, oracle: tokenizers.Tokenizer
) -> None:
    byte_id = {ours.token_bytes(i): i for i in range(256)}
    ids = [byte_id[b"a"], byte_id[b"\xff"], byte_id[b"\xe6"], byte_id[b"\x97"], byte_id[b"b"]]
    assert ours.decode(ids) == "a\ufffd\ufffdb"
    assert ours.decode(ids) == oracle.decode(ids)
    # Arbitrary bytes encode without decoding and come back exactly.
    data = bytes(range(256)) * 3
    assert ours.decode_bytes(ours.encode_bytes(data)) == data


def test_out_of_range_ids_are_rejected(ours: Tokenizer) -> None:
    with pytest.raises(ValueError, match="outside"):
        ours.decode([5, ours.vocab_size])
    with pytest.raises(ValueError, match="outside"):
        ours.decode([-1])


def test_vectors_file_is_current() -> None:
    expected = render(make_cases())
    assert VECTORS_PATH.read_text(encoding="utf-8") == expected, (
        "tests/vectors/tokenizer.json is stale: run python tests/vectorgen --write tokenizer"
    )


def test_vectors_match_oracle(oracle: tokenizers.Tokenizer) -> None:
    cases = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    assert len(cases) >= 40
    for case in cases:
        assert oracle.encode(case["text"]).ids == case["ids"], case["name"]


def test_foreign_pipeline_is_refused(tmp_path: Path) -> None:
    spec = json.loads(Path(default_path()).read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(TokenizerFileError, match="pre-tokenizer"):
        Tokenizer.from_file(path)
    with pytest.raises(FileNotFoundError, match="daisychain tokenizer"):
        Tokenizer.from_file(tmp_path / "missing.json")


def test_encode_corpus_cached(
    ours: Tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAISYCHAIN_CACHE", str(tmp_path))
    text = load_builtin_text()[:300_000]
    ids = encode_corpus_cached(text)
    assert ids.dtype == np.uint16
    assert ids.tolist() == ours.encode(text)
    files = list(tmp_path.glob("tokens-*.npy"))
    assert len(files) == 1
    files[0].write_bytes(b"not a numpy file")  # a damaged cache file is recomputed
    again = encode_corpus_cached(text)
    assert np.array_equal(again, ids)
    assert np.array_equal(encode_corpus_cached(text), ids)  # read from the rewritten file
    encode_corpus_cached(text[:-1])  # another text, another key
    assert len(list(tmp_path.glob("tokens-*.npy"))) == 2


def test_training_a_small_tokenizer_from_a_file(tmp_path: Path) -> None:
    source = tmp_path / "text.txt"
    source.write_text(load_builtin_text()[:400_000], encoding="utf-8")
    out = tmp_path / "tok.json"
    parser = argparse.ArgumentParser()
    train_module.add_arguments(parser)
    args = parser.parse_args(["--vocab-size", "384", "--source", str(source), "--out", str(out)])
    assert train_module.run(args) == 0
    small = Tokenizer.from_file(out)
    assert small.vocab_size == 384 and small.eot_id == 383
    reference = tokenizers.Tokenizer.from_file(str(out))
    for text in [*random_texts(seed=3, count=200), source.read_text()[:20000]]:
        assert small.encode(text) == reference.encode(text).ids


def test_vocab_size_must_be_a_multiple_of_64() -> None:
    with pytest.raises(ValueError, match="multiple of 64"):
        train_module.train_tokenizer(iter(["text"]), 1000)


def test_fineweb_offline_fails_with_a_hint() -> None:
    with pytest.raises(SystemExit, match="hint: this needs a connection"):
        train_module.fineweb_text("http://127.0.0.1:9/sample/10BT/000_00000.parquet", 1)
