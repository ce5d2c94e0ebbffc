"""The shared cases of what a room's host is shown of a device: tests/vectors/signaling/device.json.

Each case is a ``hello``'s ``name`` and ``device`` and what every parser of them must make of it
(docs/PROTOCOL.md, ``hello``; the rules: server/daisychain/wire/deviceinfo.py): accepted, with the
name the server keeps (``""``: the hub names the device ``device-XXXX``), the name a client shows
for the peer ``PEER_ID`` and the device summary; or refused with ``bad-message``, the field and
what it must be. The outcomes come from ``wire.deviceinfo``, and each case also states by hand
which field it must fail on (or none), so a rule that drifts fails here before the file is
written. Hostile cases are the ones issue 47 found: bidi controls, newlines and ESC in
``device.backend``, a backend that reads as a verdict, absurd speeds, and names that show as
nothing.

Checked by tests/server/test_server_device_info.py (``wire.signaling.parse_client`` and
``p2p.signaling.parse_server``) and tests/js/signaling_device.test.mjs (the page's
``parseServer``).

    python tests/signaling_vectors.py --write   # regenerate the file
    python tests/signaling_vectors.py --check   # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from daisychain.wire import deviceinfo

FILE = Path(__file__).resolve().parent / "vectors" / "signaling" / "device.json"
FORMAT = "daisychain-signaling-device-vectors"
FORMAT_VERSION = 1
PEER_ID = "Zk9dEf0a1B2c"  # the shape of a server-assigned id (12 of A-Z a-z 0-9 _ -)

NAME, DEVICE, BACKEND = "name", "device", "device.backend"
SPEED, KIND, AUDIT_KEY = "device.tokens_per_s", "device.kind", "device.audit_key"
# A real audit key: the public key of RFC 8032 section 7.1's test 1 (docs/TRUST.md)
KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
VERDICT = "webgpu · verified: your own device, approved before — click Approve"
ASTRONAUT = "\U0001f469\u200d\U0001f680"  # woman, ZERO WIDTH JOINER, rocket
PAGE = {"kind": "browser", "backend": "webgpu-dp4a", "tokens_per_s": 5120, "trickle": True}
PY = {"kind": "python", "backend": "numpy"}

# (what, name, device, the field it is refused on or None). Names and devices are apart: a case
# that refuses one keeps the other valid.
CASES: list[tuple[str, Any, Any, str | None]] = [
    # -- accepted as they are
    ("a page's hello", "Ada", PAGE, None),
    ("a Python peer's hello", "lab-3", PY, None),
    ("the test harness's bystander", "", {"kind": "bystander"}, None),
    ("an empty device", "Ada", {}, None),
    ("Latin with a precomposed letter", "Zoë", PY, None),
    ("Latin with a combining mark", "Zoe\u0308", PY, None),
    ("Han", "山田", {"kind": "python", "backend": "wgpu-lut", "tokens_per_s": 812.5}, None),
    ("Arabic", "\u0639\u0644\u064a", PAGE, None),
    ("Devanagari", "\u0905\u0928\u093f\u0932", PAGE, None),
    ("an emoji and a word", "\U0001f33c Ana", PAGE, None),
    ("a flag (regional indicators)", "\U0001f1ef\U0001f1f5", PAGE, None),
    ("a skin tone modifier", "\U0001f44b\U0001f3fd", PAGE, None),
    ("a blank letter beside a visible one", "\u3164Ada", PAGE, None),
    ("spaces around are stripped", "  Ada  ", PAGE, None),
    ("an ideographic space around", "\u3000Ada\u3000", PAGE, None),
    ("U+001C and U+0085 around (Python strips them, trim does not)", "\x1cAda\x85", PAGE, None),
    ("a name of 40 characters", "A" * 40, PAGE, None),
    ("40 emoji (80 UTF-16 units)", "\U0001f33c" * 40, PAGE, None),
    ("the slowest speed that counts", "Ada", {"tokens_per_s": 0.001}, None),
    ("the fastest speed that counts", "Ada", {"tokens_per_s": 1e9}, None),
    ("a one-letter kind", "Ada", {"kind": "x"}, None),
    ("a kind of 24 characters", "Ada", {"kind": "k" + "-" * 23}, None),
    ("keys nobody is shown keep only the size rules", "Ada", {"note": "x\u202e\n"}, None),
    ("a value of 128 emoji (256 UTF-16 units)", "Ada", {"note": "\U0001f33c" * 128}, None),
    ("a key of 32 emoji", "Ada", {"\U0001f33c" * 32: 1}, None),
    *[(f"backend {b}", "Ada", {"backend": b}, None) for b in deviceinfo.BACKENDS],
    # -- names that show nothing: accepted as no name (the device is shown as device-XXXX)
    ("no name", "", PAGE, None),
    ("spaces only", "   ", PAGE, None),
    ("U+3164 HANGUL FILLER", "\u3164", PAGE, None),
    ("three HANGUL FILLERs", "\u3164\u3164\u3164", PAGE, None),
    ("U+FFA0 HALFWIDTH HANGUL FILLER", "\uffa0", PAGE, None),
    ("U+115F U+1160 Hangul choseong and jungseong fillers", "\u115f\u1160", PAGE, None),
    ("U+2800 BRAILLE PATTERN BLANK", "\u2800", PAGE, None),
    ("U+1D159 MUSICAL SYMBOL NULL NOTEHEAD", "\U0001d159", PAGE, None),
    ("U+034F COMBINING GRAPHEME JOINER", "\u034f", PAGE, None),
    ("a combining mark alone", "\u0301", PAGE, None),
    ("U+FE0F VARIATION SELECTOR-16", "\ufe0f", PAGE, None),
    ("U+200B ZERO WIDTH SPACE", "\u200b", PAGE, None),
    ("U+FEFF ZERO WIDTH NO-BREAK SPACE", "\ufeff", PAGE, None),
    ("U+200D U+200C zero width joiners", "\u200d\u200c", PAGE, None),
    ("U+180E MONGOLIAN VOWEL SEPARATOR", "\u180e", PAGE, None),
    ("U+3000 IDEOGRAPHIC SPACE", "\u3000", PAGE, None),
    ("U+202E alone", "\u202e", PAGE, None),
    ("ESC alone", "\x1b", PAGE, None),
    ("a lone surrogate", "\ud800", PAGE, None),
    ("blanks of every kind mixed", " \u3164\u2800\u034f\u200b\u3000 ", PAGE, None),
    # -- names refused: a character that hides or reorders what is seen
    ("U+202E RIGHT-TO-LEFT OVERRIDE after a name", "Ada\u202e", PAGE, NAME),
    ("U+202E before a name", "\u202eadA", PAGE, NAME),
    ("a bidi isolate", "Ada\u2066x\u2069", PAGE, NAME),
    ("U+200F RIGHT-TO-LEFT MARK", "\u200fAda", PAGE, NAME),
    ("U+200E LEFT-TO-RIGHT MARK", "Ada\u200e", PAGE, NAME),
    ("a newline inside", "Ada\nBob", PAGE, NAME),
    ("ESC inside", "Ada\x1b[31m", PAGE, NAME),
    ("U+200B inside", "Ada\u200bBob", PAGE, NAME),
    ("a leading U+FEFF (trim would strip it; Python does not)", "\ufeffAda", PAGE, NAME),
    ("a no-break space inside", "Ada\u00a0Lovelace", PAGE, NAME),
    ("U+200D in an emoji sequence (a format character)", ASTRONAUT, PAGE, NAME),
    ("a lone surrogate beside a letter", "x\ud800", PAGE, NAME),
    ("a name of 41 characters", "A" * 41, PAGE, NAME),
    ("41 emoji", "\U0001f33c" * 41, PAGE, NAME),
    ("a number for a name", 5, PAGE, NAME),
    ("null for a name", None, PAGE, NAME),
    # -- device.backend: only the names a DaisyChain peer sends
    ("a verdict for a backend, with U+202E", "Ada", {"backend": VERDICT + "\u202e"}, BACKEND),
    ("a backend that reads as a verdict", "Ada", {"backend": VERDICT}, BACKEND),
    ("U+202E in a backend", "Ada", {"backend": "\u202eupl-ugpbew"}, BACKEND),
    ("a newline in a backend", "Ada", {"backend": "numpy\nverified"}, BACKEND),
    ("ESC in a backend", "Ada", {"backend": "\x1b[2Jnumpy"}, BACKEND),
    ("an unknown backend", "Ada", {"backend": "cuda"}, BACKEND),
    ("the page's choice 'auto' (never sent)", "Ada", {"backend": "auto"}, BACKEND),
    ("a backend in capitals", "Ada", {"backend": "NUMPY"}, BACKEND),
    ("a backend with a space", "Ada", {"backend": "numpy "}, BACKEND),
    ("a null backend", "Ada", {"backend": None}, BACKEND),
    ("a number for a backend", "Ada", {"backend": 1}, BACKEND),
    # -- device.tokens_per_s: a number in (0, 1e9]
    ("1e300 tokens per second", "Ada", {"tokens_per_s": 1e300}, SPEED),
    ("just over 1e9", "Ada", {"tokens_per_s": 1_000_000_001}, SPEED),
    ("a negative speed", "Ada", {"tokens_per_s": -5}, SPEED),
    ("a speed of 0", "Ada", {"tokens_per_s": 0}, SPEED),
    ("a string for a speed", "Ada", {"tokens_per_s": "fast"}, SPEED),
    ("true for a speed", "Ada", {"tokens_per_s": True}, SPEED),
    ("a null speed", "Ada", {"tokens_per_s": None}, SPEED),
    # -- device.kind: a short lowercase word
    ("a kind in capitals", "Ada", {"kind": "Browser"}, KIND),
    ("U+202E in a kind", "Ada", {"kind": "browser\u202e"}, KIND),
    ("a newline after a kind", "Ada", {"kind": "browser\n"}, KIND),
    ("a kind of 25 characters", "Ada", {"kind": "k" * 25}, KIND),
    ("an empty kind", "Ada", {"kind": ""}, KIND),
    ("a kind that starts with a digit", "Ada", {"kind": "9lives"}, KIND),
    ("a number for a kind", "Ada", {"kind": 3}, KIND),
    # -- device.audit_key: 64 lowercase hex digits (its shape; the peers judge the point)
    ("a page's hello with its audit key", "Ada", {**PAGE, "audit_key": KEY}, None),
    (
        "an audit key that is no point is still the right shape",
        "Ada",
        {"audit_key": "0" * 64},
        None,
    ),
    ("an audit key in capitals", "Ada", {"audit_key": KEY.upper()}, AUDIT_KEY),
    ("an audit key of 63 digits", "Ada", {"audit_key": KEY[:63]}, AUDIT_KEY),
    ("an audit key of 65 digits", "Ada", {"audit_key": KEY + "0"}, AUDIT_KEY),
    ("an audit key with a newline after it", "Ada", {"audit_key": KEY[:63] + "\n"}, AUDIT_KEY),
    ("an audit key of 64 letters past f", "Ada", {"audit_key": "g" * 64}, AUDIT_KEY),
    ("an audit key as a number", "Ada", {"audit_key": 12}, AUDIT_KEY),
    ("a null audit key", "Ada", {"audit_key": None}, AUDIT_KEY),
    ("an empty audit key", "Ada", {"audit_key": ""}, AUDIT_KEY),
    # -- the summary's shape
    ("a string for a device", "Ada", "browser", DEVICE),
    ("null for a device", "Ada", None, DEVICE),
    ("a list for a device", "Ada", [1], DEVICE),
    ("17 keys", "Ada", {f"k{i}": i for i in range(17)}, DEVICE),
    ("a key of 33 characters", "Ada", {"k" * 33: 1}, DEVICE),
    ("a value of 129 characters", "Ada", {"note": "x" * 129}, DEVICE),
    ("a value of 129 emoji", "Ada", {"note": "\U0001f33c" * 129}, DEVICE),
    ("an object value", "Ada", {"gpu": {}}, DEVICE),
]


def outcome(name: Any, device: Any) -> dict[str, Any]:
    """What ``wire.deviceinfo`` makes of one hello's name and device."""
    try:
        kept = deviceinfo.check_name(name)
        summary = deviceinfo.check_device(device)
    except deviceinfo.DeviceInfoError as exc:
        return {"refused": {"code": "bad-message", "field": exc.field, "expected": exc.expected}}
    shown = deviceinfo.shown_name(kept, PEER_ID)
    return {"accepted": {"name": kept, "shown": shown, "device": summary}}


