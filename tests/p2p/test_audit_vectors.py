"""Audits' building blocks in Python (``p2p.statements``, ``p2p.auditkey``, ``p2p.draw``) against
the golden cases of tests/vectors/audit/ (docs/TRUST.md), every refusal fed a wrong input, and
planted bugs seen to fail.

The planted bugs are source mutations: the module's text with one expression changed, loaded
as a fresh module and run through the same vector checks (``mutant``); each must be caught. The
JavaScript twin is checked on the same files by tests/js/audit_vectors.test.mjs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

import audit_vectors
from daisychain.p2p import auditkey, draw, statements
from source_mutant import mutant

FOLDER = audit_vectors.FOLDER


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / name).read_text(encoding="utf-8"))
    return data


STATEMENTS, KEYS, DRAW = load("statements.json"), load("keys.json"), load("draw.json")
b = bytes.fromhex


def test_the_files_are_what_the_generator_writes() -> None:
    for name, text in audit_vectors.files().items():
        stored = (FOLDER / name).read_text(encoding="utf-8")
        assert stored == text, (
            f"tests/vectors/audit/{name} is stale: python tests/audit_vectors.py --write"
        )


# -- the checks, as functions of the modules so that a mutant goes through the same ones


def from_fields(st: Any, f: dict[str, Any]) -> Any:
    head = st.Head(f["run"], f["step"], f["round"], f["author"], b(f["roster"]))
    if f["kind"] == 1:
        return st.Contribution(
            head,
            f["private"],
            b(f["prev"]),
            b(f["nonce_hash"]),
            b(f["data"]),
            tuple(map(b, f["chunks"])),
        )
    if f["kind"] == 2:
        return st.Reduced(head, f["chunk"], b(f["digest"]))
    if f["kind"] == 3:
        return st.Reveal(head, b(f["nonce"]), b(f["seen"]))
    return st.Audit(
        head, st.Item(f["item"]), f["index"], b(f["of"]), b(f["data"]), tuple(map(b, f["digests"]))
    )


def statement_mismatches(st: Any) -> list[str]:
    bad = []
    for c in STATEMENTS["rosters"]:
        if st.roster_digest(c["peers"], c["shares"]).hex() != c["digest"]:
            bad.append(f"roster {c['shares']}")
    for c in STATEMENTS["chunks"]:
        if st.chunk_digest(b(c["payload"])).hex() != c["digest"]:
            bad.append(f"chunk of {len(c['payload']) // 2} bytes")
    for c in STATEMENTS["data"]:
        if st.data_digest(c["rows"]).hex() != c["digest"]:
            bad.append(f"data {c['rows']}")
    for c in STATEMENTS["nonces"]:
        n = st.nonce(b(c["secret"]), c["run"], c["step"], c["round"])
        if n.hex() != c["nonce"] or st.nonce_hash(n).hex() != c["nonce_hash"]:
            bad.append(f"nonce of step {c['step']}")
    for c in STATEMENTS["statements"]:
        s = from_fields(st, c["fields"])
        if st.encode(s).hex() != c["bytes"]:
            bad.append(f"encode {c['what']}")
        elif st.parse(b(c["bytes"])) != s:
            bad.append(f"parse {c['what']}")
    for c in STATEMENTS["seen"]:
        got = st.seen(*(tuple(map(b, c[k])) for k in ("contributions", "reduced", "carried")))
        if got.hex() != c["seen"]:
            bad.append(f"seen {len(c['contributions'])}")
    for c in STATEMENTS["refused"]:
        try:
            st.parse(b(c["bytes"]))
            bad.append(f"parsed {c['what']}")
        except st.BadStatement as exc:
            if str(exc) != c["error"]:
                bad.append(f"refusal of {c['what']}: {exc}")
    return bad


def key_mismatches(ak: Any) -> list[str]:
    bad = []
    for c in KEYS["keys"]:
        if (
            ak.signing_seed(b(c["secret"])).hex() != c["seed"]
            or ak.SigningKey(b(c["secret"])).public_hex != c["public"]
        ):
            bad.append(f"key of {c['secret'][:8]}")
    for c in KEYS["signatures"]:
        k = ak.SigningKey(b(c["secret"]))
        sig = k.sign(b(c["statement"]))
        if sig.hex() != c["signature"] or not ak.verify(k.public, b(c["statement"]), sig):
            bad.append(f"signature of {c['statement'][:16]}")
    for c in KEYS["public_keys"]:
        try:
            ak.check_public_key(b(c["key"]))
            if c["error"]:
                bad.append(f"accepted {c['what']}")
        except ak.BadKey as exc:
            if str(exc) != c["error"]:
                bad.append(f"refused {c['what']}: {exc}")
    for c in KEYS["failing"]:
        if ak.verify(b(c["public"]), b(c["message"]), b(c["signature"])):
            bad.append(f"verified {c['what']}")
    return bad


def draw_mismatches(dr: Any) -> list[str]:
    bad = []
    for c in DRAW["seeds"]:
        s = dr.seed(
            c["run"],
            c["step"],
            c["round"],
            b(c["roster"]),
            b(c["prev"]),
            b(c["seen"]),
            [b(n) for n in c["nonces"]],
        )
        if s.hex() != c["seed"]:
            bad.append(f"seed of step {c['step']}")
    for c in DRAW["u"]:
        if dr.u(b(c["seed"]), b(c["label"])) != c["u"]:
            bad.append(f"u({c['label']})")
    for c in DRAW["audited"]:
        if dr.audited(b(c["seed"]), c["one_in"]) != c["audited"]:
            bad.append(f"audited 1 in {c['one_in']}")
    for c in DRAW["assignments"]:
        a = dr.assign(
            b(c["seed"]),
            c["shares"],
            blocks=c["blocks"],
            audited=c["audited"],
            private=c["private"],
            carried=c["carried"],
        )
        got = (
            [list(p) for p in a.contributions],
            [list(p) for p in a.carried],
            [list(p) for p in a.reductions],
        )
        if got != (c["contributions"], c["carried_auditors"], c["reductions"]):
            bad.append(f"assign {c['what']}")
    return bad


def test_statements_match_the_vectors() -> None:
    assert statement_mismatches(statements) == []


def test_keys_and_signatures_match_the_vectors() -> None:
    assert key_mismatches(auditkey) == []


def test_the_draw_matches_the_vectors() -> None:
    assert draw_mismatches(draw) == []


def test_rfc8032_section_7_1_through_cryptography() -> None:
    """The vectors' RFC cases are the RFC's (a public key derived, a signature reproduced)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for c in KEYS["rfc8032"]:
        key = Ed25519PrivateKey.from_private_bytes(b(c["seed"]))
        assert key.public_key().public_bytes_raw().hex() == c["public"]
        assert key.sign(b(c["message"])).hex() == c["signature"]
        assert auditkey.verify(b(c["public"]), b(c["message"]), b(c["signature"]))


