"""LEB128, the variable-length integers of the WebAssembly binary format (core spec 5.2.2).

Seven bits per byte, least significant group first, the high bit set on every byte but the
last. Signed values are two's complement and end once the remaining bits are all copies of the
sign bit (bit 6 of the last byte). The encoders emit the shortest form, so the same number always
gives the same bytes (the build is reproducible byte for byte).
"""

from __future__ import annotations


def unsigned(value: int) -> bytes:
    """The shortest unsigned LEB128 encoding of ``value`` >= 0."""
    if value < 0:
        raise ValueError(f"unsigned LEB128 of a negative number {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def signed(value: int) -> bytes:
    """The shortest signed LEB128 encoding of ``value``."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7  # arithmetic shift: -1 stays -1
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)


def decode_unsigned(data: bytes, offset: int = 0) -> tuple[int, int]:
    """(value, offset after it) of the unsigned LEB128 number at ``offset`` (for tests)."""
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset


def decode_signed(data: bytes, offset: int = 0) -> tuple[int, int]:
    """(value, offset after it) of the signed LEB128 number at ``offset`` (for tests)."""
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if byte & 0x40:
                value -= 1 << shift
            return value, offset
