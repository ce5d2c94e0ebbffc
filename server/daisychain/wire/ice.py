"""ICE servers (STUN/TURN) for pages and peers: URLs checked once, TURN credentials minted.

The rules live in the wire package because both sides apply them: the server to its flags and
to what it hands out in ``welcome``, the headless peer to its own ``--ice-*`` flags and to the
``welcome`` it receives.

Devices on different networks often cannot reach each other's host candidates; a STUN server
tells each device its public address and a TURN server relays what no direct route carries
(docs/SERVER.md, "ICE servers"). The server is told about them on its command line and hands
them to every client in ``welcome`` (docs/PROTOCOL.md); the headless peer takes the same flags.
Default: none, so only host candidates are tried and no third party is ever contacted.

URLs follow RFC 7064 (``stun:HOST[:PORT]``) and RFC 7065 (``turn:``/``turns:HOST[:PORT]
[?transport=udp|tcp]``): no ``//``, no user part, no path. ``stuns:`` is refused: browsers do not
implement it. Each one is checked here, once, so a typo stops the server at start with a hint
instead of every browser failing later with its own error.

TURN credentials are either static (``--ice-username``/``--ice-credential``, every client gets
the same) or time-limited from a secret shared with the TURN server (coturn's
``--use-auth-secret --static-auth-secret``), the "TURN REST API" convention: the username is
``"<expiry unix time>:<label>"`` and the credential ``base64(HMAC-SHA1(secret, username))``; the
TURN server recomputes the HMAC and refuses the username once its time has passed. One is minted
per client at welcome time, labelled with the client's peer id, so the TURN server's log names
the peer and a leaked credential stops working after ``ttl_s``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from daisychain.wire.signaling import IceServer

SCHEMES = ("stun", "turn", "turns")
TRANSPORTS = ("udp", "tcp")
DEFAULT_PORTS = {"stun": 3478, "turn": 3478, "turns": 5349}
MAX_URL_CHARS = 256
MAX_URLS = 8
MAX_USERNAME_CHARS = 128
MAX_CREDENTIAL_CHARS = 256
# TURN credentials minted from a secret live this long: a minute is too short for a page that
# meets a late joiner, a week too long for a credential that leaked.
MIN_TTL_S = 60
MAX_TTL_S = 7 * 24 * 3600


@dataclass(frozen=True)
class IceConfig:
    """STUN/TURN servers handed to every client in ``welcome`` (docs/SERVER.md, "ICE servers")."""

    # None by default: clients try host candidates only and contact no third party.
    urls: tuple[str, ...] = ()
    # Static TURN credentials, the same for every client ...
    username: str | None = None
    credential: str | None = None
    # ... or a secret shared with the TURN server, from which each client gets its own
    # time-limited credential at welcome time (coturn's --static-auth-secret).
    secret: str | None = None
    # A day: a run that meets a late joiner hours after its welcome still has a valid one.
    ttl_s: int = 24 * 3600
    # Tell clients to use relay candidates only (iceTransportPolicy "relay"): device addresses
    # stay hidden from each other, and every byte goes through the TURN server.
    relay_only: bool = False


URL_FORMS = "stun:HOST[:PORT], turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT]"
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")

Policy = Literal["all", "relay"]


class IceError(ValueError):
    """An ICE server setting that cannot work, with what to do instead."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class IceUrl:
    """One parsed ICE server URL; ``text`` is what clients are given, unchanged."""

    text: str
    scheme: str
    host: str
    port: int
    transport: str | None

    @property
    def is_turn(self) -> bool:
        return self.scheme in ("turn", "turns")


