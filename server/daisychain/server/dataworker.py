"""The ``/data`` worker process: parquet decode and JSON bodies under an interpreter lock of
their own, so the server's event loop never waits for them.

Decoding a ~3 MB row group into ``str`` (``to_pylist``) and building a 1 MB JSON body hold the
interpreter lock for ~20-50 ms per request: in a worker process (``workpool.WorkerPool``, which
says why a process), not on the server's loop nor under its lock. The server sends
the row group's bytes and gets the body's bytes back (pickling ``bytes`` is a copy); the
decoded texts stay in the worker (sending ``list[str]`` back would cost the server's lock
again), in the addressed form's LRU of decoded row groups.

Every job is a plain function of picklable arguments (``build``, ``json_body``), so a test can
call it in the server's own process and compare; ``DataWorker`` runs them in the pool. A worker
that dies (killed, out of memory) breaks the pool: the request in flight gets ``WorkerDied``
(the endpoint's 503 with a hint), and the next job starts a fresh pool.
"""

from __future__ import annotations

import io
import json
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from random import Random
from typing import Any

from daisychain import fineweb
from daisychain.server.workpool import WorkerPool

TEXT_COLUMN = "text"
PARQUET_MAGIC = b"PAR1"
DECODE_ROWS = 64  # rows turned into str at a time (decode_texts): ~200 KB
# Decoded row groups the addressed form keeps in the worker (least recently used dropped
# first): a rank reads one row group for fineweb.STEPS_PER_ROW_GROUP steps, so keeping one per
# active rank saves 31 of every 32 upstream reads. A FineWeb-Edu row group is ~2-5 MB of text:
# 16 hold ~30-80 MB, in the worker's memory, not the server's.
WINDOW_ROW_GROUPS = 16
FOOTERS = 64  # parsed footers the worker keeps (FineWeb-Edu sample/10BT has 14 shards)
# json_body's pieces: a long text or list is written in pieces, so no one call is long.
JSON_PIECE_CHARS = 16_384
JSON_PIECE_ITEMS = 4096


class EmptyRowGroup(Exception):
    """The row group decoded to no text at all."""


@dataclass(frozen=True)
class Chunk:
    """A row group's ``text`` column chunk: ``data`` is its bytes at ``start`` of the shard
    (``size`` bytes), ``footer`` the shard's footer (metadata + length + PAR1). ``footer``
    None: the worker has it parsed already, else ``build`` answers None; ``data`` None: the
    worker has the row group decoded in its LRU (``cache``), else ``build`` answers None."""

    shard: str
    row_group: int
    size: int
    start: int
    data: bytes | None
    footer: bytes | None = None
    cache: bool = False  # keep the decoded texts in the worker's LRU (the addressed form)
    column: str = TEXT_COLUMN  # the column the chunk is of (DataConfig.text_column)


@dataclass(frozen=True)
class RandomPick:
    """Whole documents from a random one on (wrapping round), the last cut: ``max_chars`` in
    all. ``rng`` is the request's generator, so a seed picks what it picked in the server."""

    rng: Random
    max_chars: int


@dataclass(frozen=True)
class WindowPick:
    """``fineweb.window_texts(texts, first_row, chars)``: an addressed window."""

    first_row: int
    chars: int


@dataclass(frozen=True)
class Built:
    """What ``build`` made: ``data`` is the JSON body, or the picked documents joined by
    ``build``'s ``join`` as a ``str`` (to tokenize); ``first_row`` the document the pick started
    at."""

    data: bytes | str
    first_row: int


# The worker's state (module globals: one set per worker process).
_footers: OrderedDict[tuple[str, int], Any] = OrderedDict()  # (shard, size) -> FileMetaData
_row_groups: OrderedDict[tuple[str, int], list[str]] = OrderedDict()


class _RangeFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only ``[start, start + len(data))`` is known.

    pyarrow reads the one column chunk we fetched through it; a read anywhere else is a bug in
    the offsets we computed and must fail loudly rather than decode zeros.
    """

    def __init__(self, size: int, start: int, data: bytes) -> None:
        super().__init__()
        self._size, self._start, self._data, self._pos = size, start, data, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self._size or len(view) == 0:
            return 0
        begin = self._pos - self._start
        if begin < 0 or begin >= len(self._data):
            raise OSError(f"read at {self._pos} outside the fetched range")
        chunk = memoryview(self._data)[begin : begin + len(view)]  # no copy before the one
        view[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def read_footer(footer: bytes) -> Any:
    """``footer`` (metadata + length + PAR1) as pyarrow ``FileMetaData``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(PARQUET_MAGIC + footer))


