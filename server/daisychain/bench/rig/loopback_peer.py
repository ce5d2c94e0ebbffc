"""``python -m daisychain.bench.rig.loopback_peer ADDRESS [PEER ARGS...]``: the headless peer
(``python -m daisychain.peer``) with ``ADDRESS`` as its only ICE host candidate.

Benchmarks run several peers as separate processes (each held to its own CPU budget) on one
machine. aioice never offers 127.0.0.1, and the machine's other addresses would put the
traffic on its network; ``demo.only_candidate`` makes it offer a loopback address such as
127.0.0.2 instead (all of 127.0.0.0/8 is loopback on Linux), so no packet leaves the machine.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(
            "usage: python -m daisychain.bench.rig.loopback_peer ADDRESS [PEER ARGS...]\n"
            "hint: ADDRESS is a loopback address other than 127.0.0.1, e.g. 127.0.0.2",
            file=sys.stderr,
        )
        return 2
    from daisychain.demo import only_candidate
    from daisychain.peer.main import main as peer_main

    with only_candidate(argv[0]):
        return peer_main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