def build() -> dict[str, Any]:
    cases = []
    for what, name, device, field in CASES:
        result = outcome(name, device)
        got = result["refused"]["field"] if "refused" in result else None
        assert got == field, f"case {what!r}: refused on {got}, the case says {field}"
        cases.append({"what": what, "name": name, "device": device, **result})
    whats = [c["what"] for c in cases]
    assert len(set(whats)) == len(whats), "every case needs its own description"
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": "tests/signaling_vectors.py",
        "peer_id": PEER_ID,
        "fallback_name": deviceinfo.fallback_name(PEER_ID),
        "max_name_chars": deviceinfo.MAX_NAME_CHARS,
        "backends": list(deviceinfo.BACKENDS),
        "space": deviceinfo.SPACE,
        "blanks": deviceinfo.BLANKS,
        "cases": cases,
    }


def render(doc: dict[str, Any]) -> str:
    """One case a line, ASCII only: every invisible or reordering character is an escape a
    reviewer can read."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=True)}," for k, v in head.items()]
    cases = ",\n".join(f"  {json.dumps(c, ensure_ascii=True)}" for c in doc["cases"])
    return "{\n" + "\n".join(lines) + '\n "cases": [\n' + cases + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help=f"write {FILE}")
    group.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render(build())
    if args.write:
        FILE.parent.mkdir(parents=True, exist_ok=True)
        FILE.write_text(text, encoding="utf-8")
        print(f"wrote {FILE} ({len(CASES)} cases)")
        return 0
    current = FILE.read_text(encoding="utf-8") if FILE.exists() else ""
    if current != text:
        print(f"{FILE} is stale: run python tests/signaling_vectors.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
