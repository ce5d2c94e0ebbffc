"""Every version a peer states or checks, in one place (docs/PROTOCOL.md, "Versions").

- ``SIGNALING_VERSION`` (the server's ``PROTOCOL_VERSION``): stated in ``hello`` to the server
  and echoed in ``welcome``; the server refuses another (``version-mismatch``, close 4400), and
  the peer refuses a ``welcome`` with another.
- ``DATA_PROTOCOL_VERSION`` (defined here): ``hello.version`` on every data channel; another is
  answered ``error version-mismatch`` and the channel closes.
- ``CONTRACT_VERSION`` (``daisychain.numerics``'): ``hello.contract`` on every data channel,
  checkpoints and golden vectors; another is ``error version-mismatch`` (its replica would not
  stay bit-identical).
- ``FRAME_VERSION`` (defined here): byte 2 of every binary frame; another is ``bad-frame``.

The signaling version belongs to the server's message declarations and the contract version to
the numerical contract (each is defined once, there); a peer module takes every version from
this module and from nowhere else.
"""

from __future__ import annotations

from daisychain.numerics import CONTRACT_VERSION
from daisychain.wire.signaling import PROTOCOL_VERSION as SIGNALING_VERSION

DATA_PROTOCOL_VERSION = 6
FRAME_VERSION = 1

__all__ = ["CONTRACT_VERSION", "DATA_PROTOCOL_VERSION", "FRAME_VERSION", "SIGNALING_VERSION"]
