"""``POST /api/qr``: the code drawn is segno's, every bad body is a 400/413 with a hint and no
traceback, drawing happens in a worker process (never on the event loop), and a burst is
refused early (429 with ``Retry-After``) instead of queueing.

The burst's cost to ``/healthz`` under 20 client networks is measured by ``daisychain bench
signaling --attacks qr-burst`` (no timing is asserted here)."""

from __future__ import annotations

import asyncio
import io
import logging
import os

import pytest
import segno

from daisychain.server import qr
from daisychain.server.qr import MAX_QR_BYTES, QR_AT_ONCE, QR_BURST, QR_WAITING, BadBody
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.server.workpool import WorkerPool
from server_fixtures import serve

# The heaviest text the bound accepts: 128 four-byte characters are 512 bytes.
HEAVIEST = "\U0001f600" * (MAX_QR_BYTES // 4)


def _svg(text: str) -> bytes:
    expected = io.BytesIO()
    segno.make(text, error="m", micro=False).save(
        expected, kind="svg", scale=4, border=4, dark="#111", light="#fff", xmldecl=False,
        title="QR code of the address to open", nl=False,
    )  # fmt: skip
    return expected.getvalue()


async def test_qr_draws_the_text_it_was_given() -> None:
    text = "https://192.168.1.5:8787/?room=abcdefghijklmnop"
    async with serve() as client:
        response = await client.post("/api/qr", json={"text": text})
        assert response.status == 200
        assert response.content_type == "image/svg+xml"
        svg = await response.read()
    assert svg == _svg(text)
    assert b"<svg" in svg and b"<script" not in svg


async def test_the_heaviest_accepted_text_is_drawn_and_one_byte_more_is_refused() -> None:
    async with serve() as client:
        drawn = await client.post("/api/qr", json={"text": HEAVIEST})
        assert drawn.status == 200
        assert await drawn.read() == _svg(HEAVIEST)
        over = await client.post("/api/qr", json={"text": HEAVIEST + "a"})
        assert over.status == 400
        answer = await over.json()
    assert answer["error"] == f"text is {MAX_QR_BYTES + 1} bytes long in UTF-8"
    assert str(MAX_QR_BYTES) in answer["hint"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"not json", 400, "not JSON"),
        (b'{"text": 5}', 400, 'no "text" string'),
        (b'{"text": ""}', 400, 'no "text" string'),
        (b"[1]", 400, 'no "text" string'),
        (('{"text": "' + "x" * (MAX_QR_BYTES + 1) + '"}').encode(), 400, "bytes long"),
        # 509 emoji fit a 512-character bound and cost 190 ms each: the bound is on bytes
        (('{"text": "' + "\U0001f600" * 509 + '"}').encode(), 400, "bytes long"),
        (b'{"text": "' + b"x" * 5000 + b'"}', 413, "too large"),
        # a lone surrogate: JSON lets it be written, UTF-8 has no form for it (was a 500)
        (b'{"text": "\\ud800"}', 400, "lone surrogate"),
        (b'{"text": "https://h/\\udfff"}', 400, "lone surrogate"),
        # nesting past the interpreter's recursion limit (was a 500 and a traceback)
        (b"[" * 1000 + b"]" * 1000, 400, "nested too deeply"),
        (b'{"a":' + b"[" * 1000 + b"]" * 1000 + b',"text":"x"}', 400, "nested too deeply"),
        (b'{"text": "x", "n": NaN}', 400, "NaN"),
        (b'{"text": "\xff\xfe"}', 400, "not UTF-8"),
    ],
)
async def test_qr_refuses_bad_bodies_with_a_hint_and_no_traceback(
    body: bytes, status: int, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve() as client:
        response = await client.post(
            "/api/qr", data=body, headers={"Content-Type": "application/json"}
        )
        assert response.status == status
        answer = await response.json()
    assert says in answer["error"]
    assert answer["hint"]
    assert not [r for r in caplog.records if r.exc_info], "a refusal logs no traceback"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    assert qr.parse_text(b'{"text": "https://h/\\ud83d\\ude00"}') == "https://h/\U0001f600"
    with pytest.raises(BadBody, match="lone surrogate"):
        qr.parse_text(b'{"text": "\\ude00\\ud83d"}')  # the pair in the wrong order


async def test_qr_is_rate_limited_per_network(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stopped clock: codes drawn slowly on a busy machine must not refill the bucket.
    monkeypatch.setattr(
        qr, "KeyedLimiter", lambda rate, burst: KeyedLimiter(rate, burst, clock=lambda: 0.0)
    )
    async with serve() as client:
        codes = [
            (await client.post("/api/qr", json={"text": f"https://h/{i}"})).status
            for i in range(QR_BURST + 1)
        ]
        refused = await client.post("/api/qr", json={"text": "https://h/"})
        assert refused.headers["Retry-After"].isdigit()
    assert codes[:QR_BURST] == [200] * QR_BURST
    assert codes[QR_BURST] == 429


async def test_codes_are_drawn_in_a_worker_process_not_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job runs in another process: the worker's pid is not ours. A planted endpoint that
    draws inline (the old code) fails here."""
    seen: list[int] = []
    real = WorkerPool.run

    async def spy(self: WorkerPool, job: object, *args: object) -> object:
        seen.append(await real(self, os.getpid))
        return await real(self, job, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(WorkerPool, "run", spy)
    async with serve() as client:
        response = await client.post("/api/qr", json={"text": "https://h/"})
        assert response.status == 200
    assert seen and seen[0] != os.getpid()


async def test_a_burst_past_the_line_is_refused_at_once_with_retry_after() -> None:
    """More requests at once than QR_AT_ONCE + QR_WAITING: the rest are 429s with Retry-After,
    answered without waiting for the codes in line (the worker is held by a slow job)."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(self: WorkerPool, job: object, *args: object) -> bytes:
        started.set()
        await release.wait()
        return b"<svg/>"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WorkerPool, "run", slow)
        async with serve() as client:
            held = [
                asyncio.create_task(client.post("/api/qr", json={"text": f"https://h/{i}"}))
                for i in range(QR_AT_ONCE + QR_WAITING)
            ]
            await asyncio.wait_for(started.wait(), 5)
            await asyncio.sleep(0.05)  # the others reach the line
            refused = await asyncio.wait_for(
                client.post("/api/qr", json={"text": "https://h/late"}), 5
            )
            assert refused.status == 429
            assert int(refused.headers["Retry-After"]) >= 1
            assert "QR codes already" in (await refused.json())["error"]
            release.set()
            answers = await asyncio.gather(*held)
            assert [a.status for a in answers] == [200] * len(held)
