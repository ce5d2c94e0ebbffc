"""A peer's batches for a run on a parquet dataset, fetched from the server a few steps ahead.

For ``config.data = "fineweb@REV"`` (or any dataset name, ``daisychain.datanames``: a Hub
dataset, a server's own text files) the batch of rank ``r`` at step ``s`` is the window that
``daisychain.fineweb`` addresses, read through the server's addressed ``/data`` form
(docs/SERVER.md, "Addressed windows") and tokenized here with the shipped tokenizer (the server
only reads text: its tokenizer threads stay free, and the browser tokenizes the same text to the
same ids, tests/vectors/fineweb/). Part of the node's I/O shell: the machine's ``compute``
effect asks ``batch()`` and gets a batch that was fetched while earlier steps computed.

Ahead of the step: each ``batch(address)`` also starts fetching the next ``depth`` steps for
the same rank (a rank changes only when the roster does; a guess that turns out wrong is
dropped and costs one fetch), so in steady state the batch is ready when the step starts.
``stats`` counts the batches that were ready and those the step waited for.

Failure: a server that cannot be reached (or whose certificate is not the pinned one,
``p2p.serverlink``), answers an error or a malformed window raises ``DataUnavailable``
(message + hint). A 429 or 503 with ``Retry-After`` is retried while the wait fits in
``patience_s``; a prefetch that failed is tried once more when its step comes.
Nothing is cached that did not parse completely, so a failure leaves no state behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt

from daisychain import datanames, fineweb
from daisychain.p2p import serverlink

log = logging.getLogger(__name__)

Batch = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
Encoder = Callable[[str], list[int]]


class DataUnavailable(Exception):
    """This peer cannot read the run's text; ``message`` and ``hint`` are for its user."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Address:
    """One batch of a run: whose (rank), when (step: completed steps before it) and its shape."""

    seed: int
    step: int
    rank: int
    batch: int
    seq_len: int
    split: fineweb.Split = "train"


@dataclass
class FeedStats:
    ready: int = 0  # batches that were fetched and tokenized before their step asked
    waited: int = 0  # batches the step had to wait for
    fetched: int = 0  # windows fetched from the server
    waited_steps: list[int] = field(default_factory=list)


def default_encoder() -> Encoder:
    """The shipped tokenizer through the ``tokenizers`` library (the same ids as the reference
    encoder, checked when it loads: ``tokenizer/fast.py``)."""
    from daisychain.tokenizer.fast import load_serving_tokenizer

    return load_serving_tokenizer().encode


