"""What a person is shown of another device: the ``name`` and ``device`` of its ``hello``.

A room's host decides whom to let in from a name and a line of facts (docs/PROTOCOL.md,
``hello``), so these values are checked by kind, not only by size. A name is shown only when one
of its characters can be seen: a name of blanks only (white space, format and control
characters, combining marks alone, the Hangul fillers, the blank Braille pattern) is no name,
and the device is shown as ``device-XXXX`` (its peer id's first four characters, as the hub
names it). A name that can be seen holds no character that hides or reorders it (control,
format -- bidi overrides above all -- or separator characters other than the space:
``str.isprintable``). ``device.backend`` is one of the backends this code computes on,
``device.tokens_per_s`` a speed that can be real, ``device.kind`` a short word,
``device.audit_key`` an Ed25519 public key's 64 lowercase hex digits (docs/TRUST.md; never
shown: only its shape is checked here, and whether it is a key audits accept is for the peers,
``p2p.auditkey.check_public_key``); the other keys keep the summary's size rules.

The server applies these rules to every ``hello`` (``wire.signaling.parse_client``) and both
clients to the peer info the server relays (``p2p.signaling`` here, the page's
static/js/p2p/deviceinfo.js, which mirrors this file), so an old or hostile server cannot show a
host what a current one refuses. The shared cases are tests/vectors/signaling/device.json.

Characters are judged by Python's Unicode database (14.0 in Python 3.11). A browser knows newer
ones, which a client's check may judge otherwise; the server judges first, so a character
unassigned here (category ``Cn``) is no name alone and refused beside a visible one before any
client sees it.
"""

from __future__ import annotations

import math
import re
import unicodedata

MAX_NAME_CHARS = 40
MAX_DEVICE_KEYS = 16
MAX_DEVICE_KEY_CHARS = 32
MAX_DEVICE_VALUE_CHARS = 128
MAX_TOKENS_PER_S = 1e9  # far above any real device; the figure is shown, never trusted

# Every ``device.backend`` a DaisyChain peer sends, in the order of its source. The peer
# (peer/main.py) sends ``Compute.name`` of its chosen backend (peer/backend.py): the reference
# "numpy" (p2p/options.py Compute's default, gpu/backend.py NumpyGemm.name), "cpu-int8"
# (cpuint8.NAME), "cpu-madd" (cpumadd.NAME) and a GPU kernel "wgpu-" + each kind of
# gpu/backend.GPU_ORDER (gpu/gemm.py GpuGemm.name). The page (static/js/app.js) sends the
# worker's chosen backend: one of BACKEND_CHOICES in static/js/train/messages.js other than
# "auto" ("js-cpu" is also the tier a GPU falls back to, static/js/gpu/gemm.js).
# tests/server/test_server_device_info.py checks each source.
BACKENDS: tuple[str, ...] = (
    "numpy",
    "cpu-int8",
    "cpu-madd",
    "wgpu-dp4a",
    "wgpu-lut",
    "webgpu-dp4a",
    "webgpu-lut",
    "js-cpu",
)
KIND_RE = re.compile(r"[a-z][a-z0-9-]{0,23}")  # "browser", "python", "test", "bystander"
AUDIT_KEY_RE = re.compile(r"[0-9a-f]{64}")  # an Ed25519 public key (32 bytes) in hex

# What ``str.strip()`` removes (``str.isspace``), spelled out so the page strips the same:
# JavaScript's ``trim`` also takes U+FEFF and leaves U+001C-U+001F and U+0085.
SPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# Letters and symbols that render as nothing: HANGUL CHOSEONG FILLER, JUNGSEONG FILLER, HANGUL
# FILLER, HALFWIDTH HANGUL FILLER, BRAILLE PATTERN BLANK, MUSICAL SYMBOL NULL NOTEHEAD, and
# MONGOLIAN VOWEL SEPARATOR (a format character since Unicode 6.3, listed for older tables).
BLANKS = "\u115f\u1160\u3164\uffa0\u2800\U0001d159\u180e"
# Categories a name cannot hold (``str.isprintable``: Other and Separator, except U+0020).
UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
# Categories that show nothing alone: separators, and marks that only modify another character.
UNSEEN = UNPRINTABLE | {"Mn", "Me"}

