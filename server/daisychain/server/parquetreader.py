"""Range reads of parquet files behind one base URL (the Hugging Face resolve URL shape):
``FineWebReader``, the reader ``/data`` uses (``datasource``), and its parts.

Reading FineWeb-Edu (14 parquet shards of ~2.15 GB at a pinned revision, see ``config.py``), or
any other parquet dataset, uses plain HTTP range requests:

1. cold shard: ``Range: bytes=-N`` fetches the tail; its last 8 bytes are the footer length and
   ``PAR1``; if the footer is longer than the tail, one more range GET fetches the rest. The
   footer is parsed with pyarrow and cached with the file size, together with the signed CDN URL
   the resolver redirected to (valid about an hour);
2. every row group read is then exactly ONE range GET: the byte range of the row group's text
   column chunk (the other columns are metadata we do not serve), decoded by pyarrow through a
   file object that holds only that range.

A failure is an ``UpstreamError`` naming why (connection refused, an error status, a 200 where
a 206 was asked for - which would mean downloading 2 GB, so its body is never read - a timeout,
a corrupt footer); ``datasource.DataService`` decides what it means. Subclasses replace
``_get`` (one range read): ``hubdataset.HubReader``, ``localtext.FileReader``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import struct
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import aiohttp

from daisychain.server.config import DataConfig
from daisychain.server.dataworker import (
    PARQUET_MAGIC,
    TEXT_COLUMN,
    Chunk,
    decode_texts,
    read_footer,
)

log = logging.getLogger(__name__)

_CONTENT_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_RANGE_RE = re.compile(r"bytes=(?:(\d+)-(\d+)|-(\d+))")


def byte_span(byte_range: str, size: int) -> tuple[int, int]:
    """``[start, end)`` of a file of ``size`` bytes that a ``Range`` value this reader writes
    (``bytes=A-B`` or the suffix ``bytes=-N``) names, clipped to the file: for the readers that
    make a range read themselves (``hubdataset.HubReader``, ``localtext.FileReader``)."""
    match = _RANGE_RE.fullmatch(byte_range)
    assert match is not None, f"unexpected range {byte_range}"  # only this module writes them
    first, last, suffix = match.groups()
    if suffix is not None:
        return size - min(size, int(suffix)), size
    return min(size, int(first)), min(size, int(last) + 1)


_P = ParamSpec("_P")
_T = TypeVar("_T")


class UpstreamError(Exception):
    """The upstream cannot serve this read; ``str(exc)`` says why, for the log and status."""


@dataclass(frozen=True)
class ShardIndex:
    size: int
    metadata: Any  # pyarrow.parquet.FileMetaData
    # Per row group: (offset, length) of the text column chunk, and the number of rows.
    text_chunks: tuple[tuple[int, int], ...]
    rows: tuple[int, ...]
    # Metadata + length + PAR1, as read: what the worker process parses.
    footer: bytes = field(default=b"", repr=False)


def parse_footer(tail: bytes, size: int) -> int:
    """Footer length from a file's last 8 bytes; checks the magic and the bounds."""
    if len(tail) < 8 or tail[-4:] != PARQUET_MAGIC:
        raise UpstreamError("not a parquet file (no PAR1 at the end)")
    (footer_len,) = struct.unpack("<I", tail[-8:-4])
    if footer_len + 12 > size:
        raise UpstreamError(f"parquet footer length {footer_len} exceeds file size {size}")
    return int(footer_len)


def _index_from_footer(footer: bytes, size: int, column_name: str = TEXT_COLUMN) -> ShardIndex:
    """Parse ``footer`` (metadata + length + PAR1) into the offsets of each chunk of the text
    column ``column_name``."""
    try:
        metadata = read_footer(footer)
    except (OSError, ValueError) as exc:
        raise UpstreamError(f"unreadable parquet footer: {exc}") from None
    names = metadata.schema.names
    if column_name not in names:
        raise UpstreamError(f"parquet file has no {column_name!r} column (columns: {names})")
    column = names.index(column_name)
    chunks, rows = [], []
    for i in range(metadata.num_row_groups):
        row_group = metadata.row_group(i)
        chunk = row_group.column(column)
        start = chunk.data_page_offset
        # Some writers record dictionary_page_offset 0 for "none": only trust a positive one.
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        length = chunk.total_compressed_size
        if start < 4 or start + length > size - len(footer):
            raise UpstreamError(f"row group {i}: text chunk {start}+{length} outside the file")
        chunks.append((start, length))
        rows.append(row_group.num_rows)
    return ShardIndex(
        size=size, metadata=metadata, text_chunks=tuple(chunks), rows=tuple(rows), footer=footer
    )


