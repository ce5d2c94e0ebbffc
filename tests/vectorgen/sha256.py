"""Golden SHA-256 vectors (tests/vectors/sha256.json) for the project's own JavaScript SHA-256.

``static/js/numerics/sha256.js`` is what ``numerics/hash.js`` hashes with when a page has no Web
Crypto (plain http from a LAN address is not a secure context). Its digests must be hashlib's;
``tests/js/sha256.test.mjs`` compares it with every case written here, and
``tests/numerics/test_sha256_vectors.py`` checks the file's digests with hashlib and proves the
check names a corrupted case.

Cases: the FIPS 180-4 / NIST examples ("", "abc", the 448- and 896-bit messages, one million
"a"), every length 0..130 of pseudo-random bytes (all the padding boundaries: 55/56 and 119/120
bytes, where the length field moves to an extra block, and 63/64/65, 127/128), and a few larger
buffers (1000, 4096, 65536 + 7 and 100003 bytes). Short inputs are stored as hex; long ones as a
seed of ``lcg_bytes`` (the JSON records the rule), which keeps the file small; the short ones
carry their seed too, so a reader proves its generator on them before trusting it on long ones.

    python tests/vectorgen --write sha256   # regenerate tests/vectors/sha256.json
    python tests/vectorgen --check sha256   # recompute, compare (exit 1 if different)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from vectorgen.files import check_texts, write_texts

FILE = "sha256.json"
FORMAT = "daisychain-sha256-vectors"
FORMAT_VERSION = 1
LCG_RULE = (
    "x[0] = lcg_seed; x[i+1] = (1664525 * x[i] + 1013904223) mod 2^32; "
    "byte i = x[i+1] >> 24 (the top 8 bits), for i = 0 .. length-1"
)
SHORT_LENGTHS = range(131)  # 0..130: every padding case of one and two blocks
LONG_LENGTHS = (1000, 4096, 65543, 100003)
NIST = (
    ("nist.empty", b""),
    ("nist.abc", b"abc"),
    ("nist.448-bit", b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
    (
        "nist.896-bit",
        b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
        b"klmnopqrlmnopqrsmnopqrstnopqrstu",
    ),
)


def lcg_bytes(seed: int, length: int) -> bytes:
    """The pseudo-random input bytes of ``LCG_RULE`` (a reader in any language repeats it)."""
    out = bytearray(length)
    x = seed & 0xFFFFFFFF
    for i in range(length):
        x = (1664525 * x + 1013904223) & 0xFFFFFFFF
        out[i] = x >> 24
    return bytes(out)


def _case(name: str, data: bytes, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "length": len(data),
        "input": source,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def build() -> dict[str, Any]:
    """The whole document, digests from hashlib."""
    cases = [_case(name, data, {"hex": data.hex()}) for name, data in NIST]
    million = b"a" * 1_000_000
    cases.append(_case("nist.million-a", million, {"repeat_hex": "61"}))
    for n in SHORT_LENGTHS:
        seed = 1000 + n
        data = lcg_bytes(seed, n)
        cases.append(_case(f"lcg.{n}", data, {"hex": data.hex(), "lcg_seed": seed}))
    for n in LONG_LENGTHS:
        seed = 2000 + n
        cases.append(_case(f"lcg.{n}", lcg_bytes(seed, n), {"lcg_seed": seed}))
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated_by": "python tests/vectorgen --write sha256 (digests: Python hashlib)",
        "inputs": {
            "hex": "the input bytes, hex",
            "lcg_seed": f"`length` bytes of: {LCG_RULE} (with hex too: both give the same bytes)",
            "repeat_hex": "these bytes repeated until the input is `length` bytes long",
        },
        "cases": cases,
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


def input_bytes(case: dict[str, Any]) -> bytes:
    """A case's input from whichever form the file gives (the reader's side of the format)."""
    src, n, name = case["input"], case["length"], case["name"]
    if "hex" in src:
        data = bytes.fromhex(src["hex"])
        if "lcg_seed" in src and lcg_bytes(src["lcg_seed"], n) != data:
            raise ValueError(f"case {name}: the hex input is not the bytes of its lcg_seed")
    elif "lcg_seed" in src:
        data = lcg_bytes(src["lcg_seed"], n)
    else:
        unit = bytes.fromhex(src["repeat_hex"])
        data = unit * (n // len(unit))
    if len(data) != n:
        raise ValueError(f"case {name}: {len(data)} input bytes, the file says {n}")
    return data


def mismatch(doc: dict[str, Any]) -> str | None:
    """The first case whose recorded digest is not hashlib's of its input, or None."""
    for case in doc["cases"]:
        if hashlib.sha256(input_bytes(case)).hexdigest() != case["sha256"]:
            return str(case["name"])
    return None


def write(directory: Path) -> str:
    return write_texts(directory, {FILE: render()})


def check(directory: Path) -> str:
    return check_texts(directory, {FILE: render()}, "run `python tests/vectorgen --write sha256`")
