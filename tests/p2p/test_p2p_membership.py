"""Join, leave, dropout and leader failover over real channels: never a fork."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

from daisychain.p2p.mesh import ChannelMessage, Mesh, MeshEvent, PeerLeft
from daisychain.p2p.run import Phase
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


# Runs below are long enough never to end on their own while the test acts (a loaded machine
# may be slow to connect a late peer); the test ends them with `end_run` once it has seen
# what it needs, so nothing depends on how many steps fit into a connection's set-up time.
LONG = 500


async def test_peer_joining_at_step_10_matches_from_its_first_step() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=LONG, min_peers=2))
        first = await start_peer(url, "early")
        await wait_for(lambda: len(leader.records) >= 10, 120, "step 10")
        late = await start_peer(url, "late")
        await wait_for(lambda: len(late.records) >= 3, 120, "3 steps on the late peer")
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, first, late], timeout=180)
    assert [o.reason for o in outcomes] == ["leader-request"] * 3, outcomes
    last = max(leader.hashes)
    joined = min(late.hashes)
    assert 11 <= joined < last, f"the late peer's first step is {joined}"
    assert len(late.records[0].roster) == 3
    assert_identical([leader, first, late], range(1, last + 1))
    # The joiner computed (not just copied) from its first step: it was in the roster.
    assert late.node.id in late.records[0].roster


async def test_follower_leaving_is_dropped_from_the_next_roster() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=LONG))
        stay = await start_peer(url, "stay")
        leaver = await start_peer(url, "leaver")
        await wait_for(lambda: len(leaver.records) >= 3, 120, "step 3")
        leaver.node.shutdown("test leaves")
        await wait_for(
            lambda: len(leader.records[-1].roster) == 2 and len(stay.records[-1].roster) == 2,
            120,
            "a step without the leaver",
        )
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, stay, leaver], timeout=120)
    assert [o.reason for o in outcomes] == ["leader-request", "leader-request", "left"]
    assert len(leader.records[-1].roster) == 2
    assert_identical([leader, stay, leaver], range(1, max(leader.hashes) + 1))


class _LeftBeforeStop(asyncio.Queue[MeshEvent]):
    """Mesh events where the server's peer-left for the sender of the first `stop` comes
    before the stop itself: the ordering two paths (server, data channel) can produce."""

    def __init__(self) -> None:
        super().__init__()
        self.reordered = False

    def put_nowait(self, item: MeshEvent) -> None:
        if (
            not self.reordered
            and isinstance(item, ChannelMessage)
            and isinstance(item.data, str)
            and json.loads(item.data).get("type") == "stop"
        ):
            self.reordered = True
            super().put_nowait(PeerLeft(item.peer))
        super().put_nowait(item)


class _LeftBeforeStopMesh(Mesh):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events = _LeftBeforeStop()


async def test_a_stop_wins_over_the_failover_its_senders_departure_starts() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=LONG))
        followers = [await start_peer(url, f"f{i}", mesh_cls=_LeftBeforeStopMesh) for i in range(2)]
        phases_when_leader_returned: list[Phase] = []
        leader.task.add_done_callback(
            lambda _: phases_when_leader_returned.extend(f.node.phase.phase for f in followers)
        )
        await wait_for(lambda: len(leader.records) >= 3, 120, "step 3")
        leader.node.end_run("the test ends the run")
        outcomes = await finish([leader, *followers], timeout=120)
    assert [o.reason for o in outcomes] == ["leader-request"] * 3, outcomes
    last = max(leader.hashes)
    assert 3 <= last < LONG
    assert {o.step for o in outcomes} == {last} and len({o.hash for o in outcomes}) == 1
    for f in followers:
        assert isinstance(f.node.mesh.events, _LeftBeforeStop) and f.node.mesh.events.reordered
        assert max(f.hashes) == last, "a follower trained on after the stop"
    # The stop was acknowledged before the leader let go of its channels.
    assert phases_when_leader_returned == [Phase.STOPPED, Phase.STOPPED]
    assert_identical([leader, *followers], range(1, last + 1))


KILLED_RUN = 20  # steps: the kill at step 3 lands long before the end, even on a slow machine


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
        procs = await _three_processes(url, steps=KILLED_RUN)
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
    assert lead.steps == list(range(1, KILLED_RUN + 1)) and other.steps[-1] == KILLED_RUN
    assert_no_fork(lead, other, victim)
    assert final_hash(lead) == final_hash(other)
    last = [d for d in lead.lines if d.get("event") == "step"][-1]
    assert last["peers"] == 2


async def test_leader_killed_successor_leads_without_fork() -> None:
    async with signaling_server() as url:
        procs = await _three_processes(url, steps=KILLED_RUN)
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
    # Both survivors applied every step: the departure dropped the leader alone, so neither
    # was pushed out of the re-committed roster to catch up by checkpoint (a skipped step).
    assert a.steps == b.steps == list(range(1, KILLED_RUN + 1)), (a.steps, b.steps)
    assert_no_fork(lead, a, b)
    assert final_hash(a) == final_hash(b)
    old_leader = next(d for d in lead.lines if d.get("event") == "joined")["id"]
    last = [d for d in a.lines if d.get("event") == "step"][-1]
    assert last["leader"] != old_leader and last["peers"] == 2
