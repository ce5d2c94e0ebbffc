"""The audit round's scenarios (``p2p.machine.audit``; docs/TRUST.md, "Commit, then audit"):
whole rounds among three peers whose statements travel through an in-memory network, and every
refusal fed a wrong input. Each is a function of the module, so that a planted bug (the module's
source with one expression changed) goes through the same checks and must fail them.

Contributions are stand-ins: a peer's "computation" of an item is a fixed digest of what it is
(``truth``), and a liar's is another; the round only ever sees digests (the shell computes).
Secrets are chosen by a deterministic search so that the draw goes the way a scenario needs.
Run by tests/p2p/test_audit_round.py; tests/audit_round_vectors.py writes them down as the
shared vectors the JavaScript twin replays.
"""

from __future__ import annotations

import hashlib
import types
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from daisychain.p2p import auditkey
from daisychain.p2p import statements as st
from daisychain.p2p.machine import audit

RUN = "0123456789abcdef"
PREV = hashlib.sha256(b"state of step 0").digest()
STEP = 1
PEERS = ("A", "B", "C")
SHARES = (2, 2, 2)
BLOCKS = 6


def h(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def secret(salt: int, peer: str) -> bytes:
    return h(f"audit round test secret {salt} {peer}")


def truth(round_: int, rank: int, shares: Sequence[int], blocks: int) -> audit.Outcome:
    """What an honest device computes for contribution ``rank`` (chunk digests, data digest)."""
    from daisychain.p2p import allreduce

    if shares[rank] == 0:
        return (tuple(st.ABSENT for _ in shares), st.ABSENT)
    chunks = []
    for k in range(len(shares)):
        first, end = allreduce.chunk_blocks(blocks, shares, k)
        chunks.append(st.ABSENT if first == end else h(f"chunk {round_} {rank} {k}"))
    return (tuple(chunks), h(f"rows {round_} {rank}"))


def reduced_truth(round_: int, chunk: int) -> bytes:
    return h(f"reduced {round_} {chunk}")


def lie(outcome: audit.Outcome) -> audit.Outcome:
    """Other bits in the first non-empty chunk."""
    chunks = list(outcome[0])
    k = next(i for i, d in enumerate(chunks) if d != st.ABSENT)
    chunks[k] = h("a lie")
    return (tuple(chunks), outcome[1])


Route = Callable[[str, str, Any], Any]  # (sender, to, Signed) -> Signed to deliver, or None


@dataclass
class Net:
    """Three (or more) audit rounds and the statements between them, delivered in order."""

    mod: types.ModuleType
    salt: int = 0
    one_in: int = 16
    peers: tuple[str, ...] = PEERS
    shares: tuple[int, ...] = SHARES
    blocks: int = BLOCKS
    round: int = 0
    liars: dict[str, str] = field(default_factory=dict)  # peer -> "commit"/"audit"/"reduced"
    route: Route | None = None
    private: dict[str, bool] = field(default_factory=dict)
    policy: str = "refuse"
    carry: tuple[Any, ...] = ()
    extra_keys: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.secrets = {p: secret(self.salt, p) for p in self.peers}
        self.keys = {p: auditkey.SigningKey(s).public for p, s in self.secrets.items()}
        self.keys.update(self.extra_keys)
        self.rounds = {
            p: self.mod.AuditRound(
                run=RUN,
                step=STEP,
                round_=self.round,
                peers=self.peers,
                shares=self.shares,
                blocks=self.blocks,
                me=p,
                secret=self.secrets[p],
                prev=PREV,
                one_in=self.one_in,
                keys=self.keys,
                private=self.policy,
                carry=self.carry,
            )
            for p in self.peers
        }
        self.seen: dict[str, list[Any]] = {p: [] for p in self.peers}  # every decision
        self.queue: deque[tuple[str, list[Any]]] = deque()
        self.now = 0.0

    def claim(self, peer: str) -> audit.Outcome:
        rank = self.peers.index(peer)
        out = truth(self.round, rank, self.shares, self.blocks)
        if self.private.get(peer):
            out = (out[0], st.ABSENT)
        return lie(out) if self.liars.get(peer) == "commit" else out

    def compute(self, peer: str, r: Any) -> audit.Outcome:
        """What ``peer``'s shell computes for a Recompute."""
        if r.item == st.Item.REDUCTION:
            out: audit.Outcome = ((reduced_truth(r.round, r.index),), st.ABSENT)
        else:
            out = truth(r.round, r.rank, r.shares, self.blocks)
        if self.liars.get(peer) == "audit" and r.why == "assigned":
            return (tuple(h(f"false {d.hex()}") for d in out[0]), out[1])
        return out

    def commit_all(self, only: Sequence[str] | None = None) -> None:
        for p in only if only is not None else self.peers:
            chunks, data = self.claim(p)
            self.push(
                p,
                self.rounds[p].commit_contribution(
                    chunks, data, private_data=self.private.get(p, False), now=self.now
                ),
            )
        self.run()
        for p in only if only is not None else self.peers:
            if self.peers.index(p) in self.rounds[p].chunks:
                digest = reduced_truth(self.round, self.peers.index(p))
                if self.liars.get(p) == "reduced":
                    digest = h("a reduced lie")
                self.push(p, self.rounds[p].commit_reduced(digest, self.now))
        self.run()

    def push(self, peer: str, decisions: list[Any]) -> None:
        self.seen[peer] += decisions
        self.queue.append((peer, decisions))

    def run(self) -> None:
        while self.queue:
            peer, decisions = self.queue.popleft()
            for d in decisions:
                self.now += 0.001
                if isinstance(d, self.mod.Send):
                    for to in self.peers:
                        if to != peer:
                            self.deliver(peer, to, d.signed)
                elif isinstance(d, self.mod.Recompute):
                    chunks, data = self.compute(peer, d)
                    self.push(peer, self.rounds[peer].recomputed(d.of, chunks, data, self.now))
                elif isinstance(d, self.mod.AskStatements):
                    held = self.rounds[d.peer]
                    for s in [*held.commits.values(), *held.reduced.values()]:
                        self.push(peer, self.rounds[peer].receive(s, d.peer, self.now,
                                                                  relayed=True))  # fmt: skip
                elif isinstance(d, self.mod.SendProof):
                    for to in self.peers:
                        if to != peer:
                            self.push(to, self.rounds[to].receive_proof(
                                d.kind, d.first, d.second, peer, self.now))  # fmt: skip

    def deliver(self, sender: str, to: str, signed: Any) -> None:
        if self.route is not None:
            signed = self.route(sender, to, signed)
            if signed is None:
                return
        self.push(to, self.rounds[to].receive(signed, sender, self.now))

    def of(self, peer: str, kind: type) -> list[Any]:
        return [d for d in self.seen[peer] if isinstance(d, kind)]

    def phases(self) -> dict[str, str]:
        return {p: r.phase.value for p, r in self.rounds.items()}


def salt_for(mod: types.ModuleType, audited: bool, **kw: Any) -> int:
    """The first salt whose honest round draws ``audited`` (a deterministic search)."""
    for salt in range(200):
        net = Net(mod, salt=salt, **kw)
        net.commit_all()
        if net.rounds["A"].audited is audited:
            return salt
    raise AssertionError(f"no salt in 200 gives audited={audited}")


def sign(peer_secret: bytes, s: st.Statement) -> audit.Signed:
    data = st.encode(s)
    return audit.Signed(data, auditkey.SigningKey(peer_secret).sign(data))


# -- whole rounds


def scenario_honest_not_audited(mod: types.ModuleType) -> None:
    net = Net(mod, salt=salt_for(mod, False))
    net.commit_all()
    assert net.phases() == dict.fromkeys(PEERS, "passed")
    for p in PEERS:
        r = net.rounds[p]
        assert r.may_apply and r.audited is False and not r.items and not r.proven
        assert not net.of(p, mod.Recompute)
        # one contribution commit, one reduced commit, one reveal each
        assert [st.parse(s.signed.statement).__class__ for s in net.of(p, mod.Send)] == [
            st.Contribution,
            st.Reduced,
            st.Reveal,
        ]
    assert len({r.seed for r in net.rounds.values()}) == 1


def scenario_honest_audited(mod: types.ModuleType) -> None:
    net = Net(mod, salt=salt_for(mod, True))
    net.commit_all()
    assert net.phases() == dict.fromkeys(PEERS, "passed")
    a = net.rounds["A"]
    assert a.audited is True and a.may_apply
    # every contribution and every reduction is an item, each with an auditor not its author
    kinds = sorted((i.item, i.index) for i in a.items.values())
    assert kinds == [(st.Item.CONTRIBUTION, j) for j in range(3)] + [
        (st.Item.REDUCTION, k) for k in range(3)
    ]
    assert all(i.auditor != i.author for i in a.items.values())
    for p in PEERS:
        assigned = [r for r in net.of(p, mod.Recompute) if r.why == "assigned"]
        assert len(assigned) == sum(i.auditor == p for i in a.items.values()) >= 1
        concluded = net.of(p, mod.Concluded)
        assert len(concluded) == 6 and {c.result for c in concluded} == {"pass"}
        assert not net.rounds[p].proven
    assert len({r.seed for r in net.rounds.values()}) == 1
    assert all(r.drawn_at is not None and not r.recomputing for r in net.rounds.values())


def audited_net(mod: types.ModuleType, **kw: Any) -> Net:
    net = Net(mod, salt=salt_for(mod, True, **kw), **kw)
    net.commit_all()
    return net


def scenario_caught_liar(mod: types.ModuleType) -> None:
    net = audited_net(mod, liars={"C": "commit"})
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and not r.may_apply
        assert set(r.proven) == {"C"} and r.proven["C"].kind == "lied"
        item = next(i for i in r.items.values() if i.author == "C" and i.item == 1)
        assert r.proven["C"].by == item.auditor
        assert mod.Concluded(st.Item.CONTRIBUTION, 2, "C", item.auditor, "fail") in net.of(
            p, mod.Concluded
        )
        # check-yourself: the peer that did not audit C recomputed it itself
        checks = [x for x in net.of(p, mod.Recompute) if x.why == "check"]
        assert [(x.author, x.index) for x in checks] == ([] if p == item.auditor else [("C", 2)])
    auditor = next(i.auditor for i in net.rounds["A"].items.values() if i.author == "C")
    sent = [s for s in net.of(auditor, mod.Send) if isinstance(st.parse(s.signed.statement),
            st.Audit) and s.audited is not None]  # fmt: skip
    assert len(sent) == 1, "the dispute carries the audited statement"


def scenario_liar_leader(mod: types.ModuleType) -> None:
    net = audited_net(mod, liars={"A": "commit"})
    for p in ("B", "C"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"A"}
        assert r.proven["A"].kind == "lied"


def scenario_reduction_liar(mod: types.ModuleType) -> None:
    net = audited_net(mod, liars={"B": "reduced"})
    for p in ("A", "C"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"B"}
        assert any(c.item == st.Item.REDUCTION and c.result == "fail"
                   for c in net.of(p, mod.Concluded))  # fmt: skip


def scenario_false_accusation(mod: types.ModuleType) -> None:
    net = audited_net(mod, liars={"C": "audit"})
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"C"}
        assert r.proven["C"].kind == "false-accusation" and r.proven["C"].by == p
        accused = {c.author for c in net.of(p, mod.Concluded) if c.result == "false-accusation"}
        assert accused and "C" not in accused


