"""What the protocol machine asks its shell to do (docs/PROTOCOL.md, "The protocol machine").

The shell executes effects in the order the machine returned them: messages and payloads to
one peer leave in that order (the contract: a checkpoint precedes the roster that follows it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daisychain.wire import messages
from daisychain.wire.frames import FrameKind


@dataclass(frozen=True)
class SendMessage:
    peer: str
    message: messages.Message


@dataclass(frozen=True)
class SendPayload:
    """One payload to frame (``frames.fragment``, deflate-raw when ``deflate``) and send.
    Every header field but the per-fragment ones (total, offset, crc) is chosen here."""

    peer: str
    kind: FrameKind
    step: int
    round: int
    chunk: int
    transfer: int
    deflate: bool
    payload: bytes


@dataclass(frozen=True)
class Close:
    """Close the channel to ``peer`` (it was rejected or speaks another version)."""

    peer: str


@dataclass(frozen=True)
class Compute:
    """Compute this replica's mean gradient of step ``step`` (its state is at ``step - 1``)
    over its positions as roster rank ``rank`` of a roster with these ``shares`` (only the
    kernel probe for a share of 0), cut into the roster's chunks, and answer with
    ``ComputeDone``/``ComputeFailed``."""

    step: int
    round: int
    rank: int
    shares: tuple[int, ...]

    @property
    def peers(self) -> int:
        return len(self.shares)


@dataclass(frozen=True)
class Save:
    """Save the replica (it is at ``step``) to this peer's checkpoint path."""

    step: int


@dataclass(frozen=True)
class StepApplied:
    step: int
    round: int
    loss: float
    hash: str
    roster: tuple[str, ...]
    shares: tuple[int, ...]
    probe: str
    backend: str
    leader: str


@dataclass(frozen=True)
class Outcome:
    """How the run ended for this peer."""

    reason: str  # done | fork | error | left | leader-request
    step: int
    hash: str
    message: str
    hashes: dict[str, str] = field(default_factory=dict)
    code: str = ""  # machine-readable cause for errors (version-mismatch, ...)


@dataclass(frozen=True)
class Finished:
    """The run is over and every peer acknowledged the stop (or the linger ran out): the
    shell drains its send buffers, closes and returns ``outcome``."""

    outcome: Outcome


Effect = SendMessage | SendPayload | Close | Compute | Save | StepApplied | Finished