class FineWebFeed:
    """Fetches and tokenizes the windows of one run's text from ``server``: FineWeb-Edu at
    ``revision``, or the dataset ``data_name`` names (its revision is then ``revision``)."""

    def __init__(
        self,
        server: str,
        revision: str,
        *,
        data_name: str | None = None,
        encoder: Encoder | None = None,
        depth: int = 4,
        timeout_s: float = 30.0,
        patience_s: float = 20.0,
        fingerprint: bytes | None = None,
    ) -> None:
        assert depth >= 0, f"bad prefetch depth {depth}"
        self.server = server.rstrip("/")
        if self.server.startswith("ws"):
            self.server = "http" + self.server[2:]
        self.revision = revision
        self.data_name = fineweb.data_name(revision) if data_name is None else data_name
        name = datanames.parse(self.data_name)
        assert name is not None and name.revision == revision, f"{data_name} is not at {revision}"
        self.source = name.source  # what the server's answers must say they are
        self.depth = depth
        self.timeout_s = timeout_s
        self.patience_s = patience_s
        self.fingerprint = fingerprint  # the https server's pinned certificate (p2p.serverlink)
        self.stats = FeedStats()
        self._encoder = encoder
        self._encoder_loading = asyncio.Lock()  # the first fetches share one load
        self._session: aiohttp.ClientSession | None = None
        self._pending: dict[Address, asyncio.Task[Batch]] = {}

    async def batch(self, address: Address) -> Batch:
        """The batch at ``address``; starts fetching the next ``depth`` steps too."""
        task = self._pending.pop(address, None)
        if task is not None and task.done() and not task.cancelled() and task.exception() is None:
            self.stats.ready += 1
        else:
            self.stats.waited += 1
            self.stats.waited_steps.append(address.step)
            if task is not None and task.done():  # a failed prefetch: try once more, now
                task = None
        if task is None:
            task = asyncio.create_task(self._fetch(address))
        self._prefetch(address)
        return await task

    def _prefetch(self, address: Address) -> None:
        # Drop guesses the run has passed (or made for another shape). A share can span several
        # lanes (protocol v2: ``rank`` is the lane), asked one after the other for the same
        # step, so the other lanes' guesses of this step and later are kept; a lane this peer
        # no longer computes costs at most ``depth`` windows, dropped once the run passes them.
        for stale in [
            a for a in self._pending
            if a.step < address.step
            or (a.step == address.step and a.rank == address.rank)
            or a != replace(address, step=a.step, rank=a.rank)
        ]:  # fmt: skip
            self._pending.pop(stale).cancel()
        for ahead in range(address.step + 1, address.step + 1 + self.depth):
            nxt = replace(address, step=ahead)
            if nxt not in self._pending:
                task = asyncio.create_task(self._fetch(nxt))
                task.add_done_callback(_quiet)
                self._pending[nxt] = task

    async def close(self) -> None:
        for task in self._pending.values():
            task.cancel()
        for task in self._pending.values():
            with contextlib.suppress(BaseException):
                await task
        self._pending.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- one window -----------------------------------------------------------------------------

    async def _fetch(self, address: Address) -> Batch:
        texts = await self._window(address)
        self.stats.fetched += 1
        async with self._encoder_loading:
            if self._encoder is None:
                self._encoder = await asyncio.to_thread(default_encoder)
        return await asyncio.to_thread(_tokenize, self._encoder, texts, address)

    async def _window(self, a: Address) -> list[str]:
        chars = fineweb.window_chars(a.batch, a.seq_len)
        query = {
            "split": a.split, "revision": self.revision, "seed": str(a.seed),
            "step": str(a.step), "rank": str(a.rank), "max_chars": str(chars),
        }  # fmt: skip
        url = f"{self.server}/data"
        if self._session is None:
            try:
                self._session = serverlink.session(self.server, self.fingerprint)
            except serverlink.ServerLinkError as exc:
                raise DataUnavailable(exc.message, exc.hint) from None
        give_up = time.monotonic() + self.patience_s
        while True:
            try:
                status, retry_after, body = await self._get(url, query)
            except (aiohttp.ClientError, TimeoutError) as exc:
                refusal = serverlink.tls_refusal(exc, self.server)
                if refusal is not None:
                    raise DataUnavailable(*refusal) from None
                reason = "timed out" if isinstance(exc, TimeoutError) else f"{exc}"
                raise DataUnavailable(
                    f"cannot read training data from {url}: {reason or type(exc).__name__}",
                    "check that the DaisyChain server is running and reachable from this peer",
                ) from None
            if status == 200:
                return _checked(body, a, self.revision, chars, self.source)
            error, hint = _error_of(body, status)
            retry = status in (429, 503) and retry_after is not None
            if retry and retry_after is not None and time.monotonic() + retry_after <= give_up:
                log.info("/data answered %d (%s); retrying in %g s", status, error, retry_after)
                await asyncio.sleep(retry_after)
                continue
            raise DataUnavailable(f"the server could not give this peer its data: {error}", hint)

    async def _get(self, url: str, query: dict[str, str]) -> tuple[int, float | None, Any]:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with self._session.get(url, params=query, timeout=timeout) as response:
            retry = response.headers.get("Retry-After", "")
            retry_after = float(retry) if retry.isdigit() else None
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
            return response.status, retry_after, body


def _quiet(task: asyncio.Task[Batch]) -> None:
    """A prefetch's failure is raised when its step asks for it, not logged as unretrieved."""
    if not task.cancelled():
        task.exception()


def _error_of(body: Any, status: int) -> tuple[str, str]:
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        hint = body.get("hint")
        return body["error"][:300], hint if isinstance(hint, str) else "see docs/SERVER.md"
    return f"HTTP {status}", "check that the server runs the same DaisyChain version"


def _checked(
    body: Any, a: Address, revision: str, chars: int, source: str = "fineweb"
) -> list[str]:
    """The window's texts, if the answer is the window asked for; else ``DataUnavailable``."""
    expected = {
        "source": source, "revision": revision, "split": a.split, "seed": a.seed,
        "step": a.step, "rank": a.rank, "chars": chars,
    }  # fmt: skip
    ok = isinstance(body, dict) and all(body.get(k) == v for k, v in expected.items())
    texts = body.get("texts") if isinstance(body, dict) else None
    if not ok or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise DataUnavailable(
            "the server's /data answered something other than the window asked for",
            "check that the server runs the same DaisyChain version as this peer",
        )
    if sum(map(len, texts)) != chars:
        raise DataUnavailable(
            f"the server's window holds {sum(map(len, texts))} characters, not {chars}",
            "check that the server runs the same DaisyChain version as this peer",
        )
    return texts


def _tokenize(encoder: Encoder, texts: list[str], a: Address) -> Batch:
    from daisychain.tokenizer.fast import encode_prefix

    ids = encode_prefix(encoder, fineweb.join(texts), fineweb.tokens_needed(a.batch, a.seq_len))
    return fineweb.batch_from_ids(np.frombuffer(ids, dtype=np.uint32), a.batch, a.seq_len)
