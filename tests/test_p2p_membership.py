"""Join, leave, dropout and leader failover over real channels: never a fork."""

from __future__ import annotations

import asyncio
import signal

from mesh_helpers import (
    PeerProcess,
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)

pytestmark = needs_namespace


async def test_peer_joining_at_step_10_matches_from_its_first_step() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=16, min_peers=2))
        first = await start_peer(url, "early")
        await wait_for(lambda: len(leader.records) >= 10, 120, "step 10")
        late = await start_peer(url, "late")
        outcomes = await finish([leader, first, late], timeout=180)
    assert [o.reason for o in outcomes] == ["done"] * 3, outcomes
    joined = min(late.hashes)
    assert 11 <= joined < 16, f"the late peer's first step is {joined}"
    assert len(late.records[0].roster) == 3
    assert_identical([leader, first, late], range(1, 17))
    # The joiner computed (not just copied) from its first step: it was in the roster.
    assert late.node.id in late.records[0].roster


async def test_follower_leaving_is_dropped_from_the_next_roster() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=8))
        stay = await start_peer(url, "stay")
        leaver = await start_peer(url, "leaver")
        await wait_for(lambda: len(leaver.records) >= 3, 120, "step 3")
        leaver.node.shutdown("test leaves")
        outcomes = await finish([leader, stay, leaver], timeout=120)
    assert [o.reason for o in outcomes] == ["done", "done", "left"]
    assert len(leader.records[-1].roster) == 2
    assert_identical([leader, stay, leaver], range(1, 9))


async def _three_processes(url: str, steps: int) -> list[PeerProcess]:
    common = ["--batch", "1", "--seq-len", "32", "--seed", "7"]
    procs = [PeerProcess(url, "lead", "--lead", "--steps", str(steps), "--min-peers", "3",
                         *common)]  # fmt: skip
    procs += [PeerProcess(url, f"f{i}") for i in range(2)]
    return procs


def assert_no_fork(*procs: PeerProcess) -> None:
    """Peers that applied the same attempt (step, round) hold the same hash. (A peer that
    applied an attempt the leader later re-committed is resynced by checkpoint, so its
    abandoned attempt may differ from the committed one: that is not a fork.)"""
    seen: dict[tuple[int, int], set[str]] = {}
    for p in procs:
        for key, digest in p.hashes.items():
            seen.setdefault(key, set()).add(digest)
    forks = {k: v for k, v in seen.items() if len(v) > 1}
    assert not forks, f"replicas diverged: {forks}"


def final_hash(p: PeerProcess) -> str:
    return str(next(d for d in p.lines if d.get("event") == "stopped")["hash"])


async def test_follower_killed_mid_step_run_continues_without_fork() -> None:
    async with signaling_server() as url:
        procs = await _three_processes(url, steps=10)
        try:
            victim = procs[2]
            await wait_for(lambda: len(victim.steps) >= 3, 120, "step 3 on the victim")
            victim.proc.send_signal(signal.SIGKILL)
            codes = await asyncio.gather(procs[0].wait(150), procs[1].wait(150))
            await victim.wait(10)
        finally:
            for p in procs:
                p.close()
    lead, other = procs[0], procs[1]
    assert list(codes) == [0, 0]
    assert lead.steps == list(range(1, 11)) and other.steps[-1] == 10
    assert_no_fork(lead, other, victim)
    assert final_hash(lead) == final_hash(other)
    last = [d for d in lead.lines if d.get("event") == "step"][-1]
    assert last["peers"] == 2


async def test_leader_killed_successor_leads_without_fork() -> None:
    async with signaling_server() as url:
        procs = await _three_processes(url, steps=10)
        try:
            lead = procs[0]
            await wait_for(lambda: len(lead.steps) >= 3, 120, "step 3 on the leader")
            lead.proc.send_signal(signal.SIGKILL)
            codes = await asyncio.gather(procs[1].wait(150), procs[2].wait(150))
            await lead.wait(10)
        finally:
            for p in procs:
                p.close()
    a, b = procs[1], procs[2]
    assert list(codes) == [0, 0]
    assert a.steps[-1] == b.steps[-1] == 10
    assert_no_fork(lead, a, b)
    assert final_hash(a) == final_hash(b)
    old_leader = lead.lines[0]["id"]
    last = [d for d in a.lines if d.get("event") == "step"][-1]
    assert last["leader"] != old_leader and last["peers"] == 2
