"""Binary frames on a data channel: a 28-byte header, fragmentation, bounded reassembly.

Bulk payloads (gradient chunks, checkpoints) travel as binary data-channel messages of at most
``MAX_FRAME_BYTES`` (48 KiB) so JSON control messages can interleave with a large transfer and
no message comes near aiortc's 256 KiB ``max-message-size``. Layout (little-endian), normative
in docs/PROTOCOL.md "Binary frames":

    0  magic    2 bytes  b"DC"
    2  version  u8       FRAME_VERSION
    3  kind     u8       1 contribution, 2 reduced, 3 checkpoint
    4  flags    u8       bit 0: the reassembled payload is deflate-raw (RFC 1951)
    5  round    u8       attempt of the step (gradients), 0 otherwise
    6  chunk    u16      chunk index (gradients), 0 otherwise
    8  transfer u32      sender-chosen id, unique among the sender's open transfers
    12 step     u32      step the payload belongs to
    16 total    u32      length of the whole payload (as sent, i.e. compressed if flagged)
    20 offset   u32      where this fragment's bytes start in the payload
    24 crc32    u32      CRC-32 (zlib/IEEE) of the whole payload, checked after reassembly
    28 bytes             1 .. MAX_FRAME_BYTES - 28 bytes of the payload

Nothing in a header is trusted: sizes are checked against the receiver's limit for the kind
*before* anything is buffered, fragments must arrive in order (the channel is reliable and
ordered, so a gap is a protocol violation, not loss), and the number of open transfers is capped.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum

from daisychain.p2p.versions import FRAME_VERSION

MAGIC = b"DC"
HEADER = struct.Struct("<2sBBBBHIIIII")
HEADER_BYTES = HEADER.size  # 28
MAX_FRAME_BYTES = 48 * 1024
MAX_FRAGMENT_BYTES = MAX_FRAME_BYTES - HEADER_BYTES
MAX_OPEN_TRANSFERS = 8
FLAG_DEFLATE = 0x01
KNOWN_FLAGS = FLAG_DEFLATE
U32_MAX = 2**32 - 1

assert HEADER_BYTES == 28, "the header layout in docs/PROTOCOL.md is 28 bytes"


class FrameKind(IntEnum):
    CONTRIBUTION = 1  # a peer's quantized gradient chunk, sent to the chunk's owner
    REDUCED = 2  # an owner's quantized reduced chunk, sent to every roster peer
    CHECKPOINT = 3  # checkpoint bytes (daisychain.checkpoint.encode), for join/resync/restore


class FrameError(ValueError):
    """A binary frame that violates the protocol; the channel is closed with this reason."""


@dataclass(frozen=True)
class Header:
    kind: FrameKind
    flags: int
    round: int
    chunk: int
    transfer: int
    step: int
    total: int
    offset: int
    crc: int


@dataclass(frozen=True)
class Payload:
    """A reassembled (and decompressed) binary message."""

    kind: FrameKind
    round: int
    chunk: int
    step: int
    data: bytes


def fragment(
    kind: FrameKind,
    payload: bytes,
    *,
    transfer: int,
    step: int,
    round: int = 0,
    chunk: int = 0,
    deflate: bool = False,
) -> Iterator[bytes]:
    """Split ``payload`` into frames of at most MAX_FRAME_BYTES; compress first if asked."""
    body = _deflate(payload) if deflate else payload
    flags = FLAG_DEFLATE if deflate else 0
    if not 0 < len(body) <= U32_MAX:
        raise ValueError(f"payload of {len(body)} bytes cannot be framed")
    for name, value, bound in (
        ("round", round, 0xFF),
        ("chunk", chunk, 0xFFFF),
        ("transfer", transfer, U32_MAX),
        ("step", step, U32_MAX),
    ):
        if not 0 <= value <= bound:
            raise ValueError(f"{name} {value} out of range 0..{bound}")
    crc = zlib.crc32(body)
    for offset in range(0, len(body), MAX_FRAGMENT_BYTES):
        part = body[offset : offset + MAX_FRAGMENT_BYTES]
        head = HEADER.pack(
            MAGIC, FRAME_VERSION, int(kind), flags, round, chunk, transfer, step, len(body),
            offset, crc,
        )  # fmt: skip
        yield head + part


def _deflate(data: bytes) -> bytes:
    # Run-length matches only (Z_RLE: a match is a repeat of the byte before), no general LZ77
    # search: int8 gradients compress for the spread of their values and their runs of zeros,
    # not for long repeats. On live ``small`` gradients (steps 2-8) that is 0.73-0.75 of the
    # payload at 9-10 ms/MB, against 0.67-0.74 at 35-41 ms/MB for level 1 and 0.75-0.79 for
    # Huffman coding alone: on a CPU-bound link the bytes level 1 saves cost more to find than
    # to send.
    comp = zlib.compressobj(1, zlib.DEFLATED, -15, 8, zlib.Z_RLE)
    return comp.compress(data) + comp.flush()


def inflate(data: bytes, limit: int) -> bytes:
    """Decompress deflate-raw, refusing anything that would expand beyond ``limit`` bytes."""
    dec = zlib.decompressobj(-15)
    try:
        out = dec.decompress(data, limit + 1)
    except zlib.error as exc:
        raise FrameError(f"payload is not valid deflate-raw data ({exc})") from None
    if len(out) > limit or dec.unconsumed_tail:
        raise FrameError(f"payload inflates beyond the limit of {limit} bytes")
    if not dec.eof or dec.unused_data:
        raise FrameError("deflate-raw payload is truncated or has trailing bytes")
    return out


def parse_header(frame: bytes) -> tuple[Header, memoryview]:
    """Header and fragment bytes of one frame, validated on their own (no transfer context)."""
    if len(frame) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    if len(frame) <= HEADER_BYTES:
        raise FrameError(f"frame of {len(frame)} bytes is too short for header and data")
    magic, version, kind, flags, rnd, chunk, transfer, step, total, offset, crc = (
        HEADER.unpack_from(frame)
    )
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != FRAME_VERSION:
        raise FrameError(f"frame version {version}, this peer speaks {FRAME_VERSION}")
    try:
        frame_kind = FrameKind(kind)
    except ValueError:
        raise FrameError(f"unknown frame kind {kind}") from None
    if flags & ~KNOWN_FLAGS:
        raise FrameError(f"unknown flags 0x{flags:02x}")
    data = memoryview(frame)[HEADER_BYTES:]
    if offset + len(data) > total:
        raise FrameError(f"fragment [{offset}, {offset + len(data)}) exceeds total {total}")
    head = Header(frame_kind, flags, rnd, chunk, transfer, step, total, offset, crc)
    return head, data


class _Transfer:
    def __init__(self, head: Header) -> None:
        self.head = head
        self.buf = bytearray()


# limit(kind) -> largest payload (decompressed) this receiver accepts now; 0 = kind not accepted.
LimitFn = Callable[[FrameKind], int]


class Reassembler:
    """Per-channel reassembly of fragmented payloads with size limits.

    ``feed`` returns the payload when its last fragment arrives, None while incomplete, and raises
    ``FrameError`` for any violation (the caller closes the channel: a peer that sends a bad frame
    is either broken or hostile, and its stream cannot be resynchronised).
    """

    def __init__(self, limit: LimitFn) -> None:
        self.limit = limit
        self._open: dict[int, _Transfer] = {}

    @property
    def buffered(self) -> int:
        return sum(len(t.buf) for t in self._open.values())

    def feed(self, frame: bytes) -> Payload | None:
        head, data = parse_header(frame)
        limit = self.limit(head.kind)
        if limit <= 0:
            raise FrameError(f"{head.kind.name.lower()} frames are not expected now")
        # A compressed payload is never larger than the limit plus deflate's worst-case overhead
        # (5 bytes per 16 KiB stored block, plus a little).
        wire_limit = limit + limit // 16384 * 5 + 64 if head.flags & FLAG_DEFLATE else limit
        if head.total > wire_limit:
            raise FrameError(
                f"{head.kind.name.lower()} payload of {head.total} bytes exceeds the limit "
                f"of {wire_limit}"
            )
        t = self._open.get(head.transfer)
        if t is None:
            if head.offset != 0:
                raise FrameError(f"transfer {head.transfer} starts at offset {head.offset}, not 0")
            if len(self._open) >= MAX_OPEN_TRANSFERS:
                raise FrameError(f"more than {MAX_OPEN_TRANSFERS} transfers open at once")
            t = _Transfer(head)
            self._open[head.transfer] = t
        else:
            first = t.head
            same = (first.kind, first.flags, first.round, first.chunk, first.step, first.total)
            if same != (head.kind, head.flags, head.round, head.chunk, head.step, head.total):
                raise FrameError(f"transfer {head.transfer}: header changed between fragments")
            if head.crc != first.crc:
                raise FrameError(f"transfer {head.transfer}: crc changed between fragments")
            if head.offset != len(t.buf):
                raise FrameError(
                    f"transfer {head.transfer}: fragment at offset {head.offset}, expected "
                    f"{len(t.buf)} (fragments arrive in order on a reliable channel)"
                )
        t.buf += data
        if len(t.buf) < head.total:
            return None
        del self._open[head.transfer]
        body = bytes(t.buf)
        if zlib.crc32(body) != head.crc:
            raise ChecksumError(head)
        if head.flags & FLAG_DEFLATE:
            body = inflate(body, limit)
        return Payload(head.kind, head.round, head.chunk, head.step, body)


class ChecksumError(FrameError):
    """A complete payload whose CRC-32 does not match: damaged, not malformed. The receiver
    drops it and asks for it again (gradient repair) instead of closing the channel."""

    def __init__(self, head: Header) -> None:
        super().__init__(
            f"{head.kind.name.lower()} step {head.step} chunk {head.chunk}: CRC-32 mismatch"
        )
        self.head = head
