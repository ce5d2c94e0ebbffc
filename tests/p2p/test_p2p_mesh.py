"""Three headless peers train over the real server and real aiortc data channels."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from daisychain.p2p.mesh import HIGH_WATER, LOW_WATER, ChannelMessage, Mesh
from mesh_helpers import (
    Peer,
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)

pytestmark = needs_namespace


async def test_three_peers_identical_every_step_and_loss_decreases() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=30))
        followers = [await start_peer(url, f"f{i}") for i in range(2)]
        peers = [leader, *followers]
        outcomes = await finish(peers, timeout=240)
    assert all(o.reason == "done" for o in outcomes), outcomes
    for p in peers:
        assert sorted(p.hashes) == list(range(1, 31)), p.node.name
        assert all(len(r.roster) == 3 for r in p.records)
    assert_identical(peers, range(1, 31))
    losses = [r.loss for r in leader.records]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.3, f"loss did not decrease: {first:.3f} -> {last:.3f}"


async def test_early_chunks_leave_during_the_backward_and_change_no_bit() -> None:
    """The same run (equal shares: its hashes follow from its config) with each chunk sent as
    soon as the backward produced it, and with every chunk sent after the whole gradient:
    identical hashes at every step, and only the first sent bytes before its compute was done
    (p2p/early.py; docs/PROTOCOL.md, "Early chunks")."""
    runs: list[list[Peer]] = []
    for early in (True, False):
        async with signaling_server() as url:
            leader = await start_peer(url, "lead", lead=lead_config(steps=4), early_chunks=early)
            followers = [await start_peer(url, f"f{i}", early_chunks=early) for i in range(2)]
            peers = [leader, *followers]
            outcomes = await finish(peers, timeout=240)
        assert all(o.reason == "done" for o in outcomes), outcomes
        assert_identical(peers, range(1, 5))
        runs.append(peers)
    assert runs[0][0].hashes == runs[1][0].hashes
    early_bytes = [r.bytes_early for p in runs[0] for r in p.records]
    assert sum(early_bytes) > 0, early_bytes
    assert all(r.bytes_early == 0 for p in runs[1] for r in p.records)
    assert all(r.bytes_early <= r.bytes_sent for p in runs[0] for r in p.records)


async def test_sends_wait_for_the_channel_to_drain() -> None:
    frame_bytes, count = 48_000, 100  # about 4.8 MB queued at once
    async with signaling_server() as url:
        a, b = Mesh(url, name="a"), Mesh(url, name="b")
        await a.connect()
        await b.connect()
        try:
            await wait_for(lambda: b.id in a.open_peers() and a.id in b.open_peers(), 60, "open")
            buffered_at_each_frame: list[int] = []

            def produce() -> Iterator[bytes]:
                for i in range(count):
                    buffered_at_each_frame.append(a.buffered(b.id))
                    yield bytes([i]) * frame_bytes

            assert a.send_frames(b.id, produce()) and a.send(b.id, "after")
            received: list[str | bytes] = []
            while len(received) < count + 1:
                event = await asyncio.wait_for(b.events.get(), 120)
                if isinstance(event, ChannelMessage):
                    received.append(event.data)
        finally:
            await a.close()
            await b.close()
    assert received[-1] == "after"
    assert [m[0] for m in received[:-1]] == list(range(count)), "in order, none lost"
    # Frames are produced only while the channel holds at most HIGH_WATER (+ the frame just
    # handed over, + the queued "after"): the 4.8 MB never sat in memory at once.
    assert max(buffered_at_each_frame) <= HIGH_WATER + frame_bytes + 1
    assert max(buffered_at_each_frame) > LOW_WATER, "the producer was throttled"
