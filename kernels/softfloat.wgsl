// softfloat.wgsl - float32 + - * / sqrt computed with integer instructions only
// (docs/KERNELS.md "Float32 in integers").
//
// The numerical contract (docs/NUMERICS.md) needs every float operation correctly rounded (round
// to nearest, ties to even), never fused, with subnormals kept. WGSL promises none of that: it
// lets a compiler fuse a * b + c, reassociate, flush subnormals. So a GPU epilogue that must give
// the reference's bits cannot use WGSL's f32 arithmetic. The functions below take and return
// float32 BIT PATTERNS (u32) and compute the IEEE-754 binary32 result from the sign, exponent and
// significand fields with u32/i32 instructions, whose results WGSL does define exactly:
//   sf_add(a, b)  a + b        sf_sub(a, b)  a - b        sf_mul(a, b)  a * b
//   sf_div(a, b)  a / b        sf_sqrt(a)    sqrt(a)
// and on them the contract's own sf_exp(a) and sf_log(a) (NUMERICS.md section 5, operation for
// operation) and sf_rint(a) (nearest integer, ties to even), with sf_lt(a, b) comparing values.
// Every result is the correctly rounded one (RNE), subnormal inputs and results included, with
// IEEE's signed zeros and infinities. Every NaN result is the one quiet NaN 0x7FC00000 (the
// contract treats any NaN as divergence; which NaN a CPU returns differs between CPUs).
//
// The functions are a library: an epilogue kernel is this file's functions followed by its own
// entry point (the host joins the texts). This file's own entry point applies one operation
// element by element, for the gate that proves the library on each device
// (daisychain.gpu.softfloat).
//
// Bindings (group 0):
//   0  params  uniform  { n: u32, op: u32, pad0: u32, pad1: u32 }   op: 0 add, 1 sub, 2 mul,
//                                    3 div, 4 sqrt, 5 exp, 6 log, 7 rint (4-7 leave b unread)
//   1  a       storage, read        array<u32>, n float32 bit patterns
//   2  b       storage, read        array<u32>, n float32 bit patterns
//   3  out     storage, read_write  array<u32>, n float32 bit patterns
// One invocation per element; dispatch (ceil(n / WG), 1, 1).
//
// Working format: a finite nonzero value is sig * 2^(exp - 157), sig a u32 whose leading one is
// at bit 30 (24 significant bits, then 7 bits for rounding), exp the biased exponent it would
// have. The low bit of sig is "sticky": it is set when any nonzero bits were shifted out below
// it, which is all round-to-nearest needs to know about them.

const SF_SIGN: u32 = 0x80000000u;
const SF_ABS: u32 = 0x7FFFFFFFu;
const SF_INF: u32 = 0x7F800000u;
const SF_QNAN: u32 = 0x7FC00000u;
const SF_MANT: u32 = 0x7FFFFFu;
const SF_HIDDEN: u32 = 0x800000u;

fn sf_is_nan(a: u32) -> bool {
    return (a & SF_ABS) > SF_INF;
}

fn sf_field(a: u32) -> i32 {
    return i32((a >> 23u) & 0xFFu);
}

// x >> n with every bit shifted out ORed into bit 0. Callers pass x < 2^31, so for n >= 32 only
// the sticky bit is left. (WGSL takes a shift count modulo 32, hence the explicit case.)
fn sf_shift_jam(x: u32, n: u32) -> u32 {
    if (n == 0u) {
        return x;
    }
    if (n >= 32u) {
        return select(0u, 1u, x != 0u);
    }
    let lost = x & ((1u << n) - 1u);
    return (x >> n) | select(0u, 1u, lost != 0u);
}

// Round sign * sig * 2^(exp - 157) to float32 bits. sig's leading one is at bit 30, except at
// exp == 1 where it may be lower (a subnormal). exp may be anything: below 1 the value is
// shifted into the subnormal range (with jamming) before rounding; at 0xFF or above it is inf.
fn sf_round_pack(sign: u32, exp_in: i32, sig_in: u32) -> u32 {
    var exp = exp_in;
    var sig = sig_in;
    if (exp >= 0xFF) {
        return sign | SF_INF;
    }
    if (exp < 1) {
        sig = sf_shift_jam(sig, u32(1 - exp));
        exp = 1;
    }
    let round_bits = sig & 0x7Fu;
    sig = (sig + 0x40u) >> 7u;
    if (round_bits == 0x40u) {
        sig = sig & ~1u;  // exactly halfway: to even
    }
    // sig carries its implicit one at bit 23 for a normal result, which adds 1 to the exponent
    // field: hence exp - 1. A rounding carry to 2^24 steps the exponent (to inf from 0xFE); a
    // subnormal (exp 1, no bit 23) gets field 0, or 1 when rounding carries into bit 23.
    return sign | ((u32(exp - 1) << 23u) + sig);
}

