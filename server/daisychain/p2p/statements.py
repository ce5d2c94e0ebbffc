"""The bytes an audit signature covers (docs/TRUST.md, "Keys and statements"), and the digests
they carry.

A **statement** is one signed claim of a peer about one attempt ``(step, round)`` of a run:
kind 1 its contribution commit, kind 2 its reduced commit, kind 3 its reveal, kind 4 an audit
result. Every field has a fixed size and integers are little-endian, so two implementations
that agree on the fields produce the same bytes, and a signature made by one verifies in the
other. ``static/js/p2p/statements.js`` is the mirror; ``tests/vectors/audit/`` pins both.

Layout (offsets in bytes)::

    0  magic "DCS1"    4  kind (u8)    5  run (8: its 16 hex digits)    13  step (u32)
    17 round (u8)      18 author (12: ASCII id, zero-padded)             30  roster digest (32)
    62 body: see ``contribution``, ``reduced``, ``reveal``, ``audit``

An absent digest (an empty chunk, a share of 0, no data digest) is 32 zero bytes (``ABSENT``).
Pure functions, no I/O; ``parse`` is the one place a statement received from elsewhere is read.
"""

from __future__ import annotations

import enum
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAGIC = b"DCS1"
ROSTER_MAGIC = b"DCR1"
SEEN_MAGIC = b"DCV1"
NONCE_LABEL = b"daisychain nonce"
DIGEST = 32
ABSENT = bytes(DIGEST)
HEADER = 62  # magic, kind, run, step, round, author, roster digest
ID_BYTES = 12  # the server's peer ids are 12 characters (rooms.py: token_urlsafe(9))
MAX_ROSTER = 64  # messages.MAX_ROSTER: N fits the roster digest's one byte
MAX_SHARE = 4096  # shares.MAX_GLOBAL_BATCH: a share fits the roster digest's u16
RUN_RE = re.compile(r"[0-9a-f]{16}")
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,12}")


class Kind(enum.IntEnum):
    CONTRIBUTION = 1
    REDUCED = 2
    REVEAL = 3
    AUDIT = 4


class Item(enum.IntEnum):
    """What an audit result (kind 4) recomputed."""

    CONTRIBUTION = 1
    REDUCTION = 2


class BadStatement(ValueError):
    """Bytes or fields that are not a statement; the message says which field and why."""


@dataclass(frozen=True)
class Head:
    """The fields every statement starts with: who says it about which attempt of which roster."""

    run: str  # 16 lowercase hex digits
    step: int  # u32
    round: int  # u8
    author: str  # peer id, 1-12 of [A-Za-z0-9_-]
    roster: bytes  # roster_digest(...) of the attempt


@dataclass(frozen=True)
class Contribution:
    head: Head
    private: bool  # flags bit 0: trained on private text (no data digest)
    prev: bytes  # the state hash of step - 1 it computed from
    nonce_hash: bytes
    data: bytes  # data_digest of its rows, ABSENT for a share of 0 or private data
    chunks: tuple[bytes, ...]  # one chunk_digest per roster peer, ABSENT for an empty chunk


@dataclass(frozen=True)
class Reduced:
    head: Head
    chunk: int
    digest: bytes


@dataclass(frozen=True)
class Reveal:
    head: Head
    nonce: bytes
    seen: bytes


@dataclass(frozen=True)
class Audit:
    head: Head
    item: Item
    index: int  # the contribution's rank, or the reduced chunk
    of: bytes  # SHA-256 of the audited statement
    data: bytes
    digests: tuple[bytes, ...]  # as the audited statement's: N chunk digests, or one


Statement = Contribution | Reduced | Reveal | Audit


def _u8(value: int, what: str) -> bytes:
    if not (isinstance(value, int) and 0 <= value <= 0xFF):
        raise BadStatement(f"{what} must be an integer in [0, 255], not {value!r}")
    return bytes((value,))


def _digest(value: bytes, what: str) -> bytes:
    if not (isinstance(value, bytes) and len(value) == DIGEST):
        raise BadStatement(f"{what} must be {DIGEST} bytes (a SHA-256 digest), not {value!r:.80}")
    return value


def _id(peer: str, what: str) -> bytes:
    """A peer id as 12 bytes: its ASCII, zero-padded. No id holds a zero byte, so the padding
    is unambiguous; an id longer than 12 characters cannot be stated."""
    if not (isinstance(peer, str) and ID_RE.fullmatch(peer)):
        raise BadStatement(
            f"{what} must be a peer id of 1 to {ID_BYTES} characters of A-Z a-z 0-9 _ -, not "
            f"{peer!r:.40} (the server's ids are {ID_BYTES}; audits need ids that fit)"
        )
    return peer.encode("ascii").ljust(ID_BYTES, b"\0")


