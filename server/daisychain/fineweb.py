"""Deterministic addressing of parquet datasets for training runs (docs/PROTOCOL.md, "Training
data"): FineWeb-Edu, and any other dataset a server reads (``datanames``).

A run whose ``config.data`` is ``"fineweb@REV"`` reads FineWeb-Edu ``sample/10BT`` at the pinned
dataset commit ``REV``; one whose name is ``hf:...`` or ``local:...`` reads that dataset's files
(its "shards") in the same way. The text of rank ``r`` at step ``s`` (the 0-based index of the
batch, ``TrainState.step`` before the update, as for the built-in corpus) is a pure function of
``(seed, s, r)`` and the revision's **shard table** (how many shards, row groups per shard, rows
per row group: fixed by the commit, read from the parquet footers):

1. ``shard_of``: the shard, from ``prng.key(seed, FINEWEB_STREAM, 0, s // STEPS_PER_ROW_GROUP,
   r)`` (counter 0, modulo the number of shards);
2. ``window``: the row group, from the same key (counter 1, modulo the shard's training row
   groups), and the first document, from ``prng.key(seed, FINEWEB_STREAM, 1, s, r)``
   (counter 0, modulo the row group's rows); then ``chars`` characters of documents from that
   one on (wrapping round the row group), the last one cut.

A rank keeps its row group for ``STEPS_PER_ROW_GROUP`` consecutive steps (a new first document
every step): one upstream read (~1-3 MB) then serves 32 windows instead of one, and the server's
row-group cache holds one row group per active rank. The **held-out** row group is the last row
group of the last shard: no training address ever reads it; validation addresses
(``split="validation"``) read only it, the first document from ``prng.key(seed,
FINEWEB_STREAM, 2, s, r)``.

The peer joins the window's documents with the end-of-text token (``join``), encodes the text
with the shipped tokenizer, and takes the first ``batch * (seq_len + 1)`` ids (repeated from
the start if the window was too short, which ``CHARS_PER_TOKEN`` makes practically impossible)
as ``batch`` rows of ``seq_len + 1``: ``x`` the first ``seq_len`` of each row, ``y`` the last
``seq_len`` (``batch_from_ids``). The golden cases in tests/vectors/fineweb/ pin the whole chain
from an address to the ids, for Python and JavaScript alike.

Pure: no I/O, no clock; the server (``server/datasource.py``) supplies the shard table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from daisychain import datanames
from daisychain.numerics import prng

FINEWEB_STREAM = 2  # prng.key(seed, FINEWEB_STREAM, purpose, ...); batches.BATCH_STREAM is 1
STEPS_PER_ROW_GROUP = 32
# BPE ids of English average 3-4 characters with this 2048-token vocabulary: 8 characters per
# id asked for leaves the token budget, not the text, to run out.
CHARS_PER_TOKEN = 8
MAX_WINDOW_CHARS = 1_000_000  # /data's max_chars bound
DOCUMENT_SEPARATOR = "<|endoftext|>"  # the tokenizer's end-of-text token (docs/TOKENIZER.md)

BUILTIN = datanames.BUILTIN
FINEWEB_PREFIX = datanames.FINEWEB_PREFIX
REVISION_RE = datanames.REVISION_RE

Split = Literal["train", "validation"]
SPLITS: tuple[Split, ...] = ("train", "validation")
IntArray = npt.NDArray[np.int64]


class AddressError(ValueError):
    """The shard table cannot hold an address (no training row group, an empty row group)."""


@dataclass(frozen=True)
class Window:
    """Where one window of text lives: shard index, row group, first row, and its length."""

    shard: int
    row_group: int
    first_row: int
    chars: int


def data_name(revision: str) -> str:
    """``config.data`` for FineWeb-Edu at ``revision`` (a 40-hex commit)."""
    return datanames.fineweb(revision)


def revision_of(data: str) -> str | None:
    """The revision of a dataset's name (``datanames``: FineWeb-Edu, a Hub dataset or a
    server's own text files), ``None`` for ``"builtin"``; ``ValueError`` for anything else."""
    name = datanames.parse(data)
    return None if name is None else name.revision