def test_the_sha512_cases_are_hashlibs() -> None:
    for c in KEYS["sha512"]:
        assert hashlib.sha512(b(c["data"])).hexdigest() == c["digest"]


# -- every check fed a wrong input


def head(**kw: Any) -> statements.Head:
    fields: dict[str, Any] = {
        "run": "0123456789abcdef",
        "step": 1,
        "round": 0,
        "author": "A",
        "roster": bytes(32),
    }
    fields.update(kw)
    return statements.Head(**fields)


@pytest.mark.parametrize(
    ("what", "build", "words"),
    [
        ("a run id in capitals", lambda: head(run="0123456789ABCDEF"), "16 lowercase hex"),
        ("a run id of 15 digits", lambda: head(run="0" * 15), "16 lowercase hex"),
        ("a negative step", lambda: head(step=-1), "step must be"),
        ("step 2^32", lambda: head(step=2**32), "step must be"),
        ("round 256", lambda: head(round=256), "round must be"),
        ("an id of 13 characters", lambda: head(author="A" * 13), "1 to 12 characters"),
        ("an id with a space", lambda: head(author="a b"), "peer id"),
        ("an empty id", lambda: head(author=""), "peer id"),
        ("a roster digest of 31 bytes", lambda: head(roster=bytes(31)), "roster must be 32 bytes"),
    ],
)
def test_a_head_with_a_wrong_field_is_refused(
    what: str, build: Callable[[], statements.Head], words: str
) -> None:
    with pytest.raises(statements.BadStatement, match=words):
        statements.reveal(statements.Reveal(build(), bytes(32), bytes(32)))


