"""Golden vectors of the data-channel wire formats: binary frames and control messages.

The JavaScript mirror (``static/js/p2p/frames.js``, ``messages.js``) must build, accept and
refuse exactly what ``daisychain.wire.frames`` and ``daisychain.wire.messages`` do. This module
runs the Python implementation on a fixed set of inputs (valid ones, and damaged ones that each
trip one check) and writes what it answered to ``tests/vectors/p2p_wire/``:

- ``frames.json``: CRC-32 known answers; payloads fragmented into frames with their exact header
  fields and bytes; sequences of frames fed to a ``Reassembler`` with per-kind limits and what
  each feed returned (nothing yet, a payload, or the error class and message); raw inflate cases
  (bomb at the limit, truncated, trailing bytes, invalid).
- ``messages.json``: raw texts and what ``messages.parse`` made of them: the record re-encoded by
  ``messages.encode`` (byte for byte what a peer writes), or the error code, message and hint;
  version 7's messages and fields (commit, then audit) come from ``vectorgen.wire_audit``.

Usage: ``python tests/vectorgen --write wire`` regenerates the files; ``--check wire`` regenerates
in memory and exits 1 naming the first file that differs. Payload bytes
come from a seeded ``random.Random``, so regeneration is byte-identical, except the compressed
bodies, which are zlib's (Z_RLE) and may differ between zlib builds: those cases carry
``"zlib": true`` and the zlib version is recorded (tests/p2p/test_p2p_wire_vectors.py replays them
instead of comparing bytes when the running zlib is another one).
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from daisychain.numerics import CONTRACT_VERSION
from daisychain.p2p.versions import DATA_PROTOCOL_VERSION, FRAME_VERSION
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind
from vectorgen import wire_audit
from vectorgen.files import check_texts, write_texts

FORMAT = "daisychain-p2p-wire"
FORMAT_VERSION = 1
SUBDIR = "p2p_wire"

# Per-kind receiver limits (decompressed bytes) used by the reassembly cases: gradient kinds
# accepted up to GRADIENT_LIMIT, checkpoints not expected (0) unless a case says otherwise.
GRADIENT_LIMIT = 120_000
RUN = "0123456789abcdef"
HASH_A = "a" * 64
HASH_B = "0123456789abcdef" * 4


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Blobs:
    """Byte strings stored once (base64) and referred to by name: many cases share frames."""

    def __init__(self) -> None:
        self.table: dict[str, str] = {}
        self._names: dict[bytes, str] = {}

    def ref(self, data: bytes) -> str:
        name = self._names.get(data)
        if name is None:
            name = f"b{len(self._names)}"
            self._names[data] = name
            self.table[name] = b64(data)
        return name


def _rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _header_fields(frame: bytes) -> dict[str, int]:
    head, data = frames.parse_header(frame)
    return {
        "kind": int(head.kind), "flags": head.flags, "round": head.round, "chunk": head.chunk,
        "transfer": head.transfer, "step": head.step, "total": head.total,
        "offset": head.offset, "crc": head.crc, "data_bytes": len(data),
    }  # fmt: skip


def _pack(
    *, magic: bytes = frames.MAGIC, version: int = FRAME_VERSION, kind: int = 1,
    flags: int = 0, round: int = 0, chunk: int = 0, transfer: int = 1, step: int = 1,
    total: int | None = None, offset: int = 0, crc: int | None = None, data: bytes = b"abcd",
) -> bytes:  # fmt: skip
    """One frame with any header, valid or not (the cases below damage one field each)."""
    total = len(data) if total is None else total
    crc = zlib.crc32(data) if crc is None else crc
    fields = (magic, version, kind, flags, round, chunk, transfer, step, total, offset, crc)
    return frames.HEADER.pack(*fields) + data


def _outcome(call: Callable[[], Any], blobs: Blobs) -> tuple[dict[str, Any], bool]:
    """What a call answered, as a vector result; and whether it raised."""
    try:
        value = call()
    except frames.FrameError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}, True
    if value is None:
        return {"incomplete": True}, False
    payload: frames.Payload = value
    return {
        "payload": {
            "kind": int(payload.kind), "round": payload.round, "chunk": payload.chunk,
            "step": payload.step, "data": blobs.ref(payload.data),
        }
    }, False  # fmt: skip


def _limits(gradient: int = GRADIENT_LIMIT, checkpoint: int = 0) -> dict[str, int]:
    return {"1": gradient, "2": gradient, "3": checkpoint}


def _reassembly(
    blobs: Blobs, name: str, parts: Iterable[bytes], limits: dict[str, int], *,
    zlib_made: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Feed ``parts`` in order to one Reassembler; record every answer up to the first error."""
    sequence = list(parts)
    r = frames.Reassembler(lambda kind: limits[str(int(kind))])
    results = []
    for part in sequence:
        result, raised = _outcome(lambda part=part: r.feed(part), blobs)  # type: ignore[misc]
        results.append(result)
        if raised:
            break
    return {
        "name": name, "limits": limits, "zlib": zlib_made,
        "frames": [blobs.ref(p) for p in sequence[: len(results)]], "results": results,
    }  # fmt: skip