def scenario_equivocation(mod: types.ModuleType) -> None:
    """C signs two contribution commits and sends one to A, the other to B: their seen
    differs, each asks the other's statements, finds both signatures, and proves C."""
    salt = 0
    other: list[Any] = []

    def route(sender: str, to: str, signed: Any) -> Any:
        s = st.parse(signed.statement)
        if sender == "C" and to == "B" and isinstance(s, st.Contribution):
            second = sign(secret(salt, "C"), replace(s, data=h("other rows")))
            other.append(second)
            return second
        return signed

    net = Net(mod, salt=salt, route=route)
    net.commit_all()
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"C"}
        assert r.proven["C"].kind == "equivocated"
        assert r.seed is None, "nobody draws until seen agrees"
        proofs = net.of(p, mod.SendProof)
        assert proofs and proofs[0].kind == "equivocation"
        pair = {proofs[0].first.statement, proofs[0].second.statement}
        assert pair == {net.rounds["C"].commits[2].statement, other[0].statement}
    assert net.of("A", mod.AskStatements) == [mod.AskStatements("B")]


def scenario_bad_reveal(mod: types.ModuleType) -> None:
    salt = 0

    def route(sender: str, to: str, signed: Any) -> Any:
        s = st.parse(signed.statement)
        if sender == "C" and isinstance(s, st.Reveal):
            return sign(secret(salt, "C"), replace(s, nonce=h("a nonce chosen late")))
        return signed

    net = Net(mod, salt=salt, route=route)
    net.commit_all()
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"C"}
        assert r.proven["C"].kind == "bad-reveal" and r.seed is None
        (proof,) = net.of(p, mod.SendProof)
        assert proof.kind == "bad-reveal" and proof.first == r.commits[2]