def run_bytes(run: str) -> bytes:
    """A run id (16 lowercase hex digits) as the 8 bytes those digits write, in their order."""
    if not (isinstance(run, str) and RUN_RE.fullmatch(run)):
        raise BadStatement(f"run must be 16 lowercase hex digits, not {run!r:.40}")
    return bytes.fromhex(run)


def attempt_bytes(run: str, step: int, round_: int) -> bytes:
    """run (8), step (u32), round (u8): how an attempt is written in statements, nonces and
    the draw's seed."""
    if not (isinstance(step, int) and 0 <= step <= 0xFFFFFFFF):
        raise BadStatement(f"step must be an integer in [0, 2^32), not {step!r}")
    return run_bytes(run) + struct.pack("<I", step) + _u8(round_, "round")


def roster_digest(peers: Sequence[str], shares: Sequence[int]) -> bytes:
    """SHA-256 of "DCR1", N (u8), then per rank the peer id (12 bytes) and its share (u16)."""
    if not 1 <= len(peers) <= MAX_ROSTER or len(shares) != len(peers):
        raise BadStatement(
            f"a roster is 1 to {MAX_ROSTER} peers with one share each, not {len(peers)} peers "
            f"and {len(shares)} shares"
        )
    if len(set(peers)) != len(peers):
        raise BadStatement(f"a roster's peers must be distinct: {list(peers)}")
    h = hashlib.sha256(ROSTER_MAGIC + bytes((len(peers),)))
    for rank, (peer, share) in enumerate(zip(peers, shares, strict=True)):
        if not (isinstance(share, int) and 0 <= share <= MAX_SHARE):
            raise BadStatement(
                f"share {rank} must be an integer in [0, {MAX_SHARE}], not {share!r}"
            )
        h.update(_id(peer, f"peer {rank}") + struct.pack("<H", share))
    return h.digest()


def chunk_digest(payload: bytes) -> bytes:
    """The digest of one encoded chunk (``codec.encode``: exponents then values, before
    deflate); an empty chunk has none (``ABSENT``)."""
    return hashlib.sha256(payload).digest() if payload else ABSENT


def data_digest(rows: npt.ArrayLike) -> bytes:
    """SHA-256 of the token ids of every row a contribution trained on: ``T + 1`` ids a row,
    int32 little-endian, rows in position order. What separates "computed other bits" from
    "read other text"."""
    ids = np.asarray(rows)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 2:
        raise BadStatement(
            "rows must be a 2-d array of at least one row of T + 1 >= 2 token ids, "
            f"not shape {ids.shape}"
        )
    if not np.issubdtype(ids.dtype, np.integer) or (
        ids.size and (ids.min() < 0 or ids.max() > 0x7FFFFFFF)
    ):
        raise BadStatement("token ids must be integers in [0, 2^31)")
    return hashlib.sha256(ids.astype("<i4").tobytes()).digest()


def nonce(secret: bytes, run: str, step: int, round_: int) -> bytes:
    """SHA-256("daisychain nonce" || secret || run || step || round): the peer's share of the
    draw, fixed by its secret and unknown to others until it reveals."""
    if not (isinstance(secret, bytes) and len(secret) == 32):
        raise BadStatement("the secret must be 32 bytes")
    return hashlib.sha256(NONCE_LABEL + secret + attempt_bytes(run, step, round_)).digest()


def nonce_hash(nonce_: bytes) -> bytes:
    return hashlib.sha256(_digest(nonce_, "nonce")).digest()


def statement_hash(statement: bytes) -> bytes:
    """SHA-256 of a statement: what ``seen`` lists and an audit's ``of`` names."""
    return hashlib.sha256(statement).digest()


def seen(
    contributions: Sequence[bytes], reduced: Sequence[bytes], carried: Sequence[bytes] = ()
) -> bytes:
    """SHA-256("DCV1" || the hash of each contribution commit in rank order || of each reduced
    commit in chunk order || of each carried statement in ``carry`` order): the statements a
    peer holds when it reveals; equal at every peer or nobody draws."""
    h = hashlib.sha256(SEEN_MAGIC)
    for s in (*contributions, *reduced, *carried):
        h.update(statement_hash(s))
    return h.digest()


def _head(kind: Kind, head: Head) -> bytes:
    return (
        MAGIC
        + bytes((kind,))
        + attempt_bytes(head.run, head.step, head.round)
        + _id(head.author, "author")
        + _digest(head.roster, "roster")
    )


