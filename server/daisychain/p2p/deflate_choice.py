"""Deflate where it pays: per link, whether a gradient payload leaves compressed.

The protocol lets every binary frame say whether its payload is deflate-raw (frames.py, flag
bit 0), and the machine marks every gradient payload as one that *may* be compressed; the
shell chooses per link. Compressing pays when the link time the saved bytes would take is
more than the time deflating takes on this device:

    (1 - ratio) * link seconds per byte  >  deflate seconds per byte

``ratio`` (compressed / raw bytes) and the deflate time are measured on this peer's own
deflated payloads; the link's seconds per byte are measured by the mesh while its writer waits
for a full send buffer to drain (``mesh.Mesh.drain_s_per_byte``; a link whose buffer never fills
keeps up, and counts as free). On loopback or a LAN the data channel drains at the speed of
aiortc's SCTP on this CPU, and deflate costs more than the bytes it saves (docs/BENCHMARKS.md,
``mesh --preset small``: 13 ms more per MB sent); on a home uplink or a TURN relay it pays many
times over. Every ``PROBE_EVERY``-th payload is deflated anyway, so the figures follow a link
and a machine whose speed changes. Wall seconds throughout: on a device held to a fraction of a
core, wall time is what a step pays.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY = 16
SMOOTH = 0.5  # exponential average, newest weight


def _mix(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTH * (new - old)


@dataclass
class LinkDeflate:
    """One link's choice and the figures it rests on."""

    ratio: float | None = None  # compressed bytes / raw bytes
    deflate_s_per_byte: float | None = None  # this peer's wall seconds per raw byte
    payloads: int = 0

    def choose(self, link_s_per_byte: float | None) -> bool:
        """Deflate the next payload? (None or 0 for the link: it never backed up.)"""
        self.payloads += 1
        if self.ratio is None or self.deflate_s_per_byte is None:
            return True  # nothing measured yet: measure
        if self.payloads % PROBE_EVERY == 0:
            return True
        return (1.0 - self.ratio) * (link_s_per_byte or 0.0) > self.deflate_s_per_byte

    def deflated(self, raw_bytes: int, wire_bytes: int, seconds: float) -> None:
        """A payload of ``raw_bytes`` left as ``wire_bytes`` after ``seconds`` of deflating."""
        if raw_bytes <= 0:
            return
        self.ratio = _mix(self.ratio, wire_bytes / raw_bytes)
        self.deflate_s_per_byte = _mix(self.deflate_s_per_byte, max(seconds, 0.0) / raw_bytes)
