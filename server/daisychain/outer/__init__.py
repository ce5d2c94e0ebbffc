"""Low-communication training: the outer loop's pinned arithmetic (docs/OUTER.md).

Every peer takes ``H`` inner AdamW steps on its own batches from the shared outer weights; then
the group exchanges compressed pseudo-gradients (outer weights minus a peer's weights now),
averages them weighted by the tokens each peer trained on, and applies Nesterov momentum
(DiLoCo). Every replica holds the same outer weights and momentum after every outer step.

One concept per module: ``payload`` (what a peer sends: the int8 and top-k codecs, error
feedback), ``mean`` (the token-weighted mean in roster order), ``nesterov`` (pseudo-gradient,
outer state, outer step, the carry of an overlapped round, its hash), ``exchange`` (one round
of a whole group in one process, and the bytes it sends). Peers train outer runs with these
operations through ``p2p`` (``p2p.inner``, the protocol machine; docs/PROTOCOL.md, "Outer runs").
"""

from daisychain.outer.exchange import RoundResult, bytes_sent, outer_round
from daisychain.outer.mean import MeanError, weighted_mean
from daisychain.outer.nesterov import (
    OuterConfig,
    OuterError,
    OuterState,
    add_carry,
    apply_outer,
    init_outer,
    outer_hash,
    pseudo_gradient,
)
from daisychain.outer.payload import Compression, CompressionError, compress, decode, encode

__all__ = [
    "Compression",
    "CompressionError",
    "MeanError",
    "OuterConfig",
    "OuterError",
    "OuterState",
    "RoundResult",
    "add_carry",
    "apply_outer",
    "bytes_sent",
    "compress",
    "decode",
    "encode",
    "init_outer",
    "outer_hash",
    "outer_round",
    "pseudo_gradient",
    "weighted_mean",
]
