"""The repair store: the attempts this peer still holds (the last ``HISTORY_STEPS`` steps) and
the pieces that arrived before their attempt (docs/PROTOCOL.md, "Gradient repair").

Anyone who applied an attempt holds every reduced chunk of it, and every peer holds the
contributions it sent: a request for either is answered from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from daisychain.p2p.machine.attempt import Attempt, AttemptPhase, Key
from daisychain.p2p.run import HISTORY_STEPS
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind

MAX_EARLY = 256  # pieces buffered for attempts this peer has not started yet


@dataclass(frozen=True)
class Served:
    kind: FrameKind
    payload: bytes


class RepairStore:
    def __init__(self) -> None:
        self._attempts: dict[Key, Attempt] = {}
        self._early: dict[Key, list[tuple[str, frames.Payload]]] = {}

    def get(self, key: Key) -> Attempt | None:
        return self._attempts.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._attempts

    def add(self, attempt: Attempt) -> None:
        step = attempt.roster.step
        self._attempts[attempt.key] = attempt
        for old in [k for k in self._attempts if k[0] <= step - HISTORY_STEPS]:
            del self._attempts[old]
        for old in [k for k in self._early if k[0] < step]:
            del self._early[old]

    def live(self, step: int) -> Attempt | None:
        """The attempt of ``step`` still working towards applying, if any."""
        for k, a in self._attempts.items():
            if k[0] == step and a.live:
                return a
        return None

    def applied(self, step: int) -> Attempt | None:
        """The attempt of ``step`` this peer applied, if it still holds it."""
        for k, a in self._attempts.items():
            if k[0] == step and a.phase is AttemptPhase.APPLIED:
                return a
        return None

    def abandon_before(self, key: Key) -> None:
        """A later round of the same step was committed: earlier ones never apply."""
        for k, a in self._attempts.items():
            if k[0] == key[0] and k[1] < key[1] and a.live:
                a.transition(AttemptPhase.ABANDONED)

    def hold_early(self, peer: str, p: frames.Payload, my_step: int) -> None:
        """A piece of an attempt not started yet (its roster is still on the way): kept, up to
        two steps ahead and ``MAX_EARLY`` pieces."""
        buffered = sum(len(v) for v in self._early.values())
        if my_step < p.step <= my_step + 2 and buffered < MAX_EARLY:
            self._early.setdefault((p.step, p.round), []).append((peer, p))

    def take_early(self, key: Key) -> list[tuple[str, frames.Payload]]:
        return self._early.pop(key, [])

    def serve(self, peer: str, m: messages.Repair) -> Served | None:
        """The piece ``peer`` asks for, when held (None: ignore the request)."""
        a = self._attempts.get((m.step, m.round))
        if a is None or not 0 <= m.chunk < a.n:
            return None
        if m.piece == "contribution":
            # Only the chunk's owner may ask for our contribution to it (and only if we made one).
            sent = a.sent_piece(m.chunk)
            if sent is not None and a.roster.peers[m.chunk] == peer:
                return Served(FrameKind.CONTRIBUTION, sent)
            return None
        if m.chunk in a.reduced_payload:
            return Served(FrameKind.REDUCED, a.reduced_payload[m.chunk])
        return None


def requests(a: Attempt, me: str, gone: set[str], run: str) -> list[tuple[str, messages.Repair]]:
    """What to ask for again: a missing contribution from its sender, a missing reduced chunk
    from every roster peer (anyone who applied the attempt can serve it)."""
    step, rnd = a.key
    out: list[tuple[str, messages.Repair]] = []
    if a.owns_chunk and a.rank not in a.reduced:
        for j in a.contributors:
            peer = a.roster.peers[j]
            if j not in a.contributions and peer not in gone:
                out.append((peer, messages.Repair(run, step, rnd, "contribution", a.rank)))
    for k in a.chunks:
        if k not in a.reduced:
            for peer in a.roster.peers:
                if peer != me and peer not in gone:
                    out.append((peer, messages.Repair(run, step, rnd, "reduced", k)))
    return out
