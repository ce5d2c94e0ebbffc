"""A device's audit key: Ed25519 (RFC 8032, pure) from a 32-byte secret (docs/TRUST.md, "Keys
and statements").

Each device draws a ``secret`` from its CSPRNG when it connects to signaling; its signing key
has the seed ``SHA-256("daisychain key" || secret)`` and its public key travels as
``device.audit_key`` (64 lowercase hex digits). Signing and verifying use the ``cryptography``
package (OpenSSL). ``static/js/p2p/auditkey.js`` mirrors this with ``crypto.subtle`` or
``static/js/numerics/ed25519.js``.

Why ``check_public_key`` exists: every honest peer must reach the same verdict on every
signature, or a crafted key could make one twin accept what the other refuses and split the
run. RFC 8032 leaves some freedom in verifying (strict or lenient point decoding, with or
without the cofactor); OpenSSL and BoringSSL decode public keys leniently and check
``encode([S]B - [k]A) == R`` without the cofactor. Refusing every key that is not the canonical
encoding of a point of the prime-order subgroup (other than the neutral point) leaves no key on
which implementations can differ: for such keys the equation has one answer.
"""

from __future__ import annotations

import functools
import hashlib
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_LABEL = b"daisychain key"
SECRET_BYTES = 32
KEY_BYTES = 32
SIGNATURE_BYTES = 64
KEY_HEX_RE = re.compile(r"[0-9a-f]{64}")

# Curve25519 in twisted Edwards form -x^2 + y^2 = 1 + d x^2 y^2 over GF(P) (RFC 8032 5.1)
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # the prime order of the base point
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


Extended = tuple[int, int, int, int]  # a point as X, Y, Z, T with x = X/Z, y = Y/Z, xy = T/Z


class BadKey(ValueError):
    """Bytes that are not an acceptable audit key; the message says why."""


def signing_seed(secret: bytes) -> bytes:
    """The RFC 8032 private key (32-byte seed) of a device's secret."""
    if not (isinstance(secret, bytes) and len(secret) == SECRET_BYTES):
        raise BadKey(
            f"the secret must be {SECRET_BYTES} bytes from a CSPRNG (secrets.token_bytes(32))"
        )
    return hashlib.sha256(KEY_LABEL + secret).digest()


class SigningKey:
    """A device's key pair, made from its secret."""

    def __init__(self, secret: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(signing_seed(secret))
        self.public = self._key.public_key().public_bytes_raw()

    @property
    def public_hex(self) -> str:
        """The key as ``device.audit_key`` states it."""
        return self.public.hex()

    def sign(self, statement: bytes) -> bytes:
        return self._key.sign(statement)


def _decode(key: bytes) -> tuple[int, int] | None:
    """RFC 8032 5.1.3, strictly: y below P, a square root for x, and x = 0 only with sign 0."""
    y = int.from_bytes(key, "little") & ((1 << 255) - 1)
    sign = key[31] >> 7
    if y >= P:
        return None
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if v * x * x % P == (-u) % P:
        x = x * SQRT_M1 % P
    elif v * x * x % P != u:
        return None
    if x == 0 and sign:
        return None
    return (P - x if x & 1 != sign else x), y


def _is_neutral_times(point: tuple[int, int], n: int) -> bool:
    """Whether [n] point is the neutral point. Extended coordinates (X:Y:Z:T) and RFC 8032
    5.1.4's addition, so no inversion happens: run once per key, a few milliseconds."""
    x, y = point
    q: Extended = (x, y, 1, x * y % P)
    r: Extended = (0, 1, 1, 0)
    d2 = 2 * D % P

    def add(a: Extended, b: Extended) -> Extended:
        x1, y1, z1, t1 = a
        x2, y2, z2, t2 = b
        aa, bb = (y1 - x1) * (y2 - x2) % P, (y1 + x1) * (y2 + x2) % P
        c, dd = t1 * d2 * t2 % P, 2 * z1 * z2 % P
        e, f, g, h = bb - aa, dd - c, dd + c, bb + aa
        return e * f % P, g * h % P, f * g % P, e * h % P

    while n:
        if n & 1:
            r = add(r, q)
        q = add(q, q)
        n >>= 1
    return r[0] == 0 and (r[1] - r[2]) % P == 0


def check_public_key(key: bytes) -> None:
    """Refuses a key that is not the canonical encoding of a point of order L (``BadKey``)."""
    if not (isinstance(key, bytes) and len(key) == KEY_BYTES):
        raise BadKey(
            f"an audit key is {KEY_BYTES} bytes (64 hex digits), not "
            f"{len(key) if isinstance(key, bytes) else type(key).__name__}"
        )
    why = _refusal(key)
    if why:
        raise BadKey(f"audit key {key.hex()} {why}")


@functools.lru_cache(maxsize=256)
def _refusal(key: bytes) -> str:
    """Why a 32-byte key is refused, "" if it is not. Cached: a run has at most 64 keys, and
    ``verify`` checks the key every time."""
    point = _decode(key)
    if point is None:
        return "is not the canonical encoding of a curve point (RFC 8032 5.1.3)"
    if point == (0, 1) or not _is_neutral_times(point, L):
        return "is not a point of the prime-order group (the neutral point, or a small-order part)"
    return ""


def parse_public_key(text: str) -> bytes:
    """``device.audit_key`` as bytes, checked."""
    if not (isinstance(text, str) and KEY_HEX_RE.fullmatch(text)):
        raise BadKey(f"an audit key is 64 lowercase hex digits, not {text!r:.80}")
    key = bytes.fromhex(text)
    check_public_key(key)
    return key


def verify(key: bytes, statement: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``key``'s over ``statement``: false for a key ``check_public_key``
    refuses, a signature that is not 64 bytes or has S >= L, or any other failure."""
    try:
        check_public_key(key)
    except BadKey:
        return False
    if not (isinstance(signature, bytes) and len(signature) == SIGNATURE_BYTES):
        return False
    if int.from_bytes(signature[32:], "little") >= L:
        return False  # OpenSSL refuses it too; said here so every twin visibly does
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, statement)
    except InvalidSignature:
        return False
    return True
