"""Peer-to-peer training over WebRTC data channels (docs/PROTOCOL.md, "Data channels").

The wire, one concept each: ``frames`` (binary frame header, fragmentation, reassembly),
``messages`` (JSON control messages), ``signaling`` (what the signaling server sends, parsed),
``codec`` (quantized gradient chunks), ``allreduce`` (which peer reduces which chunk, and the
pinned reduction), ``shares`` (how many of a step's sequences each peer computes), ``pace``
(the seconds per sequence a peer reports), ``early`` (chunks sent as the backward produces
them), ``inner`` (an outer run's round at one peer), ``versions`` (every version a peer states
or checks), ``runconfig`` (a leader's ``config`` validated once, with ``footprint``, the memory
it would take) and ``run`` (run phases, rosters, succession, the fork report).

Audits' building blocks (docs/TRUST.md; the machine does not use them yet): ``statements``
(the signed statements' bytes and digests), ``auditkey`` (a device's Ed25519 key, the key
check, signing and verifying) and ``draw`` (whether an attempt is audited, and who audits what).

The protocol: ``machine`` (a sans-IO package: every rule of a peer as one deterministic object
fed events with ``now`` and handing back effects) and ``traces`` (its conformance traces in
tests/vectors/protocol/). The I/O shell around it: ``mesh`` (signaling client and one aiortc
data channel per pair), ``node`` (the event loop feeding the machine and carrying out its
effects), ``replica`` (the model state the machine steers), ``options`` (what a node is
given), ``serverlink`` (plain http, CA-verified or pinned https to the server), ``datafeed``
(batches of a parquet dataset fetched ahead from the server's ``/data``) and ``local`` (several
peers in one process: the demo, the mesh bench).
"""

from daisychain.p2p.versions import DATA_PROTOCOL_VERSION  # every version: ``versions``

__all__ = ["DATA_PROTOCOL_VERSION"]
