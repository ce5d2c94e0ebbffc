// The contract's float32 primitives, exp and log (docs/NUMERICS.md, sections 0 and 5).
//
// Mirrors server/daisychain/numerics/fmath.py operation for operation. Every float32 operation
// is `Math.fround(a op b)`: for + - * / and sqrt on float32 operands that equals the correctly
// rounded float32 result (double rounding is innocuous since 53 >= 2 * 24 + 2), and JS engines
// never fuse a multiply-add. No Math.exp / Math.log / Math.pow anywhere: constants come from
// bit patterns, powers of two are assembled from exponent bits.

export const f32 = Math.fround;

// One shared scratch view for float32 <-> uint32 bit casts (no allocation per call).
const F32_VIEW = new Float32Array(1);
const U32_VIEW = new Uint32Array(F32_VIEW.buffer);

/** The uint32 bit pattern of the float32 nearest to `x` (x is normally already a float32). */
export function f32Bits(x) {
  F32_VIEW[0] = x;
  return U32_VIEW[0];
}

/** The float32 whose bit pattern is the uint32 `bits`. */
export function fromBits(bits) {
  U32_VIEW[0] = bits;
  return F32_VIEW[0];
}

// Powers of two as doubles, 2^s for s in [-POW2_SPAN, POW2_SPAN], built from float64 exponent
// bits once (a double multiply by one of them is exact unless it under- or overflows).
export const POW2_SPAN = 400;
/** POW2_TABLE[s + POW2_SPAN] = 2^s (for hot loops that index it directly). */
export const POW2_TABLE = (() => {
  const table = new Float64Array(2 * POW2_SPAN + 1);
  const words = new Uint32Array(table.buffer);
  const hiWord = new Float64Array([1]);
  // Endianness of the high word: little-endian engines keep it at index 1.
  const hiIndex = new Uint32Array(hiWord.buffer)[1] === 0x3ff00000 ? 1 : 0;
  for (let s = -POW2_SPAN; s <= POW2_SPAN; s++) {
    words[2 * (s + POW2_SPAN) + hiIndex] = (s + 1023) << 20;
  }
  return table;
})();

/** 2^s as a double for an integer s in [-400, 400] (exact). */
export function pow2d(s) {
  if (!(s >= -POW2_SPAN && s <= POW2_SPAN) || s !== (s | 0)) {
    throw new RangeError(`pow2d: exponent ${s} outside [-${POW2_SPAN}, ${POW2_SPAN}]`);
  }
  return POW2_TABLE[s + POW2_SPAN];
}

/** 2^e as float32 for an integer e in [-126, 127], built from the exponent bits (exact). */
export function pow2(e) {
  if (!(e >= -126 && e <= 127) || e !== (e | 0)) {
    throw new RangeError(`pow2: exponent ${e} outside the normal float32 range [-126, 127]`);
  }
  return fromBits(((e + 127) << 23) >>> 0);
}

// 1.5 * 2^52: for |v| < 2^51, (v + RINT_MAGIC) lies in [2^52, 2^53) where doubles are exactly
// the integers, so the addition itself rounds v to an integer, ties to even (the IEEE default
// mode). `Math.round` would be wrong: it rounds halves towards +infinity.
export const RINT_MAGIC = 6755399441055744;

/**
 * Round to the nearest integer, ties to even, like numpy's `rint` (including its signs:
 * rint(-0.3) is -0, rint(-0) is -0; NaN and infinities pass through).
 */
export function rint(x) {
  if (!(Math.abs(x) < 2251799813685248)) return x; // |x| >= 2^51 is already an integer; NaN
  const r = x + RINT_MAGIC - RINT_MAGIC;
  if (r === 0) return x < 0 || Object.is(x, -0) ? -0 : 0;
  return r;
}

// Constants from their float32 bit patterns (NUMERICS.md section 5).
export const EXP_LO = fromBits(0xc2ac0000); // -86
export const EXP_HI = fromBits(0x42b00000); // 88
const LOG2E = fromBits(0x3fb8aa3b);
// ln 2 = LN2_A + LN2_B + LN2_C; A and B have 16 significant bits, so k*A and k*B are exact.
const LN2_A = fromBits(0x3f317200);
const LN2_B = fromBits(0x35bfbf00);
const LN2_C = fromBits(0xad630880);
const C0 = fromBits(0x3f800000);
const C1 = fromBits(0x3f800000);
const C2 = fromBits(0x3f000000);
const C3 = fromBits(0x3e2aaaab);
const C4 = fromBits(0x3d2aaaab);
const C5 = fromBits(0x3c088889);
const C6 = fromBits(0x3ab60b61);
const SQRT2_MANT = 0x3504f3; // mantissa bits of sqrt(2) in float32
const LN2_HI = LN2_A; // 16 significant bits: E * LN2_HI is exact for |E| <= 256
const LN2_LO = fromBits(0x35bfbe8e);
const L3 = fromBits(0x3eaaaaab);
const L5 = fromBits(0x3e4ccccd);
const L7 = fromBits(0x3e124925);
const L9 = fromBits(0x3de38e39);

/** The contract's exp of one float32 value (NUMERICS.md section 5). */
export function exp(x) {
  x = f32(x);
  if (x !== x) return NaN;
  if (x < EXP_LO) return 0;
  if (x > EXP_HI) return Infinity;
  const k = rint(f32(x * LOG2E)); // |k| <= 127
  const r = f32(f32(f32(x - f32(k * LN2_A)) - f32(k * LN2_B)) - f32(k * LN2_C));
  let p = f32(f32(C6 * r) + C5);
  p = f32(f32(p * r) + C4);
  p = f32(f32(p * r) + C3);
  p = f32(f32(p * r) + C2);
  p = f32(f32(p * r) + C1);
  p = f32(f32(p * r) + C0);
  return f32(p * fromBits(((k + 127) << 23) >>> 0));
}

/** The contract's natural log of one float32 value (NUMERICS.md section 5). */
export function log(x) {
  x = f32(x);
  if (x !== x || x < 0) return NaN;
  if (x === Infinity) return Infinity;
  const bits = f32Bits(x);
  const biased = (bits >>> 23) & 0xff;
  if (biased === 0) return -Infinity; // zero (either sign) or subnormal
  const mant = bits & 0x7fffff;
  const big = mant > SQRT2_MANT ? 1 : 0;
  const m = fromBits((mant | ((127 - big) << 23)) >>> 0); // m in [sqrt(1/2), sqrt(2)]
  const e = biased - 127 + big; // a small integer: exact in float32
  const f = f32(m - 1);
  const s = f32(f / f32(m + 1));
  const z = f32(s * s);
  const t = f32(z * f32(L3 + f32(z * f32(L5 + f32(z * f32(L7 + f32(z * L9)))))));
  const s2 = f32(s + s);
  const logM = f32(s2 + f32(s2 * t));
  return f32(f32(e * LN2_HI) + f32(logM + f32(e * LN2_LO)));
}

/** exp over a Float32Array into `out` (may be `x` itself); returns `out`. */
export function expArray(x, out = new Float32Array(x.length)) {
  for (let i = 0; i < x.length; i++) out[i] = exp(x[i]);
  return out;
}

/** log over a Float32Array into `out` (may be `x` itself); returns `out`. */
export function logArray(x, out = new Float32Array(x.length)) {
  for (let i = 0; i < x.length; i++) out[i] = log(x[i]);
  return out;
}