NAME_EXPECTED = (
    f"at most {MAX_NAME_CHARS} printable characters (no control, format or bidi characters)"
)
BACKEND_EXPECTED = f"one of {', '.join(BACKENDS)}"
TOKENS_EXPECTED = "a number above 0 and at most 1e9 (tokens per second)"
KIND_EXPECTED = "a lowercase word: a-z, then up to 23 of a-z 0-9 -"
AUDIT_KEY_EXPECTED = "64 lowercase hex digits (an Ed25519 public key)"
DEVICE_EXPECTED = (
    f"an object of at most {MAX_DEVICE_KEYS} keys (<= {MAX_DEVICE_KEY_CHARS} chars) with "
    f"string (<= {MAX_DEVICE_VALUE_CHARS} chars), number, boolean or null values"
)

DeviceSummary = dict[str, str | int | float | bool | None]


class DeviceInfoError(ValueError):
    """A name or device summary that is not shown: which field, and what it must be."""

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(f"{field} must be {expected}")
        self.field = field  # "name", "device" or "device.<key>"
        self.expected = expected


def check_name(value: object) -> str:
    """The name as it is shown, stripped of surrounding white space; ``""`` when no character of
    it can be seen (the caller shows ``fallback_name`` instead); ``DeviceInfoError`` when it is
    not a string, is too long, or holds a character that is not printable beside one that can be
    seen."""
    if not isinstance(value, str):
        raise DeviceInfoError("name", "a string")
    name = value.strip(SPACE)
    if len(name) > MAX_NAME_CHARS:
        raise DeviceInfoError("name", NAME_EXPECTED)
    if not is_visible(name):
        return ""  # shows nothing, hides nothing: no name, whatever it is made of
    if not all(_printable(c) for c in name):
        raise DeviceInfoError("name", NAME_EXPECTED)  # would hide or reorder what is seen
    return name


def is_visible(name: str) -> bool:
    """Whether at least one character of ``name`` can be seen."""
    return any(c not in BLANKS and unicodedata.category(c) not in UNSEEN for c in name)


def fallback_name(peer_id: str) -> str:
    """How a device without a visible name is shown (the hub names it so: server/rooms.py)."""
    return f"device-{peer_id[:4]}"


def shown_name(name: str, peer_id: str) -> str:
    return name if is_visible(name) else fallback_name(peer_id)


def check_device(value: object) -> DeviceSummary:
    """A copy of the ``device`` summary, or ``DeviceInfoError`` naming the first wrong key."""
    if not isinstance(value, dict) or len(value) > MAX_DEVICE_KEYS:
        raise DeviceInfoError("device", DEVICE_EXPECTED)
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > MAX_DEVICE_KEY_CHARS or not _is_scalar(item):
            raise DeviceInfoError("device", DEVICE_EXPECTED)
    if "backend" in value and value["backend"] not in BACKENDS:
        raise DeviceInfoError("device.backend", BACKEND_EXPECTED)
    if "tokens_per_s" in value and not _is_speed(value["tokens_per_s"]):
        raise DeviceInfoError("device.tokens_per_s", TOKENS_EXPECTED)
    if "kind" in value and not (
        isinstance(value["kind"], str) and KIND_RE.fullmatch(value["kind"])
    ):
        raise DeviceInfoError("device.kind", KIND_EXPECTED)
    if "audit_key" in value and not (
        isinstance(value["audit_key"], str) and AUDIT_KEY_RE.fullmatch(value["audit_key"])
    ):
        raise DeviceInfoError("device.audit_key", AUDIT_KEY_EXPECTED)
    return dict(value)


def _printable(c: str) -> bool:
    return c == " " or unicodedata.category(c) not in UNPRINTABLE


def _is_scalar(value: object) -> bool:
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and len(value) <= MAX_DEVICE_VALUE_CHARS


def _is_speed(value: object) -> bool:
    # bool is an int in Python; NaN fails both comparisons, infinity the second.
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value <= MAX_TOKENS_PER_S
    )
