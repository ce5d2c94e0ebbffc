// quantize.wgsl - per-row power-of-two block quantization (docs/NUMERICS.md section 2), integer-only.
//
// For each row of a float32 matrix X (M x K) this computes, from the float32 BIT PATTERNS alone
// (no float instruction at all, so no rounding mode, fusion or subnormal flushing can matter):
//   amax = max |x|                      (max of the magnitude bits: monotonic for finite floats)
//   E    = biased exponent(amax) - 127
//   e    = E - 6 + (mantissa(amax) >= 0x7F0000)
//   e = 0 and q = 0 when E < -100 (E_FLOOR);  status 2 when E >= 100 (E_CEIL)
//   q    = rint(x * 2^-e)               ties to even, done as an integer shift of the mantissa
// Outputs q twice: as float32 bits (the reference's representation, +0 for every zero, never -0)
// and as int8 bytes packed four per u32 along K, zero-padded (the A operand of gemm_*.wgsl).
// Spec: docs/KERNELS.md.
//
// Bindings (group 0):
//   0  params    uniform  { m: u32, k: u32, k4: u32, pad: u32 }    k4 = ceil(K / 4)
//   1  x         storage, read        array<u32>, M x K float32 bit patterns, row-major
//   2  q         storage, read_write  array<u32>, M x K float32 bit patterns of q
//   3  q_packed  storage, read_write  array<u32>, M x k4 int8 bytes of q, little-endian in a word
//   4  e         storage, read_write  array<i32>, M: the row's scale exponent
//   5  status    storage, read_write  array<u32>, M: 0 ok, 1 non-finite value, 2 |x| >= 2^E_CEIL
//                                      (the host raises QuantizationError for either)
// Every output word of a row is written. One invocation per row; dispatch (ceil(M / WG), 1, 1).

override WG: u32 = 64u;

const E_FLOOR: i32 = -100;
const E_CEIL: i32 = 100;
const MANT_BUMP: u32 = 0x7F0000u;

struct Params {
    m: u32,
    k: u32,
    k4: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;
@group(0) @binding(3) var<storage, read_write> q_packed: array<u32>;
@group(0) @binding(4) var<storage, read_write> e_out: array<i32>;
@group(0) @binding(5) var<storage, read_write> status: array<u32>;

// rint(|x| * 2^-e) for the float32 bits of x: the mantissa (with its implicit bit) shifted right
// by r = 23 + e - exponent(x), rounded to nearest with ties to even. r >= 17 whenever |x| <= amax,
// and r >= 32 means the value is below 2^-8 of a unit: it rounds to 0.
fn round_magnitude(bits: u32, e: i32) -> u32 {
    let biased = i32((bits >> 23u) & 0xFFu);
    var mant = bits & 0x7FFFFFu;
    var ex = -126;  // subnormal (or zero): no implicit bit
    if (biased != 0) {
        mant = mant | 0x800000u;
        ex = biased - 127;
    }
    let r = 23 + e - ex;
    if (r >= 32) {
        return 0u;
    }
    if (r <= 0) {
        return mant << u32(-r);  // unreachable for |x| <= amax (kept total for safety)
    }
    let shift = u32(r);
    let qi = mant >> shift;
    let rem = mant & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (qi & 1u) == 1u)) {
        return qi + 1u;
    }
    return qi;
}

// Float32 bits of the integer +-mag (mag <= 2^24), built from integer bits: exact, and +0 for 0.
fn f32_bits(neg: bool, mag: u32) -> u32 {
    if (mag == 0u) {
        return 0u;
    }
    let p = firstLeadingBit(mag);
    let sign = select(0u, 0x80000000u, neg);
    return sign | ((127u + p) << 23u) | ((mag << (23u - p)) & 0x7FFFFFu);
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.x;
    if (row >= params.m) {
        return;
    }
    let base = row * params.k;
    var amax_bits = 0u;
    for (var k = 0u; k < params.k; k++) {
        amax_bits = max(amax_bits, x[base + k] & 0x7FFFFFFFu);
    }
    var st = 0u;
    let big_e = i32(amax_bits >> 23u) - 127;
    if (amax_bits >= 0x7F800000u) {
        st = 1u;
    } else if (big_e >= E_CEIL) {
        st = 2u;
    }
    var e = big_e - 6 + select(0, 1, (amax_bits & 0x7FFFFFu) >= MANT_BUMP);
    let zero_block = big_e < E_FLOOR || st != 0u;
    if (zero_block) {
        e = 0;
    }
    status[row] = st;
    e_out[row] = e;
    let pbase = row * params.k4;
    for (var w = 0u; w < params.k4; w++) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let k = w * 4u + lane;
            if (k < params.k) {
                let bits = x[base + k];
                var mag = 0u;
                if (!zero_block) {
                    mag = round_magnitude(bits & 0x7FFFFFFFu, e);
                }
                let neg = (bits >> 31u) == 1u;
                q[base + k] = f32_bits(neg, mag);
                let qi = select(i32(mag), -i32(mag), neg);
                word = word | ((bitcast<u32>(qi) & 0xFFu) << (8u * lane));
            }
        }
        q_packed[pbase + w] = word;
    }
}
