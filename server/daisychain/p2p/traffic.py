"""What a peer sends, counted per step, the same way by every shell that carries the machine's
effects (the headless peer's ``p2p.node`` and the simulator's ``sim.driver``).

The protocol machine decides every message; a shell only carries them. Counting them in one
place, from the effects themselves, is what lets ``daisychain bench sim`` be checked against
``daisychain bench scale`` exactly: the same machines hand out the same effects, so the same
rule gives the same figures (docs/BENCHMARKS.md, "Scale and the simulator").

Which step a message belongs to is read from the message, never from the clock: a roster, a
step hash, a repair or missing report carries its step, and so does a contribution or reduced
chunk. Everything else (hello, config, ready, sync-request, a checkpoint, save, stop, leave,
error) is membership traffic and goes to ``MEMBERSHIP``. So a step's figures do not depend on
when a message happened to leave.

Three byte counts, because two of them depend on values, not on the protocol's shape:

- ``piece_bytes``: the payloads (gradient pieces and checkpoints) framed without compression,
  each 28-byte frame header included. It follows from the model's shape and the roster alone,
  so the simulator's figure equals the real run's exactly.
- ``text_bytes``: the UTF-8 bytes of the text messages. A step hash carries the loss and the
  sender's measured seconds per sequence as JSON numbers, whose length varies with their value.
- ``wire_bytes``: text bytes plus the frames as the shell sent them (a real peer deflates
  gradient pieces, and what that saves depends on the gradient; the simulator models it with a
  ratio).

``messages`` counts data-channel messages as the protocol defines them: one per text message
and one per payload (a payload may take several frames; ``frames`` counts those, and depends on
the compressed size as well).
"""

from __future__ import annotations

from dataclasses import dataclass

from daisychain.p2p.machine import effects as fx
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind

MEMBERSHIP = -1  # the bucket of messages that belong to no step

_PER_STEP = (messages.Roster, messages.StepHash, messages.Repair, messages.Missing)


def step_of(effect: fx.SendMessage | fx.SendPayload) -> int:
    """The step ``effect`` belongs to, or ``MEMBERSHIP``."""
    if isinstance(effect, fx.SendPayload):
        return MEMBERSHIP if effect.kind is FrameKind.CHECKPOINT else effect.step
    if isinstance(effect.message, _PER_STEP):
        return effect.message.step
    return MEMBERSHIP


def framed_size(payload_bytes: int) -> int:
    """Bytes of ``payload_bytes`` framed without compression (``frames.fragment``)."""
    count = max(1, -(-payload_bytes // frames.MAX_FRAGMENT_BYTES))
    return payload_bytes + count * frames.HEADER_BYTES


@dataclass
class StepTraffic:
    messages: int = 0  # text messages + payloads
    frames: int = 0  # text messages + the frames the payloads took
    text_bytes: int = 0
    piece_bytes: int = 0  # payloads framed uncompressed
    wire_bytes: int = 0  # text bytes + the frames as sent


class Tally:
    """Per-step traffic of one peer; ``take(step)`` hands a step's figures over once."""

    def __init__(self) -> None:
        self.steps: dict[int, StepTraffic] = {}

    def _bucket(self, effect: fx.SendMessage | fx.SendPayload) -> StepTraffic:
        return self.steps.setdefault(step_of(effect), StepTraffic())

    def text(self, effect: fx.SendMessage, encoded: str) -> None:
        size = len(encoded.encode("utf-8"))
        t = self._bucket(effect)
        t.messages += 1
        t.frames += 1
        t.text_bytes += size
        t.wire_bytes += size

    def payload(self, effect: fx.SendPayload, frame_count: int, wire_bytes: int) -> None:
        if frame_count < 1 or wire_bytes < frames.HEADER_BYTES * frame_count:
            raise ValueError(
                f"a payload takes at least one frame of {frames.HEADER_BYTES} header bytes "
                f"(got {frame_count} frames, {wire_bytes} bytes)"
            )
        t = self._bucket(effect)
        t.messages += 1
        t.frames += frame_count
        t.piece_bytes += framed_size(len(effect.payload))
        t.wire_bytes += wire_bytes

    def take(self, step: int) -> StepTraffic:
        """The figures of ``step`` so far (then forgotten: a late repair starts a new count)."""
        return self.steps.pop(step, StepTraffic())
