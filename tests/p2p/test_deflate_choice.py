"""Deflate where it pays (p2p/deflate_choice.py): the choice per link, from measured figures."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from daisychain.p2p.deflate_choice import PROBE_EVERY, LinkDeflate
from daisychain.p2p.frames import FLAG_DEFLATE
from daisychain.p2p.mesh import Mesh
from mesh_helpers import (
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
)

MB = 1_000_000


def measured(ratio: float, deflate_ms_per_mb: float) -> LinkDeflate:
    """A link whose first payload was deflated with these figures."""
    choice = LinkDeflate()
    assert choice.choose(None) is True, "nothing measured yet: the first payload measures"
    choice.deflated(MB, int(ratio * MB), deflate_ms_per_mb / 1000)
    return choice


def test_a_fast_link_is_not_worth_deflating() -> None:
    """Loopback at aiortc's speed here (12 MB/s, 0.083 s/MB): 12.6% fewer bytes save 10.5 ms a
    MB of link time; deflating costs 19 ms a MB."""
    choice = measured(0.874, 19.0)
    assert choice.choose(1 / (12 * MB)) is False


def test_a_slow_link_is_worth_deflating() -> None:
    """10 Mbit/s (0.8 s/MB): the same 12.6% save 100 ms a MB."""
    choice = measured(0.874, 19.0)
    assert choice.choose(0.8 / MB) is True


def test_a_quarter_core_device_does_not_deflate_onto_its_cpu_bound_link() -> None:
    """Its channel drains at 2.5 MB/s (aiortc on a quarter core) and its deflate is 4x slower:
    50 ms saved against 76 ms spent."""
    choice = measured(0.874, 76.0)
    assert choice.choose(0.4 / MB) is False


def test_a_link_that_never_filled_keeps_up_and_is_not_worth_it() -> None:
    choice = measured(0.5, 1.0)
    assert choice.choose(None) is False
    assert choice.choose(0.0) is False


def test_incompressible_bytes_are_never_worth_it() -> None:
    choice = measured(1.0, 0.1)
    assert choice.choose(10.0 / MB) is False


def test_every_sixteenth_payload_is_deflated_to_keep_the_figures_fresh() -> None:
    choice = measured(0.874, 19.0)
    picks = [choice.choose(1 / (12 * MB)) for _ in range(2 * PROBE_EVERY)]
    assert [i + 2 for i, p in enumerate(picks) if p] == [PROBE_EVERY, 2 * PROBE_EVERY]


def test_the_figures_follow_a_changing_machine() -> None:
    """A device that got slower (its deflate now 4x dearer) stops deflating after the probes."""
    choice = measured(0.874, 19.0)
    link = 0.3 / MB  # 38 ms saved a MB
    assert choice.choose(link) is True
    for _ in range(3):
        choice.deflated(MB, int(0.874 * MB), 0.076)
    assert choice.choose(link) is False
    choice.deflated(0, 0, 1.0)  # an empty payload changes nothing
    assert choice.choose(link) is False


class RecordingMesh(Mesh):
    """A real mesh that notes the kind and flags of the first fragment of every payload sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_fragments: list[tuple[int, int]] = []

    def send_frames(self, peer: str, frames: Iterable[bytes | str]) -> bool:
        items = list(frames)
        for f in items:
            if isinstance(f, bytes) and f[:2] == b"DC" and f[20:24] == bytes(4):  # offset 0
                self.first_fragments.append((f[3], f[4]))
        return super().send_frames(peer, items)


@needs_namespace
async def test_two_loopback_peers_stop_deflating_after_measuring() -> None:
    """`tiny` over loopback: no send buffer ever fills (the link keeps up), so after the first
    payload, which measures deflate, a peer deflates only every 16th; the receivers take both
    kinds of frame and the replicas stay identical."""
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=20, min_peers=2),
                                  mesh_cls=RecordingMesh)  # fmt: skip
        follower = await start_peer(url, "f", mesh_cls=RecordingMesh)
        outcomes = await finish([leader, follower], timeout=240)
    assert all(o.reason == "done" for o in outcomes), outcomes
    assert_identical([leader, follower], range(1, 21))
    for peer in (leader, follower):
        mesh = peer.node.mesh
        assert isinstance(mesh, RecordingMesh)
        grads = [flags for kind, flags in mesh.first_fragments if kind in (1, 2)]
        deflated = [i for i, flags in enumerate(grads, start=1) if flags & FLAG_DEFLATE]
        assert len(grads) >= 30, grads
        assert deflated == [i for i in range(1, len(grads) + 1) if i == 1 or i % 16 == 0]
