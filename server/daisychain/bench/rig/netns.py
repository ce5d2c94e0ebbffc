"""The private network namespace that mesh tests and ``bench mesh --tabs`` run in.

Chromium offers no loopback ICE candidate, so browser peers need a real interface: inside a
fresh namespace (``unshare``) a veth pair gets ``NETNS_ADDRESS``, and every peer, tab and TURN
server of the run lives there; nothing leaves the machine. IPv6 is switched off first: the veth
would otherwise gain link-local addresses a second or two after it comes up, and Chromium,
seeing the network change, fails the requests it has in flight (``ERR_NETWORK_CHANGED`` on the
page's module loads, seen on a tab opened in the first seconds of a test run).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

NETNS_ADDRESS = "10.231.0.1"
# Environment variable set once a process is inside a namespace set up here; children inherit it.
INSIDE = "DAISYCHAIN_NETNS"

_SETUP = (
    ["ip", "link", "set", "lo", "up"],
    ["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
    ["ip", "addr", "add", f"{NETNS_ADDRESS}/24", "dev", "v0"],
    ["ip", "link", "set", "v0", "up"],
    ["ip", "link", "set", "v1", "up"],
    ["ip", "route", "add", "default", "dev", "v0"],
)
# Per namespace: written inside the new one, it leaves the host's IPv6 alone.
_IPV6_SWITCHES = ("all", "default")


def set_up() -> str | None:
    """Configure the namespace this process has just entered; None on success, else why not."""
    for name in _IPV6_SWITCHES:
        switch = Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6")
        if switch.exists():  # a kernel without IPv6 has nothing to switch off
            try:
                switch.write_text("1\n")
            except OSError as exc:
                return f"cannot switch IPv6 off in the namespace ({switch}): {exc}"
    for cmd in _SETUP:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"`{' '.join(cmd)}` failed in the namespace: {done.stderr.strip()}"
    return None