def decode_texts(
    metadata: Any, size: int, row_group: int, start: int, data: bytes, column: str = TEXT_COLUMN
) -> list[str]:
    """The text ``column`` of ``row_group`` from its chunk's bytes (``OSError``/``ValueError``
    if they do not decode)."""
    import pyarrow.parquet as pq

    source = _RangeFile(size, start, data)
    table = pq.ParquetFile(source, metadata=metadata).read_row_group(row_group, columns=[column])
    values = table.column(0)
    texts: list[str] = []
    for at in range(0, len(values), DECODE_ROWS):  # in slices: no one long to_pylist
        texts += (
            text for text in values.slice(at, DECODE_ROWS).to_pylist() if isinstance(text, str)
        )
    return texts


def _texts(chunk: Chunk) -> list[str] | None:
    key = (chunk.shard, chunk.row_group)
    if chunk.data is None:
        cached = _row_groups.get(key)
        if cached is not None:
            _row_groups.move_to_end(key)
        return cached
    footer_key = (chunk.shard, chunk.size)
    metadata = _footers.get(footer_key)
    if metadata is None:
        if chunk.footer is None:
            return None
        metadata = _footers[footer_key] = read_footer(chunk.footer)
        while len(_footers) > FOOTERS:
            _footers.popitem(last=False)
    texts = decode_texts(
        metadata, chunk.size, chunk.row_group, chunk.start, chunk.data, chunk.column
    )
    if not any(texts):
        raise EmptyRowGroup(f"row group {chunk.row_group} of {chunk.shard} holds no text")
    if chunk.cache:
        _row_groups[key] = texts
        _row_groups.move_to_end(key)
        while len(_row_groups) > WINDOW_ROW_GROUPS:
            _row_groups.popitem(last=False)
    return texts


def _pick_random(texts: list[str], pick: RandomPick) -> tuple[list[str], int]:
    first = pick.rng.randrange(len(texts))
    picked: list[str] = []
    budget = pick.max_chars
    for i in range(len(texts)):
        if budget <= 0:
            break
        text = texts[(first + i) % len(texts)][:budget]
        picked.append(text)
        budget -= len(text)
    return picked, first


def build(
    chunk: Chunk,
    pick: RandomPick | WindowPick,
    fields: dict[str, Any],
    join: str | None = None,
) -> Built | None:
    """Decode (or find) ``chunk``'s texts, pick from them, and make the response: ``fields`` with
    ``first_row``, ``texts`` and ``chars`` filled in, as JSON bytes; or, given ``join``, the
    picked texts joined by it. None: the worker lacks the footer or the cached row group the
    chunk leaves out (send them)."""
    texts = _texts(chunk)
    if texts is None:
        return None
    if isinstance(pick, RandomPick):
        picked, first = _pick_random(texts, pick)
    else:
        picked, first = fineweb.window_texts(texts, pick.first_row, pick.chars), pick.first_row
        first %= len(texts)
    if join is not None:
        return Built(join.join(picked), first)
    body = fields | {"first_row": first, "texts": picked, "chars": sum(map(len, picked))}
    return Built(json_body(body), first)


def json_body(body: dict[str, Any]) -> bytes:
    """``body`` as compact JSON. Its lists (``texts``: up to 1 000 000 characters; ``tokens``:
    up to 131 072 ids, a list or an ``array``) are written piece by piece, the same JSON as one
    ``json.dumps`` (which holds the interpreter lock for one long call: 6-13 ms for 1 MB)."""
    parts = ["{"]
    for n, (key, value) in enumerate(body.items()):
        parts.append(("," if n else "") + json.dumps(key) + ":")
        if isinstance(value, array):
            value = value.tolist()
        if not isinstance(value, list):
            parts.append(json.dumps(value, separators=(",", ":")))
            continue
        parts.append("[")
        if value and all(isinstance(item, str) for item in value):
            for i, text in enumerate(value):
                parts.append(',"' if i else '"')
                for at in range(0, len(text), JSON_PIECE_CHARS):
                    parts.append(json.dumps(text[at : at + JSON_PIECE_CHARS])[1:-1])
                parts.append('"')
        else:
            for at in range(0, len(value), JSON_PIECE_ITEMS):
                piece = json.dumps(value[at : at + JSON_PIECE_ITEMS], separators=(",", ":"))
                parts.append(("," if at else "") + piece[1:-1])
        parts.append("]")
    parts.append("}")
    return "".join(parts).encode("ascii")


class DataWorker(WorkerPool):
    """``processes`` worker processes for ``/data`` (``DataConfig.work_processes``), pyarrow
    imported in each before its first job."""

    def __init__(self, processes: int, nice: int) -> None:
        super().__init__(processes, nice, warm=("pyarrow.parquet",), what="/data")
