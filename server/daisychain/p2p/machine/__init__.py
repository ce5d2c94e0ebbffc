"""The sans-IO protocol core of a training peer (docs/PROTOCOL.md, "The protocol machine").

``events`` (what the machine is fed, each with ``now``), ``effects`` (what it asks for),
``machine`` (the rules), and one module per piece of state: ``peers`` (the peer table),
``attempt`` (one step's exchange, with its phase), ``leadership`` (leader, rosters, what the
leader heard), ``repair`` (the attempts kept for repair), ``guard`` (the sync guard),
``statesync`` (a follower's checkpoint sync), ``stopping``, ``replica`` (the state the machine
steers), ``settings``, and ``audit`` (an attempt's audit round, docs/TRUST.md: built ahead of
the rules that will use it, so nothing here imports it yet). Nothing here imports asyncio,
aiortc, time, threading or socket (``tests/p2p/test_protocol_machine.py`` checks it).
"""

from daisychain.p2p.machine.machine import Machine
from daisychain.p2p.machine.replica import Replica, ReplicaRefused
from daisychain.p2p.machine.settings import Settings, Timers

__all__ = [
    "Machine",
    "Replica",
    "ReplicaRefused",
    "Settings",
    "Timers",
]
