"""The project's own exp and log (docs/NUMERICS.md, "exp and log").

Platform exp/log are approximations that differ between libraries, CPUs and engines, so the
contract defines its own, using only float32 + - * / (each correctly rounded, never fused) and
integer bit manipulation. The same sequence, operation for operation, is mirrored in JavaScript
(``Math.fround`` after every operation) and WGSL (behind a bit-exact gate).

exp(x):
    x < EXP_LO (-86)  -> +0          (keeps results out of the subnormal range)
    x > EXP_HI (88)   -> +inf
    k  = rint(x * LOG2E)                       ties to even, |k| <= 127
    r  = ((x - k*LN2_A) - k*LN2_B) - k*LN2_C   LN2_A, LN2_B have <= 16 significant bits, so
                                               k*LN2_A and k*LN2_B are exact
    p  = ((((((C6*r + C5)*r + C4)*r + C3)*r + C2)*r + C1)*r + C0)    Horner, Taylor coefficients
    y  = p * 2^k                               2^k built from exponent bits
log(x), x a positive normal float32:
    split x = m * 2^E with m in [sqrt(1/2), sqrt(2)) using the bits
    f = m - 1 (exact); s = f / (m + 1); z = s*s
    t = z * (L3 + z * (L5 + z * (L7 + z * L9)))
    log m = 2*s + (2*s) * t
    y = E*LN2_HI + (log m + E*LN2_LO)          LN2_HI has 16 significant bits: E*LN2_HI exact
    x == 0 or subnormal -> -inf; x < 0 or NaN -> NaN; +inf -> +inf
"""

from __future__ import annotations

import numpy as np

from daisychain.numerics.quant import FloatArray

F32 = np.float32


def _f32(bits: int) -> np.float32:
    """A float32 constant given by its bit pattern (the spec lists every constant this way)."""
    value: np.float32 = np.array([bits], dtype=np.uint32).view(np.float32)[0]
    return value


EXP_LO = _f32(0xC2AC0000)  # -86.0
EXP_HI = _f32(0x42B00000)  # 88.0
LOG2E = _f32(0x3FB8AA3B)  # 1.44269502
# ln 2 = LN2_A + LN2_B + LN2_C; A and B have 16 significant bits, so k*A and k*B are exact
# for |k| <= 256.
LN2_A = _f32(0x3F317200)  # 0.693145751953125
LN2_B = _f32(0x35BFBF00)  # 1.42861973e-06
LN2_C = _f32(0xAD630880)  # -1.29053435e-11
# Taylor coefficients C0..C6 = 1, 1, 1/2, 1/6, 1/24, 1/120, 1/720 rounded to float32.
EXP_COEF = tuple(
    _f32(b)
    for b in (0x3F800000, 0x3F800000, 0x3F000000, 0x3E2AAAAB, 0x3D2AAAAB, 0x3C088889, 0x3AB60B61)
)
SQRT2_MANT = np.uint32(0x3504F3)  # mantissa bits of sqrt(2) in float32
LN2_HI = LN2_A  # 16 significant bits: E * LN2_HI is exact for |E| <= 256
LN2_LO = _f32(0x35BFBE8E)  # float32(ln2 - LN2_HI) = 1.42860677e-06
# atanh-series coefficients L3, L5, L7, L9 = 1/3, 1/5, 1/7, 1/9 rounded to float32.
LOG_COEF = tuple(_f32(b) for b in (0x3EAAAAAB, 0x3E4CCCCD, 0x3E124925, 0x3DE38E39))


def rint(x: FloatArray) -> FloatArray:
    """Round to nearest integer, ties to even (exact in float32)."""
    out: FloatArray = np.rint(x).astype(np.float32, copy=False)
    return out


def exp(x: FloatArray) -> FloatArray:
    """Deterministic float32 exp (at most 3 ulp from the correctly rounded value).

    Written with in-place ufuncs (each still one correctly rounded float32 operation) because
    softmax over the logits makes this one of the hottest functions of a training step.
    """
    x = np.asarray(x, dtype=np.float32)
    nan = np.isnan(x)
    # Keep k in range (NaN lanes computed as 0); out-of-range lanes are replaced below.
    xc = np.clip(x, EXP_LO, EXP_HI)
    if nan.any():
        xc[nan] = F32(0.0)
    k = np.multiply(xc, LOG2E)
    np.rint(k, out=k)
    r = np.subtract(xc, k * LN2_A, out=xc)  # ((x - k*A) - k*B) - k*C
    t = np.multiply(k, LN2_B)
    r -= t
    np.multiply(k, LN2_C, out=t)
    r -= t
    c = EXP_COEF
    # Horner: p = ((((((C6 r + C5) r + C4) r + C3) r + C2) r + C1) r + C0
    p = np.multiply(r, c[6], out=t)
    p += c[5]
    for coef in (c[4], c[3], c[2], c[1], c[0]):
        p *= r
        p += coef
    two_k = (k.astype(np.int32) + 127).astype(np.uint32)
    two_k <<= np.uint32(23)
    p *= two_k.view(np.float32)
    p[x < EXP_LO] = F32(0.0)
    p[x > EXP_HI] = F32(np.inf)
    if nan.any():
        p[nan] = F32(np.nan)
    return p


def log(x: FloatArray) -> FloatArray:
    """Deterministic float32 natural log (a few ulp from the correctly rounded value)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    biased = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    mant = bits & np.uint32(0x7FFFFF)
    big = (mant > SQRT2_MANT).astype(np.int32)
    # m = mantissa with exponent 0 (in [1, 2)) or -1 (in [0.5, 1)) so m in [sqrt(1/2), sqrt(2)]
    m_bits = mant | ((np.int32(127) - big).astype(np.uint32) << np.uint32(23))
    m = m_bits.view(np.float32)
    e = (biased - 127 + big).astype(np.float32)
    f = m - F32(1.0)
    s = f / (m + F32(1.0))
    z = s * s
    c = LOG_COEF
    t = z * (c[0] + z * (c[1] + z * (c[2] + z * c[3])))
    s2 = s + s
    log_m = s2 + s2 * t
    y = e * LN2_HI + (log_m + e * LN2_LO)
    y = np.where(biased == 0, F32(-np.inf), y)  # zero or subnormal
    y = np.where(x == F32(np.inf), F32(np.inf), y)
    y = np.where((x < 0) | np.isnan(x), F32(np.nan), y)
    out: FloatArray = y.astype(np.float32, copy=False)
    return out