def scenario_withheld_reveal(mod: types.ModuleType) -> None:
    def route(sender: str, to: str, signed: Any) -> Any:
        withheld = sender == "C" and isinstance(st.parse(signed.statement), st.Reveal)
        return None if withheld else signed

    net = Net(mod, route=route)
    net.commit_all()
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "revealed" and r.seed is None and not r.may_apply
        assert r.waiting_for() == {"C"}


def scenario_withheld_audit(mod: types.ModuleType) -> None:
    """B never sends its audit results: the round stays drawn, names B, and may not apply."""

    def route(sender: str, to: str, signed: Any) -> Any:
        withheld = sender == "B" and isinstance(st.parse(signed.statement), st.Audit)
        return None if withheld else signed

    net = audited_net(mod, route=route)
    for p in ("A", "C"):
        r = net.rounds[p]
        assert r.phase.value == "drawn" and not r.may_apply
        assert r.waiting_for() == {"B"}
        assert all(i.result == "pass" for i in r.items.values() if i.auditor != "B")
    assert net.rounds["B"].may_apply  # B holds every result, its own included


def scenario_dispute_waits_for_every_result(mod: types.ModuleType) -> None:
    """C lies; the peer that does not audit C withholds its results: the auditor of C holds C
    proven but does not settle until every result is in (a proven auditor's aside)."""
    salt = salt_for(mod, True, liars={"C": "commit"})
    probe = Net(mod, salt=salt, liars={"C": "commit"})
    probe.commit_all()
    auditor = next(i.auditor for i in probe.rounds["A"].items.values() if i.author == "C")
    other = next(p for p in ("A", "B") if p != auditor)

    def route(sender: str, to: str, signed: Any) -> Any:
        withheld = sender == other and isinstance(st.parse(signed.statement), st.Audit)
        return None if withheld else signed

    net = Net(mod, salt=salt, liars={"C": "commit"}, route=route)
    net.commit_all()
    r = net.rounds[auditor]
    assert set(r.proven) == {"C"} and r.phase.value == "disputed"
    assert r.waiting_for() == {other}