def parse_url(text: str) -> IceUrl:
    """Check one STUN/TURN URL (RFC 7064/7065); ``IceError`` says what is wrong and the form."""
    shown = repr(text[:80])
    if not text or len(text) > MAX_URL_CHARS or not text.isprintable() or " " in text:
        raise IceError(
            f"ICE server URL {shown} must be 1-{MAX_URL_CHARS} printable characters, no spaces",
            f"write {URL_FORMS}",
        )
    scheme, colon, rest = text.partition(":")
    if not colon or scheme.lower() not in SCHEMES:
        hint = f"write {URL_FORMS}"
        if scheme.lower() == "stuns":
            hint = "browsers do not implement stuns:; use stun: (or turns: for TLS)"
        elif scheme.lower() in ("http", "https", "ws", "wss", "udp", "tcp"):
            hint = f"an ICE server is not a web address: {hint}"
        raise IceError(f"ICE server URL {shown} has no stun:, turn: or turns: scheme", hint)
    scheme = scheme.lower()
    if rest.startswith("//"):
        raise IceError(
            f"ICE server URL {shown} has '//' after the scheme",
            f"STUN/TURN URLs have none (RFC 7064/7065): {scheme}:{rest[2:]}",
        )
    if "@" in rest:
        raise IceError(
            f"ICE server URL {shown} holds a user name",
            "give TURN credentials with --ice-username/--ice-credential (or --ice-secret)",
        )
    address, question, query = rest.partition("?")
    transport = _transport(scheme, query, shown) if question else None
    host, port = _host_port(address, scheme, shown)
    return IceUrl(text=text, scheme=scheme, host=host, port=port, transport=transport)


def _transport(scheme: str, query: str, shown: str) -> str:
    if scheme == "stun":
        raise IceError(
            f"ICE server URL {shown}: stun: takes no ?query", "write stun:HOST[:PORT] (RFC 7064)"
        )
    name, _, value = query.partition("=")
    if name != "transport" or value not in TRANSPORTS:
        raise IceError(
            f"ICE server URL {shown}: the only query is ?transport=udp or ?transport=tcp",
            "leave it out for UDP, the default of turn: (RFC 7065)",
        )
    if scheme == "turns" and value == "udp":
        raise IceError(
            f"ICE server URL {shown}: turns: over UDP (DTLS) is not supported by aiortc",
            "write turns:HOST[:PORT]?transport=tcp, or turn:HOST[:PORT]?transport=udp",
        )
    return value


def _host_port(address: str, scheme: str, shown: str) -> tuple[str, int]:
    port = DEFAULT_PORTS[scheme]
    if address.startswith("["):  # [IPv6]:port
        inside, bracket, after = address[1:].partition("]")
        host = inside
        if not bracket or (after and not after.startswith(":")):
            raise IceError(
                f"ICE server URL {shown} has a malformed [IPv6] host", f"write {URL_FORMS}"
            )
        port_text = after[1:] if after else None
        _check_ip(host, 6, shown)
    else:
        host, colon, port_text_ = address.partition(":")
        port_text = port_text_ if colon else None
        if not host:
            raise IceError(f"ICE server URL {shown} has no host", f"write {URL_FORMS}")
        if ":" in port_text_:
            raise IceError(
                f"ICE server URL {shown}: an IPv6 host goes in brackets", f"{scheme}:[::1]:3478"
            )
        if re.fullmatch(r"[0-9.]+", host):
            _check_ip(host, 4, shown)
        elif len(host) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in host.split(".")):
            raise IceError(
                f"ICE server URL {shown} has an invalid host name {host[:64]!r}",
                "a host is a DNS name (letters, digits, '-', '.'), an IPv4 address or [IPv6]",
            )
    if port_text is not None:
        if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise IceError(
                f"ICE server URL {shown} has an invalid port {port_text[:16]!r}",
                f"a port is 1-65535; leave it out for {port} ({scheme}:'s default)",
            )
        port = int(port_text)
    return host, port


def _check_ip(host: str, version: int, shown: str) -> None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise IceError(
            f"ICE server URL {shown} has an invalid IPv{version} address {host[:64]!r}",
            "a host is a DNS name, an IPv4 address (a.b.c.d) or an IPv6 address in brackets",
        ) from None
    if ip.version != version or ip.is_unspecified or ip.is_multicast:
        raise IceError(
            f"ICE server URL {shown}: {host} is not an address a client can send to",
            "give the address (or name) of the STUN/TURN server as the clients reach it",
        )


