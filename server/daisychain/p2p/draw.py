"""The draw of an attempt: whether it is audited, and who recomputes which item (docs/TRUST.md,
"The draw").

Every roster peer computes the same draw from what every roster peer holds once the reveals are
in: the attempt, the roster, the state hash it computed from, ``seen`` (the statements agreed
on) and every peer's nonce. Nobody knows the draw before the last nonce is revealed, and each
nonce was fixed (by its signed hash) before its author saw any other commitment, so no peer can
steer it (TRUST.md, "Why the draw cannot be steered").

Pure functions of integers and bytes, no I/O; ``static/js/p2p/draw.js`` is the mirror and
``tests/vectors/audit/draw.json`` pins both.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from daisychain.p2p import allreduce
from daisychain.p2p.statements import DIGEST, MAX_ROSTER, BadStatement, attempt_bytes

SEED_MAGIC = b"DCD1"
MAX_ONE_IN = 65536  # config.audit.one_in: the 32-bit draw's modulo bias stays below 2^-16


def seed(
    run: str,
    step: int,
    round_: int,
    roster: bytes,
    prev: bytes,
    seen: bytes,
    nonces: Sequence[bytes],
) -> bytes:
    """SHA-256("DCD1" || run || step || round || roster digest || prev || seen || nonce[0] ||
    ... || nonce[N-1]), nonces in rank order."""
    for what, value in (("roster", roster), ("prev", prev), ("seen", seen)):
        if len(value) != DIGEST:
            raise BadStatement(f"{what} must be {DIGEST} bytes, not {len(value)}")
    if not nonces or any(len(n) != DIGEST for n in nonces):
        raise BadStatement(f"nonces must be one {DIGEST}-byte nonce per roster peer")
    h = hashlib.sha256(SEED_MAGIC + attempt_bytes(run, step, round_) + roster + prev + seen)
    for n in nonces:
        h.update(n)
    return h.digest()


def u(seed_: bytes, label: bytes) -> int:
    """The first 4 bytes of SHA-256(seed || label) as a little-endian u32."""
    return int(struct.unpack_from("<I", hashlib.sha256(seed_ + label).digest())[0])


def _label(name: bytes, index: int) -> bytes:
    """A label with an index: the name, then the index as one byte (a rank, a chunk or a place
    in ``carry``: below 64, which ``assign`` checks)."""
    return name + bytes((index,))


def audited(seed_: bytes, one_in: int) -> bool:
    """Whether the attempt is audited: ``u("attempt") mod n == 0``."""
    if not (isinstance(one_in, int) and 1 <= one_in <= MAX_ONE_IN):
        raise ValueError(f"one_in must be an integer in [1, {MAX_ONE_IN}], not {one_in!r}")
    return u(seed_, b"attempt") % one_in == 0


@dataclass(frozen=True)
class Assignment:
    """Who audits what. Each pair is (item, auditor rank): a contribution's rank, a carried
    item's place in ``carry``, a reduced chunk's index. Contributions in the order they were
    assigned (largest share first), carried items and chunks in their own order."""

    contributions: tuple[tuple[int, int], ...] = ()
    carried: tuple[tuple[int, int], ...] = ()
    reductions: tuple[tuple[int, int], ...] = ()


def _contribution_auditor(
    seed_: bytes,
    label: bytes,
    shares: Sequence[int],
    share: int,
    author: int | None,
    assigned: set[int],
) -> int | None:
    """The auditor of one contribution item of ``share`` by ``author`` (None: a carried item,
    whose author is no longer in the roster); None when no roster peer could audit it."""
    others = [a for a in range(len(shares)) if a != author]
    contributors = [a for a in others if shares[a] > 0]
    free = [a for a in contributors if a not in assigned]
    for candidates in ([a for a in free if 2 * shares[a] >= share], free, contributors, others):
        if candidates:
            return candidates[u(seed_, label) % len(candidates)]
    return None


def assign(
    seed_: bytes,
    shares: Sequence[int],
    *,
    blocks: int,
    audited: bool,
    private: Sequence[bool] | None = None,
    carried: Sequence[int] = (),
) -> Assignment:
    """The items of an attempt and their auditors (TRUST.md, "The draw").

    ``shares``: the roster's, in rank order; ``blocks``: the flat gradient's blocks ``B`` (which
    chunks are empty follows from them and the shares); ``private[j]``: rank j trained on
    private text (its contribution is no item); ``carried``: the share each carried statement
    was committed with, in ``carry`` order. Carried items are assigned whatever ``audited``
    says; contributions and reductions only when it is true."""
    n = len(shares)
    flags = list(private) if private is not None else [False] * n
    if not 1 <= n <= MAX_ROSTER or len(flags) != n or len(carried) > MAX_ROSTER or blocks < 1:
        raise ValueError(
            f"assign: {n} shares (1 to {MAX_ROSTER}), {len(flags)} private flags, "
            f"{len(carried)} carried items (at most {MAX_ROSTER}), {blocks} blocks (at least 1)"
        )
    assigned: set[int] = set()
    contributions: list[tuple[int, int]] = []
    if audited and n > 1:
        order = sorted(
            (j for j in range(n) if shares[j] > 0 and not flags[j]), key=lambda j: (-shares[j], j)
        )
        for j in order:
            a = _contribution_auditor(seed_, _label(b"auditor", j), shares, shares[j], j, assigned)
            assert a is not None  # n > 1: another roster peer exists
            contributions.append((j, a))
            assigned.add(a)
    carry: list[tuple[int, int]] = []
    for c, share in enumerate(carried):
        a = _contribution_auditor(seed_, _label(b"carried", c), shares, share, None, assigned)
        assert a is not None  # a roster has a contributor
        carry.append((c, a))
        assigned.add(a)
    reductions: list[tuple[int, int]] = []
    if audited and n > 1:
        reducing: set[int] = set()
        for k in range(n):
            first, end = allreduce.chunk_blocks(blocks, shares, k)
            if end == first:
                continue
            others = [a for a in range(n) if a != k]
            candidates = [a for a in others if a not in reducing] or others
            a = candidates[u(seed_, _label(b"reducer", k)) % len(candidates)]
            reductions.append((k, a))
            reducing.add(a)
    return Assignment(tuple(contributions), tuple(carry), tuple(reductions))
