"""Peer-to-peer training over WebRTC data channels (docs/PROTOCOL.md, "Data channels").

Modules, one concept each: ``frames`` (binary frame header, fragmentation, reassembly),
``messages`` (JSON control messages), ``codec`` (quantized gradient chunks), ``allreduce``
(which peer reduces which chunk, and the pinned reduction), ``run`` (the run state machine,
rosters, the sync guard), ``mesh`` (signaling client and one aiortc data channel per pair) and
``node`` (a training peer: all of the above driven by one event loop). The peer's work is split
by concept: ``options`` (what a node is given), ``membership`` (config, join, leave, failover),
``rosters`` (accepting rosters, the leader's decisions), ``exchange`` (one step's gradient
exchange), ``repair``, ``guard`` (hash and probe checks), ``checkpoints`` (state sync, saves)
and ``stopping`` (the stop protocol); ``local`` runs several peers in one process (demo, bench).
``versions`` holds every version a peer states or checks; ``runconfig`` validates a leader's
``config`` (with ``footprint``, the memory it would take).
"""

from daisychain.p2p.versions import DATA_PROTOCOL_VERSION  # every version: ``versions``

__all__ = ["DATA_PROTOCOL_VERSION"]
