"""What peers and the server say to each other, declared where both sides import it.

- ``fields``: how a field of an untrusted JSON object is checked (``Fields``, ``PEER_ID_RE``),
  shared by every JSON parser: the signaling messages below and the data-channel control
  messages (``daisychain.wire.messages``).
- ``signaling``: every signaling message on ``/ws`` (docs/PROTOCOL.md, "Signaling"), parsed and
  validated in one place; the server (``daisychain.server``) and the peer side
  (``daisychain.p2p``, ``daisychain.peer``) both speak it from here, so a peer never imports the
  server package.
"""
