"""The golden SHA-256 vectors (tests/vectors/sha256.json, written by
``python tests/vectorgen --write sha256`` from ``vectorgen.sha256``): the committed file is
what the generator writes, every digest is hashlib's and the NIST answers are the standard's, and
the check names a case whose digest or stored input was corrupted. ``tests/js/sha256.test.mjs``
holds the page's own SHA-256 to the same file.
"""

from __future__ import annotations

import json

import pytest

from vectorgen.files import SOURCE_DIR
from vectorgen.sha256 import FILE, mismatch, render

VECTORS = SOURCE_DIR / FILE


def test_committed_file_is_what_write_produces() -> None:
    assert VECTORS.read_text(encoding="utf-8") == render(), (
        "tests/vectors/sha256.json differs: run `python tests/vectorgen --write sha256`"
    )


def test_every_digest_is_hashlibs_and_the_nist_answers_are_the_standards() -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert mismatch(doc) is None
    by_name = {c["name"]: c["sha256"] for c in doc["cases"]}
    # FIPS 180-4 examples (NIST CSRC "Examples with intermediate values", SHA-256)
    assert by_name["nist.abc"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert by_name["nist.448-bit"] == (
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    )
    assert by_name["nist.million-a"] == (
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    )
    lengths = {c["length"] for c in doc["cases"]}
    assert {55, 56, 63, 64, 65, 119, 120, 127, 128} <= lengths
    assert VECTORS.stat().st_size < 200_000


@pytest.mark.parametrize("field", ["sha256", "hex"])
def test_a_corrupted_case_is_caught(field: str) -> None:
    # one bit of one digest, or one bit of one stored input: the check names that case
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    case = next(c for c in doc["cases"] if c["name"] == "lcg.56")
    if field == "sha256":
        case["sha256"] = f"{int(case['sha256'][0], 16) ^ 1:x}" + case["sha256"][1:]
        assert mismatch(doc) == "lcg.56"
    else:
        data = bytearray(bytes.fromhex(case["input"]["hex"]))
        data[20] ^= 0x10
        case["input"]["hex"] = data.hex()
        with pytest.raises(ValueError, match=r"lcg\.56: the hex input is not the bytes of its"):
            mismatch(doc)
        del case["input"]["lcg_seed"]
        assert mismatch(doc) == "lcg.56"
