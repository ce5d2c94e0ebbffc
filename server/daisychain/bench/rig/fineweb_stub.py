"""A stand-in for the Hugging Face Hub: parquet shards served like the CDN, and the part of the
Hub's API that ``huggingface_hub`` asks about a dataset.

``write_fineweb_shard`` writes shards with the FineWeb-Edu schema and row groups of a chosen size;
``UpstreamStub`` serves them under the Hugging Face resolve URL shape from an aiohttp app
(``web.FileResponse`` answers Range with 206, like the CDN), and can misbehave on request
(``StubMode``: redirects, whole-file answers, slowness, errors, truncated or garbled bodies).
For ``huggingface_hub`` (``server/hubdataset.py``) it also answers a dataset's info at a
revision (``GET /api/datasets/REPO/revision/REV``: its commit and files with their sizes), in
the Hub's shape, with the Hub's error codes (``X-Error-Code``: ``RepoNotFound``,
``RevisionNotFound``), and, with ``token`` set, acts as a private dataset: every request
without ``Authorization: Bearer TOKEN`` is a 401 ``RepoNotFound``, as the Hub answers.
``bench data`` measures ``/data`` against it; the data tests use it as their upstream. The
real Hub's answers are richer; this serves the fields the library reads (checked by the tests
that use the library against it).
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were their one all we can her has there been if more when will would "
    "who so no she other its may these about into than them only could time some new first two "
    "energy water cell plant history school student learning teacher science system example"
)
WORDS = tuple(_WORD_TEXT.split())

StubMode = Literal["ok", "redirect", "full", "slow", "error", "truncated", "short", "garbage"]


def fineweb_table(rows: int, chars_per_row: int, seed: int) -> Any:
    """A pyarrow table with FineWeb-Edu's columns and types, filled with seeded word salad."""
    rng = random.Random(seed)
    texts = []
    for i in range(rows):
        words: list[str] = []
        size = 0
        target = rng.randint(chars_per_row // 2, chars_per_row * 3 // 2)
        while size < target:
            word = rng.choice(WORDS)
            words.append(word)
            size += len(word) + 1
        texts.append(f"[{seed}:{i}] " + " ".join(words))
    return fineweb_table_of(texts, seed)


def fineweb_table_of(texts: list[str], seed: int = 0) -> Any:
    """A pyarrow table with FineWeb-Edu's columns and types holding ``texts``."""
    import pyarrow as pa

    rows = len(texts)
    return pa.table(
        {
            "text": pa.array(texts, pa.string()),
            "id": pa.array([f"<urn:uuid:{seed}-{i}>" for i in range(rows)], pa.string()),
            "dump": pa.array(["CC-MAIN-2024-10"] * rows, pa.string()),
            "url": pa.array([f"https://example.org/{seed}/{i}" for i in range(rows)], pa.string()),
            "file_path": pa.array([f"s3://bench/{seed}.warc.gz"] * rows, pa.string()),
            "language": pa.array(["en"] * rows, pa.string()),
            "language_score": pa.array([0.9] * rows, pa.float64()),
            "token_count": pa.array([len(t) // 4 for t in texts], pa.int64()),
            "score": pa.array([3.1] * rows, pa.float64()),
            "int_score": pa.array([3] * rows, pa.int64()),
        }
    )


def write_fineweb_shard(
    path: Path, *, row_groups: int, rows_per_group: int, chars_per_row: int, seed: int
) -> Path:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = fineweb_table(row_groups * rows_per_group, chars_per_row, seed)
    pq.write_table(table, path, row_group_size=rows_per_group, compression="snappy")
    return path


@dataclass
class UpstreamStub:
    """An aiohttp app that serves ``root`` like the Hugging Face resolve endpoint.

    ``mode`` picks the behaviour (``ok``; ``redirect``: 302 to a /cdn/ URL like the real
    resolver; ``full``: ignore Range and answer 200; ``slow``: answer after ``delay_s``;
    ``error``: 500; the faults below apply to ranges that are not the footer probe's suffix
    ``bytes=-N``, so a shard's footer still loads and the fault hits a row group:
    ``truncated``: a 206 whose body stops halfway through its Content-Length, then the
    connection closes; ``short``: a consistent 206 with a few bytes fewer than asked for (the
    wrong length); ``garbage``: a 206 of the right length holding random bytes). Every request
    is appended to ``log`` as (method, path, Range header).
    """

    root: Path
    mode: StubMode = "ok"
    delay_s: float = 5.0
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    base_url: str = ""  # set by whoever serves the app, for the data source to point at
    # The Hub API's view: the one dataset served (None: any id), its commit, the branches and
    # tags naming it, and the token a private dataset asks for (None: public).
    repo: str | None = None
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/datasets/{repo:[^/]+/[^/]+}/resolve/{rev}/{path:.*}", self._resolve)
        app.router.add_get("/cdn/{path:.*}", self._cdn)
        app.router.add_get("/api/datasets/{repo:[^/]+/[^/]+}/revision/{rev}", self._info)
        app.router.add_get("/api/datasets/{repo:[^/]+/[^/]+}", self._info)  # the default branch
        return app

    def _refused(self, request: web.Request, repo: str) -> web.Response | None:
        """The Hub's answer for a dataset this request cannot see, or None."""
        if (self.repo is not None and repo != self.repo) or (
            self.token is not None
            and request.headers.get("Authorization") != f"Bearer {self.token}"
        ):
            status = 401 if self.token is not None else 404
            return web.json_response(
                {"error": "Repository not found"}, status=status,
                headers={"X-Error-Code": "RepoNotFound"},
            )  # fmt: skip
        return None

    async def _info(self, request: web.Request) -> web.StreamResponse:
        self.log.append((request.method, request.path, None))
        repo, rev = request.match_info["repo"], request.match_info.get("rev", "main")
        refused = self._refused(request, repo)
        if refused is not None:
            return refused
        refs = {"main": self.commit} | self.refs
        commit = refs.get(rev, rev if rev in refs.values() else None)
        if commit is None:
            return web.json_response(
                {"error": f"Invalid rev id: {rev}"}, status=404,
                headers={"X-Error-Code": "RevisionNotFound"},
            )  # fmt: skip
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        siblings = [
            {"rfilename": p.relative_to(self.root).as_posix(), "size": p.stat().st_size}
            for p in files
        ]
        return web.json_response(
            {"id": repo, "sha": commit, "private": self.token is not None, "siblings": siblings}
        )

    def range_gets(self) -> int:
        return sum(1 for _m, _p, byte_range in self.log if byte_range is not None)

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        self.log.append((request.method, request.path, request.headers.get("Range")))
        refused = self._refused(request, request.match_info["repo"])
        if refused is not None:
            return refused
        if self.mode == "redirect":
            raise web.HTTPFound(f"/cdn/{request.match_info['path']}?signed=1")
        return await self._serve(request)

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        self.log.append((request.method, request.path, request.headers.get("Range")))
        return await self._serve(request)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = (self.root / request.match_info["path"]).resolve()
        if not path.is_relative_to(self.root.resolve()) or not path.is_file():
            raise web.HTTPNotFound()
        if self.mode == "error":
            raise web.HTTPInternalServerError()
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        if self.mode == "full":
            return web.Response(body=path.read_bytes(), content_type="application/octet-stream")
        byte_range = request.headers.get("Range", "")
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range)
        if self.mode in ("truncated", "short", "garbage") and match is not None:
            start, end = int(match.group(1)), int(match.group(2))
            data = path.read_bytes()[start : end + 1]
            size = path.stat().st_size
            if self.mode == "garbage":
                data = random.Random(start).randbytes(len(data))
            if self.mode == "short":
                data, end = data[:-7], end - 7
            headers = {"Content-Range": f"bytes {start}-{end}/{size}"}
            if self.mode != "truncated":
                return web.Response(status=206, body=data, headers=headers)
            response = web.StreamResponse(status=206, headers=headers)
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
            assert request.transport is not None
            request.transport.close()  # the rest never comes
            return response
        return web.FileResponse(path)