def contribution(c: Contribution) -> bytes:
    """Kind 1: flags (bit 0 private data), prev, nonce_hash, data, then N chunk digests."""
    if not 1 <= len(c.chunks) <= MAX_ROSTER:
        raise BadStatement(f"chunks must be 1 to {MAX_ROSTER} digests, not {len(c.chunks)}")
    return (
        _head(Kind.CONTRIBUTION, c.head)
        + bytes((1 if c.private else 0,))
        + _digest(c.prev, "prev")
        + _digest(c.nonce_hash, "nonce_hash")
        + _digest(c.data, "data")
        + b"".join(_digest(d, f"chunks[{k}]") for k, d in enumerate(c.chunks))
    )


def reduced(r: Reduced) -> bytes:
    """Kind 2: chunk (u8), digest."""
    return _head(Kind.REDUCED, r.head) + _u8(r.chunk, "chunk") + _digest(r.digest, "digest")


def reveal(r: Reveal) -> bytes:
    """Kind 3: nonce, seen."""
    return _head(Kind.REVEAL, r.head) + _digest(r.nonce, "nonce") + _digest(r.seen, "seen")


def audit(a: Audit) -> bytes:
    """Kind 4: item (u8), index (u8), of, data, count (u8), count digests."""
    if not 1 <= len(a.digests) <= MAX_ROSTER:
        raise BadStatement(f"digests must be 1 to {MAX_ROSTER}, not {len(a.digests)}")
    return (
        _head(Kind.AUDIT, a.head)
        + _u8(int(a.item), "item")
        + _u8(a.index, "index")
        + _digest(a.of, "of")
        + _digest(a.data, "data")
        + bytes((len(a.digests),))
        + b"".join(_digest(d, f"digests[{k}]") for k, d in enumerate(a.digests))
    )


def encode(s: Statement) -> bytes:
    """The statement's bytes, whatever its kind."""
    if isinstance(s, Contribution):
        return contribution(s)
    if isinstance(s, Reduced):
        return reduced(s)
    if isinstance(s, Reveal):
        return reveal(s)
    return audit(s)


def _digests(body: bytes, count: int) -> tuple[bytes, ...]:
    return tuple(body[DIGEST * k : DIGEST * (k + 1)] for k in range(count))


def parse(data: bytes) -> Statement:
    """A statement's fields from its bytes. Raises ``BadStatement`` naming what is wrong: a
    wrong magic or kind, an id that is not one, or a length other than its kind's."""
    if len(data) < HEADER or data[:4] != MAGIC:
        raise BadStatement(
            f'not a statement: {len(data)} bytes (expected "DCS1" and at least {HEADER} bytes)'
        )
    raw_id = data[18:30].rstrip(b"\0")
    try:
        author = raw_id.decode("ascii")
    except UnicodeDecodeError:
        author = ""
    if not ID_RE.fullmatch(author) or data[18 + len(raw_id) : 30] != bytes(ID_BYTES - len(raw_id)):
        raise BadStatement(f"author must be a zero-padded peer id, not {data[18:30].hex()}")
    step = struct.unpack_from("<I", data, 13)[0]
    head = Head(data[5:13].hex(), step, data[17], author, data[30:62])
    body = data[HEADER:]
    kind = data[4]
    if kind == Kind.CONTRIBUTION:
        n, rest = divmod(len(body) - 97, DIGEST)
        if len(body) < 97 + DIGEST or rest or n > MAX_ROSTER:
            raise BadStatement(
                f"a contribution commit's body is 97 bytes and 1 to {MAX_ROSTER} chunk digests, "
                f"not {len(body)} bytes"
            )
        if body[0] > 1:
            raise BadStatement(f"a contribution commit's flags are 0 or 1, not {body[0]}")
        return Contribution(
            head, body[0] == 1, body[1:33], body[33:65], body[65:97], _digests(body[97:], n)
        )
    if kind == Kind.REDUCED:
        if len(body) != 1 + DIGEST:
            raise BadStatement(f"a reduced commit's body is {1 + DIGEST} bytes, not {len(body)}")
        return Reduced(head, body[0], body[1:])
    if kind == Kind.REVEAL:
        if len(body) != 2 * DIGEST:
            raise BadStatement(f"a reveal's body is {2 * DIGEST} bytes, not {len(body)}")
        return Reveal(head, body[:DIGEST], body[DIGEST:])
    if kind == Kind.AUDIT:
        if (
            len(body) < 67
            or body[0] not in (1, 2)
            or not 1 <= body[66] <= MAX_ROSTER
            or len(body) != 67 + DIGEST * body[66]
        ):
            raise BadStatement(
                f"an audit result has item 1 or 2 and 1 to {MAX_ROSTER} digests, its count saying "
                f"how many; not {len(body)} body bytes"
            )
        return Audit(
            head, Item(body[0]), body[1], body[2:34], body[34:66], _digests(body[67:], body[66])
        )
    raise BadStatement(
        f"unknown statement kind {kind} (1 contribution, 2 reduced, 3 reveal, 4 audit)"
    )
