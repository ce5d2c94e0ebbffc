"""What the protocol machine is fed (docs/PROTOCOL.md, "The protocol machine").

Every event carries ``now``: seconds on the shell's monotonic clock. The machine never reads a
clock, so the same events with the same ``now`` produce the same effects on every platform;
conformance traces (tests/vectors/protocol/) are exactly such sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

from daisychain.wire import messages


@dataclass(frozen=True)
class ChannelOpened:
    """The data channel to ``peer`` is open (this peer sends ``hello`` on it)."""

    now: float
    peer: str


@dataclass(frozen=True)
class ChannelClosed:
    """The data channel to ``peer`` closed: the peer is gone."""

    now: float
    peer: str


@dataclass(frozen=True)
class PeerLeft:
    """The signaling server says ``peer`` left (after the shell's grace for its channel)."""

    now: float
    peer: str


@dataclass(frozen=True)
class MessageReceived:
    """A text (control) message from ``peer``, exactly as received (parsed by the machine)."""

    now: float
    peer: str
    text: str


@dataclass(frozen=True)
class FrameReceived:
    """A binary message (one frame) from ``peer``, exactly as received."""

    now: float
    peer: str
    data: bytes


@dataclass(frozen=True)
class ComputeDone:
    """The gradient asked for by a ``Compute`` effect: one quantized chunk payload per roster
    peer (``payloads[k]`` goes to the owner of chunk ``k``; ours stays; empty bytes for an
    empty chunk, all of them with a share of 0), the batch loss, the kernel probe of the
    backend that computed it, and the shell's smoothed seconds per sequence (0: never
    measured)."""

    now: float
    step: int
    round: int
    loss: float
    payloads: tuple[bytes, ...]
    probe: str
    seq_s: float


@dataclass(frozen=True)
class ComputePartial:
    """Chunk ``chunk`` of the gradient a ``Compute`` effect asked for is final before the rest
    (the backward produces the last layers first): its quantized payload, exactly the bytes the
    ``ComputeDone`` that follows will carry for it. A contribution leaves at once; our own chunk
    lets the reduction start while the backward goes on."""

    now: float
    step: int
    round: int
    chunk: int
    payload: bytes


@dataclass(frozen=True)
class ComputeFailed:
    now: float
    step: int
    round: int
    error: str


@dataclass(frozen=True)
class Timer:
    """The deadline the machine last announced (``next_deadline``) has passed."""

    now: float


@dataclass(frozen=True)
class UserLead:
    """This peer leads the run ``config``; its replica is already at ``config``'s state (fresh
    or restored by the shell). The first roster needs ``min_peers`` ready peers."""

    now: float
    config: messages.Config
    min_peers: int


@dataclass(frozen=True)
class UserStop:
    """The leader's user ends the run at the next step boundary (``stop leader-request``)."""

    now: float
    reason: str


@dataclass(frozen=True)
class UserLeave:
    """This peer's user leaves (Ctrl-C): ``leave`` to every peer, then finish."""

    now: float
    reason: str


@dataclass(frozen=True)
class UserSave:
    """Save now (SIGUSR1); a leader also asks every peer to save this step."""

    now: float


@dataclass(frozen=True)
class UserPrivateData:
    """This peer's user trains on text only this device holds (``on``), or stops (docs/PROTOCOL.md,
    "Private data"). Taken only before a run is configured: the ``ready`` or ``sync-request``
    this peer sends says it, and a run keeps what it was told."""

    now: float
    on: bool


@dataclass(frozen=True)
class SignalingLost:
    now: float
    reason: str


Event = (
    ChannelOpened
    | ChannelClosed
    | PeerLeft
    | MessageReceived
    | FrameReceived
    | ComputeDone
    | ComputePartial
    | ComputeFailed
    | Timer
    | UserLead
    | UserStop
    | UserLeave
    | UserSave
    | UserPrivateData
    | SignalingLost
)
