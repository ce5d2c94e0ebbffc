"""Damaged and forged gradients, hostile frames, checkpoints, user-facing errors."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from daisychain import checkpoint, training
from daisychain.p2p import DATA_PROTOCOL_VERSION
from daisychain.p2p.mesh import ChannelOpen, Mesh
from daisychain.wire import frames, messages
from mesh_helpers import (
    Faults,
    FaultyNode,
    PeerProcess,
    assert_identical,
    corpus,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)
from shares_replay import replayed_hashes, shares_of

pytestmark = needs_namespace


async def test_damaged_contribution_is_detected_and_repaired() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=5, min_peers=2))
        bad = await start_peer(url, "bad", faults=Faults(damage_contribution_at=3))
        outcomes = await finish([leader, bad], timeout=120)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert isinstance(bad.node, FaultyNode) and bad.node.faults.damage_contribution_at is None, (
        "the fault fired"
    )
    assert_identical([leader, bad], range(1, 6))
    assert [r.round for r in leader.records] == [0] * 5, "repaired in place, no re-commit"


async def test_forged_reduced_chunk_is_stopped_by_the_sync_guard() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=6))
        forger = await start_peer(url, "a", faults=Faults(fork_reduced_at=3))
        peers = [leader, forger, await start_peer(url, "b")]
        outcomes = await finish(peers, timeout=120)
    assert {o.reason for o in outcomes} == {"fork"}, outcomes
    report = next(o for o in outcomes if o.hashes)
    assert "diverged after step 3" in report.message
    assert len(set(report.hashes.values())) == 2
    assert max(max(p.hashes) for p in peers) == 3, "nobody trained past the fork"


async def test_checkpoint_restored_into_a_fresh_group_continues_identically(
    tmp_path: Path,
) -> None:
    path = tmp_path / "step15.safetensors"
    _, sha, _ = corpus()
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=18, min_peers=2))
        other = await start_peer(url, "other")

        def save_at_15(record: object) -> None:
            if leader.node.state is not None and leader.node.state.step == 15:
                checkpoint.save(path, leader.node.state, sha)

        leader.node.on_step = lambda r: (leader.records.append(r), save_at_15(r))  # type: ignore[func-returns-value]
        await finish([leader, other], timeout=180)
    assert checkpoint.load(path).step == 15
    async with signaling_server() as url:
        resumed = await start_peer(
            url, "lead2", lead=lead_config(steps=18, min_peers=2, resume=str(path))
        )
        other2 = await start_peer(url, "other2")
        outcomes = await finish([resumed, other2], timeout=120)
    assert [o.reason for o in outcomes] == ["done", "done"]
    assert sorted(resumed.hashes) == [16, 17, 18]
    # Protocol v2: the steps after the checkpoint are exactly what its state, the run's config
    # and the shares this group committed give (recomputed outside any mesh); and where the
    # resumed group committed the uninterrupted run's shares, its hashes are that run's.
    config = resumed.node.config
    assert config is not None
    split = shares_of(resumed.records)
    want = await replayed_hashes(config, split, state=checkpoint.load(path).state)
    first = shares_of(leader.records)
    for step in (16, 17, 18):
        assert resumed.hashes[step] == other2.hashes[step] == want[step], step
        if all(split[s] == first[s] for s in range(16, step + 1)):
            assert resumed.hashes[step] == leader.hashes[step], step


async def test_unreachable_server_exits_with_hint() -> None:
    proc = PeerProcess("http://127.0.0.1:9", "lonely")
    try:
        code = await proc.wait(60)
        err = proc.stderr()
    finally:
        proc.close()
    assert code == 1
    assert "cannot reach the DaisyChain server" in err and "hint:" in err


async def test_denied_room_exits_with_hint() -> None:
    async with signaling_server() as url:
        host = PeerProcess(url, "host", "--room", "testroom42", "--approve", "none")
        guest = None
        try:
            await wait_for(lambda: host.joined, 60, "host")
            guest = PeerProcess(url, "guest", "--room", "testroom42")
            code = await guest.wait(60)
            err = guest.stderr()
        finally:
            host.close()
            if guest is not None:
                guest.close()
    assert code == 1, err
    assert "room testroom42" in err and "hint:" in err


async def _hostile(url: str, peers: int) -> tuple[Mesh, set[str]]:
    """A mesh member that speaks raw bytes; returns once its channels to ``peers`` are open."""
    mesh = Mesh(url, name="hostile")
    await mesh.connect()
    opened: set[str] = set()
    while len(opened) < peers:
        event = await asyncio.wait_for(mesh.events.get(), 30)
        if isinstance(event, ChannelOpen):
            opened.add(event.peer)
    return mesh, opened


async def test_wrong_protocol_version_makes_the_peer_exit_with_hint() -> None:
    async with signaling_server() as url:
        follower = PeerProcess(url, "follower")
        try:
            await wait_for(lambda: follower.joined, 60, "the follower joined")
            mesh, opened = await _hostile(url, 1)
            for peer in opened:
                mesh.send(peer, json.dumps({"type": "hello", "version": 99, "name": "future"}))
            code = await follower.wait(60)
            err = follower.stderr()
            await mesh.close()
        finally:
            follower.close()
    assert code == 1, err
    assert "protocol version 99" in err and "hint: run the same DaisyChain version" in err


async def test_hostile_frames_are_rejected_and_the_run_continues() -> None:
    async with signaling_server() as url:
        # Long enough not to end while the hostile peer connects; the test ends it below.
        leader = await start_peer(url, "lead", lead=lead_config(steps=500, min_peers=2))
        other = await start_peer(url, "other")
        await wait_for(lambda: len(leader.records) >= 1, 120, "step 1")
        mesh, _ = await _hostile(url, 2)
        lead_id, other_id = leader.node.id, other.node.id
        hello = messages.encode(messages.Hello(DATA_PROTOCOL_VERSION, "hostile"))
        mesh.send(lead_id, hello)
        mesh.send(lead_id, b"DC\x01\x01" + bytes(100))  # header claims total 0: malformed
        mesh.send(other_id, hello)
        oversized = frames.HEADER.pack(b"DC", 1, 1, 0, 0, 0, 1, 1, 2**31, 0, 0) + b"x"
        mesh.send(other_id, oversized)
        gone = (leader.node.gone, other.node.gone)
        await wait_for(lambda: all(mesh.id in g for g in gone), 60, "hostile peer rejected")
        after = len(leader.records) + 2
        await wait_for(lambda: len(other.records) >= after, 120, "two more steps")
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, other], timeout=120)
        await mesh.close()
    assert [o.reason for o in outcomes] == ["leader-request", "leader-request"]
    assert mesh.id in leader.node.gone and mesh.id in other.node.gone
    assert_identical([leader, other], range(1, max(leader.hashes) + 1))


async def test_save_every_writes_atomic_checkpoints_and_the_last_step(tmp_path: Path) -> None:
    path = tmp_path / "run.safetensors"
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=5, min_peers=2))
        saver = await start_peer(url, "saver", checkpoint_path=str(path), save_every=2)
        outcomes = await finish([leader, saver], timeout=120)
    assert [o.reason for o in outcomes] == ["done", "done"]
    assert saver.node.saved == [f"{path}@2", f"{path}@4", f"{path}@5"]
    assert checkpoint.load(path).step == 5
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


async def test_ctrl_c_saves_the_checkpoint_before_leaving(tmp_path: Path) -> None:
    path = tmp_path / "follower.safetensors"
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=40, min_peers=2))
        follower = PeerProcess(url, "follower", "--checkpoint", str(path))
        try:
            await wait_for(lambda: len(follower.steps) >= 2, 120, "step 2 on the follower")
            follower.proc.send_signal(signal.SIGINT)
            code = await follower.wait(60)
            leader.node.end_run("the test is over")
            await finish([leader], timeout=60)
        finally:
            follower.close()
    assert code == 130, follower.stderr()
    saved = checkpoint.load(path)
    stopped = next(d for d in follower.lines if d.get("event") == "stopped")
    assert saved.step == stopped["step"] >= 2
    assert leader.hashes[saved.step] == stopped["hash"] == training.state_hash(saved.state)
