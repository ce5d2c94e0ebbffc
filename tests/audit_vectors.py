"""The golden cases of audits' building blocks: tests/vectors/audit/ (docs/TRUST.md).

- ``statements.json``: roster digests, chunk and data digests, nonces, ``seen``, statements of
  every kind (fields and bytes), and bytes that are not statements (the refusal's words);
- ``keys.json``: secrets to signing seeds and public keys, signatures of the statements above,
  RFC 8032 section 7.1's test vectors, random keys and messages signed by ``cryptography``,
  SHA-512 of several lengths, keys that must be refused and signatures that must fail;
- ``draw.json``: seeds, ``u`` of labels, "audited" at several rates, and assignments for rosters
  with ties, a lone contributor, shares of 0, private data, carried items, one roster peer;
- ``contributions.json``: contributions as an auditor recomputes them: a small model's states
  (by seed and local steps, not bytes), the text as token ids, each state's lane offsets, and
  for every rank of rosters with pieces spanning lanes, shares of 1 and of 0, each chunk's
  digest (SHA-256 of its ``codec.encode`` bytes), the data digest and the float32 mean's digest.

Every value comes from the Python twin (``p2p.statements``, ``p2p.auditkey``, ``p2p.draw``,
``p2p.contribution`` on the numpy reference), the RFC and ``cryptography``; inputs are fixed or
drawn from a seeded generator, so regeneration is byte-identical. Checked by
tests/p2p/test_audit_vectors.py, tests/p2p/test_audit_contributions.py (every gated CPU backend),
tests/gpu/test_gpu_contributions.py (the wgpu kernels),
tests/js/audit_vectors.test.mjs, tests/js/audit_contributions.test.mjs, tests/js/ed25519.test.mjs
and in Chromium by tests/browser/test_browser_audit.py.

    python tests/audit_vectors.py --write   # regenerate the files
    python tests/audit_vectors.py --check   # exit 1 if a file is stale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from daisychain import batches, training
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.optim import AdamWConfig
from daisychain.p2p import auditkey, contribution, draw
from daisychain.p2p import statements as st

FOLDER = Path(__file__).resolve().parent / "vectors" / "audit"
FORMAT_VERSION = 1
RUN = "0123456789abcdef"
PEERS = ["Zk9dEf0a1B2c", "a-b_c", "Q", "x" * 12]


def secret(i: int) -> bytes:
    """A fixed secret: 32 bytes of SHA-256("daisychain test secret" || i)."""
    return hashlib.sha256(b"daisychain test secret" + bytes((i,))).digest()


def digest(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def hx(b: bytes) -> str:
    return b.hex()


def _head(author: str, roster: bytes, step: int = 7, round_: int = 2) -> st.Head:
    return st.Head(RUN, step, round_, author, roster)


def statement_cases() -> dict[str, Any]:
    rosters = [
        (["A"], [8]),
        (PEERS[:3], [3, 3, 2]),
        (PEERS, [4096, 0, 1, 258]),  # a share above 255: both bytes of the u16 matter
        ([f"p{i:02d}" for i in range(64)], [64] * 64),
    ]
    roster_cases = [
        {"peers": p, "shares": s, "digest": hx(st.roster_digest(p, s))} for p, s in rosters
    ]
    roster = st.roster_digest(PEERS[:3], [3, 3, 2])
    payloads = [b"", b"\x00", bytes(range(256)) * 3]
    chunk_cases = [{"payload": hx(p), "digest": hx(st.chunk_digest(p))} for p in payloads]
    data_rows = [[[1, 2, 3]], [[0, 65535, 2**31 - 1, 5], [9, 8, 7, 6]]]
    data_cases = [{"rows": r, "digest": hx(st.data_digest(r))} for r in data_rows]
    nonces = []
    for i, (step, round_) in enumerate([(0, 0), (1, 0), (7, 2), (2**32 - 1, 255)]):
        n = st.nonce(secret(i), RUN, step, round_)
        nonces.append(
            {
                "secret": hx(secret(i)),
                "run": RUN,
                "step": step,
                "round": round_,
                "nonce": hx(n),
                "nonce_hash": hx(st.nonce_hash(n)),
            }
        )
    chunks = (digest("chunk 0"), st.ABSENT, digest("chunk 2"))
    n0 = st.nonce(secret(0), RUN, 7, 2)
    statements: list[tuple[str, st.Statement]] = [
        (
            "contribution commit",
            st.Contribution(
                _head(PEERS[0], roster),
                False,
                digest("prev"),
                st.nonce_hash(n0),
                digest("rows"),
                chunks,
            ),
        ),
        (
            "contribution commit, private data",
            st.Contribution(
                _head(PEERS[1], roster), True, digest("prev"), digest("nh"), st.ABSENT, chunks
            ),
        ),
        (
            "contribution commit, a share of 0",
            st.Contribution(
                _head(PEERS[2], roster),
                False,
                digest("prev"),
                digest("nh2"),
                st.ABSENT,
                (st.ABSENT,) * 3,
            ),
        ),
        (
            "contribution commit, step 2^32 - 1 and round 255",
            st.Contribution(
                _head("Q", st.roster_digest(["Q"], [1]), 2**32 - 1, 255),
                False,
                digest("p"),
                digest("n"),
                digest("d"),
                (digest("c"),),
            ),
        ),
        ("reduced commit", st.Reduced(_head(PEERS[1], roster), 1, digest("reduced 1"))),
        ("reveal", st.Reveal(_head(PEERS[0], roster), n0, digest("seen"))),
        (
            "audit result, contribution",
            st.Audit(
                _head(PEERS[1], roster),
                st.Item.CONTRIBUTION,
                0,
                digest("of"),
                digest("rows"),
                chunks,
            ),
        ),
        (
            "audit result, reduction",
            st.Audit(
                _head(PEERS[2], roster),
                st.Item.REDUCTION,
                1,
                digest("of2"),
                st.ABSENT,
                (digest("r"),),
            ),
        ),
    ]
    statement_cases = [
        {"what": what, "fields": fields(s), "bytes": hx(st.encode(s))} for what, s in statements
    ]
    encoded = [st.encode(s) for _, s in statements]
    seen_cases = [
        {"contributions": [hx(e) for e in encoded[:3]], "reduced": [hx(encoded[4])], "carried": []},
        {"contributions": [hx(encoded[0])], "reduced": [], "carried": [hx(encoded[3])]},
        {"contributions": [], "reduced": [], "carried": []},
    ]
    for c in seen_cases:
        c["seen"] = hx(
            st.seen(
                *(
                    tuple(bytes.fromhex(x) for x in c[k])
                    for k in ("contributions", "reduced", "carried")
                )
            )
        )
    good = encoded[0]
    bad = [
        ("too short", good[:61]),
        ("wrong magic", b"DCS2" + good[4:]),
        ("unknown kind", good[:4] + b"\x05" + good[5:]),
        ("a contribution commit cut inside a digest", good[:-1]),
        ("a contribution commit with no chunk digest", good[: st.HEADER + 97]),
        ("a contribution commit of 65 chunk digests", good + bytes(32 * 62)),
        ("flags other than 0 or 1", good[: st.HEADER] + b"\x02" + good[st.HEADER + 1 :]),
        ("an author with a zero byte inside", good[:18] + b"A\x00B" + bytes(9) + good[30:]),
        ("an author of no bytes", good[:18] + bytes(12) + good[30:]),
        ("a reduced commit one byte too long", encoded[4] + b"\x00"),
        ("a reveal cut short", encoded[5][:-32]),
        ("an audit whose count is not its digests", encoded[6][:-32]),
        ("an audit of item 3", encoded[7][: st.HEADER] + b"\x03" + encoded[7][st.HEADER + 1 :]),
    ]
    refusals = []
    for what, data in bad:
        try:
            st.parse(data)
        except st.BadStatement as exc:
            refusals.append({"what": what, "bytes": hx(data), "error": str(exc)})
        else:
            raise AssertionError(f"{what}: parsed")
    return {
        "format_version": FORMAT_VERSION,
        "rosters": roster_cases,
        "chunks": chunk_cases,
        "data": data_cases,
        "nonces": nonces,
        "statements": statement_cases,
        "seen": seen_cases,
        "refused": refusals,
    }


def fields(s: st.Statement) -> dict[str, Any]:
    """A statement's fields as JSON (digests as hex)."""
    h = s.head
    out: dict[str, Any] = {
        "kind": int(
            st.Kind.CONTRIBUTION
            if isinstance(s, st.Contribution)
            else st.Kind.REDUCED
            if isinstance(s, st.Reduced)
            else st.Kind.REVEAL
            if isinstance(s, st.Reveal)
            else st.Kind.AUDIT
        ),
        "run": h.run,
        "step": h.step,
        "round": h.round,
        "author": h.author,
        "roster": hx(h.roster),
    }
    if isinstance(s, st.Contribution):
        out |= {
            "private": s.private,
            "prev": hx(s.prev),
            "nonce_hash": hx(s.nonce_hash),
            "data": hx(s.data),
            "chunks": [hx(c) for c in s.chunks],
        }
    elif isinstance(s, st.Reduced):
        out |= {"chunk": s.chunk, "digest": hx(s.digest)}
    elif isinstance(s, st.Reveal):
        out |= {"nonce": hx(s.nonce), "seen": hx(s.seen)}
    else:
        out |= {
            "item": int(s.item),
            "index": s.index,
            "of": hx(s.of),
            "data": hx(s.data),
            "digests": [hx(d) for d in s.digests],
        }
    return out