// The significand of a finite value in the working format (implicit one at bit 30), with a
// subnormal read at exponent 1.
fn sf_sig31(a: u32) -> u32 {
    if (sf_field(a) == 0) {
        return (a & SF_MANT) << 7u;
    }
    return ((a & SF_MANT) | SF_HIDDEN) << 7u;
}

struct SfNorm {
    exp: i32,  // biased; below 1 for a subnormal input
    sig: u32,  // 24 bits, bit 23 set
}

// A finite nonzero value as sig * 2^(exp - 150) with bit 23 of sig set (subnormals normalised).
fn sf_norm24(a: u32) -> SfNorm {
    let field = sf_field(a);
    let mant = a & SF_MANT;
    if (field == 0) {
        let shift = countLeadingZeros(mant) - 8u;
        return SfNorm(1 - i32(shift), mant << shift);
    }
    return SfNorm(field, mant | SF_HIDDEN);
}

fn sf_add(a: u32, b: u32) -> u32 {
    if (sf_is_nan(a) || sf_is_nan(b)) {
        return SF_QNAN;
    }
    let ma = a & SF_ABS;
    let mb = b & SF_ABS;
    if (ma == SF_INF) {
        if (mb == SF_INF && a != b) {
            return SF_QNAN;  // inf - inf
        }
        return a;
    }
    if (mb == SF_INF) {
        return b;
    }
    if (ma == 0u && mb == 0u) {
        return a & b;  // -0 only for -0 + -0
    }
    if (ma == 0u) {
        return b;
    }
    if (mb == 0u) {
        return a;
    }
    // big: the operand of larger magnitude (its sign is the result's).
    var big = a;
    var small = b;
    if (mb > ma) {
        big = b;
        small = a;
    }
    var exp = max(sf_field(big), 1);
    let d = u32(exp - max(sf_field(small), 1));
    let sig_big = sf_sig31(big);
    // Aligning with jamming is exact enough: when bits are lost (d >= 8) the sum or difference
    // is odd in its last bit while every rounding boundary is even, so it rounds as the exact
    // one would (docs/KERNELS.md, "Float32 in integers").
    let sig_small = sf_shift_jam(sf_sig31(small), d);
    let sign = big & SF_SIGN;
    if (((a ^ b) & SF_SIGN) == 0u) {
        var s = sig_big + sig_small;
        if (s >= 0x80000000u) {
            s = sf_shift_jam(s, 1u);
            exp = exp + 1;
        }
        return sf_round_pack(sign, exp, s);
    }
    if (ma == mb) {
        return 0u;  // x - x is +0 when rounding to nearest
    }
    var s = sig_big - sig_small;
    // Leading one back to bit 30, but not below exponent 1 (a subnormal result).
    var shift = i32(countLeadingZeros(s)) - 1;
    shift = min(shift, exp - 1);
    if (shift > 0) {
        s = s << u32(shift);
        exp = exp - shift;
    }
    return sf_round_pack(sign, exp, s);
}

fn sf_sub(a: u32, b: u32) -> u32 {
    return sf_add(a, b ^ SF_SIGN);
}

fn sf_mul(a: u32, b: u32) -> u32 {
    if (sf_is_nan(a) || sf_is_nan(b)) {
        return SF_QNAN;
    }
    let sign = (a ^ b) & SF_SIGN;
    let ma = a & SF_ABS;
    let mb = b & SF_ABS;
    if (ma == SF_INF || mb == SF_INF) {
        if (ma == 0u || mb == 0u) {
            return SF_QNAN;  // inf * 0
        }
        return sign | SF_INF;
    }
    if (ma == 0u || mb == 0u) {
        return sign;
    }
    let x = sf_norm24(a);
    let y = sf_norm24(b);
    // The 48-bit product of two 24-bit significands from 16-bit halves (WGSL has no u64).
    let x0 = x.sig & 0xFFFFu;
    let x1 = x.sig >> 16u;
    let y0 = y.sig & 0xFFFFu;
    let y1 = y.sig >> 16u;
    let p00 = x0 * y0;
    let mid = x0 * y1 + x1 * y0;
    let lo = p00 + (mid << 16u);
    let hi = x1 * y1 + (mid >> 16u) + select(0u, 1u, lo < p00);
    // The product is in [2^46, 2^48): its top 32 bits, the rest as sticky.
    var sig = (hi << 16u) | (lo >> 16u);
    var exp = x.exp + y.exp - 127;
    if (sig >= 0x80000000u) {
        sig = (sig >> 1u) | (sig & 1u);
        exp = exp + 1;
    }
    sig = sig | select(0u, 1u, (lo & 0xFFFFu) != 0u);
    return sf_round_pack(sign, exp, sig);
}

