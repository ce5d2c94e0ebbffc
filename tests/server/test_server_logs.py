"""What the server writes about people (docs/SERVER.md, "What the server keeps").

- A private room's code is planted in every place a client can put it (the page's URL, the
  Referer of the files that page loads, the WebSocket URL, a hello, a join request to the room,
  the QR endpoint's body) against the real server process, in both log formats: it is in no log
  line and not in ``/api/status``, while the room's keyed tag is (so the lines were written),
  the same in the membership lines and the access log.
- Client addresses are written as their network (127.0.0.0/24 here), in full only with
  ``--log-full-addresses``.
- Every line is bounded: a 4,000-digit value is cut saying its length; a fuzzer's 10,000-frame
  budget (reconnecting whenever it is closed) costs a bounded number of log bytes per message,
  printed; the room code it plants in its frames is in no line either.
- The pieces one by one, each fed a wrong input: ``logs.cut``, the formatters' bounds,
  ``KeyedThrottle`` (per key, least recently used forgotten first), ``redact`` (addresses,
  queries, Referers, room tags).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from daisychain.bench.rig import attacks, http_attacks
from daisychain.bench.rig.hostile import Attacker, server_process
from daisychain.server import aiohttplog, httpconn, logs, redact
from hostile_harness import record, run_hostile

CODE = "PlantedRoomCode7xQ"  # a valid room code (6-32 of A-Z a-z 0-9 - _)
TAG = re.compile(r"room-[0-9a-f]{10}")
HELLO = {"type": "hello", "version": 1, "name": "planter", "device": {}}


# ---- the real server, a planted room code ----------------------------------------


async def _plant(url: str) -> dict[str, object]:
    """Put CODE everywhere a client can; returns /api/status as the server answered it."""
    room_url = f"{url}/?room={CODE}"
    ws_url = url.replace("http://", "ws://") + "/ws"
    async with aiohttp.ClientSession() as session:
        async with session.get(room_url) as page:
            assert page.status == 200
        async with session.get(f"{url}/js/app.js", headers={"Referer": room_url}) as script:
            assert script.status == 200
        async with session.get(f"{url}/no-such-file", headers={"Referer": room_url}) as missing:
            assert missing.status == 404
        async with session.post(f"{url}/api/qr", json={"text": room_url}) as qr:
            assert qr.status == 200
        host = await session.ws_connect(f"{ws_url}?room={CODE}")
        await host.send_json(HELLO)
        welcome = json.loads((await host.receive(timeout=10)).data)
        assert welcome["type"] == "welcome" and welcome["role"] == "host", welcome
        guest = await session.ws_connect(ws_url)
        await guest.send_json({**HELLO, "room": CODE})
        pending = json.loads((await guest.receive(timeout=10)).data)
        assert pending["type"] == "pending", pending
        request = json.loads((await host.receive(timeout=10)).data)
        assert request["type"] == "join-request", request
        await host.send_json({"type": "approve", "peer": request["peer"]["id"]})
        admitted = json.loads((await guest.receive(timeout=10)).data)
        assert admitted["type"] == "welcome", admitted
        wrong = await session.ws_connect(f"{ws_url}?room={CODE}")
        await wrong.send_json({**HELLO, "room": CODE + "-other"})  # differs from the URL's
        refused = json.loads((await wrong.receive(timeout=10)).data)
        assert refused["type"] == "error" and refused["code"] == "bad-room-code", refused
        for ws in (wrong, guest, host):
            await ws.close()
        async with session.get(f"{url}/api/status") as status:
            body: dict[str, object] = await status.json()
    return body


async def _settled_log(server: object, needle: str, timeout_s: float = 10.0) -> str:
    """The server's log once ``needle`` appears in it (the last lines are written after the
    sockets close)."""
    text = ""
    for _ in range(int(timeout_s / 0.1)):
        text = server.log_text()  # type: ignore[attr-defined]
        if needle in text:
            break
        await asyncio.sleep(0.1)
    return text


@pytest.mark.parametrize("fmt", ["kv", "json"])
async def test_a_planted_room_code_is_in_no_log_line_and_not_in_status(
    tmp_path: Path, fmt: str
) -> None:
    async with server_process(tmp_path, ["--log-format", fmt]) as server:
        status = await _plant(server.url)
        log = await _settled_log(server, "closed")
    assert CODE not in json.dumps(status), status
    assert CODE not in log, [line for line in log.splitlines() if CODE in line]
    # not vacuous: the room's lines were written, under one tag
    room_lines = [line for line in log.splitlines() if "group room-" in line]
    assert any("created" in line for line in room_lines), log
    assert any("closed" in line for line in room_lines), log
    tags = set(TAG.findall(log))
    assert len(tags) == 1, tags  # the same room: the same tag in every line and the access log
    access = [line for line in log.splitlines() if "daisychain.server.access" in line]
    assert any(f"/?room={next(iter(tags))}" in line for line in access), access
    assert any("/js/app.js" in line and f"room={next(iter(tags))}" in line for line in access)
    if fmt == "json":
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        clients = {r["client"] for r in records if r["logger"] == "daisychain.server.access"}
        assert clients == {"127.0.0.0/24"}, clients
    else:
        assert "client=127.0.0.0/24" in log
        assert "client=127.0.0.1 " not in log


async def test_full_addresses_only_when_asked(tmp_path: Path) -> None:
    async with server_process(tmp_path, ["--log-full-addresses"]) as server:
        async with aiohttp.ClientSession() as session, session.get(server.url) as page:
            assert page.status == 200
        log = await _settled_log(server, "client=")
    assert "client=127.0.0.1 " in log


async def test_a_fuzzers_frames_cost_bounded_log_bytes_and_leak_no_code(tmp_path: Path) -> None:
    result = await run_hostile(
        attacks.fuzz_frames(max_messages=3000), tmp_path, name="fuzz-frames", attack_s=8.0
    )
    record(result, tmp_path)
    summary = result.summary()
    print(
        "fuzz-frames: log bytes per hostile message",
        summary["log_bytes_per_message"],
        "longest line",
        summary["log_longest_line"],
        "frames",
        result.attack.sent,
        "connections",
        result.attack.connections,
    )
    assert result.attack.sent >= 200, result.attack.summary()
    room = str(result.attack.notes["room_code"])
    assert room not in result.log_text
    assert result.log_tracebacks == 0
    assert summary["log_longest_line"] <= 1200, summary
    # every frame is refused (and struck); the log holds a few lines per client network a
    # minute, not one per frame
    assert summary["log_bytes_per_message"] <= 60, summary


# ---- the pieces, each fed a wrong input ----------------------------------------


def test_cut_keeps_what_fits_and_says_how_much_it_left_out() -> None:
    assert logs.cut("abc", 3) == "abc"
    assert logs.cut("abcd", 3) == "abc...(+1 chars)"
    assert logs.cut("9" * 4000, 10) == "9" * 10 + "...(+3990 chars)"


def _record(msg: str, fields: dict[str, object], exc: bool = False) -> logging.LogRecord:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, msg, (), None)
    record.fields = fields
    if exc:
        try:
            raise ValueError("x" * 20_000)
        except ValueError:
            import sys

            record.exc_info = sys.exc_info()
    return record


@pytest.mark.parametrize("formatter", [logs.KeyValueFormatter(), logs.JsonFormatter()])
def test_every_line_is_bounded_whatever_it_is_given(formatter: logging.Formatter) -> None:
    huge = "9" * 4000
    fields: dict[str, object] = {f"k{i}": huge for i in range(40)}
    fields["n"] = 12
    fields["big"] = 10**4000
    line = formatter.format(_record(f"refused {huge}", fields, exc=True))
    bound = (
        logs.MAX_MESSAGE_CHARS
        + logs.MAX_FIELDS * (logs.MAX_FIELD_CHARS + 80)
        + logs.MAX_TRACEBACK_CHARS
        + 400
    )
    assert len(line) <= bound, len(line)
    assert f"(+{4008 - logs.MAX_MESSAGE_CHARS} chars)" in line  # says how long it was
    assert "fields_left_out" in line
    small = formatter.format(_record("ok", {"n": 12, "flag": True}))
    assert "12" in small and "true" in small.lower()


def test_keyed_throttle_limits_each_key_and_forgets_the_oldest() -> None:
    now = [0.0]
    keyed = logs.KeyedThrottle(burst=2, every_s=10.0, max_keys=3, clock=lambda: now[0])
    a = keyed.get("a")
    assert [a.allow(), a.allow(), a.allow(), a.allow()] == [0, 0, None, None]
    assert keyed.get("a") is a and a.suppressed == 2
    assert keyed.get("b").allow() == 0  # another key has its own burst
    assert keyed.get("b").allow() == 0  # (spent, so b is not idle when a refills)
    now[0] = 10.0
    assert a.allow() == 2  # one line a period again, saying what was held back
    keyed.get("c")
    keyed.get("a")  # a is now the most recently used
    keyed.get("d")  # over max_keys: b (least recently used) is forgotten
    assert len(keyed) == 3
    assert keyed.get("a") is a
    assert keyed.get("b").suppressed == 0 and len(keyed) <= 3  # b came back fresh


def test_keyed_throttle_forgets_a_key_once_it_is_idle() -> None:
    now = [0.0]
    keyed = logs.KeyedThrottle(burst=1, every_s=10.0, clock=lambda: now[0])
    assert keyed.get("net-a").allow() == 0
    assert keyed.get("net-a").allow() is None  # held back: a count to report, kept
    keyed.get("net-b").allow()
    now[0] = 30.0
    keyed.get("net-c")
    assert len(keyed) == 3  # net-a still holds a count; net-b behind it waits
    assert keyed.get("net-a").allow() == 1  # the count is reported
    keyed.get("net-c")
    assert len(keyed) == 2  # net-b (idle, oldest) forgotten; net-a just used


def test_throttle_log_passes_fields_and_counts_what_it_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    throttle = logs.Throttle(burst=1, every_s=5.0, clock=lambda: now[0])
    logger = logging.getLogger("daisychain.test.throttle")
    with caplog.at_level(logging.INFO, logger="daisychain.test.throttle"):
        for _ in range(4):
            throttle.log(logger, logging.INFO, "refused %s", "x", fields={"client": "net"})
        now[0] = 5.0
        throttle.log(logger, logging.INFO, "refused %s", "y", fields={"client": "net"})
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["refused x", "refused y (3 similar lines suppressed)"]
    assert all(getattr(r, "fields", None) == {"client": "net"} for r in caplog.records)


@pytest.mark.parametrize(
    ("given", "full", "shown"),
    [
        ("203.0.113.77", False, "203.0.113.0/24"),
        ("203.0.113.77", True, "203.0.113.77"),
        ("2001:db8:1:2:3:4:5:6", False, "2001:db8:1::/48"),
        ("2001:db8:1:2:3:4:5:6", True, "2001:db8:1:2:3:4:5:6"),
        ("::ffff:198.51.100.9", False, "198.51.100.0/24"),
        ("[2001:db8::1]:4711", False, "2001:db8::/48"),
        ("198.51.100.9:5555", False, "198.51.100.0/24"),
        ("not-an-address", False, "unknown"),
        ("", False, "unknown"),
        (None, True, "unknown"),
    ],
)
def test_addresses_are_written_as_their_network(given: str | None, full: bool, shown: str) -> None:
    assert redact.address(given, full=full) == shown


def test_a_query_keeps_numbers_tags_the_room_and_hides_text() -> None:
    pairs = [
        ("format", "tokens"),
        ("max_tokens", "1024"),
        ("seed", "-3"),
        ("room", CODE),
        ("name", "Alice's phone"),
        ("bad key!", "v"),
    ]
    shown = redact.query(pairs)
    assert CODE not in shown and "Alice" not in shown and "bad key" not in shown
    assert shown == (
        f"format=~6&max_tokens=1024&seed=-3&room={redact.room_tag(CODE)}&name=~13&~8=~1"
    )
    many = redact.query([(f"k{i}", "1") for i in range(100)])
    assert many.endswith("&...") and many.count("&") == redact.MAX_QUERY_FIELDS


def test_a_referer_keeps_its_path_and_a_reduced_query() -> None:
    assert redact.referer(None) == "-"
    assert redact.referer(f"https://example.org/?room={CODE}") == f"/?room={redact.room_tag(CODE)}"
    assert redact.referer("http://[::1") == "~11"  # not a URL: its length only
    long_path = "https://example.org/" + "p" * 500
    assert len(redact.referer(long_path)) < 260


def test_room_tags_are_stable_distinct_and_not_the_code() -> None:
    a, b = redact.room_tag(CODE), redact.room_tag(CODE + "x")
    assert a == redact.room_tag(CODE) and a != b
    assert TAG.fullmatch(a) and CODE.lower() not in a.lower()


# ---- issue 47: what a client can make the server write -------------------------------------

# Per client network and kind of line: a burst of 5, then one a minute (logs.KeyedThrottle); the
# door's refusals: 10, then one per 10 s for every network together. Over a run of seconds that
# is a few dozen lines of at most ~400 bytes, whatever the attacker's pace.
LOG_BYTES_PER_RUN = 16_000


@pytest.mark.parametrize(
    ("name", "attacker", "floor"),
    [
        # before: a "suppressed" line per socket (~300/s) and no hello token spent
        ("bad-hello-loop", lambda: http_attacks.bad_hello_loop(max_connections=3000), 200),
        # before: one line per request, quoting the request line with its room code
        ("malformed-http", lambda: http_attacks.malformed_http(max_requests=3000), 1000),
        # before: aiohttp's "<full address>: Client protocols [...]" per upgrade
        (
            "subprotocol-upgrades",
            lambda: http_attacks.subprotocol_upgrades(max_connections=3000),
            200,
        ),
    ],
)
async def test_a_hostile_loop_costs_a_bounded_log_and_leaks_no_code(
    tmp_path: Path, name: str, attacker: Callable[[], Attacker], floor: int
) -> None:
    result = await run_hostile(attacker(), tmp_path, name=name, attack_s=6.0)
    summary = record(result, tmp_path)
    print(
        f"{name}: log bytes per hostile message {summary['log_bytes_per_message']}, "
        f"per minute per network {summary['log_bytes_per_minute_per_network']}, "
        f"connections {result.attack.connections}"
    )
    assert result.attack.connections >= floor, result.attack.summary()
    assert result.log_bytes <= LOG_BYTES_PER_RUN, result.log_text[-3000:]
    assert result.log_tracebacks == 0
    log = result.log_text
    assert http_attacks.PLANTED_ROOM not in log, [
        line for line in log.splitlines() if http_attacks.PLANTED_ROOM in line
    ]
    assert "127.0.0.1" not in log.replace("127.0.0.1:", ""), "addresses are written as networks"
    if name == "malformed-http":
        # not vacuous: the refusals were written, as networks, without the client's bytes
        assert "refused a malformed HTTP request: BadStatusLine" in log, log[-2000:]
        assert "client=127.0.0.0/24" in log
    if name == "subprotocol-upgrades":
        assert "Client protocols <list 3 items>" in log, log[-2000:]
    if name == "bad-hello-loop":
        # invalid hellos spend the network's hellos: the loop meets the 429 at the door
        assert result.attack.closes["http-429"] > 0, result.attack.summary()


def test_parser_reasons_keep_the_words_and_leave_the_bytes_out() -> None:
    from aiohttp.http_exceptions import BadHttpMessage, BadStatusLine, LineTooLong

    line = f"GET /?room={CODE} HTTP/9.x"
    cases = {
        BadStatusLine(line): "BadStatusLine: Bad status line",
        BadHttpMessage(f"Invalid header value char:\n\n  b'Referer: /?room={CODE}\\x7f'\n  ^"): (
            "BadHttpMessage: Invalid header value char"
        ),
        LineTooLong(f"/?room={CODE}" + "a" * 9000, "8190"): "LineTooLong: Got more than 8190 bytes",
    }
    for exc, reason in cases.items():
        shown = httpconn.parser_reason(exc)
        assert CODE not in shown, shown
        assert shown.startswith(reason), (shown, reason)


def test_aiohttp_lines_are_reduced_masked_and_throttled(caplog: pytest.LogCaptureFixture) -> None:
    gate = aiohttplog.AiohttpLines()
    logger = logging.getLogger("daisychain.test.aiohttp")
    logger.addFilter(gate)
    try:
        with caplog.at_level(logging.INFO, logger="daisychain.test.aiohttp"):
            for _ in range(20):
                logger.warning(
                    "%s: Client protocols %r don't overlap server-known ones %r",
                    "203.0.113.77", ["a", CODE], (),
                )  # fmt: skip
            logger.error("Error handling request from %s", "2001:db8:1:2::9")
    finally:
        logger.removeFilter(gate)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == (
        "203.0.113.0/24: Client protocols <list 2 items> don't overlap server-known ones "
        "<tuple 0 items>"
    )
    assert len(messages) == 5 + 1, messages  # the burst, then the other network's line
    assert messages[-1] == "Error handling request from 2001:db8:1::/48"
    assert not any(CODE in m or "203.0.113.77" in m for m in messages)


def test_held_lines_are_reported_once_for_all_networks(caplog: pytest.LogCaptureFixture) -> None:
    keyed = logs.KeyedThrottle(burst=1, every_s=60.0, what="test lines")
    for network in ("198.51.100.1", "198.51.100.2"):
        for _ in range(4):
            keyed.get(network).allow()
    logger = logging.getLogger("daisychain.test.held")
    with caplog.at_level(logging.INFO, logger="daisychain.test.held"):
        logs.report_held(logger)
        logs.report_held(logger)  # nothing new: no second line
    mine = [r.getMessage() for r in caplog.records if "(test lines)" in r.getMessage()]
    assert mine == ["6 log lines held back (test lines) from 2 client networks"]
    assert "198.51.100" not in caplog.text