def _fragment_case(blobs: Blobs, name: str, payload: bytes, **kw: Any) -> dict[str, Any]:
    parts = list(frames.fragment(payload=payload, **kw))
    return {
        "name": name, "kind": int(kw["kind"]), "transfer": kw["transfer"], "step": kw["step"],
        "round": kw.get("round", 0), "chunk": kw.get("chunk", 0),
        "deflate": kw.get("deflate", False), "zlib": kw.get("deflate", False),
        # Uncompressed, the payload is the frames' data in order; compressed, it is stored.
        "payload": blobs.ref(payload) if kw.get("deflate") else None,
        "frames": [blobs.ref(p) for p in parts],
        "headers": [_header_fields(p) for p in parts],
    }  # fmt: skip


def _deflate(data: bytes) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush()


def build_frames() -> dict[str, Any]:
    blobs = Blobs()
    crc_inputs = [b"", b"a", b"123456789", _rand(1, 1000), bytes(range(256)) * 3]
    crc = [{"data": b64(d), "crc": zlib.crc32(d)} for d in crc_inputs]

    C, R, K = FrameKind.CONTRIBUTION, FrameKind.REDUCED, FrameKind.CHECKPOINT
    full = frames.MAX_FRAGMENT_BYTES
    multi = _rand(2, 2 * full + 777)  # three fragments, the last one short
    # int8-like gradient bytes (small magnitudes, then zeros) compress; random bytes do not.
    gradient = bytes(random.Random(5).choices(range(248, 256), k=20_000)) + bytes(20_000)
    fragments = [
        _fragment_case(blobs, "one-byte", b"\x07", kind=R, transfer=0, step=0),
        _fragment_case(blobs, "one-full-fragment", multi[:full], kind=C, transfer=2**32 - 1,
                       step=2**32 - 1, round=255, chunk=65535),
        _fragment_case(blobs, "one-over-a-fragment", multi[: full + 1], kind=R, transfer=5,
                       step=9, round=3, chunk=17),
        _fragment_case(blobs, "three-fragments", multi, kind=K, transfer=77, step=12),
        _fragment_case(blobs, "deflate-gradient", gradient, kind=C, transfer=6, step=4, round=1,
                       chunk=2, deflate=True),
        _fragment_case(blobs, "deflate-random-fragmented", multi[: full + 3000], kind=R,
                       transfer=8, step=4, round=1, deflate=True),
    ]  # fmt: skip

    lim = _limits()
    good = _pack(data=b"abcd")
    three = list(frames.fragment(R, multi, transfer=5, step=2))
    # Small hand-made fragments for the checks that need a transfer in progress.
    body = b"abcdefgh"
    first = _pack(kind=2, transfer=3, total=8, data=body[:4], crc=zlib.crc32(body))
    second = _pack(kind=2, transfer=3, total=8, offset=4, data=body[4:], crc=zlib.crc32(body))

    def second_with(**kw: Any) -> bytes:
        fields: dict[str, Any] = {"kind": 2, "transfer": 3, "total": 8, "offset": 4,
                                  "data": body[4:], "crc": zlib.crc32(body)}  # fmt: skip
        fields.update(kw)
        return _pack(**fields)

    other = b"0123456789"
    o1 = _pack(kind=2, transfer=4, total=10, data=other[:6], crc=zlib.crc32(other))
    o2 = _pack(kind=2, transfer=4, total=10, offset=6, data=other[6:], crc=zlib.crc32(other))
    opened = [_pack(kind=2, transfer=t, total=8, data=b"open", crc=0) for t in range(8)]
    ninth = _pack(kind=2, transfer=99, total=8, data=b"open", crc=0)
    damaged = bytearray(next(frames.fragment(C, b"x" * 100, transfer=1, step=7, chunk=3)))
    damaged[-1] ^= 1
    at_limit = list(frames.fragment(R, bytes(GRADIENT_LIMIT), transfer=3, step=1, deflate=True))
    over_limit = list(
        frames.fragment(R, bytes(GRADIENT_LIMIT + 1), transfer=3, step=1, deflate=True)
    )
    bomb = list(frames.fragment(R, bytes(GRADIENT_LIMIT * 40), transfer=4, step=1, deflate=True))
    invalid = b"\xff" * 64
    truncated = _deflate(_rand(8, 3000))[:-3]
    trailing = _deflate(_rand(9, 3000)) + b"\x00\x01"
    wire_limit = GRADIENT_LIMIT + GRADIENT_LIMIT // 16384 * 5 + 64

    def flagged(data: bytes, **kw: Any) -> bytes:
        return _pack(kind=2, flags=frames.FLAG_DEFLATE, data=data, **kw)

    reassembly = [
        _reassembly(blobs, "single-frame", [good], lim),
        _reassembly(blobs, "three-fragments", three, lim),
        _reassembly(blobs, "two-small-fragments", [first, second], lim),
        _reassembly(blobs, "interleaved-transfers", [first, o1, second, o2], lim),
        _reassembly(blobs, "eight-open-transfers", opened, lim),
        _reassembly(blobs, "checkpoint-when-expected", list(frames.fragment(K, multi[:5000],
                    transfer=9, step=30)), _limits(checkpoint=6000)),
        _reassembly(blobs, "deflate-fragmented", list(frames.fragment(R, multi[: full + 3000],
                    transfer=8, step=4, round=1, deflate=True)), lim, zlib_made=True),
        _reassembly(blobs, "deflate-exactly-at-limit", at_limit, lim, zlib_made=True),
        # Refusals, one check each, in the order frames.py makes them.
        _reassembly(blobs, "empty", [b""], lim),
        _reassembly(blobs, "header-only", [good[:28]], lim),
        _reassembly(blobs, "short-header", [good[:20]], lim),
        _reassembly(blobs, "oversized", [_pack(total=full + 1, data=bytes(full + 1))], lim),
        _reassembly(blobs, "bad-magic", [_pack(magic=b"XX")], lim),
        _reassembly(blobs, "bad-magic-bytes", [_pack(magic=b"'\x00")], lim),
        _reassembly(blobs, "wrong-version", [_pack(version=2)], lim),
        _reassembly(blobs, "version-zero", [_pack(version=0)], lim),
        _reassembly(blobs, "unknown-kind", [_pack(kind=9)], lim),
        _reassembly(blobs, "kind-zero", [_pack(kind=0)], lim),
        _reassembly(blobs, "unknown-flag", [_pack(flags=0x80)], lim),
        _reassembly(blobs, "unknown-flag-with-deflate", [_pack(flags=0x03)], lim),
        _reassembly(blobs, "fragment-past-total", [_pack(total=2)], lim),
        _reassembly(blobs, "offset-past-total", [_pack(offset=3, total=4, data=b"ab")], lim),
        _reassembly(blobs, "kind-not-expected", [_pack(kind=3)], lim),
        _reassembly(blobs, "total-over-limit", [_pack(total=GRADIENT_LIMIT + 1)], lim),
        _reassembly(blobs, "total-at-limit", [_pack(total=GRADIENT_LIMIT)], lim),
        _reassembly(blobs, "compressed-total-at-wire-limit",
                    [flagged(b"abcd", total=wire_limit)], lim),
        _reassembly(blobs, "compressed-total-over-wire-limit",
                    [flagged(b"abcd", total=wire_limit + 1)], lim),
        _reassembly(blobs, "new-transfer-not-at-zero", [_pack(offset=4, total=8)], lim),
        _reassembly(blobs, "ninth-open-transfer", [*opened, ninth], lim),
        _reassembly(blobs, "header-changed-step", [first, second_with(step=2)], lim),
        _reassembly(blobs, "header-changed-kind", [first, second_with(kind=1)], lim),
        _reassembly(blobs, "header-changed-flags", [first, second_with(flags=1)], lim),
        _reassembly(blobs, "header-changed-round", [first, second_with(round=1)], lim),
        _reassembly(blobs, "header-changed-chunk", [first, second_with(chunk=1)], lim),
        _reassembly(blobs, "header-changed-total", [first, second_with(total=9)], lim),
        _reassembly(blobs, "crc-changed", [first, second_with(crc=1)], lim),
        _reassembly(blobs, "fragment-skipped", three[:1] + three[2:], lim),
        _reassembly(blobs, "fragment-repeated", [first, first], lim),
        _reassembly(blobs, "crc-mismatch", [bytes(damaged)], lim),
        _reassembly(blobs, "crc-mismatch-fragmented", [first, second_with(data=b"efgX")], lim),
        _reassembly(blobs, "deflate-one-over-limit", over_limit, lim, zlib_made=True),
        _reassembly(blobs, "deflate-bomb", bomb, lim, zlib_made=True),
        _reassembly(blobs, "deflate-invalid", [flagged(invalid)], lim),
        _reassembly(blobs, "deflate-truncated", [flagged(truncated)], lim, zlib_made=True),
        _reassembly(blobs, "deflate-trailing-bytes", [flagged(trailing)], lim, zlib_made=True),
    ]  # fmt: skip

    inflate_cases = []
    for name, data, limit, made in (
        ("small", _deflate(b"hello " * 100), 600, True),
        ("exactly-limit", _deflate(bytes(5000)), 5000, True),
        ("one-over-limit", _deflate(bytes(5001)), 5000, True),
        ("bomb", _deflate(bytes(10_000_000)), 100_000, True),
        ("stored-blocks", b"\x01\x03\x00\xfc\xffabc", 3, False),
        ("empty-input", b"", 10, False),
        ("invalid", invalid, 1000, False),
        ("truncated", truncated, 10_000, True),
        ("trailing-bytes", trailing, 10_000, True),
    ):
        result, _ = _inflate_outcome(data, limit)
        inflate_cases.append(
            {"name": name, "data": b64(data), "limit": limit, "zlib": made, **result}
        )

    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "zlib_version": zlib.ZLIB_VERSION,
        "constants": {
            "header_bytes": frames.HEADER_BYTES, "max_frame_bytes": frames.MAX_FRAME_BYTES,
            "max_fragment_bytes": frames.MAX_FRAGMENT_BYTES, "frame_version":
            FRAME_VERSION, "max_open_transfers": frames.MAX_OPEN_TRANSFERS,
            "flag_deflate": frames.FLAG_DEFLATE,
        },
        "crc32": crc, "fragment": fragments, "reassembly": reassembly, "inflate": inflate_cases,
        "blobs": blobs.table,
    }  # fmt: skip


