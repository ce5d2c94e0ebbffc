"""The simulator's link model: latency between peers, islands of fast links, uplink bandwidth.

Peers are placed on ``islands`` (peer ``i`` on island ``i % islands``); a message between two
peers of one island takes ``latency_s`` one way, between islands ``island_latency_s``. A
device's uplink (``profiles.Device.up_bytes_s``) is shared by everything it sends, in the order
it sent it, which is what makes a leader's or a big roster's traffic cost time. A channel opens
``connect_rtts`` round trips after both peers are present (ICE, DTLS and SCTP handshakes).

Gradient pieces travel deflated in a real run; what deflate saves depends on the gradient's
values, which the simulator does not compute: ``wire_ratio`` (compressed over raw, measured in
a real run) scales their bytes on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Links:
    name: str
    latency_s: float  # one way, within an island
    island_latency_s: float = 0.0  # one way, between islands
    islands: int = 1
    wire_ratio: float = 1.0  # deflated / raw bytes of a gradient piece
    connect_rtts: float = 4.0

    def __post_init__(self) -> None:
        if self.latency_s < 0 or self.island_latency_s < 0 or self.islands < 1:
            raise ValueError(f"links {self.name!r}: latencies >= 0 and at least one island")
        if not 0 < self.wire_ratio <= 2:
            raise ValueError(f"links {self.name!r}: wire_ratio {self.wire_ratio} not in (0, 2]")

    def latency(self, a: int, b: int) -> float:
        same = a % self.islands == b % self.islands
        return self.latency_s if same else self.island_latency_s

    def connect_s(self, a: int, b: int) -> float:
        return 2 * self.connect_rtts * self.latency(a, b)


LINK_MODELS: dict[str, Links] = {
    "loopback": Links("loopback", latency_s=0.0002),
    "lan": Links("lan", latency_s=0.0005, wire_ratio=0.8),
    "wan-islands": Links(
        "wan-islands", latency_s=0.002, island_latency_s=0.04, islands=4, wire_ratio=0.8
    ),
}
