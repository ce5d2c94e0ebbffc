"""Training text for ``/data``: random row groups of FineWeb-Edu ``sample/10BT`` (or of the Hub
dataset the server was started on: ``hubdataset.py``), or the built-in corpus when the upstream
cannot be used.

The parquet files are read by range requests (``parquetreader.FineWebReader``: one range GET
per row group once a file's footer is known; ``hubdataset.HubReader`` and
``localtext.FileReader`` make the same reads through ``huggingface_hub`` and from a local file);
decoding and the response body are built in the worker process (``dataworker``), so the
server's event loop never waits for the interpreter lock that work holds.

Any failure (connection refused, an error status, a 200 where a 206 was asked for - which would
mean downloading 2 GB - a timeout, a corrupt footer) moves the upstream into ``BACKOFF``: the
request is served from the built-in corpus, the reason is logged, and the upstream is tried again
after a delay that doubles while it keeps failing. Every response names its source.

The addressed form (``DataService.window``, docs/SERVER.md "Addressed windows") reads the window
of text a training run's address names (``daisychain.fineweb``): it never falls back, because a
peer handed other text would silently train on it; a failure is ``DataUnavailable`` (the
endpoint's 503 with a hint) and counts against the upstream like any other. Its decoded row
groups are kept in a small LRU in the worker (``dataworker.WINDOW_ROW_GROUPS``; the server
keeps the keys), since a rank reads one row group for ``fineweb.STEPS_PER_ROW_GROUP`` steps.

Upstream state, changed only through ``DataService._set_state``::

    UNTRIED --read ok--> OK      UNTRIED/OK/BACKOFF --read failed--> BACKOFF
    BACKOFF --retry ok--> OK     OFFLINE (--offline): terminal, never contacts the upstream
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import os
import random
import time
from array import array
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import aiohttp

from daisychain import fineweb
from daisychain.server.config import DataConfig
from daisychain.server.dataworker import (
    WINDOW_ROW_GROUPS,
    Built,
    Chunk,
    DataWorker,
    EmptyRowGroup,
    RandomPick,
    WindowPick,
    build,
    json_body,
)
from daisychain.server.hubdataset import HubReader
from daisychain.server.localtext import FileReader
from daisychain.server.parquetreader import FineWebReader, ShardIndex, UpstreamError

log = logging.getLogger(__name__)


class Tokenizer(Protocol):
    sha256: str
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...


def load_builtin_text() -> str:
    from daisychain.corpus import load_builtin_text as load

    return load()


def load_tokenizer() -> Tokenizer:
    """The shipped tokenizer through the ``tokenizers`` library, which releases the interpreter
    lock while it encodes (``daisychain.tokenizer.fast`` says why and how it is checked)."""
    from daisychain.tokenizer.fast import load_serving_tokenizer

    return load_serving_tokenizer()


class DataUnavailable(Exception):
    """An addressed window cannot be served; ``message``/``hint`` go to the client (a 503),
    ``retry_after_s`` is when asking again may help (``None``: not before something changes)."""

    def __init__(self, message: str, hint: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message, self.hint, self.retry_after_s = message, hint, retry_after_s


class DataBusy(Exception):
    """Every ``/data`` slot is taken and the line is full: refused at once (a 503 with
    ``Retry-After``), not queued (``Admission``)."""

    def __init__(self, waiting: int, retry_after_s: float) -> None:
        super().__init__(f"the server is busy: {waiting} /data requests are waiting")
        self.waiting, self.retry_after_s = waiting, retry_after_s


class Admission:
    """At most ``at_once`` ``/data`` requests are served at once and ``waiting`` more wait in
    line, first come first served; one more is refused (``DataBusy``) rather than queued. The
    work of a served request - its JSON and the write of its body - is ready on the event loop
    only for the few in their slots, so the loop turns often enough for ``/healthz``,
    ``/ws`` and the rest whatever the burst (docs/SERVER.md, "/data")."""

    def __init__(
        self, at_once: int, waiting: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert at_once >= 1 and waiting >= 0, f"bad admission bounds {at_once}, {waiting}"
        self.at_once, self.max_waiting = at_once, waiting
        self._slots = asyncio.Semaphore(at_once)
        self._clock = clock
        self.in_slots = 0
        self.waiting = 0
        self.refused = 0
        self._hold_s = 0.05  # how long a slot is held, a moving average: for Retry-After
        self._since: list[float] = []  # when each slot held now was taken, oldest first

    def retry_after_s(self) -> float:
        """When the line ahead of a new request will have been served, about (at least 1 s)."""
        return max(1.0, (self.waiting + 1) * self._hold_s / self.at_once)

    async def acquire(self) -> None:
        """Take a slot, waiting in line if there is room in it; else ``DataBusy`` at once."""
        if self._slots.locked():
            if self.waiting >= self.max_waiting:
                self.refused += 1
                raise DataBusy(self.waiting, self.retry_after_s())
            self.waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self.waiting -= 1
        else:
            await self._slots.acquire()
        self.in_slots += 1
        self._since.append(self._clock())

    def release(self) -> None:
        self.in_slots -= 1
        self._slots.release()
        self._hold_s += 0.2 * (self._clock() - self._since.pop(0) - self._hold_s)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    def status(self) -> dict[str, int]:
        return {
            "at_once": self.at_once, "in_slots": self.in_slots, "waiting": self.waiting,
            "max_waiting": self.max_waiting, "refused": self.refused,
        }  # fmt: skip


class UpstreamState(enum.Enum):
    OFFLINE = "offline"
    UNTRIED = "untried"
    OK = "ok"
    BACKOFF = "backoff"


@dataclass(frozen=True)
class TextSample:
    """Where a response's text came from. ``texts``: the picked texts where the server holds
    them (the built-in corpus); empty where the worker process built the body from them."""

    source: Literal["fineweb", "dataset", "builtin"]
    texts: list[str]
    shard: str | None = None
    row_group: int | None = None
    first_row: int | None = None
    offset: int | None = None  # character offset into the built-in corpus
    window: fineweb.Window | None = None  # the addressed form's coordinates


def reader_for(
    config: DataConfig, session: aiohttp.ClientSession | None, executor: Executor | None
) -> FineWebReader | None:
    """The reader ``config.reader`` names (None without a session: offline)."""
    if session is None:
        return None
    if config.reader == "hub":
        return HubReader(config, session, executor)
    if config.reader == "file":
        return FileReader(config, session, executor)
    return FineWebReader(config, session, executor)


def describe(sample: TextSample) -> dict[str, Any]:
    """The fields a JSON ``/data`` body starts with: where its text came from."""
    return {
        "source": sample.source,
        "shard": sample.shard,
        "row_group": sample.row_group,
        "first_row": sample.first_row,
        "offset": sample.offset,
    }


class DataService:
    """Chooses a slice and a source for each ``/data`` request and tracks upstream health.
    The parquet decode and the JSON bodies run in the worker process (``dataworker``)."""

    def __init__(
        self,
        config: DataConfig,
        session: aiohttp.ClientSession | None,
        *,
        fallback_text: Callable[[], str] = load_builtin_text,
        tokenizer: Callable[[], Tokenizer] = load_tokenizer,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        # Parquet decoding and JSON bodies: in worker processes, under their own interpreter
        # lock (dataworker says why), at most requests_at_once jobs at a time (Admission).
        self.worker = DataWorker(config.work_processes, config.work_nice)
        # Footers (once per shard; the server needs their row group offsets): on a thread.
        self._footer_pool = ThreadPoolExecutor(1, thread_name_prefix="data-footer")
        self.admission = Admission(config.requests_at_once, config.requests_waiting, clock)
        self.reader = reader_for(config, session, self._footer_pool)
        self._fallback_text = fallback_text
        self._tokenizer_loader = tokenizer
        self._tokenizer: Tokenizer | None = None
        self._builtin: str | None = None
        # Both loads take a fifth of a second or so: in a worker thread, once, never on the loop.
        self._loading = asyncio.Lock()
        threads = config.tokenize_threads or max(1, (os.cpu_count() or 2) - 1)
        self._tokenize_pool = ThreadPoolExecutor(threads, thread_name_prefix="tokenize")
        # Held from sampling to the last id (see DataConfig.token_requests_at_once).
        self.token_slots = asyncio.Semaphore(config.token_requests_at_once or threads + 1)
        self._clock = clock
        self.state = UpstreamState.OFFLINE if config.offline or session is None else (
            UpstreamState.UNTRIED
        )  # fmt: skip
        self.last_error: str | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.served = {config.source: 0, "builtin": 0}
        self.windows_served = 0
        # (shard, row group) the worker holds decoded, least recently used first (the addressed
        # form only): the keys of the worker's LRU, which sees the same reads in the same order.
        # A key the worker lacks (it was restarted) is read again.
        self._row_groups: OrderedDict[tuple[str, int], None] = OrderedDict()

    def _set_state(self, new: UpstreamState, reason: str) -> None:
        old, self.state = self.state, new
        if old is not new:
            log.info("%s upstream: %s -> %s (%s)", self.config.label, old.value, new.value, reason)

    def status(self) -> dict[str, Any]:
        retry_in = max(0.0, self.retry_at - self._clock())
        return {
            "state": self.state.value,
            # The run's data name (datanames): what a peer of this server can train on.
            "name": self.config.name,
            "revision": self.config.revision,
            "shards": len(self.config.shards),
            "shards_cached": self.reader.cached_shards if self.reader else 0,
            "last_error": self.last_error,
            "retry_in_s": round(retry_in, 1) if self.state is UpstreamState.BACKOFF else None,
            "served": dict(self.served),
            "windows_served": self.windows_served,
            "requests": self.admission.status(),
            "worker": self.worker.status(),
        }

    def _upstream_usable(self) -> bool:
        if self.reader is None or self.state is UpstreamState.OFFLINE:
            return False
        return self.state is not UpstreamState.BACKOFF or self._clock() >= self.retry_at

    async def text_body(self, rng: random.Random, max_chars: int) -> tuple[TextSample, bytes]:
        """The JSON body of a random slice of at most ``max_chars`` characters (FineWeb-Edu if
        possible), built in the worker process."""
        sample, data = await self._sampled(rng, max_chars, None)
        assert isinstance(data, bytes)
        return sample, data

    async def text(
        self, rng: random.Random, max_chars: int, separator: str
    ) -> tuple[TextSample, str]:
        """A random slice of at most ``max_chars`` characters, its documents joined by
        ``separator`` (to tokenize)."""
        sample, text = await self._sampled(rng, max_chars, separator)
        assert isinstance(text, str)
        return sample, text

    async def _sampled(
        self, rng: random.Random, max_chars: int, join: str | None
    ) -> tuple[TextSample, bytes | str]:
        if self._upstream_usable():
            try:
                result = await self._fineweb(rng, max_chars, join)
            except UpstreamError as exc:
                self._failed(str(exc))
            else:
                self.failures, self.last_error = 0, None
                self._set_state(UpstreamState.OK, "read succeeded")
                self.served[self.config.source] += 1
                return result
        self.served["builtin"] += 1
        sample = self._builtin_sample(await self.builtin_text(), rng, max_chars)
        if join is not None:
            return sample, join.join(sample.texts)
        body = describe(sample) | {"texts": sample.texts, "chars": sum(map(len, sample.texts))}
        return sample, await self.worker.run(json_body, body)

    async def json(self, body: dict[str, Any]) -> bytes:
        """``body`` as JSON bytes, built in the worker process (``dataworker.json_body``)."""
        return await self.worker.run(json_body, body)

    async def _build(
        self,
        index: ShardIndex,
        chunk: Chunk,
        pick: RandomPick | WindowPick,
        fields: dict[str, Any],
        join: str | None = None,
    ) -> Built | None:
        """``dataworker.build`` in the worker, with the footer sent along when the worker has
        not parsed it yet; None only for a cached row group the worker no longer holds. A chunk
        that does not decode is an ``UpstreamError``; a worker that died, ``WorkerDied``."""
        try:
            built = await self.worker.run(build, chunk, pick, fields, join)
            if built is None and chunk.data is not None:
                chunk = replace(chunk, footer=index.footer)
                built = await self.worker.run(build, chunk, pick, fields, join)
                assert built is not None, "a full chunk is always built"
        except EmptyRowGroup as exc:
            raise UpstreamError(str(exc)) from None
        except (OSError, ValueError) as exc:
            raise UpstreamError(
                f"cannot decode row group {chunk.row_group} of {chunk.shard}: {exc}"
            ) from None
        return built

    async def window(
        self, split: fineweb.Split, seed: int, step: int, rank: int, chars: int
    ) -> tuple[TextSample, bytes]:
        """The JSON body of the window of text at a run's address (``daisychain.fineweb``), from
        FineWeb-Edu at this server's revision, or ``DataUnavailable``: never the built-in
        corpus."""
        if self.reader is None or self.state is UpstreamState.OFFLINE:
            raise DataUnavailable(
                f"this server does not read {self.config.label} (it runs with --offline)",
                "lead with data builtin, or use a server started without --offline",
            )
        wait = self.retry_at - self._clock()
        if self.state is UpstreamState.BACKOFF and wait > 0:
            raise DataUnavailable(
                f"the {self.config.label} upstream failed ({self.last_error}); next try in "
                f"{wait:.0f} s",
                f"retry in {max(1, round(wait))} s; the server's /api/status shows the upstream",
                retry_after_s=wait,
            )
        try:
            result = await self._window(split, seed, step, rank, chars)
        except UpstreamError as exc:
            self._failed(str(exc))
            raise DataUnavailable(
                f"the {self.config.label} upstream failed: {str(exc)[:200]}",
                "retry later; the server's /api/status shows the upstream and its last error",
                retry_after_s=max(0.0, self.retry_at - self._clock()),
            ) from None
        except fineweb.AddressError as exc:
            raise DataUnavailable(
                f"the revision's shard table cannot hold this address: {exc}",
                "the dataset revision is unusable for training: lead with another --data",
            ) from None
        self.failures, self.last_error = 0, None
        self._set_state(UpstreamState.OK, "read succeeded")
        self.windows_served += 1
        return result

    async def _window(
        self, split: fineweb.Split, seed: int, step: int, rank: int, chars: int
    ) -> tuple[TextSample, bytes]:
        assert self.reader is not None, "upstream used while offline"
        shards = self.config.shards
        shard_index = fineweb.shard_of(seed, step, rank, split, len(shards))
        shard = shards[shard_index]
        index = await self.reader.index(shard)
        where = fineweb.window(
            seed, step, rank, split, shard=shard_index, n_shards=len(shards), rows=index.rows,
            chars=chars,
        )  # fmt: skip
        sample = TextSample(
            source=self.config.source,
            texts=[],
            shard=shard,
            row_group=where.row_group,
            window=where,
        )
        fields = describe(sample) | {
            "revision": self.config.revision, "split": split, "seed": seed, "step": step,
            "rank": rank,
        }  # fmt: skip
        pick = WindowPick(where.first_row, chars)
        key = (shard, where.row_group)
        built = None
        if key in self._row_groups:  # decoded in the worker: no upstream read
            self._row_groups.move_to_end(key)
            cached = Chunk(shard, where.row_group, index.size, 0, None, cache=True)
            built = await self._build(index, cached, pick, fields)
        if built is None:
            self._row_groups.pop(key, None)
            _index, chunk = await self.reader.read_chunk(shard, where.row_group)
            built = await self._build(index, replace(chunk, cache=True), pick, fields)
            assert built is not None, "a chunk with its bytes is always built"
            self._row_groups[key] = None
            while len(self._row_groups) > WINDOW_ROW_GROUPS:
                self._row_groups.popitem(last=False)
        assert isinstance(built.data, bytes)
        return replace(sample, first_row=built.first_row), built.data

    async def tokenizer(self) -> Tokenizer:
        """The tokenizer, loaded on first use; a failed load raises and is tried again later."""
        if self._tokenizer is None:
            async with self._loading:
                if self._tokenizer is None:
                    self._tokenizer = await asyncio.to_thread(self._tokenizer_loader)
        return self._tokenizer

    async def encode(
        self, tokenizer: Tokenizer, text: str, max_tokens: int, typecode: str
    ) -> array[int]:
        """The first ``max_tokens`` ids of ``text`` as an ``array`` of ``typecode``, on one of
        the ``tokenize_threads`` (never on the loop), piece by piece (``encode_prefix``)."""
        from daisychain.tokenizer.fast import encode_prefix

        job = functools.partial(
            encode_prefix, tokenizer.encode, text, max_tokens, typecode=typecode
        )
        return await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, job)

    def close(self) -> None:
        """Stop the threads and the worker processes (waits for the workers to exit)."""
        self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        self._footer_pool.shutdown(wait=False, cancel_futures=True)
        if self.reader is not None:
            self.reader.close()
        self.worker.close()

    async def builtin_text(self) -> str:
        """The built-in corpus (~12 M characters, ~24 MB as a str), loaded on first use."""
        if self._builtin is None:
            async with self._loading:
                if self._builtin is None:
                    text = await asyncio.to_thread(self._fallback_text)
                    assert text, "the built-in corpus is empty"
                    self._builtin = text
        return self._builtin

    async def preload(self) -> None:
        """Load what requests will need before serving (``daisychain serve`` does): no request
        waits for a load, and the server's memory is steady from its first request. The
        built-in corpus only when offline, where it is the only source; online it stays a
        fallback loaded on the first failure. A tokenizer that fails to load is reported here
        and again, with a hint, by every ``format=tokens`` request."""
        try:
            tokenizer = await self.tokenizer()
        except (ImportError, OSError, ValueError) as exc:
            log.warning("no tokenizer for /data?format=tokens: %s", exc)
        else:
            await self.encode(tokenizer, "warm up the tokenize threads", 16, "I")
        await self.worker.run(os.getpid)  # the worker process started, pyarrow imported
        if self.state is UpstreamState.OFFLINE:
            await self.builtin_text()

    def _failed(self, reason: str) -> None:
        self.failures += 1
        delay = min(self.config.retry_max_s, self.config.retry_initial_s * 2 ** (self.failures - 1))
        self.retry_at = self._clock() + delay
        self.last_error = reason[:200]
        log.warning(
            "fineweb upstream failed: %s; retrying in %g s (until then the random form serves "
            "the built-in corpus and the addressed form answers 503)",
            reason, delay, extra={"fields": {"failures": self.failures, "retry_in_s": delay}},
        )  # fmt: skip
        self._set_state(UpstreamState.BACKOFF, reason[:80])

    async def _fineweb(
        self, rng: random.Random, max_chars: int, join: str | None
    ) -> tuple[TextSample, bytes | str]:
        assert self.reader is not None, "upstream used while offline"
        shard = self.config.shards[rng.randrange(len(self.config.shards))]
        index = await self.reader.index(shard)
        if not index.rows:
            raise UpstreamError(f"{shard} has no row groups")
        row_group = rng.randrange(len(index.rows))
        _index, chunk = await self.reader.read_chunk(shard, row_group)
        sample = TextSample(source=self.config.source, texts=[], shard=shard, row_group=row_group)
        # Whole documents from a random one on (wrapping round), the last one cut to fit.
        pick = RandomPick(rng, max_chars)
        built = await self._build(index, chunk, pick, describe(sample), join)
        assert built is not None, "a chunk with its bytes is always built"
        return replace(sample, first_row=built.first_row), built.data

    @staticmethod
    def _builtin_sample(text: str, rng: random.Random, max_chars: int) -> TextSample:
        offset = rng.randrange(len(text))
        piece = text[offset : offset + max_chars]
        if len(piece) < max_chars:  # wrap round so short corpora still fill the request
            piece += text[: max_chars - len(piece)]
        return TextSample(source="builtin", texts=[piece], offset=offset)