def _inflate_outcome(data: bytes, limit: int) -> tuple[dict[str, Any], bool]:
    try:
        out = frames.inflate(data, limit)
    except frames.FrameError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}, True
    return {"output": b64(out)}, False


# ---------------------------------------------------------------------------------------------
# Control messages


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _valid_messages() -> dict[str, dict[str, Any]]:
    model = {"vocab_size": 2048, "width": 64, "layers": 2, "heads": 2, "seq_len": 32,
             "batch": 1, "mlp_mult": 4}  # fmt: skip
    optim = {"lr": 0.003, "warmup_steps": 3, "weight_decay": 0.1, "clip": 1.0}
    config = {"type": "config", "run": RUN, "preset": "tiny", "model": model, "optim": optim,
              "steps": 30, "seed": 7, "data": "builtin", "tokenizer_sha256": HASH_B,
              "resume_step": 0, "global_batch": 16, "shares_by": "speed"}  # fmt: skip
    return {
        "hello": {"type": "hello", "version": DATA_PROTOCOL_VERSION, "contract": CONTRACT_VERSION,
                  "name": "Ada"},
        "config": config,
        "ready": {"type": "ready", "run": RUN, "step": 0, "hash": HASH_A, "peers": ["Q2x-_9"],
                  "seq_s": 0.125},
        "sync-request": {"type": "sync-request", "run": RUN},
        "roster": {"type": "roster", "run": RUN, "step": 1, "round": 0, "peers": ["b", "a"],
                   "shares": [13, 3]},
        "hash": {"type": "hash", "run": RUN, "step": 1, "round": 2, "hash": HASH_A,
                 "loss": 7.6543, "probe": HASH_B, "backend": "numpy", "seq_s": 0},
        "missing": {"type": "missing", "run": RUN, "step": 3, "round": 1, "peers": []},
        "repair": {"type": "repair", "run": RUN, "step": 3, "round": 1,
                   "piece": "contribution", "chunk": 2},
        "save": {"type": "save", "run": RUN, "step": 0},
        "leave": {"type": "leave", "reason": "user closed the tab"},
        "stop": {"type": "stop", "run": RUN, "reason": "fork", "step": 4, "message": "diverged",
                 "hashes": {"b": HASH_A, "a": HASH_B, "123": "x"}},
        "error": {"type": "error", "code": "bad-frame", "message": "m", "hint": "h"},
        **wire_audit.valid(),  # version 7: commit, reveal, audit, proof
    }  # fmt: skip


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        name = key.rstrip("_")
        if value is _DROP:
            out.pop(name, None)
        else:
            out[name] = value
    return out


