"""The protocol simulator (``daisychain.sim``): unchanged machines over a modelled network.

Deterministic from its seed, fails loudly (``Stall``, naming who waits for what) on a planted
protocol bug instead of hanging, counts what every peer sends as the real shell does, carries
churn (a peer leaving, a peer joining late and syncing), and refuses bad scenarios. No sockets,
no sleeps: every test here runs in well under a second of CPU per simulated run.
"""

from __future__ import annotations

import dataclasses

import pytest

from daisychain.p2p.machine import Machine, Timers
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.traffic import MEMBERSHIP, Tally, framed_size, step_of
from daisychain.sim import Device, Links, Scenario, Simulator, Stall
from daisychain.sim.clock import EventQueue
from daisychain.sim.network import LINK_MODELS
from daisychain.sim.profiles import LAPTOP, PHONE, assign, calibrated
from daisychain.sim.report import step_traffic, summarize
from daisychain.wire import messages
from daisychain.wire.frames import FrameKind

LAN = LINK_MODELS["lan"]


def run(scenario: Scenario, machine: type[Machine] = Machine) -> list[tuple[object, ...]]:
    """Everything a run reports, as plain values (for comparing two runs)."""
    result = Simulator(scenario, machine).run()
    out: list[tuple[object, ...]] = [(result.end_s, result.events)]
    for p in result.peers:
        out.append((p.name, p.joined_at, p.final_hash, tuple(sorted(p.steps.items()))))
    return out


def test_a_small_full_mesh_run_finishes_with_identical_replicas() -> None:
    result = Simulator(Scenario((LAPTOP,) * 4, LAN, steps=3)).run()
    assert {o.reason for o in result.outcomes.values()} == {"done"}
    assert {o.step for o in result.outcomes.values()} == {3}
    summary = summarize(result.peers, 1, 3)
    assert summary["replicas_identical"] is True
    assert summary["connections_per_peer"]["min"] == summary["connections_per_peer"]["max"] == 3


@pytest.mark.parametrize("n", [2, 4, 7])
def test_every_peer_sends_what_the_full_mesh_protocol_says_per_step(n: int) -> None:
    """Equal shares, no repairs: a follower sends n-1 contributions, n-1 reduced chunks (its
    own chunk), n-1 step hashes; the leader also n-1 rosters (p2p/traffic.py counts by the
    message's own step)."""
    result = Simulator(Scenario((LAPTOP,) * n, LAN, steps=3)).run()
    for p in result.peers:
        for step in (2, 3):
            want = 3 * (n - 1) + (n - 1 if p.leader and step < 3 else 0)
            # The last step's hashes end the run: no roster of a step after it.
            if p.leader and step == 3:
                want = 4 * (n - 1)
            assert p.steps[step].messages == want, (p.name, step, p.steps[step])


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    devices = (LAPTOP, PHONE, dataclasses.replace(PHONE, straggle=0.5), LAPTOP)
    scenario = Scenario(devices, LINK_MODELS["wan-islands"], steps=4, seed=7, shares_by="speed")
    assert run(scenario) == run(scenario)
    assert run(scenario) != run(dataclasses.replace(scenario, seed=8))


class DropsReduced(Machine):
    """A planted protocol bug: peer 1 never sends its reduced chunk (repairs included)."""

    def handle(self, event: ev.Event) -> list[fx.Effect]:
        out = super().handle(event)
        if self.id != "sim-00000001":
            return out
        reduced = FrameKind.REDUCED
        return [e for e in out if not (isinstance(e, fx.SendPayload) and e.kind is reduced)]


def test_a_machine_that_drops_a_message_stalls_the_run_and_the_report_says_who_waits() -> None:
    scenario = Scenario((LAPTOP,) * 3, LAN, steps=3, stall_s=30.0)
    with pytest.raises(Stall) as stall:
        Simulator(scenario, DropsReduced).run()
    waits = stall.value.waits
    assert "no peer applied a step for 30 s" in str(stall.value)
    for peer in ("sim-00000000", "sim-00000002"):
        assert "pieces missing from ['sim-00000001']" in waits[peer], waits
    # The healthy machine finishes the very same scenario.
    assert {o.reason for o in Simulator(scenario).run().outcomes.values()} == {"done"}


class NoHello(Machine):
    def handle(self, event: ev.Event) -> list[fx.Effect]:
        return [
            e
            for e in super().handle(event)
            if not (isinstance(e, fx.SendMessage) and isinstance(e.message, messages.Hello))
        ]


def test_a_run_with_nothing_left_to_happen_stalls_instead_of_hanging() -> None:
    with pytest.raises(Stall) as stall:
        Simulator(Scenario((LAPTOP,) * 3, LAN, steps=2), NoHello).run()
    assert "nothing is left to happen" in str(stall.value)
    assert "sim-00000000" in stall.value.waits


def test_churn_a_follower_leaves_and_a_late_peer_syncs_in() -> None:
    scenario = Scenario((LAPTOP,) * 4, LAN, steps=8, leaves={2: 0.3}, joins={3: 0.35})
    result = Simulator(scenario).run()
    reasons = {pid: o.reason for pid, o in result.outcomes.items()}
    assert reasons == {"sim-00000000": "done", "sim-00000001": "done",
                       "sim-00000002": "left", "sim-00000003": "done"}  # fmt: skip
    late = result.peers[3]
    assert min(late.steps) > 1  # it entered a later roster, after the leader's checkpoint
    assert late.final_hash == result.peers[0].final_hash