fn sf_div(a: u32, b: u32) -> u32 {
    if (sf_is_nan(a) || sf_is_nan(b)) {
        return SF_QNAN;
    }
    let sign = (a ^ b) & SF_SIGN;
    let ma = a & SF_ABS;
    let mb = b & SF_ABS;
    if (ma == SF_INF) {
        if (mb == SF_INF) {
            return SF_QNAN;  // inf / inf
        }
        return sign | SF_INF;
    }
    if (mb == SF_INF) {
        return sign;
    }
    if (mb == 0u) {
        if (ma == 0u) {
            return SF_QNAN;  // 0 / 0
        }
        return sign | SF_INF;
    }
    if (ma == 0u) {
        return sign;
    }
    let x = sf_norm24(a);
    let y = sf_norm24(b);
    var num = x.sig;
    var exp = x.exp - y.exp + 127;
    if (num < y.sig) {
        num = num << 1u;
        exp = exp - 1;
    }
    // num / y.sig is in [1, 2): 31 quotient bits by restoring division, the remainder as sticky.
    var q = 0u;
    for (var i = 0u; i < 31u; i++) {
        q = q << 1u;
        if (num >= y.sig) {
            num = num - y.sig;
            q = q | 1u;
        }
        num = num << 1u;
    }
    return sf_round_pack(sign, exp, q | select(0u, 1u, num != 0u));
}

fn sf_sqrt(a: u32) -> u32 {
    if (sf_is_nan(a)) {
        return SF_QNAN;
    }
    if ((a & SF_ABS) == 0u) {
        return a;  // sqrt(-0) is -0
    }
    if ((a & SF_SIGN) != 0u) {
        return SF_QNAN;
    }
    if (a == SF_INF) {
        return a;
    }
    let x = sf_norm24(a);
    // a = m * 2^e with m = sig / 2^23; make e even (m in [1, 4)).
    var e = x.exp - 127;
    var sig = x.sig;
    if ((e & 1) != 0) {
        sig = sig << 1u;
        e = e - 1;
    }
    // root = floor(sqrt(N)), N = sig * 2^27 (52 bits), two bits of N per step, digit by digit;
    // root is in [2^25, 2^26): 24 bits, a rounding bit, one more; the remainder is sticky.
    var rem = 0u;
    var root = 0u;
    for (var i = 0; i < 26; i++) {
        let low = 23 - 2 * i;  // N's bit pair (51 - 2i, 50 - 2i) is sig's pair (low + 1, low)
        var two = 0u;
        if (low >= 0) {
            two = (sig >> u32(low)) & 3u;
        } else if (low == -1) {
            two = (sig & 1u) << 1u;
        }
        rem = (rem << 2u) | two;
        let trial = (root << 2u) | 1u;
        if (rem >= trial) {
            rem = rem - trial;
            root = (root << 1u) | 1u;
        } else {
            root = root << 1u;
        }
    }
    return sf_round_pack(0u, e / 2 + 127, (root << 5u) | select(0u, 1u, rem != 0u));
}

// --- the contract's exp and log (docs/NUMERICS.md section 5), operation for operation ----------

// Total order of non-NaN values, -0 equal to +0: a key whose unsigned order is the float order.
fn sf_key(a: u32) -> u32 {
    if ((a & SF_ABS) == 0u) {
        return SF_SIGN;
    }
    if ((a & SF_SIGN) != 0u) {
        return ~a;
    }
    return a | SF_SIGN;
}

fn sf_lt(a: u32, b: u32) -> bool {
    return sf_key(a) < sf_key(b);
}

// The float32 bits of a small integer (|i| <= 2^24: exact).
fn sf_from_int(i: i32) -> u32 {
    if (i == 0) {
        return 0u;
    }
    let sign = select(0u, SF_SIGN, i < 0);
    let mag = u32(abs(i));
    let p = firstLeadingBit(mag);
    return sign | ((127u + p) << 23u) | ((mag << (23u - p)) & SF_MANT);
}

// rint: to the nearest integer, ties to even, as float32 bits (the sign of a zero result kept).
fn sf_rint(a: u32) -> u32 {
    if (sf_is_nan(a)) {
        return SF_QNAN;
    }
    let field = sf_field(a);
    if (field >= 150) {
        return a;  // already an integer, or an infinity
    }
    let sign = a & SF_SIGN;
    if (field < 126) {
        return sign;  // |a| < 0.5
    }
    let m = (a & SF_MANT) | SF_HIDDEN;
    let shift = u32(150 - field);  // 1 .. 24
    var q = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        q = q + 1u;
    }
    if (q == 0u) {
        return sign;
    }
    return sign | sf_from_int(i32(q));
}