_DROP = object()


def _message_texts() -> list[tuple[str, str]]:
    v = _valid_messages()
    cases: list[tuple[str, str]] = [(f"valid-{k}", _dumps(m)) for k, m in v.items()]
    cfg = v["config"]
    add = cases.append
    # Valid variations.
    add(("valid-hello-unicode-name", _dumps(_with(v["hello"], name="Zoë 😀" + "x" * 34))))
    add(("valid-unknown-fields-ignored", _dumps(_with(v["hello"], extra={"nested": [1, 2]},
                                                        **{"from": "forged"}))))  # fmt: skip
    add(("valid-whitespace", ' \t\n{ "type" : "leave" , "reason" : "" }\r\n'))
    add(("valid-config-preset-null", _dumps(_with(cfg, preset=None))))
    add(("valid-config-preset-absent", _dumps(_with(cfg, preset=_DROP))))
    add(("valid-config-resume", _dumps(_with(cfg, resume_step=12, resume_hash=HASH_A))))
    add(("valid-config-resume-hash-ignored-at-0", _dumps(_with(cfg, resume_hash="junk"))))
    add(("valid-config-int-lr", _dumps(_with(cfg, optim=_with(cfg["optim"], lr=1)))))
    add(("valid-config-float-forms", _dumps(cfg).replace('"lr":0.003', '"lr":3E-3')
         .replace('"clip":1.0', '"clip":1e16').replace('"weight_decay":0.1',
                                                      '"weight_decay":-0.0')))  # fmt: skip
    add(("valid-hash-int-loss", _dumps(_with(v["hash"], loss=3))))
    add(("valid-hash-tiny-loss", _dumps(_with(v["hash"], loss=1.5e-7))))
    add(("valid-hash-big-loss", _dumps(_with(v["hash"], loss=123456789012345678.0))))
    add(("valid-negative-zero-int", _dumps(v["save"]).replace('"step":0', '"step":-0')))
    add(("valid-duplicate-key-last-wins", '{"type":"leave","reason":"a","reason":"b"}'))
    add(("valid-error-unknown-code", _dumps(_with(v["error"], code="future-code"))))
    add(("valid-error-non-ascii", _dumps(_with(v["error"], message="ünïcode\u2028\x7f"))))
    add(
        (
            "valid-roster-64",
            _dumps(_with(v["roster"], peers=[f"p{i}" for i in range(64)], shares=[1] * 64)),
        )
    )
    add(("valid-roster-share-zero", _dumps(_with(v["roster"], shares=[16, 0]))))
    # The optional private-data flag: written only when true, absent or false read as false.
    add(("valid-ready-private-data", _dumps(_with(v["ready"], private_data=True))))
    add(("valid-ready-private-data-false", _dumps(_with(v["ready"], private_data=False))))
    add(("valid-sync-request-private-data", _dumps(_with(v["sync-request"], private_data=True))))
    add(("valid-stop-empty-hashes", _dumps(_with(v["stop"], hashes={}))))
    pair_and_lone = (
        '{"type":"hello","version":'
        + str(DATA_PROTOCOL_VERSION)
        + ',"contract":'
        + str(CONTRACT_VERSION)
        + ","
        '"name":"\\ud83d\\ude00\\ud800"}'
    )
    add(("valid-escaped-surrogates", pair_and_lone))
    base = _dumps(_with(v["leave"], reason=""))
    add(("valid-max-size", base[:-1] + " " * (16384 - len(base)) + "}"))
    add(("too-large-by-one", base[:-1] + " " * (16385 - len(base)) + "}"))
    add(("valid-nesting-50", '{"type":"leave","reason":"","x":' + "[" * 50 + "]" * 50 + "}"))

    # Refused: the whole message.
    add(("too-large", _dumps(_with(v["leave"], reason="x" * 16400))))
    add(("too-large-utf8", _dumps(_with(v["leave"], reason="é" * 8200)).replace(
        "\\u00e9", "é")))  # fmt: skip
    add(("bad-json", "{not json"))
    add(("bad-json-empty", ""))
    add(("bad-json-trailing-data", '{"type":"leave","reason":""} x'))
    add(("bad-json-trailing-comma", '{"type":"leave","reason":"",}'))
    add(("bad-json-single-quotes", "{'type':'leave'}"))
    add(("bad-json-control-char", '{"type":"leave","reason":"a\x01b"}'))
    add(("bad-json-bad-escape", '{"type":"leave","reason":"\\x41"}'))
    add(("bad-json-bad-unicode-escape", '{"type":"leave","reason":"\\u12G4"}'))
    add(("bad-json-leading-zero", '{"type":"save","run":"' + RUN + '","step":01}'))
    add(("bad-json-bom", '\ufeff{"type":"leave","reason":""}'))
    add(("bad-json-plus-sign", '{"type":"save","run":"' + RUN + '","step":+1}'))
    add(("bad-json-huge-integer", '{"type":"save","run":"' + RUN + '","step":' + "9" * 4301
         + "}"))  # fmt: skip
    add(("bad-json-deep-nesting", "[" * 5000 + "]" * 5000))
    add(("not-an-object", "[1, 2]"))
    add(("not-an-object-string", '"hello"'))
    add(("not-an-object-null", "null"))
    add(("unknown-type", _dumps({"type": "gossip"})))
    add(("unknown-type-quoted", _dumps({"type": "it's"})))
    add(("unknown-type-long", _dumps({"type": "x" * 100})))
    add(("unknown-type-missing", _dumps({"version": 1})))
    add(("unknown-type-number", _dumps({"type": 5})))
    add(("unknown-type-case", _dumps({"type": "Hello"})))
    add(("version-mismatch", _dumps(_with(v["hello"], version=1))))
    add(("version-zero", _dumps(_with(v["hello"], version=0))))
    add(("contract-mismatch", _dumps(_with(v["hello"], contract=CONTRACT_VERSION + 1))))
    add(
        (
            "contract-and-version-mismatch",
            _dumps(_with(v["hello"], contract=CONTRACT_VERSION + 1, version=3)),
        )
    )
    add(("contract-missing", _dumps(_with(v["hello"], contract=_DROP))))

    # Refused: one field each.
    h, hs, st, rp, ro = v["hello"], v["hash"], v["stop"], v["repair"], v["roster"]
    for name, msg in (
        ("hello-version-float", _dumps(h).replace('"version":2', '"version":2.0')),
        ("hello-version-exponent", _dumps(h).replace('"version":2', '"version":2e0')),
        ("hello-version-bool", _dumps(_with(h, version=True))),
        ("hello-version-string", _dumps(_with(h, version="1"))),
        ("hello-version-negative", _dumps(_with(h, version=-1))),
        ("hello-version-u32-overflow", _dumps(_with(h, version=2**32))),
        ("hello-version-missing", _dumps(_with(h, version=_DROP))),
        ("hello-name-long", _dumps(_with(h, name="x" * 41))),
        ("hello-name-long-astral", _dumps(_with(h, name="😀" * 41))),
        ("hello-name-null", _dumps(_with(h, name=None))),
        ("config-model-missing", _dumps(_with(cfg, model=_DROP))),
        ("config-model-list", _dumps(_with(cfg, model=[1]))),
        ("config-optim-missing", _dumps(_with(cfg, optim=_DROP))),
        ("config-preset-long", _dumps(_with(cfg, preset="p" * 33))),
        ("config-preset-number", _dumps(_with(cfg, preset=3))),
        ("config-resume-step-negative", _dumps(_with(cfg, resume_step=-1))),
        ("config-resume-hash-missing", _dumps(_with(cfg, resume_step=3))),
        ("config-resume-hash-upper", _dumps(_with(cfg, resume_step=3, resume_hash="A" * 64))),
        ("config-run-short", _dumps(_with(cfg, run="0123"))),
        ("config-run-upper", _dumps(_with(cfg, run=RUN.upper()))),
        ("config-width-float", _dumps(_with(cfg, model=_with(cfg["model"], width=64.5)))),
        ("config-batch-missing", _dumps(_with(cfg, model=_with(cfg["model"], batch=_DROP)))),
        ("config-layers-huge", _dumps(_with(cfg, model=_with(cfg["model"], layers=2**32)))),
        ("config-lr-string", _dumps(_with(cfg, optim=_with(cfg["optim"], lr="0.1")))),
        ("config-lr-nan", _dumps(cfg).replace('"lr":0.003', '"lr":NaN')),
        ("config-lr-infinity", _dumps(cfg).replace('"lr":0.003', '"lr":Infinity')),
        ("config-lr-overflow-float", _dumps(cfg).replace('"lr":0.003', '"lr":1e400')),
        ("config-clip-overflow-int", _dumps(cfg).replace('"clip":1.0', '"clip":1' + "0" * 400)),
        ("config-clip-neg-infinity", _dumps(cfg).replace('"clip":1.0', '"clip":-Infinity')),
        ("config-warmup-float", _dumps(_with(cfg, optim=_with(cfg["optim"], warmup_steps=3.0)))),
        ("config-steps-negative", _dumps(_with(cfg, steps=-5))),
        ("config-seed-bool", _dumps(_with(cfg, seed=False))),
        ("config-data-long", _dumps(_with(cfg, data="d" * 201))),  # the bound: 200
        ("config-tokenizer-short", _dumps(_with(cfg, tokenizer_sha256="abc"))),
        ("ready-peers-duplicate", _dumps(_with(v["ready"], peers=["a", "a"]))),
        ("ready-peers-bad-id", _dumps(_with(v["ready"], peers=["bad id"]))),
        ("ready-peers-long-id", _dumps(_with(v["ready"], peers=["x" * 33]))),
        ("ready-peers-not-list", _dumps(_with(v["ready"], peers="a"))),
        ("ready-peers-number", _dumps(_with(v["ready"], peers=[1]))),
        ("ready-hash-missing", _dumps(_with(v["ready"], hash=_DROP))),
        ("ready-step-float", _dumps(_with(v["ready"], step=0.5))),
        ("ready-seq-s-missing", _dumps(_with(v["ready"], seq_s=_DROP))),
        ("ready-seq-s-negative", _dumps(_with(v["ready"], seq_s=-0.5))),
        ("ready-seq-s-string", _dumps(_with(v["ready"], seq_s="1"))),
        ("ready-private-data-string", _dumps(_with(v["ready"], private_data="true"))),
        ("ready-private-data-number", _dumps(_with(v["ready"], private_data=1))),
        ("ready-private-data-null", _dumps(_with(v["ready"], private_data=None))),
        ("sync-request-private-data-list", _dumps(_with(v["sync-request"], private_data=[True]))),
        ("hash-seq-s-missing", _dumps(_with(hs, seq_s=_DROP))),
        ("hash-seq-s-huge", _dumps(_with(hs, seq_s=1e7))),
        ("config-global-batch-missing", _dumps(_with(cfg, global_batch=_DROP))),
        ("config-global-batch-float", _dumps(_with(cfg, global_batch=16.5))),
        ("config-shares-by-unknown", _dumps(_with(cfg, shares_by="fastest"))),
        ("config-shares-by-missing", _dumps(_with(cfg, shares_by=_DROP))),
        ("roster-shares-missing", _dumps(_with(ro, shares=_DROP))),
        ("roster-shares-short", _dumps(_with(ro, shares=[16]))),
        ("roster-shares-negative", _dumps(_with(ro, shares=[17, -1]))),
        ("roster-shares-over-4096", _dumps(_with(ro, shares=[4097, 0]))),
        ("roster-shares-float", _dumps(_with(ro, shares=[13.0, 3]))),
        ("roster-shares-bool", _dumps(_with(ro, shares=[True, 15]))),
        ("sync-request-run-missing", _dumps({"type": "sync-request"})),
        ("roster-empty", _dumps(_with(ro, peers=[], shares=[]))),
        ("roster-65", _dumps(_with(ro, peers=[f"p{i}" for i in range(65)], shares=[0] * 65))),
        ("roster-step-zero", _dumps(_with(ro, step=0))),
        ("roster-round-256", _dumps(_with(ro, round=256))),
        ("roster-empty-and-bad-step", _dumps(_with(ro, peers=[], shares=[], step=0))),
        ("hash-loss-string", _dumps(_with(hs, loss="7"))),
        ("hash-loss-nan", _dumps(hs).replace('"loss":7.6543', '"loss":NaN')),
        ("hash-loss-null", _dumps(_with(hs, loss=None))),
        ("hash-probe-short", _dumps(_with(hs, probe="ab"))),
        ("hash-backend-long", _dumps(_with(hs, backend="b" * 33))),
        ("hash-step-zero", _dumps(_with(hs, step=0))),
        ("missing-peers-missing", _dumps(_with(v["missing"], peers=_DROP))),
        ("repair-piece-unknown", _dumps(_with(rp, piece="checkpoint"))),
        ("repair-piece-number", _dumps(_with(rp, piece=1))),
        ("repair-chunk-64", _dumps(_with(rp, chunk=64))),
        ("repair-bad-piece-and-run", _dumps(_with(rp, piece="x", run="y"))),
        ("save-step-negative", _dumps(_with(v["save"], step=-1))),
        ("leave-reason-long", _dumps(_with(v["leave"], reason="r" * 201))),
        ("leave-reason-missing", _dumps({"type": "leave"})),
        ("stop-reason-unknown", _dumps(_with(st, reason="bored"))),
        ("stop-hashes-list", _dumps(_with(st, hashes=[]))),
        ("stop-hashes-bad-key", _dumps(_with(st, hashes={"bad key": "x"}))),
        ("stop-hashes-long-value", _dumps(_with(st, hashes={"a": "h" * 65}))),
        ("stop-hashes-number-value", _dumps(_with(st, hashes={"a": 1}))),
        ("stop-hashes-65", _dumps(_with(st, hashes={f"p{i}": "h" for i in range(65)}))),
        ("stop-message-long", _dumps(_with(st, message="m" * 1001))),
        ("stop-step-missing", _dumps(_with(st, step=_DROP))),
        ("error-code-long", _dumps(_with(v["error"], code="c" * 33))),
        ("error-hint-missing", _dumps(_with(v["error"], hint=_DROP))),
    ):
        add((name, msg))
    cases += wire_audit.texts(v)  # version 7's messages and fields (vectorgen.wire_audit)
    return cases