def test_step_traffic_tells_two_runs_apart() -> None:
    a = Simulator(Scenario((LAPTOP,) * 3, LAN, steps=3)).run().peers
    b = Simulator(Scenario((LAPTOP,) * 3, LAN, steps=3)).run().peers
    assert step_traffic(a, 1, 3) == step_traffic(b, 1, 3)
    f = b[1].steps[2]
    b[1].steps[2] = dataclasses.replace(f, piece_bytes=f.piece_bytes + 1)
    assert step_traffic(a, 1, 3) != step_traffic(b, 1, 3)


def test_summary_refuses_missing_steps() -> None:
    peers = Simulator(Scenario((LAPTOP,) * 2, LAN, steps=2)).run().peers
    assert "missing at 2 peers" in summarize(peers, 1, 5)["error"]


# -- the traffic rule ------------------------------------------------------------------------


def test_traffic_counts_a_message_by_its_own_step() -> None:
    roster = fx.SendMessage("b", messages.Roster("r", 5, 0, ["a", "b"], [1, 1]))
    hello = fx.SendMessage("b", messages.Hello(1, "a"))
    piece = fx.SendPayload("b", FrameKind.REDUCED, 4, 0, 1, 9, True, b"x" * 100)
    checkpoint = fx.SendPayload("b", FrameKind.CHECKPOINT, 4, 0, 0, 9, False, b"x" * 100)
    assert (step_of(roster), step_of(hello), step_of(piece), step_of(checkpoint)) == (
        5, MEMBERSHIP, 4, MEMBERSHIP,
    )  # fmt: skip
    tally = Tally()
    tally.payload(piece, 1, 60)
    tally.text(roster, messages.encode(roster.message))
    t = tally.take(4)
    assert (t.messages, t.frames, t.piece_bytes, t.wire_bytes) == (1, 1, framed_size(100), 60)
    assert tally.take(4).messages == 0  # handed over once


@pytest.mark.parametrize(("count", "wire"), [(0, 100), (2, 40)])
def test_traffic_refuses_a_payload_without_its_frame_headers(count: int, wire: int) -> None:
    piece = fx.SendPayload("b", FrameKind.REDUCED, 4, 0, 1, 9, True, b"x" * 100)
    with pytest.raises(ValueError, match="at least one frame"):
        Tally().payload(piece, count, wire)


def test_framed_size_counts_one_header_per_fragment() -> None:
    assert framed_size(1) == 29
    assert framed_size(48 * 1024 - 28) == 48 * 1024
    assert framed_size(48 * 1024 - 27) == 48 * 1024 - 27 + 56


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"devices": ()}, "at least one device"),
        ({"steps": 0}, "steps must be at least 1"),
        ({"ids": ("a", "a")}, "2 distinct ids"),
        ({"leaves": {5: 1.0}}, "leaves: peers \\[5\\]"),
        ({"joins": {1: -1.0}}, "joins: peers \\[1\\]"),
        ({"leaves": {0: 1.0}}, "the leader"),
    ],
)
def test_a_bad_scenario_is_refused(changes: dict[str, object], match: str) -> None:
    base = {"devices": (LAPTOP, LAPTOP), "links": LAN}
    with pytest.raises(ValueError, match=match):
        Scenario(**{**base, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Device("x", gflops=0, up_bytes_s=1),
        lambda: Device("x", gflops=1, up_bytes_s=1, straggle=2),
        lambda: Links("x", latency_s=-1),
        lambda: Links("x", latency_s=0, wire_ratio=0),
        lambda: calibrated("x", 0.0, 1000, 64, up_bytes_s=1),
        lambda: assign("no-such-mix", 4, 1),
    ],
)
def test_bad_profiles_and_links_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        bad()  # type: ignore[operator]


def test_the_event_queue_refuses_to_go_back_in_time_and_keeps_ties_in_order() -> None:
    q: EventQueue[str] = EventQueue()
    q.at(1.0, "b")
    q.at(1.0, "a")
    assert q.pop() == (1.0, "b") and q.pop() == (1.0, "a")
    with pytest.raises(ValueError, match="before now"):
        q.at(0.5, "late")


def test_a_device_mix_is_assigned_in_its_shares_and_by_seed() -> None:
    mix = assign("home", 100, 1)
    assert len(mix) == 100
    assert sum(d.name == "laptop" for d in mix) == 50
    assert sum(d.name == "phone" for d in mix) == 30
    assert mix != assign("home", 100, 2)


def test_timers_reach_every_machine() -> None:
    timers = Timers(step_timeout_s=5.0)
    sim = Simulator(Scenario((LAPTOP,) * 2, LAN, steps=1, timers=timers))
    assert all(m.settings.timers == timers for m in sim.machines)
    assert sim.stall_s == 5.0 + timers.repair_after_s


def test_the_wires_roster_cap_refuses_a_group_of_66_unless_a_what_if_lifts_it() -> None:
    """A ready lists its open channels, at most messages.MAX_ROSTER (64) of them: in a full mesh
    of 66 every follower's ready is refused, and nothing can start."""
    scenario = Scenario((LAPTOP,) * 66, LINK_MODELS["loopback"], steps=1)
    sim = Simulator(scenario)
    with pytest.raises(Stall, match="nothing is left to happen"):
        sim.run()
    assert sim.closed >= 65
    lifted = Simulator(dataclasses.replace(scenario, roster_cap=66)).run()
    assert {o.reason for o in lifted.outcomes.values()} == {"done"} and lifted.closed == 0
    assert messages.MAX_ROSTER == 64 and messages.MAX_MESSAGE_BYTES == 16 * 1024  # restored


@pytest.mark.parametrize("cap", [10, 70000])
def test_a_roster_cap_outside_the_wires_range_is_refused(cap: int) -> None:
    with pytest.raises(ValueError, match="roster_cap"):
        Scenario((LAPTOP,) * 2, LAN, roster_cap=cap)
