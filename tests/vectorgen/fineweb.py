"""Golden cases of FineWeb-Edu addressing: a run's address -> window of text -> token ids.

A FineWeb-Edu run (``config.data = "fineweb@REV"``) is only bit-identical across peers if every
peer, Python or browser, turns the address of its batch into the same ids. This module pins that
chain on a small fixed dataset (two shards of three row groups, documents that mix word salad
with the tokenizer's hard cases: accents, CJK, emoji, whitespace runs, CRLF, the end-of-text
literal) and writes ``tests/vectors/fineweb/cases.json``:

- ``shards``: each shard's path and rows per row group (the shard table of the revision);
- ``documents``: every document, per shard and row group;
- ``cases``: for each address (split, seed, step, rank, batch, seq_len) the window
  (``fineweb.shard_of`` / ``fineweb.window``: shard, row group, first row, chars), its texts
  (``fineweb.window_texts``) and the first ``batch * (seq_len + 1)`` ids of
  ``fineweb.join(texts)`` under the shipped tokenizer (the reference encoder).

``tests/data/test_fineweb_vectors.py`` checks the file against this generator and against the real
path (the documents written as parquet, served by a local range server, read through the
server's addressed ``/data`` and tokenized by the peer's feed); ``tests/js/fineweb_tokens.test.mjs``
tokenizes every case's texts with ``static/js/tokenizer.js`` to the same ids.

Usage: ``python tests/vectorgen --write fineweb`` regenerates the file; ``--check fineweb``
compares and exits 1 when it differs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from daisychain import fineweb
from vectorgen.files import check_texts, write_texts

FORMAT = "daisychain-fineweb-vectors"
FORMAT_VERSION = 1
REVISION = "0123456789abcdef0123456789abcdef01234567"  # a stand-in: the dataset is this file's
SHARDS = ("sample/10BT/000_00000.parquet", "sample/10BT/001_00000.parquet")
ROW_GROUPS = 3
ROWS = 12
FILE = "fineweb/cases.json"

_WORD_TEXT = (
    "the of and to in is that for energy water cell plant history school student learning "
    "teacher science system example photosynthesis river mountain equation"
)
_WORDS = tuple(_WORD_TEXT.split())
_HARD = (
    "naïve café résumé — «quoted» ‘single’ “double”",
    "日本語のテキスト、中文文本。한국어 텍스트",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷 end",
    "tabs\tand\t\ttabs   spaces    runs\n\n\nnewlines\r\nCRLF\r\n",
    "numbers 3.14159 1,000,000 2024-10-01 0x1F 1e-9 ½ ²",
    "code: def f(x):\n    return {'a': [1, 2]}  # ok\n",
    "literal <|endoftext|> inside a document, and <|endoftext| broken",
    "\u00a0no-break\u3000ideographic\u2028line separator\u200bzero width",
)


def documents() -> list[list[list[str]]]:
    """Every document of the vector dataset: ``[shard][row_group][row]``."""
    rng = random.Random(2026)
    out = []
    for shard in range(len(SHARDS)):
        groups = []
        for group in range(ROW_GROUPS):
            rows = []
            for row in range(ROWS):
                words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 40)))
                hard = _HARD[(shard * 7 + group * 5 + row) % len(_HARD)]
                rows.append(f"[{shard}:{group}:{row}] {words} {hard} {words[:30]}")
            groups.append(rows)
        out.append(groups)
    return out


# (split, seed, step, rank, batch, seq_len): ranks, steps within and across a row-group block,
# seeds, shapes, and the held-out row group.
ADDRESSES: tuple[tuple[fineweb.Split, int, int, int, int, int], ...] = (
    ("train", 7, 0, 0, 2, 16),
    ("train", 7, 0, 1, 2, 16),
    ("train", 7, 1, 0, 2, 16),
    ("train", 7, 31, 0, 2, 16),
    ("train", 7, 32, 0, 2, 16),
    ("train", 1, 500, 3, 1, 64),
    ("train", 7, 2, 1, 8, 64),  # many documents: separators inside the ids, wrapping round
    ("train", 4294967295, 4294967295, 63, 4, 8),
    ("validation", 7, 0, 0, 2, 16),
    ("validation", 7, 9, 2, 1, 32),
)


def build() -> dict[str, Any]:
    from daisychain.tokenizer import load_default

    tok = load_default()
    docs = documents()
    cases = []
    for split, seed, step, rank, batch, seq_len in ADDRESSES:
        chars = fineweb.window_chars(batch, seq_len)
        shard = fineweb.shard_of(seed, step, rank, split, len(SHARDS))
        rows = [len(group) for group in docs[shard]]
        where = fineweb.window(seed, step, rank, split, shard=shard, n_shards=len(SHARDS),
                               rows=rows, chars=chars)  # fmt: skip
        texts = fineweb.window_texts(docs[shard][where.row_group], where.first_row, chars)
        ids = tok.encode(fineweb.join(texts))[: fineweb.tokens_needed(batch, seq_len)]
        cases.append({
            "split": split, "seed": seed, "step": step, "rank": rank, "batch": batch,
            "seq_len": seq_len, "chars": chars, "shard": shard, "row_group": where.row_group,
            "first_row": where.first_row, "texts": texts, "ids": ids,
        })  # fmt: skip
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tokenizer_sha256": tok.sha256,
        "revision": REVISION,
        "shards": [{"path": path, "rows": [ROWS] * ROW_GROUPS} for path in SHARDS],
        "documents": docs,
        "cases": cases,
    }


def text() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def write(directory: Path) -> str:
    return write_texts(directory, {FILE: text()})


def check(directory: Path) -> str:
    why = (
        "if addressing or the tokenizer changed on purpose, run "
        "`python tests/vectorgen --write fineweb`"
    )
    return check_texts(directory, {FILE: text()}, why)