def build_messages() -> dict[str, Any]:
    cases = []
    for name, raw in _message_texts():
        try:
            parsed = messages.parse(raw)
        except messages.MessageError as exc:
            result: dict[str, Any] = {
                "error": {"code": exc.code, "message": exc.message, "hint": exc.hint}
            }
            reply = messages.encode(messages.error_from(exc))
            result["reply"] = reply
        else:
            result = {"encoded": messages.encode(parsed)}
        cases.append({"name": name, "raw": raw, **result})
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "message case names must be unique"
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "types": list(messages.TYPES),
        "error_codes": list(messages.ERROR_CODES), "max_message_bytes":
        messages.MAX_MESSAGE_BYTES, "cases": cases,
    }  # fmt: skip


def build() -> dict[str, str]:
    """File name -> exact file text."""
    return {
        name: json.dumps(content, indent=1, sort_keys=False) + "\n"
        for name, content in (("frames.json", build_frames()), ("messages.json", build_messages()))
    }


def write(directory: Path) -> str:
    return write_texts(directory / SUBDIR, build())


def check(directory: Path) -> str:
    why = (
        "if the wire format changed on purpose, run `python tests/vectorgen --write wire` and "
        "update static/js/p2p/ to match"
    )
    return check_texts(directory / SUBDIR, build(), why)