const SF_EXP_LO: u32 = 0xC2AC0000u;
const SF_EXP_HI: u32 = 0x42B00000u;
const SF_LOG2E: u32 = 0x3FB8AA3Bu;
const SF_LN2_A: u32 = 0x3F317200u;
const SF_LN2_B: u32 = 0x35BFBF00u;
const SF_LN2_C: u32 = 0xAD630880u;
const SF_ONE: u32 = 0x3F800000u;
const SF_LN2_LO: u32 = 0x35BFBE8Eu;

fn sf_exp(x: u32) -> u32 {
    if (sf_is_nan(x)) {
        return SF_QNAN;
    }
    if (sf_lt(x, SF_EXP_LO)) {
        return 0u;
    }
    if (sf_lt(SF_EXP_HI, x)) {
        return SF_INF;
    }
    let k = sf_rint(sf_mul(x, SF_LOG2E));
    let r = sf_sub(sf_sub(sf_sub(x, sf_mul(k, SF_LN2_A)), sf_mul(k, SF_LN2_B)), sf_mul(k, SF_LN2_C));
    // Horner, C6 down to C0 (1/720 ... 1).
    var p = sf_add(sf_mul(r, 0x3AB60B61u), 0x3C088889u);
    p = sf_add(sf_mul(p, r), 0x3D2AAAABu);
    p = sf_add(sf_mul(p, r), 0x3E2AAAABu);
    p = sf_add(sf_mul(p, r), 0x3F000000u);
    p = sf_add(sf_mul(p, r), SF_ONE);
    p = sf_add(sf_mul(p, r), SF_ONE);
    // k is an integer in [-125, 127]: 2^k from its exponent bits.
    let ki = i32(sf_rint_to_int(k));
    return sf_mul(p, u32(ki + 127) << 23u);
}

// The integer value of float32 bits that hold a small integer (|v| < 2^24).
fn sf_rint_to_int(a: u32) -> i32 {
    let field = sf_field(a);
    if (field < 127) {
        return 0;
    }
    let mag = i32(((a & SF_MANT) | SF_HIDDEN) >> u32(150 - field));
    return select(mag, -mag, (a & SF_SIGN) != 0u);
}

fn sf_log(x: u32) -> u32 {
    if (sf_is_nan(x)) {
        return SF_QNAN;
    }
    if ((x & SF_SIGN) != 0u && (x & SF_ABS) != 0u) {
        return SF_QNAN;  // below zero (-0 is not)
    }
    let field = sf_field(x);
    if (field == 0) {
        return 0xFF800000u;  // zero (either sign) or subnormal: -inf
    }
    if (x == SF_INF) {
        return SF_INF;
    }
    let mant = x & SF_MANT;
    let big = select(0, 1, mant > 0x3504F3u);  // mantissa of sqrt(2)
    let m = mant | (u32(127 - big) << 23u);  // in [sqrt(1/2), sqrt(2)]
    let e = sf_from_int(field - 127 + big);
    let f = sf_sub(m, SF_ONE);
    let s = sf_div(f, sf_add(m, SF_ONE));
    let z = sf_mul(s, s);
    // L3 + z * (L5 + z * (L7 + z * L9)), innermost first (1/3, 1/5, 1/7, 1/9).
    var t = sf_add(0x3E124925u, sf_mul(z, 0x3DE38E39u));
    t = sf_add(0x3E4CCCCDu, sf_mul(z, t));
    t = sf_add(0x3EAAAAABu, sf_mul(z, t));
    t = sf_mul(z, t);
    let s2 = sf_add(s, s);
    let log_m = sf_add(s2, sf_mul(s2, t));
    return sf_add(sf_mul(e, SF_LN2_A), sf_add(log_m, sf_mul(e, SF_LN2_LO)));
}

// --- the gate's entry point -------------------------------------------------------------------

struct SfParams {
    n: u32,
    op: u32,
    pad0: u32,
    pad1: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> sf_params: SfParams;
@group(0) @binding(1) var<storage, read> sf_a: array<u32>;
@group(0) @binding(2) var<storage, read> sf_b: array<u32>;
@group(0) @binding(3) var<storage, read_write> sf_out: array<u32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= sf_params.n) {
        return;
    }
    let a = sf_a[i];
    let op = sf_params.op;
    var r = 0u;
    if (op == 0u) {
        r = sf_add(a, sf_b[i]);
    } else if (op == 1u) {
        r = sf_sub(a, sf_b[i]);
    } else if (op == 2u) {
        r = sf_mul(a, sf_b[i]);
    } else if (op == 3u) {
        r = sf_div(a, sf_b[i]);
    } else if (op == 4u) {
        r = sf_sqrt(a);
    } else if (op == 5u) {
        r = sf_exp(a);
    } else if (op == 6u) {
        r = sf_log(a);
    } else {
        r = sf_rint(a);
    }
    sf_out[i] = r;
}