def test_wrong_bodies_are_refused() -> None:
    h, d = head(), bytes(32)
    with pytest.raises(statements.BadStatement, match="prev must be 32 bytes"):
        statements.contribution(statements.Contribution(h, False, d[:1], d, d, (d,)))
    with pytest.raises(statements.BadStatement, match="chunks must be 1 to 64"):
        statements.contribution(statements.Contribution(h, False, d, d, d, ()))
    with pytest.raises(statements.BadStatement, match="chunks must be 1 to 64"):
        statements.contribution(statements.Contribution(h, False, d, d, d, (d,) * 65))
    with pytest.raises(statements.BadStatement, match=r"chunks\[1\] must be 32"):
        statements.contribution(statements.Contribution(h, False, d, d, d, (d, d + b"x")))
    with pytest.raises(statements.BadStatement, match="chunk must be an integer"):
        statements.reduced(statements.Reduced(h, 256, d))
    with pytest.raises(statements.BadStatement, match="digests must be 1 to 64"):
        statements.audit(statements.Audit(h, statements.Item.REDUCTION, 0, d, d, ()))
    with pytest.raises(statements.BadStatement, match="nonce must be 32"):
        statements.nonce_hash(b"short")


def test_wrong_rosters_rows_and_secrets_are_refused() -> None:
    with pytest.raises(statements.BadStatement, match="1 to 64 peers"):
        statements.roster_digest([], [])
    with pytest.raises(statements.BadStatement, match="1 to 64 peers"):
        statements.roster_digest([f"p{i}" for i in range(65)], [1] * 65)
    with pytest.raises(statements.BadStatement, match="one share each"):
        statements.roster_digest(["A", "B"], [1])
    with pytest.raises(statements.BadStatement, match="distinct"):
        statements.roster_digest(["A", "A"], [1, 1])
    with pytest.raises(statements.BadStatement, match=r"share 1 must be an integer in \[0, 4096\]"):
        statements.roster_digest(["A", "B"], [1, 4097])
    with pytest.raises(statements.BadStatement, match="2-d array"):
        statements.data_digest([1, 2, 3])
    with pytest.raises(statements.BadStatement, match="token ids must be integers"):
        statements.data_digest([[1, -2]])
    with pytest.raises(statements.BadStatement, match="secret must be 32 bytes"):
        statements.nonce(bytes(31), "0123456789abcdef", 1, 0)
    with pytest.raises(auditkey.BadKey, match="secret must be 32 bytes"):
        auditkey.SigningKey(bytes(33))
    with pytest.raises(draw.BadStatement, match="nonces must be one"):
        draw.seed("0123456789abcdef", 1, 0, bytes(32), bytes(32), bytes(32), [])
    with pytest.raises(ValueError, match=r"one_in must be an integer in \[1, 65536\]"):
        draw.audited(bytes(32), 0)
    with pytest.raises(ValueError, match=r"one_in must be an integer in \[1, 65536\]"):
        draw.audited(bytes(32), 65537)
    with pytest.raises(ValueError, match="private flags"):
        draw.assign(bytes(32), [1, 1], blocks=4, audited=True, private=[False])


