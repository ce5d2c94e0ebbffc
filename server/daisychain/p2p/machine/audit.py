"""The audit round of one attempt ``(step, round)`` at this peer (docs/TRUST.md, "Commit, then
audit": "One attempt, step by step", "The draw", "Results and disputes").

    committing --every statement and carried statement held; reveal sent--> revealed
    revealed --every reveal in, seen agrees--> drawn --not audited, or every item passed--> passed
    drawn --a dispute or a proof--> disputed --every check concluded--> settled (proven: ids)
    committing/revealed --a proof--> disputed  (a proof needs no draw: the attempt never applies)
    any but settled --the attempt abandoned--> cancelled

The round works on **signed statements** (``Signed``: a statement's bytes and its author's
64-byte signature), never on wire messages: the wire layer turns a ``commit``, ``reveal`` or
``audit`` message into its statement, so the seam between the two is the statement itself.
Authors' public keys come from a table (the peers' ``device.audit_key``).

Sans-IO, like the rest of the machine: no clock, no I/O, no asyncio; ``now`` comes in with each
event, and every event returns the decisions it led to (``Send`` this signed statement,
``Recompute`` an item, ``SendProof``, ``AskStatements``, ``Concluded``, ``Proven``, ``Refuse``).
Input that breaks a rule is refused by raising ``AuditRefused`` naming the rule (the round's
state is then unchanged); only an audit result held from before the draw is refused later, as
a ``Refuse`` decision, because its assignment is known only once the draw is made.

What the round does not do (the machine's, or not built): the bytes (verify-before-reduce uses
``committed_chunk``/``committed_reduced``), timers and ``missing`` (``waiting_for`` names whom
the round waits for), re-commits and failover (``settled`` only reports ``proven``), and the
"a relayed set that does not give the seen its sender signed" rule (``bad-message``): a ``seen``
that differs asks the statements again and finds any equivocation among them, but a peer that
answers with statements equal to this peer's and still signed another ``seen`` is not refused
here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from daisychain.p2p import allreduce, auditkey, draw
from daisychain.p2p import statements as st

log = logging.getLogger("daisychain.p2p.machine")

Refusal = Literal["bad-signature", "bad-message", "fork", "other-roster"]
Result = Literal["pass", "fail", "false-accusation"]
ProvenKind = Literal["lied", "false-accusation", "equivocated", "bad-reveal"]
ProofKind = Literal["equivocation", "bad-reveal"]
PrivatePolicy = Literal["refuse", "unaudited"]
Outcome = tuple[tuple[bytes, ...], bytes]  # (chunk digests, data digest) of a computation
# An attempt has at most 64 contributions, 64 reductions and 64 carried items: the most audit
# results one peer can owe before this peer draws (they are held until then).
MAX_ITEMS = 3 * st.MAX_ROSTER


class RoundPhase(Enum):
    COMMITTING = "committing"  # gathering commits; this peer has not revealed
    REVEALED = "revealed"  # reveal sent; waiting for every reveal
    DRAWN = "drawn"  # the draw is made; waiting for the items' results
    PASSED = "passed"  # not audited, or every item passed: the attempt may apply
    DISPUTED = "disputed"  # a dispute or a proof: this attempt never applies
    SETTLED = "settled"  # every result in, every check concluded; ``proven`` names who lied
    CANCELLED = "cancelled"  # the attempt was abandoned


_ALLOWED = {
    RoundPhase.COMMITTING: (RoundPhase.REVEALED, RoundPhase.DISPUTED, RoundPhase.CANCELLED),
    RoundPhase.REVEALED: (RoundPhase.DRAWN, RoundPhase.DISPUTED, RoundPhase.CANCELLED),
    RoundPhase.DRAWN: (RoundPhase.PASSED, RoundPhase.DISPUTED, RoundPhase.CANCELLED),
    RoundPhase.PASSED: (RoundPhase.CANCELLED,),  # passed, then a reduced chunk never came
    RoundPhase.DISPUTED: (RoundPhase.SETTLED, RoundPhase.CANCELLED),
    RoundPhase.SETTLED: (),
    RoundPhase.CANCELLED: (),
}


_KIND: dict[type, st.Kind] = {
    st.Contribution: st.Kind.CONTRIBUTION,
    st.Reduced: st.Kind.REDUCED,
    st.Reveal: st.Kind.REVEAL,
    st.Audit: st.Kind.AUDIT,
}


class AuditRefused(Exception):
    """A statement, result or proof that breaks a rule. ``code``: ``bad-signature`` (a signature
    fails, or a statement not its sender's that was not asked for), ``bad-message`` (a rule of
    TRUST.md broken), ``fork`` (its ``prev`` is not this peer's state hash of step - 1: the sync
    guard's ``stop fork``), ``other-roster`` (another roster digest for this attempt: the machine
    holds it, as an early piece, or it is a leader's equivocation)."""

    def __init__(self, code: Refusal, message: str) -> None:
        super().__init__(message)
        self.code: Refusal = code


@dataclass(frozen=True)
class Signed:
    statement: bytes  # statements.encode(...)
    sig: bytes  # 64 bytes: the author's Ed25519 signature over ``statement``


@dataclass(frozen=True)
class Carried:
    """An entry of ``roster.carry``: the contribution commit of ``peer`` in round ``round`` of
    this step, with that round's roster (its digest and the share the commit was made with)."""

    round: int
    peer: str
    peers: tuple[str, ...]
    shares: tuple[int, ...]


# -- decisions: what an event asks the shell to do


@dataclass(frozen=True)
class Send:
    """Send this signed statement to every roster peer. An audit result that disputes or
    audits a carried item carries the audited statement with it (``audited``)."""

    signed: Signed
    audited: Signed | None = None


@dataclass(frozen=True)
class Recompute:
    """Compute item ``of`` from the current state: for a contribution, what ``compute`` would
    for ``rank`` of the roster with ``shares`` (round ``round``); for a reduction, chunk
    ``index`` from the contributions. ``why``: assigned to this peer, or a check of a dispute.
    Answer with ``AuditRound.recomputed(of, ...)``."""

    of: bytes
    item: st.Item
    index: int
    author: str
    round: int
    rank: int
    shares: tuple[int, ...]
    why: Literal["assigned", "check"]


@dataclass(frozen=True)
class AskStatements:
    """Ask ``peer`` for the statements it holds (``repair`` pieces ``commit`` and
    ``reduced-commit``): its ``seen`` differs from this peer's."""

    peer: str


@dataclass(frozen=True)
class SendProof:
    kind: ProofKind
    first: Signed
    second: Signed


@dataclass(frozen=True)
class Concluded:
    """An item's result (the machine's ``audited`` effect)."""

    item: st.Item
    index: int
    author: str
    auditor: str
    result: Result


@dataclass(frozen=True)
class Proven:
    peer: str
    kind: ProvenKind
    by: str  # who showed it: the accuser, or this peer when its own check or a proof did


@dataclass(frozen=True)
class Refuse:
    """An audit result held from before the draw breaks a rule: close ``peer``'s channel with
    ``code``, as ``AuditRefused`` would have."""

    peer: str
    code: Refusal
    message: str


Decision = Send | Recompute | AskStatements | SendProof | Concluded | Proven | Refuse


@dataclass
class _Item:
    """One audited item: a statement held by every roster peer, its assigned auditor, and what
    the results and this peer's own check said."""

    item: st.Item
    index: int  # rank, chunk, or place in ``carry``
    author: str
    auditor: str
    held: Signed
    claim: Outcome  # what the statement says
    round: int
    rank: int
    shares: tuple[int, ...]
    accusation: Outcome | None = None  # the auditor's digests, when they differ
    result: Result | None = None
    own: Outcome | None = None  # this peer's recomputation
    asked: bool = False  # a Recompute is out


@dataclass
class _Context:
    """The roster a contribution commit is checked against: this attempt's, or a carried one's."""

    round: int
    peers: tuple[str, ...]
    shares: tuple[int, ...]
    digest: bytes
    empty: frozenset[int] = field(default_factory=frozenset)  # empty chunks


class AuditRound:
    def __init__(
        self,
        *,
        run: str,
        step: int,
        round_: int,
        peers: Sequence[str],
        shares: Sequence[int],
        blocks: int,
        me: str,
        secret: bytes,
        prev: bytes,
        one_in: int,
        keys: Mapping[str, bytes],
        private: PrivatePolicy = "refuse",
        carry: Sequence[Carried] = (),
    ) -> None:
        if me not in peers:
            raise ValueError(f"{me!r} is not in the roster {list(peers)}")
        if not 1 <= one_in <= draw.MAX_ONE_IN:
            raise ValueError(f"one_in must be in [1, {draw.MAX_ONE_IN}], not {one_in}")
        self.run, self.step, self.round = run, step, round_
        self.me, self.prev, self.one_in, self.policy = me, prev, one_in, private
        self.keys = dict(keys)
        self._signer = auditkey.SigningKey(secret)
        self._nonce = st.nonce(secret, run, step, round_)
        self.context = self._context(round_, tuple(peers), tuple(shares), blocks)
        self.peers, self.shares = self.context.peers, self.context.shares
        self.blocks = blocks
        self.chunks = tuple(k for k in range(len(self.peers)) if k not in self.context.empty)
        self.carry = tuple(carry)
        self.carried_context = [
            self._context(c.round, c.peers, c.shares, blocks) for c in self.carry
        ]
        for c in self.carry:
            if c.peer not in c.peers or c.round >= round_:
                raise ValueError(f"carry {c}: its peer is not in its roster, or its round is late")
        self.phase = RoundPhase.COMMITTING
        self.since = 0.0  # when the phase last changed
        self.commits: dict[int, Signed] = {}  # rank -> contribution commit
        self.reduced: dict[int, Signed] = {}  # chunk -> reduced commit
        self.carried: dict[int, Signed] = {}  # place in carry -> its commit
        self.reveals: dict[int, Signed] = {}  # rank -> reveal
        self.seen: bytes | None = None  # ours, once revealed
        self.seed: bytes | None = None
        self.audited: bool | None = None
        self.drawn_at: float | None = None  # an audit gets a whole step timer from here
        self.items: dict[bytes, _Item] = {}  # of -> item
        self.proven: dict[str, Proven] = {}
        self._held: dict[tuple[int, str, int, bytes], Signed] = {}  # for equivocation
        self._early_audits: list[tuple[str, Signed]] = []
        self._asked: set[str] = set()

    def _context(
        self, round_: int, peers: tuple[str, ...], shares: tuple[int, ...], blocks: int
    ) -> _Context:
        spans = [allreduce.chunk_blocks(blocks, shares, k) for k in range(len(peers))]
        empty = frozenset(k for k, (first, end) in enumerate(spans) if first == end)
        return _Context(round_, peers, shares, st.roster_digest(peers, shares), empty)

    # -- the one place the phase changes

    def _become(self, new: RoundPhase, now: float) -> None:
        old = self.phase
        if new not in _ALLOWED[old]:
            raise AssertionError(f"audit round {self.key}: {old.value} cannot become {new.value}")
        self.phase, self.since = new, now
        log.debug("audit round %s: %s -> %s", self.key, old.value, new.value)

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.round)

    @property
    def rank(self) -> int:
        return self.peers.index(self.me)

    @property
    def may_apply(self) -> bool:
        """apply-after-audit: every item the attempt audits passed (or none is audited). The
        machine also needs the attempt's reduced chunks, each matching its reduced commit."""
        return self.phase is RoundPhase.PASSED

    @property
    def settled(self) -> bool:
        return self.phase is RoundPhase.SETTLED

    def committed_chunk(self, rank: int, chunk: int) -> bytes | None:
        """verify-before-reduce: the digest ``rank`` committed for ``chunk`` (None: no commit)."""
        held = self.commits.get(rank)
        if held is None:
            return None
        parsed = st.parse(held.statement)
        assert isinstance(parsed, st.Contribution)
        return parsed.chunks[chunk]

    def committed_reduced(self, chunk: int) -> bytes | None:
        held = self.reduced.get(chunk)
        if held is None:
            return None
        parsed = st.parse(held.statement)
        assert isinstance(parsed, st.Reduced)
        return parsed.digest

    # -- this peer's own statements

    def _head(self) -> st.Head:
        return st.Head(self.run, self.step, self.round, self.me, self.context.digest)

    def _sign(self, statement: bytes) -> Signed:
        return Signed(statement, self._signer.sign(statement))

    def commit_contribution(
        self, chunks: Sequence[bytes], data: bytes, *, private_data: bool, now: float
    ) -> list[Decision]:
        """commit-first: this peer's compute is done (a share of 0 too); its chunk digests
        (``ABSENT`` for empty chunks and a share of 0) and data digest. Send before the frames."""
        if self.rank in self.commits:
            raise ValueError(f"audit round {self.key}: this peer has committed already")
        c = st.Contribution(
            self._head(),
            private_data,
            self.prev,
            st.nonce_hash(self._nonce),
            data,
            tuple(chunks),
        )
        why = self._layout(c, self.context)
        if why:
            raise ValueError(f"this peer's own commit: {why}")
        signed = self._sign(st.contribution(c))
        self.commits[self.rank] = signed
        self._held[self._slot(c)] = signed
        return [Send(signed), *self._advance(now)]

    def commit_reduced(self, digest: bytes, now: float) -> list[Decision]:
        """commit-reduced: this peer reduced its chunk; ``digest`` is its encoded bytes'."""
        if self.rank not in self.chunks or self.rank in self.reduced:
            raise ValueError(f"audit round {self.key}: no reduced commit is due from this peer")
        r = st.Reduced(self._head(), self.rank, digest)
        signed = self._sign(st.reduced(r))
        self.reduced[self.rank] = signed
        self._held[self._slot(r)] = signed
        return [Send(signed), *self._advance(now)]

    # -- statements from others

    def receive(
        self, signed: Signed, sender: str, now: float, *, relayed: bool = False
    ) -> list[Decision]:
        """A statement from ``sender``: its own, or (``relayed``: answering this peer's
        ``repair``) any author's. Raises ``AuditRefused`` when it breaks a rule."""
        try:
            s = st.parse(signed.statement)
        except st.BadStatement as e:
            raise AuditRefused("bad-message", f"not a statement from {sender}: {e}") from None
        author = s.head.author
        if author != sender and not relayed:
            raise AuditRefused(
                "bad-signature",
                f"{sender} sent a statement by {author} that this peer did not ask for "
                "(statements travel from their author, or answer a repair)",
            )
        # The signature first: a relayed statement that fails the later rules (a fork above
        # all) must be its author's before it can blame anyone.
        self._verify(signed, author)
        if (s.head.run, s.head.step) != (self.run, self.step):
            raise AuditRefused(
                "bad-message",
                f"a statement of run {s.head.run} step {s.head.step} reached the audit round "
                f"of run {self.run} step {self.step}",
            )
        context = self._context_of(s)
        if s.head.roster != context.digest:
            raise AuditRefused(
                "other-roster",
                f"{author}'s statement of attempt {(s.head.step, s.head.round)} names another "
                "roster than this peer's: hold it until that roster is known, or the leader "
                "committed two rosters for one attempt",
            )
        if isinstance(s, st.Contribution):
            why = self._layout(s, context)
            if why:
                raise AuditRefused("bad-message", f"{author}'s contribution commit: {why}")
            if s.prev != self.prev:
                raise AuditRefused(
                    "fork",
                    f"{author} computed step {self.step} from state {s.prev.hex()[:16]}, this "
                    f"peer from {self.prev.hex()[:16]}: the replicas forked at step "
                    f"{self.step - 1}",
                )
            if s.private and self.policy == "refuse":
                raise AuditRefused(
                    "bad-message",
                    f"{author} committed a contribution on private text and this run refuses "
                    "private data (config.audit.private)",
                )
        elif isinstance(s, st.Reduced) and (
            s.chunk not in self.chunks or context.peers[s.chunk] != author
        ):
            raise AuditRefused(
                "bad-message",
                f"{author} committed a reduction of chunk {s.chunk}, which it does not own "
                "or which is empty",
            )
        if isinstance(s, st.Audit):
            return self._audit_received(signed, s, now)
        proof = self._equivocation(signed, s)
        if proof is not None:
            return proof + self._advance(now)
        if isinstance(s, st.Contribution):
            if s.head.round == self.round:
                self.commits.setdefault(context.peers.index(author), signed)
            else:
                self.carried.setdefault(self._carry_place(s), signed)
        elif isinstance(s, st.Reduced):
            self.reduced.setdefault(s.chunk, signed)
        elif isinstance(s, st.Reveal):
            self.reveals.setdefault(self.peers.index(author), signed)
        return self._advance(now)

    def _context_of(self, s: st.Statement) -> _Context:
        if s.head.round == self.round:
            if s.head.author not in self.peers:
                raise AuditRefused(
                    "bad-message", f"{s.head.author} is not in the roster of {self.key}"
                )
            return self.context
        if isinstance(s, st.Contribution):
            return self.carried_context[self._carry_place(s)]
        raise AuditRefused(
            "bad-message",
            f"a statement of round {s.head.round} reached the audit round of {self.key}",
        )

    def _carry_place(self, s: st.Statement) -> int:
        for c, entry in enumerate(self.carry):
            if (entry.round, entry.peer) == (s.head.round, s.head.author):
                return c
        raise AuditRefused(
            "bad-message",
            f"a contribution commit of {s.head.author} in round {s.head.round} that the roster "
            f"of {self.key} does not carry",
        )

    @staticmethod
    def _layout(c: st.Contribution, context: _Context) -> str:
        """Why a contribution commit's digests do not fit its roster ("" when they do)."""
        n = len(context.peers)
        if len(c.chunks) != n:
            return f"{len(c.chunks)} chunk digests for a roster of {n}"
        share = context.shares[context.peers.index(c.head.author)]
        for k, d in enumerate(c.chunks):
            absent = share == 0 or k in context.empty
            if (d == st.ABSENT) != absent:
                return (
                    f"chunk {k}'s digest must be {'absent' if absent else 'present'} "
                    f"(share {share}, chunk {'empty' if k in context.empty else 'not empty'})"
                )
        if (c.data == st.ABSENT) != (share == 0 or c.private):
            return "the data digest is absent exactly for a share of 0 or private data"
        return ""

    def _verify(self, signed: Signed, author: str) -> None:
        key = self.keys.get(author)
        if key is None:
            raise AuditRefused(
                "bad-signature", f"no audit key for {author}: its statements cannot be checked"
            )
        if not auditkey.verify(key, signed.statement, signed.sig):
            raise AuditRefused(
                "bad-signature",
                f"{author}'s signature over its statement does not verify under its audit key",
            )

    @staticmethod
    def _slot(s: st.Statement) -> tuple[int, str, int, bytes]:
        """What two statements of one author must not differ in: kind, attempt, and index (a
        reduced commit's chunk; an audit's ``of``, the statement it recomputed, since a
        carried item's index is its place in ``carry`` and may equal a rank)."""
        if isinstance(s, st.Reduced):
            index = bytes((s.chunk,))
        elif isinstance(s, st.Audit):
            index = s.of
        else:
            index = b""
        return (int(_KIND[type(s)]), s.head.author, s.head.round, index)

    def _equivocation(self, signed: Signed, s: st.Statement) -> list[Decision] | None:
        """Two valid signatures by one author over different statements of one slot: a proof
        (None when this statement is new or the same as held)."""
        slot = self._slot(s)
        held = self._held.setdefault(slot, signed)
        if held.statement == signed.statement:
            return None
        return [SendProof("equivocation", held, signed), *self._prove(s.head.author,
                "equivocated", self.me)]  # fmt: skip

    def receive_proof(
        self, kind: ProofKind, first: Signed, second: Signed, sender: str, now: float
    ) -> list[Decision]:
        """A ``proof`` from ``sender``: settled by checking its two signatures, no compute."""
        try:
            a, b = st.parse(first.statement), st.parse(second.statement)
        except st.BadStatement as e:
            raise AuditRefused("bad-message", f"{sender}'s proof: {e}") from None
        author = a.head.author
        steps = {(x.head.run, x.head.step) for x in (a, b)}
        if b.head.author != author or steps != {(self.run, self.step)}:
            raise AuditRefused(
                "bad-message", f"{sender}'s proof: not two statements of one author, this step"
            )
        self._verify(first, author)
        self._verify(second, author)
        if kind == "equivocation":
            ok = self._slot(a) == self._slot(b) and first.statement != second.statement
            proven: ProvenKind = "equivocated"
        else:
            ok = (
                isinstance(a, st.Contribution)
                and isinstance(b, st.Reveal)
                and a.head.round == b.head.round
                and st.nonce_hash(b.nonce) != a.nonce_hash
            )
            proven = "bad-reveal"
        if not ok:
            raise AuditRefused(
                "bad-message", f"{sender}'s {kind} proof does not show what it claims"
            )
        return self._prove(author, proven, sender) + self._advance(now)

    # -- audit results

    def _audit_received(self, signed: Signed, a: st.Audit, now: float) -> list[Decision]:
        if self.seed is None:
            if sum(sender == a.head.author for sender, _ in self._early_audits) >= MAX_ITEMS:
                raise AuditRefused(
                    "bad-message",
                    f"{a.head.author} sent more audit results before the draw than an attempt "
                    f"has items ({MAX_ITEMS})",
                )
            self._early_audits.append((a.head.author, signed))
            return []
        return self._audit_result(signed, a, now)

    def _audit_result(self, signed: Signed, a: st.Audit, now: float) -> list[Decision]:
        item = self.items.get(a.of)
        if item is None or (item.item, item.index) != (a.item, a.index):
            raise AuditRefused(
                "bad-message",
                f"{a.head.author}'s audit of item {a.item.name.lower()} {a.index} names no item "
                f"of the draw of {self.key}",
            )
        if item.auditor != a.head.author:
            raise AuditRefused(
                "bad-message",
                f"{a.head.author} sent an audit of {item.item.name.lower()} {item.index}, which "
                f"the draw assigned to {item.auditor}: only the assigned auditor may dispute",
            )
        proof = self._equivocation(signed, a)
        if proof is not None:
            return proof + self._advance(now)
        if item.result is not None or item.accusation is not None:
            return []  # the same result again
        if self.phase in (RoundPhase.SETTLED, RoundPhase.CANCELLED):
            return []  # the attempt never applies: a late result changes nothing
        result: Outcome = (a.digests, a.data)
        if result == item.claim:
            item.result = "pass"
            return [Concluded(item.item, item.index, item.author, item.auditor, "pass"),
                    *self._advance(now)]  # fmt: skip
        item.accusation = result
        out: list[Decision] = []
        if self.phase is RoundPhase.DRAWN:
            self._become(RoundPhase.DISPUTED, now)
        out += self._ask_check(item)
        return out + self._advance(now)

    def _ask_check(self, item: _Item) -> list[Decision]:
        """check-yourself: a dispute is settled by this peer's own recomputation."""
        if item.own is not None or item.asked:
            return []
        item.asked = True
        return [self._recompute(item, "check")]

    def _recompute(self, item: _Item, why: Literal["assigned", "check"]) -> Recompute:
        of = st.statement_hash(item.held.statement)
        return Recompute(of, item.item, item.index, item.author, item.round, item.rank,
                         item.shares, why)  # fmt: skip

    def recomputed(
        self, of: bytes, digests: Sequence[bytes], data: bytes, now: float
    ) -> list[Decision]:
        """This peer's recomputation of item ``of`` (asked for by a ``Recompute``): the digests
        of what it computed (the shell hashes; the round compares)."""
        item = self.items.get(of)
        if item is None or not item.asked or item.own is not None:
            raise ValueError(f"audit round {self.key}: no recomputation of {of.hex()[:16]} is due")
        item.own = (tuple(digests), data)
        out: list[Decision] = []
        if item.auditor == self.me and item.result is None and item.accusation is None:
            a = st.Audit(self._head(), item.item, item.index, of, data, tuple(digests))
            signed = self._sign(st.audit(a))
            self._held[self._slot(a)] = signed
            disputes = item.own != item.claim
            out.append(Send(signed, item.held if disputes or item.round != self.round else None))
            out += self._audit_result(signed, a, now)
        return out + self._advance(now)

    def _verdict(self, item: _Item) -> list[Decision]:
        """check-yourself, concluded: equal to the accuser's digests proves the author; equal
        to the statement's proves the accuser; equal to neither proves both."""
        assert item.own is not None and item.accusation is not None
        out: list[Decision] = []
        if item.own == item.accusation:
            item.result = "fail"
            out += self._prove(item.author, "lied", item.auditor)
        elif item.own == item.claim:
            item.result = "false-accusation"
            out += self._prove(item.auditor, "false-accusation", self.me)
        else:
            item.result = "fail"
            out += self._prove(item.author, "lied", self.me)
            out += self._prove(item.auditor, "false-accusation", self.me)
        return [Concluded(item.item, item.index, item.author, item.auditor, item.result), *out]

    def _prove(self, peer: str, kind: ProvenKind, by: str) -> list[Decision]:
        if peer in self.proven:
            return []
        self.proven[peer] = Proven(peer, kind, by)
        log.info("audit round %s: %s proven (%s, by %s)", self.key, peer, kind, by)
        return [self.proven[peer]]

    # -- progress: reveal, draw, results, settle

    def _advance(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        if self.proven and self.phase in (
            RoundPhase.COMMITTING, RoundPhase.REVEALED, RoundPhase.DRAWN
        ):  # fmt: skip
            self._become(RoundPhase.DISPUTED, now)
        if self.phase is RoundPhase.COMMITTING and not self._missing_statements():
            out += self._reveal(now)
        if self.phase is RoundPhase.REVEALED:
            out += self._bad_reveals()
            if not self.proven and len(self.reveals) == len(self.peers):
                out += self._draw(now)
        if self.proven and self.phase in (RoundPhase.REVEALED, RoundPhase.DRAWN):
            self._become(RoundPhase.DISPUTED, now)
        if self.phase is RoundPhase.DISPUTED:
            for item in self.items.values():
                if item.accusation is not None and item.own is not None and item.result is None:
                    out += self._verdict(item)
            # Settled once every item has its result (a proven auditor's aside), not at the
            # first verdict: peers that heard the disputes in another order must still reach
            # the same ``proven``, which the leader's next roster is checked against.
            if all(i.result is not None or i.auditor in self.proven for i in self.items.values()):
                self._become(RoundPhase.SETTLED, now)
        if self.phase is RoundPhase.DRAWN and all(i.result == "pass" for i in self.items.values()):
            self._become(RoundPhase.PASSED, now)
        return out

    def _missing_statements(self) -> set[str]:
        out = {p for j, p in enumerate(self.peers) if j not in self.commits}
        out |= {self.peers[k] for k in self.chunks if k not in self.reduced}
        out |= {c.peer for i, c in enumerate(self.carry) if i not in self.carried}
        return out

    def _reveal(self, now: float) -> list[Decision]:
        """reveal-after-all: every contribution commit, reduced commit and carried statement is
        held (this peer's own included)."""
        self.seen = st.seen(
            [self.commits[j].statement for j in range(len(self.peers))],
            [self.reduced[k].statement for k in self.chunks],
            [self.carried[c].statement for c in range(len(self.carry))],
        )
        signed = self._sign(st.reveal(st.Reveal(self._head(), self._nonce, self.seen)))
        self.reveals[self.rank] = signed
        self._held[(int(st.Kind.REVEAL), self.me, self.round, b"")] = signed
        self._become(RoundPhase.REVEALED, now)
        return [Send(signed)]

    def _bad_reveals(self) -> list[Decision]:
        out: list[Decision] = []
        for j, signed in self.reveals.items():
            r, c = st.parse(signed.statement), st.parse(self.commits[j].statement)
            assert isinstance(r, st.Reveal) and isinstance(c, st.Contribution)
            if st.nonce_hash(r.nonce) != c.nonce_hash and self.peers[j] not in self.proven:
                out += [SendProof("bad-reveal", self.commits[j], signed)]
                out += self._prove(self.peers[j], "bad-reveal", self.me)
        return out

    def _draw(self, now: float) -> list[Decision]:
        """seen-agree, then the draw: every reveal's ``seen`` equals this peer's."""
        out: list[Decision] = []
        differ = []
        for j, signed in sorted(self.reveals.items()):
            r = st.parse(signed.statement)
            assert isinstance(r, st.Reveal)
            if r.seen != self.seen:
                differ.append(self.peers[j])
        if differ:
            for p in differ:
                if p not in self._asked:
                    self._asked.add(p)
                    out.append(AskStatements(p))
            return out
        nonces = []
        for j in range(len(self.peers)):
            r = st.parse(self.reveals[j].statement)
            assert isinstance(r, st.Reveal)
            nonces.append(r.nonce)
        assert self.seen is not None
        self.seed = draw.seed(
            self.run, self.step, self.round, self.context.digest, self.prev, self.seen, nonces
        )
        self.audited = draw.audited(self.seed, self.one_in)
        commits = [st.parse(self.commits[j].statement) for j in range(len(self.peers))]
        private = [isinstance(c, st.Contribution) and c.private for c in commits]
        carried_shares = [
            c.shares[c.peers.index(c.peer)] for c in self.carry
        ]  # the share each was committed with
        assignment = draw.assign(
            self.seed,
            self.shares,
            blocks=self.blocks,
            audited=self.audited,
            private=private,
            carried=carried_shares,
        )
        self._items(assignment)
        self.drawn_at = now
        self._become(RoundPhase.DRAWN, now)
        for item in self.items.values():
            if item.auditor == self.me:
                item.asked = True
                out.append(self._recompute(item, "assigned"))
        early, self._early_audits = self._early_audits, []
        for sender, signed in early:
            a = st.parse(signed.statement)
            assert isinstance(a, st.Audit)
            try:
                out += self._audit_result(signed, a, now)
            except AuditRefused as e:
                out.append(Refuse(sender, e.code, str(e)))
        return out

    def _items(self, assignment: draw.Assignment) -> None:
        for j, a in assignment.contributions:
            c = st.parse(self.commits[j].statement)
            assert isinstance(c, st.Contribution)
            self._add(st.Item.CONTRIBUTION, j, self.commits[j], (c.chunks, c.data), a,
                      self.round, j, self.shares)  # fmt: skip
        for place, a in assignment.carried:
            c = st.parse(self.carried[place].statement)
            assert isinstance(c, st.Contribution)
            entry = self.carry[place]
            self._add(st.Item.CONTRIBUTION, place, self.carried[place], (c.chunks, c.data), a,
                      entry.round, entry.peers.index(entry.peer), entry.shares)  # fmt: skip
        for k, a in assignment.reductions:
            r = st.parse(self.reduced[k].statement)
            assert isinstance(r, st.Reduced)
            self._add(st.Item.REDUCTION, k, self.reduced[k], ((r.digest,), st.ABSENT), a,
                      self.round, k, self.shares)  # fmt: skip

    def _add(self, item: st.Item, index: int, held: Signed, claim: Outcome, auditor: int,
             round_: int, rank: int, shares: tuple[int, ...]) -> None:  # fmt: skip
        author = st.parse(held.statement).head.author
        self.items[st.statement_hash(held.statement)] = _Item(
            item, index, author, self.peers[auditor], held, claim, round_, rank, shares
        )

    def cancel(self, now: float) -> None:
        """The attempt was abandoned (a later round of the step committed): audits stop."""
        if self.phase not in (RoundPhase.SETTLED, RoundPhase.CANCELLED):
            self._become(RoundPhase.CANCELLED, now)

    def waiting_for(self) -> set[str]:
        """Whom the round waits for (the machine's ``missing``; this peer never): authors of
        statements not held, peers whose reveal has not come, auditors whose result has not
        come. This peer's own recomputations are ``recomputing``."""
        out: set[str] = set()
        if self.phase is RoundPhase.COMMITTING:
            out = self._missing_statements()
        elif self.phase is RoundPhase.REVEALED:
            out = {p for j, p in enumerate(self.peers) if j not in self.reveals}
        elif self.phase in (RoundPhase.DRAWN, RoundPhase.DISPUTED):
            out = {i.auditor for i in self.items.values() if i.result is None} - set(self.proven)
        return out - {self.me}

    @property
    def recomputing(self) -> set[bytes]:
        """The items (``of``) whose ``Recompute`` is out and unanswered."""
        return {of for of, i in self.items.items() if i.asked and i.own is None}
