"""A room's waiting list against a party that holds the room's code (issue 47, item 7), on the
hub alone (``rooms.Hub``, no sockets): crowds are counted by site (an IPv4 /24, an IPv6 /48),
so 16 requests from 16 addresses of one site cannot keep a guest from another site from
reaching the host; a guest's request is never the one that gives its place up; a class behind
one NAT still fills an idle room's list; and the host is told, at a bounded pace, how many
requests were refused because the list was full.

The same over real sockets: ``test_server_rooms.py`` (16 source addresses on loopback) and the
hostile harness's ``pending-squat`` (``test_server_hostile.py``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any

import pytest

from daisychain.server.grouping import group_key, network_key, site_key
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.server.rooms import Close, Hub, MemberState, Peer
from daisychain.wire.signaling import CLOSE_PROTOCOL, Hello, ProtocolError

ROOM = "room-crowd01"
MAX_PENDING = 16


def make_hub(*, max_pending: int = MAX_PENDING, refused_notice_s: float = 1.0) -> Hub:
    # Production pacing: a burst of 16 requests per address and room, then one per 5 s.
    return Hub(
        max_group_size=256,
        max_pending=max_pending,
        join_timeout_s=120.0,
        join_requests=KeyedLimiter(0.2, 16),
        refused_notice_s=refused_notice_s,
    )


class Client:
    """One connection to the hub from ``address``, keyed as ``signaling.py`` keys it."""

    def __init__(self, hub: Hub, address: str, name: str) -> None:
        parsed = ipaddress.ip_address(address)
        self.hub = hub
        self.name = name
        self.outbox: list[Any] = []
        self.peer = Peer(
            id=hub.new_peer_id(),
            post=self.outbox.append,
            network_key=group_key(parsed),
            address=network_key(parsed),
            site=site_key(parsed),
        )
        hub.connect(self.peer)

    def hello(self) -> None:
        self.hub.hello(self.peer, Hello(version=1, name=self.name, device={}), ROOM)

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(item) for item in self.outbox if isinstance(item, str)]

    def closes(self) -> list[int]:
        return [item.code for item in self.outbox if isinstance(item, Close)]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages() if m["type"] == kind]

    @property
    def state(self) -> MemberState:
        return self.peer.state


def host_of(hub: Hub) -> Client:
    host = Client(hub, "192.0.2.1", "host")
    host.hello()
    assert host.state is MemberState.MEMBER
    return host


def ask(hub: Hub, address: str, name: str) -> Client:
    """A request that must be queued (pending)."""
    client = Client(hub, address, name)
    client.hello()
    assert client.state is MemberState.PENDING, f"{name} from {address}: {client.messages()}"
    return client


def refused(hub: Hub, address: str, name: str, code: str = "room-busy") -> ProtocolError:
    client = Client(hub, address, name)
    with pytest.raises(ProtocolError) as info:
        client.hello()
    assert info.value.code == code, info.value.message
    assert client.state is MemberState.CONNECTED  # in no list: the shell closes it
    return info.value


def requested(host: Client) -> list[str]:
    """Peer ids the host was shown a join request from, in order."""
    return [m["peer"]["id"] for m in host.of_type("join-request")]


def dropped(host: Client) -> list[str]:
    return [m["peer"] for m in host.of_type("join-request-closed") if m["reason"] == "dropped"]


def fill_from_one_site(hub: Hub, prefix: str = "203.0.113.") -> list[Client]:
    """16 requests from 16 addresses of one /24: 16 "networks" to a per-address count."""
    squatters = [ask(hub, f"{prefix}{n}", f"squatter-{n}") for n in range(1, MAX_PENDING + 1)]
    assert len({s.peer.address for s in squatters}) == MAX_PENDING
    assert len({s.peer.site for s in squatters}) == 1
    return squatters


def assert_dropped_for_another(squatter: Client) -> None:
    assert squatter.state is MemberState.DENIED
    error = squatter.of_type("error")[-1]
    assert error["code"] == "room-busy" and error["ref"] == "hello"
    assert "another network's" in error["message"] and "/24" in error["message"]
    assert squatter.closes() == [CLOSE_PROTOCOL]


# -- the must-show: 16 hostile pending joins do not keep a real guest from the host ------------


async def test_sixteen_addresses_of_one_site_do_not_keep_a_guest_from_the_host() -> None:
    hub = make_hub()
    host = host_of(hub)
    squatters = fill_from_one_site(hub)
    guest = ask(hub, "198.51.100.7", "guest")
    assert requested(host)[-1] == guest.peer.id, "the guest's request reached the host"
    # One squatter gave its place: the newest.
    assert dropped(host) == [squatters[-1].peer.id]
    assert_dropped_for_another(squatters[-1])
    assert all(s.state is MemberState.PENDING for s in squatters[:-1])
    assert len(hub.groups[f"room:{ROOM}"].pending) == MAX_PENDING
    # The host lets the guest in.
    hub.approve(host.peer, guest.peer.id)
    assert guest.state is MemberState.MEMBER
    assert guest.of_type("welcome")[0]["host"] == host.peer.id


async def test_the_same_addresses_counted_per_address_would_shut_the_guest_out() -> None:
    """The wrong input for the site count: with every request its own site (what counting by
    ``Peer.address`` did), 16 squatters are 16 networks of one request each and the guest is
    refused. This is also the case the site count cannot help: 16 sites, one request each."""
    hub = make_hub()
    host = host_of(hub)
    for n in range(1, MAX_PENDING + 1):
        ask(hub, f"203.0.{n}.1", f"squatter-{n}")  # 16 different /24s
    refused(hub, "198.51.100.7", "guest")
    assert dropped(host) == []


async def test_a_squatter_asking_again_is_refused_and_the_guest_keeps_its_place() -> None:
    hub = make_hub()
    host = host_of(hub)
    squatters = fill_from_one_site(hub)
    guest = ask(hub, "198.51.100.7", "guest")
    # The crowd's 15 against its own 15: no place moves back.
    for n in range(17, 40):
        refused(hub, f"203.0.113.{n}", f"squatter-{n}")
    assert guest.state is MemberState.PENDING
    assert dropped(host) == [squatters[-1].peer.id]


async def test_the_guest_is_never_the_one_who_gives_its_place_up() -> None:
    """Whoever comes next, from the crowd or from new sites, the guest's lone request stays:
    newcomers from new sites take places from the crowd until it is down to one, then the list
    (16 sites, one request each) is simply full."""
    hub = make_hub()
    host = host_of(hub)
    squatters = fill_from_one_site(hub)
    guest = ask(hub, "198.51.100.7", "guest")
    newcomers = [ask(hub, f"203.0.{n}.9", f"newcomer-{n}") for n in range(1, 15)]
    assert sum(s.state is MemberState.PENDING for s in squatters) == 1
    assert [s.state is MemberState.PENDING for s in squatters] == [True] + [False] * 15
    refused(hub, "203.0.99.9", "one site too many")
    refused(hub, "203.0.113.77", "crowd")
    assert guest.state is MemberState.PENDING
    assert all(n.state is MemberState.PENDING for n in newcomers)
    assert guest.peer.id not in dropped(host)
    assert len(hub.groups[f"room:{ROOM}"].pending) == MAX_PENDING


async def test_sixteen_ipv6_networks_of_one_slash_48_are_one_crowd() -> None:
    hub = make_hub()
    host = host_of(hub)
    squatters = [
        ask(hub, f"2001:db8:5:{n:x}::1", f"squatter-{n}") for n in range(1, MAX_PENDING + 1)
    ]
    assert len({s.peer.address for s in squatters}) == MAX_PENDING, "16 different /64s"
    assert {s.peer.site for s in squatters} == {"v6:2001:db8:5::/48"}
    guest = ask(hub, "2001:db8:77::5", "guest")
    assert requested(host)[-1] == guest.peer.id
    assert dropped(host) == [squatters[-1].peer.id]
    assert_dropped_for_another(squatters[-1])
    refused(hub, "2001:db8:5:ffff::1", "another /64 of the crowd")
    assert guest.state is MemberState.PENDING


# -- what stays as it was ----------------------------------------------------------------------


async def test_a_class_behind_one_nat_still_fills_an_idle_rooms_list() -> None:
    hub = make_hub()
    host = host_of(hub)
    pupils = [ask(hub, "203.0.113.5", f"pupil-{n}") for n in range(MAX_PENDING)]
    assert requested(host) == [p.peer.id for p in pupils]
    # One more from the same NAT is over its pace; from its neighbour, over the list.
    refused(hub, "203.0.113.5", "pupil-16", code="rate-limited")
    refused(hub, "203.0.113.6", "neighbour")
    # Another network still gets in, in the place of the class's newest request.
    guest = ask(hub, "198.51.100.7", "guest")
    assert dropped(host) == [pupils[-1].peer.id]
    assert guest.state is MemberState.PENDING


# -- each rule firing on an input it must refuse -----------------------------------------------


async def test_a_crowd_only_one_ahead_keeps_its_places() -> None:
    """The margin of two: 2 against 1 gives nothing (else the dropped one could take it back);
    2 against 0 gives one."""
    hub = make_hub(max_pending=3)
    host = host_of(hub)
    crowd = [ask(hub, f"203.0.113.{n}", f"crowd-{n}") for n in (1, 2)]
    lone = ask(hub, "198.51.100.1", "lone")
    refused(hub, "198.51.100.2", "lone's neighbour")
    assert dropped(host) == []
    newcomer = ask(hub, "192.0.2.200", "newcomer")  # not the host's site: the host is no request
    assert dropped(host) == [crowd[-1].peer.id]
    assert lone.state is MemberState.PENDING and newcomer.state is MemberState.PENDING


async def test_the_crowds_busiest_address_gives_its_newest_request() -> None:
    """Within the crowd, the address with the most waiting gives, not its neighbour whose lone
    request came last."""
    hub = make_hub(max_pending=4)
    host = host_of(hub)
    busy = [ask(hub, "203.0.113.66", f"busy-{n}") for n in range(3)]
    neighbour = ask(hub, "203.0.113.67", "neighbour")
    ask(hub, "198.51.100.7", "guest")
    assert dropped(host) == [busy[-1].peer.id]
    assert neighbour.state is MemberState.PENDING
    assert busy[0].state is MemberState.PENDING and busy[1].state is MemberState.PENDING


async def test_of_two_crowds_as_large_the_one_that_asked_last_gives() -> None:
    """Ties go to the newest request, so the requests the host has had longest stay."""
    hub = make_hub(max_pending=4)
    host = host_of(hub)
    first = [ask(hub, f"203.0.113.{n}", f"first-{n}") for n in (1, 2)]
    second = [ask(hub, f"198.51.100.{n}", f"second-{n}") for n in (1, 2)]
    ask(hub, "2001:db8::1", "guest")
    assert dropped(host) == [second[-1].peer.id]
    assert all(r.state is MemberState.PENDING for r in first)


# -- the host is told of refusals ---------------------------------------------------------------


async def until(condition: Any, timeout_s: float = 2.0) -> None:
    """Bounded polling for a timer's effect."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_the_host_is_told_how_many_requests_were_refused_at_a_bounded_pace() -> None:
    hub = make_hub(refused_notice_s=0.2)
    host = host_of(hub)
    fill_from_one_site(hub)
    refused(hub, "203.0.113.100", "first refusal")
    assert host.of_type("join-requests-refused") == [{"type": "join-requests-refused", "count": 1}]
    for n in range(101, 111):
        refused(hub, f"203.0.113.{n}", f"refusal-{n}")
    # Ten more within the period: no message yet, then one with the count.
    assert len(host.of_type("join-requests-refused")) == 1
    await until(lambda: len(host.of_type("join-requests-refused")) == 2)
    assert host.of_type("join-requests-refused")[-1]["count"] == 11
    # Nothing new: no further message.
    await asyncio.sleep(0.5)
    assert len(host.of_type("join-requests-refused")) == 2
    group = hub.groups[f"room:{ROOM}"]
    assert group.refused_timer is None
    # A later refusal is told at once again.
    refused(hub, "203.0.113.200", "later")
    assert host.of_type("join-requests-refused")[-1]["count"] == 12


async def test_a_request_that_takes_a_place_or_is_paced_is_not_a_refusal() -> None:
    hub = make_hub()
    host = host_of(hub)
    for n in range(MAX_PENDING):
        ask(hub, "203.0.113.5", f"pupil-{n}")
    refused(hub, "203.0.113.5", "too fast", code="rate-limited")
    ask(hub, "198.51.100.7", "guest")  # takes a place
    assert host.of_type("join-requests-refused") == []
    assert hub.groups[f"room:{ROOM}"].refused == 0


async def test_the_notice_timer_goes_with_the_room() -> None:
    hub = make_hub(max_pending=1, refused_notice_s=60.0)
    host = host_of(hub)
    waiting = ask(hub, "203.0.113.1", "waiting")
    refused(hub, "203.0.113.2", "refused")
    group = hub.groups[f"room:{ROOM}"]
    timer = group.refused_timer
    assert timer is not None
    hub.disconnect(waiting.peer)
    assert group.refused_timer is timer, "a room with members keeps its timer"
    hub.disconnect(host.peer)
    assert f"room:{ROOM}" not in hub.groups
    assert group.refused_timer is None and timer.cancelled()