def scenario_no_reveal_before_every_commit(mod: types.ModuleType) -> None:
    net = Net(mod)
    net.commit_all(only=("A", "B"))  # C's commits never come
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "committing"
        assert not [s for s in net.of(p, mod.Send) if isinstance(st.parse(s.signed.statement),
                    st.Reveal)]  # fmt: skip
        assert r.waiting_for() == {"C"}
    net.commit_all(only=("C",))
    assert net.phases() in (dict.fromkeys(PEERS, "passed"), dict.fromkeys(PEERS, "drawn"))
    assert all(r.seed is not None for r in net.rounds.values())


def scenario_private_unaudited(mod: types.ModuleType) -> None:
    net = audited_net(mod, private={"C": True}, policy="unaudited")
    a = net.rounds["A"]
    assert a.phase.value == "passed"
    assert {(i.item, i.author) for i in a.items.values() if i.item == 1} == {
        (st.Item.CONTRIBUTION, "A"),
        (st.Item.CONTRIBUTION, "B"),
    }, "a private contribution is no item"
    assert (st.Item.REDUCTION, "C") in {(i.item, i.author) for i in a.items.values()}


def carried_net(mod: types.ModuleType, liar: bool, audited: bool) -> Net:
    """Round 0 of A, B, C; C's commit is carried into round 1 of A and B (C left)."""
    first = Net(mod, liars={"C": "commit"} if liar else {})
    first.commit_all(only=("C",))
    commit = first.rounds["C"].commits[2]
    carry = (mod.Carried(0, "C", PEERS, SHARES),)
    c_key = {"C": first.keys["C"]}

    def make(salt: int) -> Net:
        net = Net(mod, salt=salt, peers=("A", "B"), shares=(3, 3), round=1, carry=carry,
                  extra_keys=c_key)  # fmt: skip
        for p in net.peers:
            net.push(p, net.rounds[p].receive(commit, "A" if p == "B" else "B", net.now,
                                              relayed=True))  # fmt: skip
        net.run()
        net.commit_all()
        return net

    for salt in range(200):
        net = make(salt)
        if net.rounds["A"].audited is audited:
            return net
    raise AssertionError("no salt")