def test_the_draw_refuses_wrong_inputs() -> None:
    run, d = "0123456789abcdef", bytes(32)
    for what, args in [
        ("roster", (d[:31], d, d, [d])),
        ("prev", (d, d + b"x", d, [d])),
        ("seen", (d, d, b"", [d])),
    ]:
        with pytest.raises(draw.BadStatement, match=f"{what} must be 32 bytes"):
            draw.seed(run, 1, 0, *args)  # type: ignore[arg-type]
    with pytest.raises(draw.BadStatement, match="nonces must be one"):
        draw.seed(run, 1, 0, d, d, d, [d, d[:31]])
    for shares, kw, words in [
        ([], {}, r"0 shares \(1 to 64\)"),
        ([1] * 65, {}, r"65 shares \(1 to 64\)"),
        ([1, 1], {"carried": [1] * 65}, r"65 carried items \(at most 64\)"),
        ([1, 1], {"blocks": 0}, r"0 blocks \(at least 1\)"),
    ]:
        args: dict[str, Any] = {"blocks": 4, "audited": True, **kw}
        with pytest.raises(ValueError, match=words):
            draw.assign(d, shares, **args)
    # no carried items unless given; a lone block makes one non-empty chunk
    a = draw.assign(d, [4, 4, 4], blocks=1, audited=True)
    assert a.carried == () and len(a.reductions) == 1 and len(a.contributions) == 3
    # the limits are inclusive: 64 peers and 64 carried items are a roster's most
    assert len(draw.assign(d, [1, 1], blocks=4, audited=False, carried=[1] * 64).carried) == 64
    assert len(draw.assign(d, [1] * 64, blocks=64, audited=True).contributions) == 64


def test_the_key_refusals() -> None:
    for text, words in [
        ("A" * 64, "64 lowercase hex"),
        ("0" * 63, "64 lowercase hex"),
        (7, "64 lowercase hex"),
        ("01" + "0" * 62, "prime-order group"),  # the neutral point
        ("02" + "0" * 62, "canonical encoding"),  # y = 2: no x
    ]:
        with pytest.raises(auditkey.BadKey, match=words):
            auditkey.parse_public_key(text)  # type: ignore[arg-type]
    with pytest.raises(auditkey.BadKey, match="32 bytes"):
        auditkey.check_public_key(bytes(31))
    key = auditkey.SigningKey(audit_vectors.secret(0))
    assert auditkey.parse_public_key(key.public_hex) == key.public


def test_every_flipped_bit_of_a_signature_is_refused() -> None:
    key = auditkey.SigningKey(audit_vectors.secret(1))
    message = b(STATEMENTS["statements"][0]["bytes"])
    sig = key.sign(message)
    assert auditkey.verify(key.public, message, sig)
    for bit in range(512):
        flipped = bytearray(sig)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert not auditkey.verify(key.public, message, bytes(flipped)), (
            f"bit {bit} flipped was accepted"
        )
    for cut in (1, len(message) - 1):
        assert not auditkey.verify(key.public, message[:cut], sig), "a truncated statement verified"


