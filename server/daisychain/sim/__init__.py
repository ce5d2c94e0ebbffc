"""A simulator of the real protocol: N protocol machines in one process over a modelled network.

``driver`` feeds each peer's unchanged ``p2p.machine.Machine`` its events and carries its
effects as real messages and frames (``wire.messages.encode``, ``wire.frames.fragment``) over
the links of ``network``, ordered by the discrete-event ``clock``; a ``Compute`` effect is
answered after the time its device's profile (``profiles``) gives, by a stand-in replica
(``replica``) that models time, not arithmetic. Deterministic from a seed: no sockets, no
sleeps, no clock (``tests/p2p/test_protocol_machine.py`` scans this package as it scans the
machine). ``report`` gives the figures of ``daisychain bench scale`` (docs/BENCHMARKS.md,
"Scale and the simulator").
"""

from daisychain.sim.driver import Scenario, SimResult, Simulator, Stall
from daisychain.sim.network import Links
from daisychain.sim.profiles import Device

__all__ = ["Device", "Links", "Scenario", "SimResult", "Simulator", "Stall"]