def window_chars(batch: int, seq_len: int) -> int:
    """Characters of text a ``batch x seq_len`` window asks for."""
    return min(MAX_WINDOW_CHARS, CHARS_PER_TOKEN * batch * (seq_len + 1))


def _draw(key: int, bound: int, counter: int) -> int:
    return int(prng.below(key, 1, bound, start=counter)[0])


def shard_of(seed: int, step: int, rank: int, split: Split, n_shards: int) -> int:
    """Index of the shard the window of ``(seed, step, rank)`` lives in."""
    if n_shards < 1:
        raise AddressError("the shard table is empty")
    if split == "validation":
        return n_shards - 1
    key = prng.key(seed, FINEWEB_STREAM, 0, step // STEPS_PER_ROW_GROUP, rank)
    return _draw(key, n_shards, 0)


def training_row_groups(shard: int, n_shards: int, row_groups: int) -> int:
    """Row groups of ``shard`` that training may read: all but the held-out one."""
    return row_groups - 1 if shard == n_shards - 1 else row_groups


def window(
    seed: int,
    step: int,
    rank: int,
    split: Split,
    *,
    shard: int,
    n_shards: int,
    rows: Sequence[int],
    chars: int,
) -> Window:
    """The window of ``(seed, step, rank)`` in ``shard`` (from ``shard_of``), whose row groups
    hold ``rows[i]`` rows each."""
    if split == "validation":
        if not rows:
            raise AddressError("the last shard has no row group to hold out")
        row_group = len(rows) - 1
        key = prng.key(seed, FINEWEB_STREAM, 2, step, rank)
    else:
        usable = training_row_groups(shard, n_shards, len(rows))
        if usable < 1:
            raise AddressError(f"shard {shard} has no training row group (only the held-out one)")
        group_key = prng.key(seed, FINEWEB_STREAM, 0, step // STEPS_PER_ROW_GROUP, rank)
        row_group = _draw(group_key, usable, 1)
        key = prng.key(seed, FINEWEB_STREAM, 1, step, rank)
    if rows[row_group] < 1:
        raise AddressError(f"row group {row_group} of shard {shard} has no rows")
    return Window(shard, row_group, _draw(key, rows[row_group], 0), chars)


def window_texts(documents: Sequence[str], first_row: int, chars: int) -> list[str]:
    """``chars`` characters of ``documents`` from ``first_row`` on (wrapping round, as often as
    needed), the last one cut; rows past the decoded documents wrap too."""
    if not any(documents):
        raise AddressError("the row group holds no text")
    picked: list[str] = []
    budget, i = chars, first_row % len(documents)
    while budget > 0:
        text = documents[i][:budget]
        picked.append(text)
        budget -= len(text)
        i = (i + 1) % len(documents)
    return picked


def join(texts: Sequence[str]) -> str:
    """The text a peer encodes: the window's documents separated by the end-of-text token."""
    return DOCUMENT_SEPARATOR.join(texts)


def tokens_needed(batch: int, seq_len: int) -> int:
    return batch * (seq_len + 1)


def batch_from_ids(ids: npt.ArrayLike, batch: int, seq_len: int) -> tuple[IntArray, IntArray]:
    """(x, y), each (batch, seq_len) int64, from the first ``batch * (seq_len + 1)`` ids
    (repeated from the start when fewer)."""
    flat = np.asarray(ids, dtype=np.int64).reshape(-1)
    if flat.size == 0:
        raise AddressError("the window encoded to no tokens")
    need = tokens_needed(batch, seq_len)
    rows = np.resize(flat, need).reshape(batch, seq_len + 1)  # (B, T + 1)
    return rows[:, :-1], rows[:, 1:]