class FineWebReader:
    """Range reads of parquet shards behind one base URL, with footers cached per shard."""

    def __init__(
        self,
        config: DataConfig,
        session: aiohttp.ClientSession,
        executor: Executor | None = None,
    ) -> None:
        """``executor`` parses footers, and decodes row groups for ``read_texts`` (None:
        asyncio's default executor)."""
        self.config = config
        self.session = session
        self._executor = executor
        self._indexes: dict[str, ShardIndex] = {}
        self._loading: dict[str, asyncio.Task[ShardIndex]] = {}
        self._resolved: dict[str, tuple[str, float]] = {}  # shard -> (CDN URL, expires at)
        self._slots = asyncio.Semaphore(config.max_concurrent_reads)

    @property
    def cached_shards(self) -> int:
        return len(self._indexes)

    async def index(self, shard: str) -> ShardIndex:
        cached = self._indexes.get(shard)
        if cached is not None:
            return cached
        # Concurrent cold reads of one shard share a single footer fetch.
        task = self._loading.get(shard)
        if task is None:
            task = asyncio.create_task(self._load_index(shard))
            self._loading[shard] = task
            task.add_done_callback(lambda _t: self._loading.pop(shard, None))
        return await asyncio.shield(task)

    async def read_chunk(self, shard: str, row_group: int) -> tuple[ShardIndex, Chunk]:
        """The bytes of ``row_group``'s text column chunk: exactly one range GET."""
        index = await self.index(shard)
        start, length = index.text_chunks[row_group]
        data, _size = await self._get(shard, f"bytes={start}-{start + length - 1}")
        if len(data) != length:
            raise UpstreamError(f"asked for {length} bytes, got {len(data)}")
        column = self.config.text_column
        return index, Chunk(shard, row_group, index.size, start, data, column=column)

    async def read_texts(self, shard: str, row_group: int) -> list[str]:
        """``row_group``'s texts, decoded on the reader's executor (a thread of this process)."""
        index, chunk = await self.read_chunk(shard, row_group)
        assert chunk.data is not None
        try:
            return await self._run(
                decode_texts, index.metadata, index.size, row_group, chunk.start, chunk.data,
                chunk.column,
            )  # fmt: skip
        except (OSError, ValueError) as exc:
            raise UpstreamError(f"cannot decode row group {row_group} of {shard}: {exc}") from None

    async def _load_index(self, shard: str) -> ShardIndex:
        tail, size = await self._get(shard, f"bytes=-{self.config.footer_probe_bytes}")
        footer_len = parse_footer(tail, size)
        needed = footer_len + 8
        if needed > len(tail):
            start = size - needed
            head, _ = await self._get(shard, f"bytes={start}-{size - len(tail) - 1}")
            tail = head + tail
        index = await self._run(_index_from_footer, tail[-needed:], size, self.config.text_column)
        self._indexes[shard] = index
        log.info(
            "%s shard %s: %d row groups, %d bytes", self.config.label, shard, len(index.rows), size,
            extra={"fields": {"shard": shard, "row_groups": len(index.rows), "size": size}},
        )  # fmt: skip
        return index

    async def _run(self, job: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        call = functools.partial(job, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Stop what the reader runs beside the session (nothing here; ``HubReader``'s
        threads)."""

    async def _get(self, shard: str, byte_range: str) -> tuple[bytes, int]:
        """One range GET; returns the body and the total file size from Content-Range."""
        resolved = self._resolved.get(shard)
        if resolved is not None and resolved[1] > time.monotonic():
            try:
                return await self._get_url(shard, resolved[0], byte_range)
            except UpstreamError as exc:
                # The signed URL may have expired early: go back to the resolver once.
                log.info("cached CDN URL for %s failed (%s); resolving again", shard, exc)
                self._resolved.pop(shard, None)
        # A private dataset's token goes to the resolver only, never to the signed CDN URL it
        # redirects to (aiohttp drops Authorization on a redirect to another host, too).
        auth = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        return await self._get_url(shard, self.config.shard_url(shard), byte_range, auth)

    async def _get_url(
        self, shard: str, url: str, byte_range: str, auth: dict[str, str] | None = None
    ) -> tuple[bytes, int]:
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        headers = {"Range": byte_range} | (auth or {})
        try:
            async with (
                self._slots,
                self.session.get(url, headers=headers, timeout=timeout) as resp,
            ):
                if resp.status != 206:
                    # Never read a 200 body: it is the whole 2 GB shard.
                    raise UpstreamError(
                        f"HTTP {resp.status} for a range request (expected 206 Partial Content)"
                    )
                match = _CONTENT_RANGE_RE.fullmatch(resp.headers.get("Content-Range", ""))
                if match is None:
                    raise UpstreamError("206 without a valid Content-Range header")
                body = await resp.read()
                if resp.history:
                    expires = time.monotonic() + self.config.redirect_ttl_s
                    self._resolved[shard] = (str(resp.url), expires)
                return body, int(match.group(3))
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            raise UpstreamError(f"{reason}: {exc}".rstrip(": ")) from None
