"""Automatic groups by public address, and when proxy headers are believed."""

from __future__ import annotations

import ipaddress

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from daisychain.server.grouping import client_address, group_key, network_key, parse_address
from server_fixtures import config, join, serve


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("8.8.8.8", "v4:8.8.8.8"),
        ("2606:4700:10:20:aaaa::1", "v6:2606:4700:10:20::/64"),
        ("2606:4700:10:20:bbbb:cccc:dddd:eeee", "v6:2606:4700:10:20::/64"),
        ("::ffff:8.8.4.4", "v4:8.8.4.4"),
        ("192.168.1.20", "local"),
        ("10.0.0.7", "local"),
        ("127.0.0.1", "local"),
        ("::1", "local"),
        ("fe80::1", "local"),
        ("169.254.3.4", "local"),
    ],
)
def test_group_key(address: str, key: str) -> None:
    assert group_key(ipaddress.ip_address(address) if "ffff" not in address else
                     parse_address(address)) == key  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.8.8.8:443", "8.8.8.8"),
        ("[2606:4700::1]:8080", "2606:4700::1"),
        ('"[2606:4700::1]"', "2606:4700::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("garbage", None),
        ("unknown", None),
    ],
)
def test_parse_address_forms(text: str, expected: str | None) -> None:
    parsed = parse_address(text)
    assert (str(parsed) if parsed else None) == expected


def test_proxy_headers_ignored_without_trust() -> None:
    headers = {"X-Forwarded-For": "8.8.8.8"}
    assert str(client_address(headers, "127.0.0.1", trust_proxy=False)) == "127.0.0.1"


def test_trusted_proxy_takes_the_right_most_public_address() -> None:
    # The client forged 1.1.1.1 on the left; the proxy appended what it saw (9.9.9.9), then an
    # internal hop (10.0.0.2) appended the proxy's own address.
    headers = {"X-Forwarded-For": "1.1.1.1, 9.9.9.9, 10.0.0.2"}
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "9.9.9.9"


def test_trusted_forwarded_header_is_used_without_x_forwarded_for() -> None:
    headers = {"Forwarded": 'for="[2606:4700::1]:4711";proto=https, for=10.1.1.1'}
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "2606:4700::1"


def test_trusted_proxy_without_public_entries_falls_back_to_the_socket() -> None:
    headers = {"X-Forwarded-For": "192.168.0.2, nonsense"}
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "10.0.0.3"


async def test_spoofed_forwarded_for_is_ignored_without_trust_proxy() -> None:
    async with serve(config(trust_proxy=False)) as client:
        _, first = await join(client, "a", xff="8.8.8.8")
        _, second = await join(client, "b", xff="9.9.9.9")
        assert first["group"]["kind"] == "local"
        assert [m["id"] for m in second["members"]] == [first["id"]]


async def test_forwarded_for_separates_networks_with_trust_proxy() -> None:
    async with serve(config(trust_proxy=True)) as client:
        _, first = await join(client, "a", xff="8.8.8.8")
        _, second = await join(client, "b", xff="9.9.9.9")
        _, third = await join(client, "c", xff="8.8.8.8")
        assert first["group"]["kind"] == "network"
        assert second["members"] == []
        assert [m["id"] for m in third["members"]] == [first["id"]]
        assert first["group"]["id"] == third["group"]["id"] != second["group"]["id"]
        assert "8.8.8.8" not in first["group"]["id"]  # group ids never reveal the address


async def test_ipv6_devices_in_one_slash_64_share_a_group() -> None:
    async with serve(config(trust_proxy=True)) as client:
        _, first = await join(client, "a", xff="2606:4700:10:20::1")
        _, second = await join(client, "b", xff="2606:4700:10:20:ffff::2")
        _, third = await join(client, "c", xff="2606:4700:10:21::1")
        assert [m["id"] for m in second["members"]] == [first["id"]]
        assert third["members"] == []


def two_lines(name: str, first: str, second: str) -> CIMultiDictProxy[str]:
    """A header sent as two lines, as aiohttp's parser hands it over (one entry per line)."""
    return CIMultiDictProxy(CIMultiDict([(name, first), (name.lower(), second)]))


def test_x_forwarded_for_on_two_lines_is_read_as_one_list() -> None:
    # The client forged the first line; the proxy added its own line, last.
    headers = two_lines("X-Forwarded-For", "1.1.1.1", "9.9.9.9, 10.0.0.2")
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "9.9.9.9"
    # The right-most public address wins across lines, not within the first line.
    headers = two_lines("X-Forwarded-For", "9.9.9.9, 8.8.8.8", "10.0.0.2")
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "8.8.8.8"


def test_forwarded_on_two_lines_is_read_as_one_list() -> None:
    headers = two_lines("Forwarded", "for=1.1.1.1", 'for="[2606:4700::1]:4711";proto=https')
    assert str(client_address(headers, "10.0.0.3", trust_proxy=True)) == "2606:4700::1"


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("8.8.8.8", "v4:8.8.8.8"),
        ("192.168.1.20", "v4:192.168.1.20"),  # per address on a LAN, unlike the "local" group
        ("2606:4700:10:20:aaaa::1", "v6:2606:4700:10:20::/64"),
        ("fd00:1:2:3:4::5", "v6:fd00:1:2:3::/64"),
    ],
)
def test_network_key_is_the_address_or_its_slash_64(address: str, key: str) -> None:
    assert network_key(ipaddress.ip_address(address)) == key


async def test_two_line_forwarded_for_decides_the_group_by_its_last_public_entry() -> None:
    async with serve(config(trust_proxy=True)) as client:
        _, first = await join(client, "a", xff="9.9.9.9")
        peer = await client.ws_connect(
            "/ws",
            headers=CIMultiDict([("X-Forwarded-For", "8.8.8.8"), ("X-Forwarded-For", "9.9.9.9")]),
        )
        await peer.send_json({"type": "hello", "version": 1, "name": "b", "device": {}})
        second = await peer.receive_json(timeout=5)
        assert second["type"] == "welcome"
        assert [m["id"] for m in second["members"]] == [first["id"]]
        await peer.close()
