"""What a room's host is shown of a device (issue 47): ``hello.name`` and ``hello.device`` checked
by kind (``wire.deviceinfo``) in the server's parser and in the Python peer's parser of what the
server relays, against the shared cases of tests/vectors/signaling/device.json (the page's
parser replays them in tests/js/signaling_device.test.mjs); and through a real server on
loopback, a hostile backend refused before the host hears of the device, and a name that shows
nothing reaching the host as ``device-XXXX``."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any, get_args

import pytest

import signaling_vectors
from daisychain.cpu import int8 as cpuint8
from daisychain.cpu import madd as cpumadd
from daisychain.gpu.backend import GPU_ORDER, NumpyGemm
from daisychain.gpu.gemm import GemmKind, GpuGemm
from daisychain.p2p import signaling as p2p
from daisychain.p2p.options import Compute
from daisychain.wire import deviceinfo
from daisychain.wire.signaling import ProtocolError, parse_client
from server_fixtures import connect, join, serve

DOC: dict[str, Any] = json.loads(signaling_vectors.FILE.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = DOC["cases"]
ROOM = "room-abc123"
VERDICT = "webgpu · verified: your own device, approved before — click Approve\u202e"


def hello(name: Any, device: Any) -> str:
    return json.dumps({"type": "hello", "version": 1, "name": name, "device": device})


def test_the_vectors_file_is_up_to_date() -> None:
    text = signaling_vectors.render(signaling_vectors.build())
    stale = (
        "tests/vectors/signaling/device.json is stale: python tests/signaling_vectors.py --write"
    )
    assert signaling_vectors.FILE.read_text(encoding="utf-8") == text, stale
    assert signaling_vectors.main(["--check"]) == 0


def test_the_generator_fails_when_a_case_and_the_rules_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = [("a verdict said to pass", "Ada", {"backend": VERDICT}, None)]
    monkeypatch.setattr(signaling_vectors, "CASES", wrong)
    with pytest.raises(AssertionError, match=r"refused on device\.backend, the case says None"):
        signaling_vectors.build()


def test_the_cases_cover_every_refused_field_and_names_that_show_nothing() -> None:
    fields = {c["refused"]["field"] for c in CASES if "refused" in c}
    assert fields == {
        "name",
        "device",
        "device.backend",
        "device.tokens_per_s",
        "device.kind",
        "device.audit_key",
    }
    assert sum(c.get("accepted", {}).get("name") == "" for c in CASES) >= 10
    assert all(c["refused"]["code"] == "bad-message" for c in CASES if "refused" in c)


@pytest.mark.parametrize("case", CASES, ids=[c["what"] for c in CASES])
def test_the_server_parses_each_hello_as_the_vectors_say(case: dict[str, Any]) -> None:
    raw = hello(case["name"], case["device"])
    if "refused" in case:
        with pytest.raises(ProtocolError) as info:
            parse_client(raw, max_broadcast_bytes=4096)
        refused = case["refused"]
        assert info.value.code == refused["code"]
        assert info.value.message == f"hello.{refused['field']} must be {refused['expected']}"
        assert info.value.hint and info.value.ref == "hello"
        return
    message = parse_client(raw, max_broadcast_bytes=4096)
    assert message.type == "hello"
    assert message.name == case["accepted"]["name"]
    assert message.device == case["accepted"]["device"]


SITES = {
    "join-request.peer": lambda peer: {"type": "join-request", "peer": peer, "expires_in_s": 120},
    "peer-joined.peer": lambda peer: {"type": "peer-joined", "peer": peer},
    "welcome.members[]": lambda peer: {
        "type": "welcome", "version": 1, "id": "me", "group": {"kind": "room", "id": ROOM},
        "role": "host", "host": "me", "members": [peer],
    },
}  # fmt: skip


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("case", CASES, ids=[c["what"] for c in CASES])
def test_the_python_peer_parses_each_relayed_peer_as_the_vectors_say(
    case: dict[str, Any], site: str
) -> None:
    peer = {"id": DOC["peer_id"], "name": case["name"], "device": case["device"]}
    raw = json.dumps(SITES[site](peer))
    if "refused" in case:
        refused = case["refused"]
        with pytest.raises(p2p.SignalingError) as info:
            p2p.parse_server(raw)
        expected = f"server message {site}.{refused['field']} must be {refused['expected']}"
        assert info.value.message == expected
        assert info.value.hint
        return
    message: Any = p2p.parse_server(raw)
    shown = message.members[0] if site.startswith("welcome") else message.peer
    assert shown.id == DOC["peer_id"]
    assert shown.name == case["accepted"]["shown"]
    assert shown.device == case["accepted"]["device"]


def test_every_backend_the_python_peer_can_send_is_known() -> None:
    """peer/main.py says hello with ``Compute.name`` of its backend: the reference, the CPU
    int8 GEMM, the 16-bit multiply-add GEMM, or a GPU kernel (each kind of GPU_ORDER, named by
    GpuGemm.name)."""
    name_of_kind = GpuGemm.name.fget  # type: ignore[attr-defined]
    gpu = [name_of_kind(SimpleNamespace(kind=kind)) for kind in get_args(GemmKind)]
    assert set(GPU_ORDER) == set(get_args(GemmKind))
    cpu = {cpuint8.NAME, cpuint8.CpuInt8Gemm.name, cpumadd.NAME, cpumadd.MaddGemm.name}
    produced = {Compute().name, NumpyGemm.name, *cpu, *gpu}
    assert produced <= set(deviceinfo.BACKENDS), produced - set(deviceinfo.BACKENDS)
    assert DOC["backends"] == list(deviceinfo.BACKENDS)


def test_the_white_space_stripped_is_exactly_what_str_strip_removes() -> None:
    every = {chr(c) for c in range(sys.maxunicode + 1)}
    assert set(deviceinfo.SPACE) == {c for c in every if c.isspace()}
    assert DOC["space"] == deviceinfo.SPACE


def test_inside_a_visible_name_a_character_is_refused_exactly_when_not_printable() -> None:
    """Every code point, between two letters: ``check_name`` keeps the name when
    ``str.isprintable`` holds for the character and refuses it otherwise (control, format
    -- bidi -- and separator characters, unassigned ones, lone surrogates)."""
    wrong = []
    for code in range(sys.maxunicode + 1):
        c = chr(code)
        try:
            kept = deviceinfo.check_name(f"a{c}b") == f"a{c}b"
        except deviceinfo.DeviceInfoError:
            kept = False
        if kept != c.isprintable():
            wrong.append(f"U+{code:04X}")
    assert not wrong, wrong[:20]


@pytest.mark.parametrize("blank", [*deviceinfo.BLANKS, "\u034f", "\u0301", "\u20dd", "\ufe0f"])
def test_blank_letters_and_marks_alone_are_no_name_but_count_beside_a_letter(blank: str) -> None:
    assert deviceinfo.check_name(blank * 3) == ""
    assert deviceinfo.shown_name(deviceinfo.check_name(blank), "AbCdEf") == "device-AbCd"
    if blank.isprintable():
        assert deviceinfo.check_name(f"A{blank}") == f"A{blank}"


# -- through the real server on loopback ----------------------------------------------------


async def test_a_hostile_backend_is_refused_and_the_host_never_hears_of_it() -> None:
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        stranger = await connect(client, room=ROOM)
        for device in ({"backend": VERDICT}, {"backend": "numpy\n"}, {"tokens_per_s": 1e300}):
            await stranger.ws.send_str(hello("stranger", {"kind": "browser", **device}))
            error = await stranger.expect_error("bad-message")
            assert error["message"].startswith("hello.device."), error
            assert error["ref"] == "hello"
        await stranger.barrier()  # still connected, still not pending: nothing else came
        await host.barrier()  # and the host was asked nothing
        # The same socket, with a backend a peer really sends, is asked about as usual.
        await stranger.ws.send_str(hello("stranger", {"kind": "browser", "backend": "js-cpu"}))
        pending = await stranger.expect("pending")
        request = await host.expect("join-request")
        device = {"kind": "browser", "backend": "js-cpu"}
        assert request["peer"] == {"id": pending["id"], "name": "stranger", "device": device}


async def test_a_name_that_shows_nothing_reaches_the_host_as_device_xxxx() -> None:
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        for blank in ("\u3164", "\u2800\u034f", "\u200b"):
            requester = await connect(client, room=ROOM)
            await requester.ws.send_str(hello(blank, {"kind": "browser", "backend": "js-cpu"}))
            pending = await requester.expect("pending")
            request = await host.expect("join-request")
            assert request["peer"]["name"] == f"device-{pending['id'][:4]}"
            assert request["peer"]["name"] == deviceinfo.fallback_name(pending["id"])
            # What the host's own parser makes of it: the same name.
            parsed: Any = p2p.parse_server(json.dumps(request))
            assert parsed.peer.name == request["peer"]["name"]
            await requester.close()
            closed = await host.expect("join-request-closed")
            assert closed["reason"] == "left"


async def test_a_name_with_a_bidi_override_is_refused_before_the_host_hears_of_it() -> None:
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        stranger = await connect(client, room=ROOM)
        await stranger.ws.send_str(hello("Ada\u202e (approved)", {"kind": "browser"}))
        error = await stranger.expect_error("bad-message")
        assert error["message"].startswith("hello.name must be"), error
        await host.barrier()