def check(config: IceConfig, *, allow_secret: bool = True) -> tuple[IceUrl, ...]:
    """Every rule an ICE configuration must pass, or ``IceError``; the parsed URLs."""
    if len(config.urls) > MAX_URLS:
        raise IceError(
            f"{len(config.urls)} ICE servers given; at most {MAX_URLS}",
            "one STUN and one TURN server are what clients use (aiortc takes only the first of "
            "each)",
        )
    urls = tuple(parse_url(u) for u in config.urls)
    turn = [u for u in urls if u.is_turn]
    static = config.username is not None or config.credential is not None
    if config.secret is not None and not allow_secret:
        raise IceError(
            "a TURN secret is the server's to hold", "give the peer --ice-username/--ice-credential"
        )
    if static and (config.username is None or config.credential is None):
        raise IceError(
            "a TURN username needs its credential, and a credential its username",
            "give both --ice-username and --ice-credential",
        )
    if static and config.secret is not None:
        raise IceError(
            "static TURN credentials and a TURN secret were both given",
            "choose one: --ice-username/--ice-credential, or --ice-secret for time-limited ones",
        )
    for name, value, limit in (
        ("username", config.username, MAX_USERNAME_CHARS),
        ("credential", config.credential, MAX_CREDENTIAL_CHARS),
        ("secret", config.secret, MAX_CREDENTIAL_CHARS),
    ):
        if value is not None and not (0 < len(value) <= limit and value.isprintable()):
            raise IceError(
                f"the TURN {name} must be 1-{limit} printable characters",
                f"check --ice-{name} (a secret file's trailing newline is dropped)",
            )
    if (static or config.secret is not None) and not turn:
        raise IceError(
            "TURN credentials were given but no turn: or turns: server",
            "add --ice-server turn:HOST[:PORT] (STUN servers take no credentials)",
        )
    if turn and not static and config.secret is None:
        raise IceError(
            f"the TURN server {turn[0].text} needs credentials",
            "give --ice-username and --ice-credential (a server may use --ice-secret instead, "
            "coturn's static-auth-secret, for time-limited ones)",
        )
    if config.relay_only and not turn:
        raise IceError(
            "relay-only needs a TURN server: with it and none, no connection can ever form",
            "add --ice-server turn:HOST[:PORT] with its credentials, or drop --ice-relay-only",
        )
    if not MIN_TTL_S <= config.ttl_s <= MAX_TTL_S:
        raise IceError(
            f"TURN credential lifetime {config.ttl_s} s is outside {MIN_TTL_S}-{MAX_TTL_S} s",
            "--ice-ttl takes seconds, e.g. 86400 for a day",
        )
    return urls


def turn_credential(secret: str, username: str) -> str:
    """The TURN REST API password for ``username``: base64(HMAC-SHA1(secret, username))."""
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def mint(secret: str, label: str, *, now: float, ttl_s: int) -> tuple[str, str]:
    """A time-limited TURN username (``"<expiry>:<label>"``) and its credential."""
    username = f"{int(now) + ttl_s}:{label}"
    return username, turn_credential(secret, username)


class IceIssuer:
    """What every client is told in ``welcome``: the servers (with fresh credentials when they
    come from a secret) and the transport policy. Built once from a checked configuration."""

    def __init__(self, config: IceConfig, clock: Callable[[], float] = time.time) -> None:
        urls = check(config)
        self.config = config
        self.clock = clock
        self.stun = [u.text for u in urls if not u.is_turn]
        self.turn = [u.text for u in urls if u.is_turn]
        self.policy: Policy = "relay" if config.relay_only else "all"

    def servers(self, label: str) -> list[IceServer]:
        """The ICE servers for the client ``label`` (its peer id): STUN servers as one entry,
        TURN servers as another with their credentials; none configured -> ``[]``."""
        out: list[IceServer] = []
        if self.stun:
            out.append(IceServer(urls=list(self.stun)))
        if self.turn:
            cfg = self.config
            if cfg.secret is not None:
                username, credential = mint(cfg.secret, label, now=self.clock(), ttl_s=cfg.ttl_s)
            else:
                assert cfg.username is not None and cfg.credential is not None  # check()
                username, credential = cfg.username, cfg.credential
            out.append(IceServer(urls=list(self.turn), username=username, credential=credential))
        return out
