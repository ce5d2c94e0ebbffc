"""Three headless peers train over the real server and real aiortc data channels."""

from __future__ import annotations

from mesh_helpers import (
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
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