def scenario_carried(mod: types.ModuleType) -> None:
    for audited in (False, True):
        net = carried_net(mod, liar=False, audited=audited)
        assert net.phases() == {"A": "passed", "B": "passed"}
        carried = [i for i in net.rounds["A"].items.values() if i.author == "C"]
        assert len(carried) == 1 and carried[0].round == 0 and carried[0].rank == 2
        assert carried[0].shares == SHARES and carried[0].result == "pass"
    net = carried_net(mod, liar=True, audited=False)
    for p in ("A", "B"):
        r = net.rounds[p]
        assert r.phase.value == "settled" and set(r.proven) == {"C"}
        assert r.proven["C"].kind == "lied"


def scenario_carried_late(mod: types.ModuleType) -> None:
    """The carried statement reaches A only after every commit of round 1: A reveals only
    once it holds it (reveal-after-all covers carried statements)."""
    first = Net(mod)
    first.commit_all(only=("C",))
    commit = first.rounds["C"].commits[2]
    carry = (mod.Carried(0, "C", PEERS, SHARES),)
    net = Net(mod, peers=("A", "B"), shares=(3, 3), round=1, carry=carry,
              extra_keys={"C": first.keys["C"]})  # fmt: skip
    net.commit_all()
    for p in net.peers:
        assert net.rounds[p].phase.value == "committing"
        assert net.rounds[p].waiting_for() == {"C"}
    for p in net.peers:
        net.push(p, net.rounds[p].receive(commit, "A" if p == "B" else "B", net.now, relayed=True))
    net.run()
    assert all(r.seed is not None for r in net.rounds.values())


ROUNDS: list[Callable[[types.ModuleType], None]] = [
    scenario_honest_not_audited,
    scenario_honest_audited,
    scenario_caught_liar,
    scenario_liar_leader,
    scenario_reduction_liar,
    scenario_false_accusation,
    scenario_equivocation,
    scenario_bad_reveal,
    scenario_withheld_reveal,
    scenario_withheld_audit,
    scenario_dispute_waits_for_every_result,
    scenario_no_reveal_before_every_commit,
    scenario_private_unaudited,
    scenario_carried,
    scenario_carried_late,
]


# -- refusals: one wrong input each


def committed(mod: types.ModuleType) -> tuple[Net, dict[str, Any]]:
    """A round where only C has committed (its statements held back), and C's honest commit."""
    held: dict[str, Any] = {}

    def route(sender: str, to: str, signed: Any) -> Any:
        if sender == "C":
            held[type(st.parse(signed.statement)).__name__] = signed
            return None
        return signed

    net = Net(mod, route=route)
    net.commit_all()
    return net, held


def refused(mod: types.ModuleType, net: Net, signed: Any, code: str, sender: str = "C",
            relayed: bool = False) -> str:  # fmt: skip
    a = net.rounds["A"]
    before = (dict(a.commits), dict(a.reveals), a.phase)
    with pytest.raises(mod.AuditRefused) as e:
        a.receive(signed, sender, 1.0, relayed=relayed)
    assert e.value.code == code, str(e.value)
    assert (dict(a.commits), dict(a.reveals), a.phase) == before, "a refusal changes nothing"
    return str(e.value)


def resign(net: Net, s: st.Statement, peer: str = "C") -> Any:
    return sign(net.secrets[peer], s)


def c_commit(net: Net, held: dict[str, Any]) -> st.Contribution:
    c = st.parse(held["Contribution"].statement)
    assert isinstance(c, st.Contribution)
    return c


