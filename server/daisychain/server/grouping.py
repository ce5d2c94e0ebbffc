"""Which automatic group a connection belongs to: its public address, as far as we can trust it.

Devices behind one NAT share a public address, so grouping by it puts a classroom's devices
together with no code to type (the Snapdrop idea). The keys:

* IPv4 public address: exact (``v4:203.0.113.7``);
* IPv6 public address: its /64 (``v6:2001:db8:1:2::/64``), because one home or office network
  gets a /64 and every device in it picks its own interface identifier;
* any non-global address (private, loopback, link-local, CGNAT, ...): the single ``local`` group,
  because such a peer reached us without crossing the internet, so it shares our network.

Proxy headers are client-controlled unless a proxy we trust rewrites them, so they are read only
with ``--trust-proxy``. The rule then: the right-most *public* address of ``X-Forwarded-For`` (or,
without it, of ``Forwarded: for=``). A proxy appends the address it saw to the right, so what a
client forges sits to the left of it; non-global entries further right are the proxy chain's own
internal hops (a Space's front proxies) and are skipped. If no entry is public, the socket peer's
address decides. A header sent as several lines is one list, the lines in the order received
(RFC 9110 section 5.3): a proxy that adds its own line adds it last, so reading only the first
line would let the client's forged line decide.

``network_key`` is the same per-network key without the ``local`` merge; the ``/data`` rate
limiter uses it, so an IPv6 client cannot multiply its budget by picking new addresses in its
/64.

``site_key`` is wider: the block an address was handed out from, an IPv4 /24 or an IPv6 /48.
Whoever holds many addresses usually holds them within one (an IPv6 end site is commonly given
a /48 or a /56, RFC 6177, so a single home holds 65,536 /64s; a /24 is the smallest IPv4 block
routed on the internet), so the addresses of one site are counted as one party where owning
more addresses is cheap: a room's waiting list counts its crowds by site (``rooms.py``), and
logs show a site instead of an address (``redact.address``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from multidict import MultiMapping

LOCAL_GROUP = "local"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# ``Forwarded: for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"`` (RFC 7239)
_FORWARDED_FOR_RE = re.compile(r'for=("?)([^;,"]+)\1', re.IGNORECASE)


def parse_address(text: str) -> IPAddress | None:
    """Parse one address as it appears in headers: bare, ``[v6]``, ``[v6]:port`` or ``v4:port``."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # IPv4 with a port; a bare IPv6 has at least two colons
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; group them as IPv4.
        return address.ipv4_mapped
    return address


def network_key(address: IPAddress) -> str:
    """The network an address stands for: an IPv4 address itself, an IPv6 address's /64."""
    if isinstance(address, ipaddress.IPv4Address):
        return f"v4:{address}"
    network = ipaddress.IPv6Network((address, 64), strict=False)
    return f"v6:{network}"


# The prefixes of a site (see the module docstring).
IPV4_SITE_PREFIX = 24
IPV6_SITE_PREFIX = 48


def site_network(address: IPAddress) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The block an address belongs to: its IPv4 /24, its IPv6 /48."""
    prefix = IPV4_SITE_PREFIX if isinstance(address, ipaddress.IPv4Address) else IPV6_SITE_PREFIX
    return ipaddress.ip_network((address, prefix), strict=False)


def site_key(address: IPAddress | None) -> str:
    """``site_network`` as a key (``v4:203.0.113.0/24``, ``v6:2001:db8:1::/48``); ``unknown``
    for a connection whose address could not be read, as ``network_key``'s callers use."""
    if address is None:
        return "unknown"
    version = "v4" if isinstance(address, ipaddress.IPv4Address) else "v6"
    return f"{version}:{site_network(address)}"


def group_key(address: IPAddress | None) -> str:
    if address is None or not address.is_global:
        return LOCAL_GROUP
    return network_key(address)


def header_lines(headers: Mapping[str, str], name: str) -> list[str]:
    """Every line of header ``name`` in the order received (a multidict keeps one per line)."""
    if isinstance(headers, MultiMapping):
        return list(headers.getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]


def forwarded_candidates(headers: Mapping[str, str]) -> list[str]:
    """Addresses claimed by proxy headers, left (client side) to right (our side)."""
    forwarded_for = ",".join(header_lines(headers, "X-Forwarded-For"))
    if forwarded_for.strip(", \t"):
        return [part for part in forwarded_for.split(",") if part.strip()]
    forwarded = ",".join(header_lines(headers, "Forwarded"))
    return [match.group(2) for match in _FORWARDED_FOR_RE.finditer(forwarded)]


def client_address(
    headers: Mapping[str, str], peer: str | None, *, trust_proxy: bool
) -> IPAddress | None:
    """The address that decides the group (see the module docstring for the proxy rule)."""
    if trust_proxy:
        for candidate in reversed(forwarded_candidates(headers)):
            address = parse_address(candidate)
            if address is not None and address.is_global:
                return address
    return parse_address(peer) if peer else None


def request_group_key(headers: Mapping[str, str], peer: str | None, *, trust_proxy: bool) -> str:
    return group_key(client_address(headers, peer, trust_proxy=trust_proxy))
