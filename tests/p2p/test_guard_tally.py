"""The sync guard's read-only tally (server/daisychain/p2p/machine/guard.py ``tally``, the twin
of guard.js, which the page's live panel reads): which roster peers' hashes of an attempt equal
ours, differ or are missing, and the backends their ``hash`` messages named. A differing hash is
never counted as agreement, and asking changes nothing the machine does."""

from __future__ import annotations

from daisychain.p2p.machine.guard import SyncGuard
from protocol_traces.scenarios import ABC, follow, stops
from protocol_traces.script import A, B, C, Script, config, roster_msg


def test_three_equal_hashes_and_their_backends() -> None:
    s = Script("t", "tally", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    assert s.machine.tally(1, 0, list(ABC)) is None, "nothing before our own hash"
    digest = s.exchange(1, 0, ABC)
    t = s.machine.tally(1, 0, list(ABC))
    assert t is not None and t.same == [B] and t.missing == [A, C] and t.hash == digest
    assert not stops(s.hashes(1, 0, (A,), digest, backend="webgpu-dp4a"))
    assert not stops(s.hashes(1, 0, (C,), digest, backend="numpy"))
    t = s.machine.tally(1, 0, list(ABC))
    assert t is not None
    assert (t.same, t.differ, t.missing) == ([A, B, C], [], [])
    assert t.by_peer[A] == "webgpu-dp4a" and t.by_peer[C] == "numpy"
    assert sum(t.backends.values()) == 3
    assert s.machine.tally(1, 1, list(ABC)) is None, "another round is another attempt"
    assert s.machine.agreement(1) == (3, 3)


def test_a_differing_hash_is_never_agreement() -> None:
    s = Script("t", "tally", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    digest = s.exchange(1, 0, ABC)
    out = s.hashes(1, 0, (A,), "f" * 64)
    assert stops(out), "the guard fires"
    t = s.machine.tally(1, 0, list(ABC))
    assert t is not None
    assert (t.same, t.differ, t.missing) == ([B], [A], [C])
    assert t.hash == digest


def test_tally_is_read_only() -> None:
    g = SyncGuard("a", "p" * 64)
    g.record("a", (3, 0), "5" * 64, "numpy")
    before = g.have((3, 0))
    g.tally((3, 0), ["a", "b"])
    g.tally((4, 0), ["a"])
    assert g.have((3, 0)) == before
    assert g.have((4, 0)) == {}