def scenario_refuse_wrong_signature(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    good = held["Contribution"]
    bad = mod.Signed(good.statement, bytes([good.sig[0] ^ 1]) + good.sig[1:])
    assert "does not verify" in refused(mod, net, bad, "bad-signature")
    other = mod.Signed(good.statement, auditkey.SigningKey(net.secrets["B"]).sign(good.statement))
    refused(mod, net, other, "bad-signature")
    net.rounds["A"].receive(good, "C", 1.0)  # the right one is taken


def scenario_refuse_unasked_relay(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    msg = refused(mod, net, held["Contribution"], "bad-signature", sender="B")
    assert "did not ask" in msg


def scenario_refuse_no_key(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    del net.rounds["A"].keys["C"]
    assert "no audit key" in refused(mod, net, held["Contribution"], "bad-signature")


def scenario_refuse_wrong_roster(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    c = c_commit(net, held)
    other = st.roster_digest(PEERS, (2, 2, 1))
    signed = resign(net, replace(c, head=replace(c.head, roster=other)))
    refused(mod, net, signed, "other-roster")


def scenario_refuse_wrong_prev(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    c = c_commit(net, held)
    assert "forked" in refused(mod, net, resign(net, replace(c, prev=h("other state"))), "fork")


def scenario_refuse_forged_fork(mod: types.ModuleType) -> None:
    """A relayed commit with another prev but no valid signature blames nobody: it is the
    relayer's bad signature, not a fork."""
    net, held = committed(mod)
    c = c_commit(net, held)
    forged = mod.Signed(st.encode(replace(c, prev=h("other state"))), held["Contribution"].sig)
    refused(mod, net, forged, "bad-signature", sender="B", relayed=True)


def scenario_refuse_wrong_layout(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    c = c_commit(net, held)
    wrong = [
        replace(c, chunks=c.chunks[:2]),  # N - 1 digests
        replace(c, chunks=(st.ABSENT, *c.chunks[1:])),  # a non-empty chunk without a digest
        replace(c, data=st.ABSENT),  # no data digest, not private
        replace(c, private=True),  # private with a data digest
    ]
    for s in wrong:
        refused(mod, net, resign(net, s), "bad-message")


def scenario_refuse_layout_of_empty_chunks(mod: types.ModuleType) -> None:
    """Shares (2, 2, 0) over 4 blocks: chunk 2 is empty and C contributes nothing."""
    net = Net(mod, shares=(2, 2, 0), blocks=4)
    a = net.rounds["A"]
    assert a.chunks == (0, 1)
    zero = st.Contribution(st.Head(RUN, STEP, 0, "C", a.context.digest), False, PREV,
                           st.nonce_hash(h("n")), st.ABSENT, (st.ABSENT,) * 3)  # fmt: skip
    a.receive(resign(net, zero), "C", 1.0)  # a share of 0: every digest absent
    b = st.Contribution(st.Head(RUN, STEP, 0, "B", a.context.digest), False, PREV,
                        st.nonce_hash(h("n")), h("rows"), (h("0"), h("1"), h("2")))  # fmt: skip
    refused(mod, net, resign(net, b, "B"), "bad-message", sender="B")  # chunk 2 is empty
    refused(mod, net, resign(net, replace(zero, data=h("rows"))), "bad-message")
    net2 = Net(mod, shares=(2, 2, 0), blocks=4)
    refused(mod, net2, resign(net2, replace(zero, chunks=(h("0"), st.ABSENT, st.ABSENT))),
            "bad-message")  # fmt: skip


def scenario_refuse_private_when_refused(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    c = c_commit(net, held)
    msg = refused(mod, net, resign(net, replace(c, private=True, data=st.ABSENT)), "bad-message")
    assert "refuses private data" in msg


def scenario_refuse_reduced_of_another_chunk(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    r = st.parse(held["Reduced"].statement)
    assert isinstance(r, st.Reduced)
    refused(mod, net, resign(net, replace(r, chunk=1)), "bad-message")


def scenario_refuse_other_attempt_and_stranger(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    c = c_commit(net, held)
    refused(mod, net, resign(net, replace(c, head=replace(c.head, step=2))), "bad-message")
    refused(mod, net, resign(net, replace(c, head=replace(c.head, round=3))), "bad-message")
    net.rounds["A"].keys["D"] = auditkey.SigningKey(h("D")).public
    d = sign(h("D"), replace(c, head=replace(c.head, author="D")))
    refused(mod, net, d, "bad-message", sender="D")
    refused(mod, net, mod.Signed(b"DCS1", bytes(64)), "bad-message")


def scenario_refuse_audit_from_unassigned(mod: types.ModuleType) -> None:
    net = audited_net(mod)
    a = net.rounds["A"]
    item = next(i for i in a.items.values() if i.auditor != "A" and i.author != "A")
    intruder = next(p for p in PEERS if p not in (item.auditor, "A"))
    of = st.statement_hash(item.held.statement)
    result = st.Audit(st.Head(RUN, STEP, 0, intruder, a.context.digest), item.item, item.index,
                      of, item.claim[1], item.claim[0])  # fmt: skip
    with pytest.raises(mod.AuditRefused) as e:
        a.receive(resign(net, result, intruder), intruder, 9.0)
    assert e.value.code == "bad-message" and "assigned to" in str(e.value)
    nothing = replace(result, head=replace(result.head, author=item.auditor), of=h("nothing"))
    with pytest.raises(mod.AuditRefused) as e:
        a.receive(resign(net, nothing, item.auditor), item.auditor, 9.0)
    assert "names no item" in str(e.value)


def scenario_refuse_early_audit_from_unassigned(mod: types.ModuleType) -> None:
    """An audit that arrives before the draw is held, and refused once the draw shows its
    sender was not assigned the item."""
    salt = salt_for(mod, True)
    forged: list[Any] = []

    def route(sender: str, to: str, signed: Any) -> Any:
        s = st.parse(signed.statement)
        if to == "A" and sender == "B" and isinstance(s, st.Reveal) and not forged:
            # before B's reveal reaches A, B sends an audit of every item not assigned to it
            ref = net.rounds["B"]
            for item in ref.items.values():
                if item.auditor != "B":
                    a = st.Audit(replace(s.head), item.item, item.index,
                                 st.statement_hash(item.held.statement), item.claim[1],
                                 item.claim[0])  # fmt: skip
                    forged.append(sign(net.secrets["B"], a))
            for f in forged:
                net.push("A", net.rounds["A"].receive(f, "B", net.now))
        return signed

    net = Net(mod, salt=salt, route=route)
    net.commit_all()
    refusals = net.of("A", mod.Refuse)
    assert forged and len(refusals) == len(forged)
    assert all(r.peer == "B" and r.code == "bad-message" for r in refusals)


def scenario_refuse_audit_flood(mod: types.ModuleType) -> None:
    """Audit results held before the draw are bounded: no more than an attempt has items."""
    net = Net(mod)
    a = net.rounds["A"]
    for i in range(mod.MAX_ITEMS + 1):
        result = st.Audit(st.Head(RUN, STEP, 0, "B", a.context.digest), st.Item.CONTRIBUTION, 0,
                          h(f"of {i}"), st.ABSENT, (h(f"digest {i}"),))  # fmt: skip
        if i < mod.MAX_ITEMS:
            assert a.receive(resign(net, result, "B"), "B", 1.0) == []
        else:
            with pytest.raises(mod.AuditRefused, match="more audit results"):
                a.receive(resign(net, result, "B"), "B", 1.0)


def scenario_refuse_bad_proof(mod: types.ModuleType) -> None:
    net = Net(mod)
    net.commit_all()
    a = net.rounds["A"]
    c = a.commits[2]
    with pytest.raises(mod.AuditRefused):
        a.receive_proof("equivocation", c, c, "B", 9.0)  # the same statement twice
    r = a.reveals[2]
    with pytest.raises(mod.AuditRefused):
        a.receive_proof("bad-reveal", c, r, "B", 9.0)  # its nonce matches
    forged = mod.Signed(r.statement, bytes(64))
    with pytest.raises(mod.AuditRefused) as e:
        a.receive_proof("bad-reveal", c, forged, "B", 9.0)
    assert e.value.code == "bad-signature"
    later = st.parse(r.statement)
    assert isinstance(later, st.Reveal)
    other_step = sign(net.secrets["C"], replace(later, head=replace(later.head, step=STEP + 1)))
    with pytest.raises(mod.AuditRefused, match="this step"):
        a.receive_proof("bad-reveal", c, other_step, "B", 9.0)  # step 2's nonce, not step 1's
    first = st.parse(c.statement)
    other_commit = replace(first, head=replace(first.head, step=STEP + 1))
    with pytest.raises(mod.AuditRefused, match="this step"):
        a.receive_proof("equivocation", c, sign(net.secrets["C"], other_commit), "B", 9.0)
    assert not a.proven and a.phase.value == "passed"
    second = sign(net.secrets["C"], replace(st.parse(c.statement), data=h("x")))
    a.receive_proof("equivocation", c, second, "B", 9.0)
    assert a.proven["C"] == mod.Proven("C", "equivocated", "B")


def scenario_refuse_relayed_bad_signature(mod: types.ModuleType) -> None:
    net, held = committed(mod)
    good = held["Contribution"]
    msg = refused(mod, net, mod.Signed(good.statement, bytes(64)), "bad-signature", sender="B",
                  relayed=True)  # fmt: skip
    assert "does not verify" in msg


def scenario_own_commit_checked(mod: types.ModuleType) -> None:
    net = Net(mod)
    a = net.rounds["A"]
    with pytest.raises(ValueError, match="digest"):
        a.commit_contribution((st.ABSENT,) * 3, h("rows"), private_data=False, now=0.0)
    with pytest.raises(ValueError, match="no reduced commit"):
        Net(mod, shares=(2, 2, 0), blocks=4).rounds["C"].commit_reduced(h("r"), 0.0)
    with pytest.raises(ValueError, match="no recomputation"):
        a.recomputed(h("x"), (h("y"),), st.ABSENT, 0.0)
    a.commit_contribution(*net.claim("A"), private_data=False, now=0.0)
    with pytest.raises(ValueError, match="committed already"):
        a.commit_contribution(*net.claim("A"), private_data=False, now=0.0)
    a.commit_reduced(h("r"), 0.0)
    with pytest.raises(ValueError, match="no reduced commit"):
        a.commit_reduced(h("r"), 0.0)
    done = audited_net(mod)
    mine = next(of for of, i in done.rounds["A"].items.items() if i.auditor == "A")
    with pytest.raises(ValueError, match="no recomputation"):
        done.rounds["A"].recomputed(mine, (h("y"),), st.ABSENT, 0.0)  # answered already


def scenario_setup_checked(mod: types.ModuleType) -> None:
    """A round is made only for a roster holding this peer, a rate in [1, 65536] and carried
    entries of earlier rounds whose peer was in their roster."""
    good: dict[str, Any] = dict(run=RUN, step=STEP, round_=1, peers=PEERS, shares=SHARES,
                                blocks=BLOCKS, me="A", secret=h("s"), prev=PREV, one_in=16,
                                keys={})  # fmt: skip
    mod.AuditRound(**good, carry=(mod.Carried(0, "C", PEERS, SHARES),))
    wrong = [
        ({"me": "Z"}, "not in the roster"),
        ({"one_in": 0}, "one_in"),
        ({"one_in": 65537}, "one_in"),
        ({"carry": (mod.Carried(1, "C", PEERS, SHARES),)}, "round is late"),
        ({"carry": (mod.Carried(0, "D", PEERS, SHARES),)}, "not in its roster"),
    ]
    for change, words in wrong:
        with pytest.raises(ValueError, match=words):
            mod.AuditRound(**{**good, **change})


def scenario_cancelled(mod: types.ModuleType) -> None:
    net = Net(mod)
    net.commit_all(only=("A",))
    a = net.rounds["A"]
    a.cancel(5.0)
    assert a.phase.value == "cancelled" and not a.may_apply and a.since == 5.0
    a.cancel(6.0)  # once is enough
    with pytest.raises(AssertionError, match="cannot become"):
        a._become(mod.RoundPhase.PASSED, 7.0)


REFUSALS: list[Callable[[types.ModuleType], None]] = [
    scenario_refuse_wrong_signature,
    scenario_refuse_unasked_relay,
    scenario_refuse_no_key,
    scenario_refuse_wrong_roster,
    scenario_refuse_wrong_prev,
    scenario_refuse_forged_fork,
    scenario_refuse_wrong_layout,
    scenario_refuse_layout_of_empty_chunks,
    scenario_refuse_private_when_refused,
    scenario_refuse_reduced_of_another_chunk,
    scenario_refuse_other_attempt_and_stranger,
    scenario_refuse_audit_from_unassigned,
    scenario_refuse_early_audit_from_unassigned,
    scenario_refuse_audit_flood,
    scenario_refuse_bad_proof,
    scenario_refuse_relayed_bad_signature,
    scenario_own_commit_checked,
    scenario_setup_checked,
    scenario_cancelled,
]
