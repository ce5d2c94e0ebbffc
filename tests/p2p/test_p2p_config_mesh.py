"""Must-show 5 over real channels: a follower answers a hostile leader's config with
`incompatible` and a hint, keeps running in the lobby, and trains in the next valid run
(docs/PROTOCOL.md, "Config validation"). The hostile leader is a bare ``Mesh`` (real aiortc
channel, real signaling server) speaking the data-channel protocol by hand, because a real
leader would never build such a config."""

from __future__ import annotations

import asyncio
import dataclasses

from daisychain.p2p import DATA_PROTOCOL_VERSION, runconfig
from daisychain.p2p.mesh import ChannelClosed, ChannelMessage, ChannelOpen, Mesh, MeshEvent
from daisychain.p2p.run import Phase
from daisychain.wire import messages
from mesh_helpers import (
    assert_identical,
    corpus,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)

pytestmark = needs_namespace

LONG = 500  # the valid run never ends on its own while the test watches; end_run ends it
EVENT_S = 60.0  # bound on each wait for one mesh event (channel set-up on a loaded machine)


def hostile_config(**model: int) -> messages.Config:
    """The tiny preset's run with some model fields changed (no validation on this side)."""
    _, sha, vocab = corpus()
    spec = dict(vocab_size=vocab, width=64, layers=2, heads=4, seq_len=32, batch=1, mlp_mult=4)
    spec.update(model)
    return messages.Config(
        run="feedfacecafebeef", preset=None, model=messages.ModelSpec(**spec),
        optim=messages.OptimSpec(3e-3, 0, 0.1, 1.0), steps=30, seed=7, data="builtin",
        tokenizer_sha256=sha, resume_step=0, resume_hash=None, global_batch=2, shares_by="speed",
    )  # fmt: skip


async def _next(events: asyncio.Queue[MeshEvent], peer: str) -> MeshEvent:
    while True:
        event = await asyncio.wait_for(events.get(), EVENT_S)
        if getattr(event, "peer", None) == peer:
            return event


async def impose(url: str, follower: str, cfg: messages.Config) -> messages.Error:
    """Connect as a leader, greet ``follower``, send ``cfg``; return its reply, after checking
    that the follower then closed the channel (the leader is gone for it)."""
    leader = Mesh(url, name="hostile")
    await leader.connect()
    try:
        assert isinstance(await _next(leader.events, follower), ChannelOpen)
        leader.send(follower, messages.encode(messages.Hello(DATA_PROTOCOL_VERSION, "hostile")))
        leader.send(follower, messages.encode(cfg))
        replies: list[messages.Message] = []
        while not isinstance(event := await _next(leader.events, follower), ChannelClosed):
            assert isinstance(event, ChannelMessage) and isinstance(event.data, str)
            replies.append(messages.parse(event.data))
        assert isinstance(replies[0], messages.Hello), replies
        errors = [m for m in replies if isinstance(m, messages.Error)]
        assert len(errors) == 1 and replies == [replies[0], errors[0]], replies
        return errors[0]
    finally:
        await leader.close()


async def test_follower_refuses_hostile_configs_stays_up_and_joins_the_next_run() -> None:
    async with signaling_server() as url:
        follower = await start_peer(url, "follower")
        node = follower.node

        # The case: width 65 with 4 heads used to crash the follower (ConfigError).
        reply = await impose(url, node.id, hostile_config(width=65))
        assert reply.code == "incompatible"
        assert "width 65 is not divisible by heads 4" in reply.message
        assert "width / heads is a power of 4" in reply.hint

        # A well-formed model far above the default memory cap (about 35 GB estimated).
        big = hostile_config(width=1024, layers=16, heads=16, seq_len=512, batch=16)
        reply = await impose(url, node.id, big)
        assert reply.code == "incompatible"
        assert "above its cap of 4096 MiB" in reply.message and "--max-memory-mb" in reply.hint

        # Still up, still in the lobby, holding no run and no state.
        assert not follower.task.done()
        assert node.phase.phase is Phase.LOBBY and node.config is None and node.state is None

        # The next (valid) leader gets it: the follower trains in its roster from step 1.
        leader = await start_peer(url, "lead", lead=lead_config(steps=LONG, min_peers=2))
        await wait_for(lambda: len(follower.records) >= 2, 120, "2 steps on the follower")
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, follower], timeout=120)
    assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
    assert min(follower.hashes) == 1 and node.id in follower.records[0].roster
    assert_identical([leader, follower], range(1, max(leader.hashes) + 1))


async def test_a_leader_checks_its_own_config_with_the_same_rules() -> None:
    """A leader whose run is above its own cap ends at once with the rule's reason and hint
    (it trains the run too), before sending anything."""
    async with signaling_server() as url:
        lead = dataclasses.replace(lead_config(), seq_len=64)
        leader = await start_peer(url, "lead", lead=lead, limits=runconfig.Limits(max_seq_len=32))
        outcome = await finish([leader], timeout=60)
    assert outcome[0].reason == "error" and outcome[0].code == "incompatible"
    assert "seq_len 64 above this peer's cap of 32" in outcome[0].message
    assert "--max-seq-len" in outcome[0].message