def test_an_assignment_follows_the_rule_on_many_seeds() -> None:
    """An independent reading of TRUST.md's rule on random rosters: every auditor is another
    peer, and one that meets the earliest non-empty candidate set."""
    import random

    rng = random.Random(5)
    for trial in range(400):
        n = rng.randint(2, 9)
        shares = [rng.choice([0, 1, 2, 3, 4, 8, 8, 16]) for _ in range(n)]
        if sum(shares) == 0:
            shares[0] = 1
        seed = hashlib.sha256(bytes((trial % 256, trial // 256))).digest()
        a = draw.assign(seed, shares, blocks=rng.randint(1, 40), audited=True)
        order = sorted((j for j in range(n) if shares[j] > 0), key=lambda j: (-shares[j], j))
        assert [j for j, _ in a.contributions] == order
        assigned: set[int] = set()
        for j, auditor in a.contributions:
            assert auditor != j
            free = [x for x in range(n) if x != j and shares[x] > 0 and x not in assigned]
            strong = [x for x in free if 2 * shares[x] >= shares[j]]
            if strong:
                assert auditor in strong, (shares, j, auditor, strong)
            elif free:
                assert auditor in free
            assigned.add(auditor)
        for k, auditor in a.reductions:
            assert auditor != k


def test_audited_rate_is_about_one_in_n() -> None:
    hits = sum(
        draw.audited(hashlib.sha256(i.to_bytes(4, "little")).digest(), 16) for i in range(16000)
    )
    assert 850 < hits < 1150, hits  # 1000 expected; 4.7 standard deviations either side


# -- planted bugs: each must fail the vector checks (or verification)


@pytest.mark.parametrize(
    ("what", "old", "new"),
    [
        ("the step written big-endian", 'struct.pack("<I", step)', 'struct.pack(">I", step)'),
        ("a share written big-endian", 'struct.pack("<H", share)', 'struct.pack(">H", share)'),
        ("an id padded with spaces", 'ljust(ID_BYTES, b"\\0")', 'ljust(ID_BYTES, b" ")'),
        ("seen without its magic", "hashlib.sha256(SEEN_MAGIC)", "hashlib.sha256()"),
        ("the private flag dropped", "bytes((1 if c.private else 0,))", "bytes((0,))"),
        ("an empty chunk hashed", "if payload else ABSENT", "if payload is not None else ABSENT"),
        (
            "the nonce without the round",
            "secret + attempt_bytes(run, step, round_)",
            "secret + attempt_bytes(run, step, 0)",
        ),
        ("an audit's count left out", "+ bytes((len(a.digests),))", ""),
    ],
)
def test_a_planted_statement_bug_fails_the_vectors(what: str, old: str, new: str) -> None:
    assert statement_mismatches(mutant(statements, old, new)), what


@pytest.mark.parametrize(
    ("what", "old", "new"),
    [
        ("2 s[a] > s[j]", "2 * shares[a] >= share", "2 * shares[a] > share"),
        (
            "ties broken by the last rank",
            "key=lambda j: (-shares[j], j)",
            "key=lambda j: (-shares[j], -j)",
        ),
        ("shares smallest first", "key=lambda j: (-shares[j], j)", "key=lambda j: (shares[j], j)"),
        ("assigned peers not skipped", "if a not in assigned]", "]"),
        ("u read big-endian", 'struct.unpack_from("<I"', 'struct.unpack_from(">I"'),
        ("a seed without the nonces", "h.update(n)", "pass"),
        ("a private contribution drawn", "shares[j] > 0 and not flags[j]", "shares[j] > 0"),
        (
            "carried items only when audited",
            "for c, share in enumerate(carried):",
            "for c, share in enumerate(carried if audited else ()):",
        ),
        ("reductions not spread", "if a not in reducing] or others", "] or others"),
        (
            "empty chunks audited",
            "if end == first:\n                continue",
            "if end < first:\n                continue",
        ),
    ],
)
def test_a_planted_draw_bug_fails_the_vectors(what: str, old: str, new: str) -> None:
    assert draw_mismatches(mutant(draw, old, new)), what


# Not here: dropping auditkey.verify's own S < L check. OpenSSL refuses S >= L as well (the
# vectors' "S + L" case fails either way), so that mutant is equivalent in Python; the check is
# said there so every twin visibly does it, and the JavaScript fallback's is planted in
# tests/js/audit_vectors.test.mjs.
@pytest.mark.parametrize(
    ("what", "old", "new"),
    [
        (
            "a signature over a truncated statement",
            "return self._key.sign(statement)",
            "return self._key.sign(statement[:-1])",
        ),
        (
            "small-order keys accepted",
            "if point == (0, 1) or not _is_neutral_times(point, L):",
            "if False:",
        ),
        ("the key label left out", "KEY_LABEL + secret", "secret"),
        ("x = 0 with the sign bit accepted", "if x == 0 and sign:", "if False:"),
    ],
)
def test_a_planted_key_bug_fails(what: str, old: str, new: str) -> None:
    assert key_mismatches(mutant(auditkey, old, new)), what
