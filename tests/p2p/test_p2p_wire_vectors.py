"""The data-channel wire vectors (tests/vectors/p2p_wire/) are what the Python implementation
answers now: regenerated and compared, and replayed case by case through ``wire.frames`` and
``wire.messages``. The JavaScript mirror checks the same files (tests/js/p2p_*.test.mjs), so a
change to a frame or message rule that is not carried to static/js/p2p/ fails one side.

Compressed bodies are zlib's output and may differ between zlib builds: with another zlib than
the one recorded in frames.json, the cases marked ``"zlib": true`` are replayed, not compared.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind
from vectorgen import main as vectors_main
from vectorgen import wire as vectors
from vectorgen.files import SOURCE_DIR

STORED = {name: SOURCE_DIR / vectors.SUBDIR / name for name in ("frames.json", "messages.json")}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(STORED[name].read_text(encoding="utf-8"))
    return data


def without_zlib_cases(frames_file: dict[str, Any]) -> dict[str, Any]:
    out = dict(frames_file)
    for section in ("fragment", "reassembly", "inflate"):
        out[section] = [c for c in frames_file[section] if not c["zlib"]]
    out.pop("blobs")
    out.pop("zlib_version")
    return out


def test_stored_vectors_equal_a_fresh_build() -> None:
    built = vectors.build()
    assert set(built) == set(STORED)
    assert STORED["messages.json"].read_text(encoding="utf-8") == built["messages.json"], (
        "messages.json is stale: run `python tests/vectorgen --write wire` and carry "
        "the change to static/js/p2p/messages.js"
    )
    stored = load("frames.json")
    if stored["zlib_version"] == zlib.ZLIB_VERSION:
        assert STORED["frames.json"].read_text(encoding="utf-8") == built["frames.json"]
    else:  # another zlib: compare everything zlib did not write (the rest is replayed below)
        fresh = json.loads(built["frames.json"])
        assert without_zlib_cases(stored) == without_zlib_cases(fresh)


def blob(stored: dict[str, Any], name: str) -> bytes:
    return base64.b64decode(stored["blobs"][name])


def test_every_reassembly_case_replays_in_python() -> None:
    stored = load("frames.json")
    for case in stored["reassembly"]:
        limits: dict[str, int] = case["limits"]

        def limit(kind: FrameKind, limits: dict[str, int] = limits) -> int:
            return limits[str(int(kind))]

        r = frames.Reassembler(limit)
        for name, expected in zip(case["frames"], case["results"], strict=True):
            try:
                got = r.feed(blob(stored, name))
            except frames.FrameError as exc:
                assert expected.get("error") == type(exc).__name__, case["name"]
                assert expected["message"] == str(exc), case["name"]
                continue
            assert "error" not in expected, case["name"]
            if got is None:
                assert expected == {"incomplete": True}, case["name"]
            else:
                p = expected["payload"]
                head = (int(got.kind), got.round, got.chunk, got.step)
                assert head == (p["kind"], p["round"], p["chunk"], p["step"]), case["name"]
                assert got.data == blob(stored, p["data"]), case["name"]


def test_every_fragment_and_inflate_case_replays_in_python() -> None:
    stored = load("frames.json")
    for case in stored["fragment"]:
        parts = [blob(stored, name) for name in case["frames"]]
        r = frames.Reassembler(lambda kind: 1 << 20)
        out = [r.feed(p) for p in parts][-1]
        assert out is not None
        if case["deflate"]:
            assert out.data == blob(stored, case["payload"])
        else:
            kw = {k: case[k] for k in ("transfer", "step", "round", "chunk")}
            again = list(frames.fragment(FrameKind(case["kind"]), out.data, **kw))
            assert again == parts, case["name"]
    for case in stored["inflate"]:
        data = base64.b64decode(case["data"])
        if "error" in case:
            with pytest.raises(frames.FrameError) as info:
                frames.inflate(data, case["limit"])
            assert str(info.value) == case["message"]
        else:
            assert frames.inflate(data, case["limit"]) == base64.b64decode(case["output"])


def test_every_message_case_replays_in_python() -> None:
    for case in load("messages.json")["cases"]:
        if "error" in case:
            with pytest.raises(messages.MessageError) as info:
                messages.parse(case["raw"])
            exc = info.value
            assert {"code": exc.code, "message": exc.message, "hint": exc.hint} == case["error"]
        else:
            assert messages.encode(messages.parse(case["raw"])) == case["encoded"], case["name"]


def test_the_vectors_cover_every_message_type_and_refusal_code() -> None:
    cases = load("messages.json")["cases"]
    valid = {json.loads(c["encoded"])["type"] for c in cases if "encoded" in c}
    assert valid == set(messages.TYPES)
    refused = {c["error"]["code"] for c in cases if "error" in c}
    assert {"bad-json", "bad-message", "unknown-type", "too-large", "version-mismatch"} <= refused


def test_check_mode_names_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert vectors_main(["--write", "wire", "--dir", str(tmp_path)]) == 0
    assert vectors_main(["--check", "wire", "--dir", str(tmp_path)]) == 0
    stale = tmp_path / vectors.SUBDIR / "messages.json"
    stale.write_text(stale.read_text(encoding="utf-8").replace("bad-json", "bad-jsno", 1))
    capsys.readouterr()
    assert vectors_main(["--check", "wire", "--dir", str(tmp_path)]) == 1
    assert "messages.json differs" in capsys.readouterr().err
    (tmp_path / vectors.SUBDIR / "frames.json").unlink()
    stale.write_text(vectors.build()["messages.json"])
    assert vectors_main(["--check", "wire", "--dir", str(tmp_path)]) == 1