# RFC 8032 section 7.1: (secret key, public key, message, signature), tests 1, 2, 3 and SHA(abc)
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
    (
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        hashlib.sha512(b"abc").hexdigest(),
        "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    ),
]

P = auditkey.P


def _add_encoded(a: bytes, b: bytes) -> bytes:
    """The encoding of the sum of two encoded points (affine Edwards addition, RFC 8032 5.1.4)."""
    pa, pb = auditkey._decode(a), auditkey._decode(b)
    assert pa is not None and pb is not None
    (x1, y1), (x2, y2) = pa, pb
    t = auditkey.D * x1 * x2 * y1 * y2 % P
    x = (x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P
    y = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _small_order_keys() -> list[tuple[str, bytes]]:
    """Encodings of the neutral point, points of small order, a mixed key and encodings that are
    no point: all refused; the base point last, accepted."""
    neutral = (1).to_bytes(32, "little")
    order2 = (P - 1).to_bytes(32, "little")  # (0, -1)
    order4 = bytes(32)  # (sqrt(-1), 0), sign 0
    base = bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666")
    # A point of order 8: y with x^2 = (y^2 - 1) / (d y^2 + 1) and 8 P = 0, from the RFC's
    # curve: y = 2707385501144840649318225287225658788936804267575313519463743609750303402022
    order8 = (
        2707385501144840649318225287225658788936804267575313519463743609750303402022
    ).to_bytes(32, "little")
    return [
        ("a mixed key: the base point plus a point of order 8", _add_encoded(base, order8)),
        ("the neutral point", neutral),
        ("a point of order 2", order2),
        ("a point of order 4", order4),
        ("a point of order 8", order8),
        (
            "the neutral point with the sign bit set (x = 0)",
            neutral[:31] + bytes((neutral[31] | 0x80,)),
        ),
        ("y = P + 1 (non-canonical: the neutral point)", (P + 1).to_bytes(32, "little")),
        ("y = 2: no square root for x", (2).to_bytes(32, "little")),
        ("the base point", base),  # valid: a control
    ]


def key_cases() -> dict[str, Any]:
    rng = random.Random(42)
    keys = []
    for i in range(4):
        k = auditkey.SigningKey(secret(i))
        keys.append(
            {
                "secret": hx(secret(i)),
                "seed": hx(auditkey.signing_seed(secret(i))),
                "public": k.public_hex,
            }
        )
    stmts = statement_cases()["statements"]
    signatures = []
    for i, case in enumerate(stmts):
        k = auditkey.SigningKey(secret(i % 4))
        signatures.append(
            {
                "secret": hx(secret(i % 4)),
                "statement": case["bytes"],
                "signature": hx(k.sign(bytes.fromhex(case["bytes"]))),
            }
        )
    rfc = [{"seed": s, "public": p, "message": m, "signature": g} for s, p, m, g in RFC8032]
    randoms = []
    for _ in range(48):
        seed = rng.randbytes(32)
        message = rng.randbytes(rng.choice([0, 1, 31, 64, 111, 112, 127, 128, 200, 2207]))
        key = Ed25519PrivateKey.from_private_bytes(seed)
        randoms.append(
            {
                "seed": hx(seed),
                "public": hx(key.public_key().public_bytes_raw()),
                "message": hx(message),
                "signature": hx(key.sign(message)),
            }
        )
    sha512 = []
    for n in (0, 1, 111, 112, 127, 128, 129, 239, 240, 1000):
        data = bytes((i * 131 + 7) % 256 for i in range(n))
        sha512.append({"data": hx(data), "digest": hashlib.sha512(data).hexdigest()})
    bad_keys = []
    for what, key in _small_order_keys():
        try:
            auditkey.check_public_key(key)
            bad_keys.append({"what": what, "key": hx(key), "error": ""})
        except auditkey.BadKey as exc:
            bad_keys.append({"what": what, "key": hx(key), "error": str(exc)})
    assert bad_keys[-1]["error"] == "" and all(b["error"] for b in bad_keys[:-1]), bad_keys
    # Signatures that must fail: each changes one thing of a valid one.
    good = signatures[0]
    pub = keys[0]["public"]
    msg = bytes.fromhex(good["statement"])
    sig = bytes.fromhex(good["signature"])
    s_plus_l = (int.from_bytes(sig[32:], "little") + auditkey.L).to_bytes(32, "little")
    failing = [
        ("a flipped bit in R", pub, msg, bytes((sig[0] ^ 1,)) + sig[1:]),
        ("a flipped bit in S", pub, msg, sig[:40] + bytes((sig[40] ^ 0x10,)) + sig[41:]),
        ("S + L (the same point, a non-canonical scalar)", pub, msg, sig[:32] + s_plus_l),
        ("over a truncated statement", pub, msg[:-1], sig),
        ("another author's key", keys[1]["public"], msg, sig),
        ("63 bytes", pub, msg, sig[:63]),
        ("a key of small order", hx((1).to_bytes(32, "little")), msg, sig),
    ]
    fails = [
        {"what": w, "public": k, "message": hx(m), "signature": hx(s)} for w, k, m, s in failing
    ]
    for f in fails:
        assert not auditkey.verify(
            bytes.fromhex(f["public"]), bytes.fromhex(f["message"]), bytes.fromhex(f["signature"])
        ), f
    return {
        "format_version": FORMAT_VERSION,
        "keys": keys,
        "signatures": signatures,
        "rfc8032": rfc,
        "random": randoms,
        "sha512": sha512,
        "public_keys": bad_keys,
        "failing": fails,
    }


# (what, shares, blocks, private flags or None, carried shares)
ROSTERS: list[tuple[str, list[int], int, list[bool] | None, list[int]]] = [
    ("three equal shares", [8, 8, 8], 30, None, []),
    ("ties broken by rank, not by id", [4, 6, 4, 6], 40, None, []),
    ("2 s[a] = s[j] exactly: a half share may audit", [8, 4, 3], 20, None, []),
    ("a lone contributor among followers", [0, 12, 0], 10, None, []),
    ("shares of 0 audit nothing while a contributor is free", [5, 0, 5, 0, 5], 25, None, []),
    ("one roster peer: nothing is an item", [16], 10, None, []),
    ("private data: no item, still an auditor", [6, 6, 6], 18, [False, True, False], []),
    ("carried items after the contributions", [6, 6, 6], 18, None, [6, 12]),
    ("a carried item with one roster peer", [16], 10, None, [8]),
    ("a slow device: no half share, fallbacks", [32, 2, 32, 1], 64, None, []),
    ("more contributions than free peers", [10, 10], 4, None, []),
    ("an empty chunk (B w[k] / W < 1)", [5, 5, 5, 5], 3, None, []),
    ("one block: a single non-empty chunk", [4, 4, 4], 1, None, []),
    ("a follower is not a free contributor", [8, 1, 0], 9, None, []),
    ("followers and a lone half share", [6, 0, 3, 0], 12, None, [3]),
    ("64 peers", [1 + (k % 5) for k in range(64)], 512, None, [3]),
]


def draw_cases() -> dict[str, Any]:
    seeds = []
    for i, (n, step, round_) in enumerate([(1, 1, 0), (3, 2, 1), (4, 2**32 - 1, 255)]):
        peers = PEERS[:n] if n <= 4 else []
        roster = st.roster_digest(peers, [1] * n)
        nonces = [st.nonce(secret(i * 8 + k), RUN, step, round_) for k in range(n)]
        s = draw.seed(RUN, step, round_, roster, digest(f"prev {i}"), digest(f"seen {i}"), nonces)
        seeds.append(
            {
                "run": RUN,
                "step": step,
                "round": round_,
                "roster": hx(roster),
                "prev": hx(digest(f"prev {i}")),
                "seen": hx(digest(f"seen {i}")),
                "nonces": [hx(x) for x in nonces],
                "seed": hx(s),
            }
        )
    base = bytes.fromhex(seeds[1]["seed"])
    labels = [b"attempt", b"auditor\x00", b"auditor\x3f", b"carried\x01", b"reducer\x02", b""]
    us = [{"seed": hx(base), "label": hx(lbl), "u": draw.u(base, lbl)} for lbl in labels]
    rates = []
    for i in range(24):
        sd = digest(f"draw {i}")
        for n in (1, 2, 16, 65536):
            rates.append({"seed": hx(sd), "one_in": n, "audited": draw.audited(sd, n)})
    assert any(r["audited"] for r in rates if r["one_in"] == 16), "a rate case must be audited"
    assignments = []
    for what, shares, blocks, private, carried in ROSTERS:
        for i in range(6):
            sd = digest(f"{what} {i}")
            for aud in (True, False):
                a = draw.assign(
                    sd, shares, blocks=blocks, audited=aud, private=private, carried=carried
                )
                assignments.append(
                    {
                        "what": what,
                        "seed": hx(sd),
                        "shares": shares,
                        "blocks": blocks,
                        "private": private,
                        "carried": carried,
                        "audited": aud,
                        "contributions": [list(p) for p in a.contributions],
                        "carried_auditors": [list(p) for p in a.carried],
                        "reductions": [list(p) for p in a.reductions],
                    }
                )
    return {
        "format_version": FORMAT_VERSION,
        "seeds": seeds,
        "u": us,
        "audited": rates,
        "assignments": assignments,
    }


# -- contributions (docs/TRUST.md, "What an auditor recomputes, and its cost")

# A model small enough that every backend and tier recomputes every case in seconds, with two
# blocks so the backward reports parameters in several chunks; lane batch 4, rows of T + 1 = 9.
CONTRIBUTION_MODEL = {
    "vocab_size": 300,
    "width": 16,
    "layers": 2,
    "heads": 1,
    "seq_len": 8,
    "batch": 4,
    "mlp_mult": 2,
}
# The optimizer of the local steps, every field written out (both twins take these names).
CONTRIBUTION_OPTIM: dict[str, Any] = {
    "lr": 3e-3,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.1,
    "clip": 1.0,
    "warmup_steps": 0,
    "schedule": "constant",
    "total_steps": 0,
    "final_lr": 0.0,
}
CONTRIBUTION_SEED = 11
CONTRIBUTION_STEPS = (0, 2)  # the states: the seed's initial one, and after two local steps
TEXT_LENGTH = 1200
# Every rank of each roster is a case: one whole lane; a lane and a row of the next; a share
# of 0 beside three pieces; shares of 1 around a share spanning two lanes; a middle share of
# three pieces (a lane's last row, a whole lane, the next lane's first row); four shares of 1
# and a last share of three whole lanes (the step's last positions).
CONTRIBUTION_ROSTERS: list[list[int]] = [
    [4],
    [5, 3],
    [2, 0, 10],
    [1, 6, 1],
    [3, 6, 3],
    [1, 1, 1, 1, 12],
]


def contribution_text() -> list[int]:
    """The run's text: fixed token ids below the vocabulary, from a seeded generator."""
    rng = random.Random(20261207)
    return [rng.randrange(CONTRIBUTION_MODEL["vocab_size"]) for _ in range(TEXT_LENGTH)]


def contribution_state(
    vectors: dict[str, Any], text: npt.NDArray[np.int64], steps: int, ops: GemmOps = NUMPY_OPS
) -> training.TrainState:
    """The seed's state after ``steps`` single-device steps on ``text`` (lane 0 of each batch
    index), of the model, optimizer and seed ``vectors`` name: a pure function of the seed and
    the text, so the file holds no weights."""
    cfg, optim = ModelConfig(**vectors["model"]), AdamWConfig(**vectors["optim"])
    state = training.init(cfg, optim, vectors["seed"])
    state.ops = ops
    for _ in range(steps):
        x, y = training.next_batch(state, text)
        training.train_step(state, x, y, with_hash=False)
    return state


def recompute(
    state: training.TrainState,
    text: npt.NDArray[np.int64],
    shares: list[int],
    rank: int,
    c: Any = contribution,
    batch_source: Any = batches,
    statements: Any = st,
) -> dict[str, Any]:
    """Rank ``rank``'s contribution of the step after ``state`` as a commit states it: each
    chunk's digest (absent: 64 zeros), its payload sizes, and the data digest; and the digest
    of its float32 mean. The modules are
    arguments so that a planted copy goes through the same computation."""
    cfg = state.cfg
    rows = []
    for piece in c.positions(shares, rank, cfg.batch):
        x, y = batch_source.sample_batch(
            text, cfg.batch, cfg.seq_len, state.seed, state.step, piece.lane
        )
        rows.append(c.piece_rows(x, y, piece))
    computed = c.compute(state, rows, shares, rank)
    data = statements.data_digest(c.token_rows(rows)) if rows else statements.ABSENT
    mean = computed.mean
    return {
        "chunks": [hx(statements.chunk_digest(p)) for p in computed.payloads],
        "sizes": [len(p) for p in computed.payloads],
        "data": hx(data),
        # Not in a commit: the float32 mean before quantization (little-endian, parameter
        # order), pinned by NUMERICS.md section 9; a summation order that moves one float32
        # rounding rarely moves an int8 one, so the chunk digests alone would rarely see it.
        "mean": "" if mean is None else hashlib.sha256(mean.astype("<f4").tobytes()).hexdigest(),
    }


def contribution_mismatches(
    vectors: dict[str, Any],
    ops: GemmOps = NUMPY_OPS,
    c: Any = contribution,
    batch_source: Any = batches,
    statements: Any = st,
) -> list[str]:
    """What differs from ``vectors`` (contributions.json, parsed) when ``ops`` multiplies and
    the modules compute: state hashes, lane offsets, pieces, and each case's chunks, data digest
    and mean; a case that raises counts as differing. [] is a pass. The check of
    tests/p2p/test_audit_contributions.py (numpy, the CPU backends, planted copies) and
    tests/gpu/test_gpu_contributions.py (the wgpu kernels)."""
    bad: list[str] = []
    text = np.array(vectors["text"], dtype=np.int64)
    lane_size, seq_len = vectors["model"]["batch"], vectors["model"]["seq_len"]
    states = []
    for i, s in enumerate(vectors["states"]):
        state = contribution_state(vectors, text, s["steps"], ops)
        if training.state_hash(state) != s["hash"]:
            bad.append(f"state {i}: hash")
        for lane, want in enumerate(s["offsets"]):
            got = batch_source.sample_offsets(
                len(text), lane_size, seq_len, state.seed, state.step, lane
            )
            if [int(o) for o in got] != want:
                bad.append(f"state {i}: offsets of lane {lane}")
        states.append(state)
    for case in vectors["cases"]:
        what = f"state {case['state']}, shares {case['shares']}, rank {case['rank']}"
        pieces = c.positions(case["shares"], case["rank"], lane_size)
        if [[p.lane, p.row, p.rows] for p in pieces] != case["pieces"]:
            bad.append(f"{what}: pieces")
        state = states[case["state"]]
        try:
            got = recompute(state, text, case["shares"], case["rank"], c, batch_source, statements)
        except Exception as exc:  # a planted copy may fail outright: that is a difference too
            bad.append(f"{what}: raised {exc!r}")
            continue
        for k, (g, w) in enumerate(zip(got["chunks"], case["chunks"], strict=True)):
            if g != w:
                bad.append(f"{what}: chunk {k}")
        if got["data"] != case["data"]:
            bad.append(f"{what}: data")
        if got["mean"] != case["mean"]:
            bad.append(f"{what}: mean")
    return bad


def contribution_cases() -> dict[str, Any]:
    ids = contribution_text()
    text = np.array(ids, dtype=np.int64)
    cfg = ModelConfig(**CONTRIBUTION_MODEL)
    spec = {"model": CONTRIBUTION_MODEL, "optim": CONTRIBUTION_OPTIM, "seed": CONTRIBUTION_SEED}
    lanes = max(sum(s) for s in CONTRIBUTION_ROSTERS) // cfg.batch
    states, cases = [], []
    for i, steps in enumerate(CONTRIBUTION_STEPS):
        state = contribution_state(spec, text, steps)
        assert state.step == steps
        offsets = [
            batches.sample_offsets(len(ids), cfg.batch, cfg.seq_len, state.seed, steps, lane)
            for lane in range(lanes)
        ]
        states.append(
            {
                "steps": steps,
                "hash": training.state_hash(state),
                "offsets": [[int(o) for o in lane] for lane in offsets],
            }
        )
        for shares in CONTRIBUTION_ROSTERS:
            first = 0
            for rank, share in enumerate(shares):
                pieces = contribution.positions(shares, rank, cfg.batch)
                cases.append(
                    {
                        "state": i,
                        "shares": shares,
                        "rank": rank,
                        "positions": [first, first + share],
                        "pieces": [[p.lane, p.row, p.rows] for p in pieces],
                        **recompute(state, text, shares, rank),
                    }
                )
                first += share
    return {
        "format_version": FORMAT_VERSION,
        **spec,
        "text": ids,
        "states": states,
        "cases": cases,
    }


def files() -> dict[str, str]:
    """Each file's name and its text."""
    out = {}
    for name, data in (
        ("statements.json", statement_cases()),
        ("keys.json", key_cases()),
        ("draw.json", draw_cases()),
        ("contributions.json", contribution_cases()),
    ):
        out[name] = json.dumps(data, indent=1, ensure_ascii=True) + "\n"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true")
    group.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for name, text in files().items():
        path = FOLDER / name
        if args.write:
            FOLDER.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    if stale:
        print(
            f"stale: {', '.join(stale)}: run python tests/audit_vectors.py --write", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
