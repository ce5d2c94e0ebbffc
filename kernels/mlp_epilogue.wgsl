// mlp_epilogue.wgsl - between the MLP's two products, on the GPU (docs/KERNELS.md "The MLP chain").
//
// The MLP of a block is  u = qmatmul(bn, w1);  r = u > 0 ? u : +0;  (r_q, r_e) = quantize(r per
// row);  y = qmatmul(r, w2)  (docs/MODEL.md section 4, steps 8-9). This kernel is the part between
// the two products, so both products and it go in one submit with one readback:
//   u[i, f]  = RNE_f32(acc[i, f] * 2^(row_e[i] + col_e[f]))   the contract's dequantization, one
//              rounding (subnormal and overflowing results included), built from the integer
//   r[i, f]  = u if u > 0 else +0
//   r_q, r_e = NUMERICS.md section 2 per row (amax, E, bump, floors and ceilings), integer-only
// and writes r_q as the next product's A operand: int8 packed four per u32 along F, K-MAJOR
// (word [w][i] = r_q[i, 4w .. 4w+3]), rows padded with zero words to a multiple of 4, as
// gemm_*.wgsl reads it. No float instruction at all: the bits cannot depend on the device.
//
// The softfloat library (softfloat.wgsl, cut before its entry point) is prepended by the host:
// sf_round_pack rounds the scaled integer once.
//
// Bindings (group 0):
//   0  params   uniform  { m: u32, f: u32, f4: u32, m4: u32 }   f4 = ceil(F / 4), m4 = 4 ceil(M / 4)
//   1  acc      storage, read        array<i32>, M x F row-major (the first product's out)
//   2  scales   storage, read        array<i32>, M row exponents then F column exponents
//   3  packed   storage, read_write  array<u32>, f4 x m4 words: r_q K-major (every word of the
//                                    m rows written, zero bytes past F)
//   4  status   storage, read_write  array<u32>, 2 M words: [2i] r_e of row i (as bits),
//                                    [2i + 1] 0 ok, 1 non-finite, 2 |r| >= 2^E_CEIL
// One invocation per row; dispatch (ceil(m / WG), 1, 1). The padding rows m .. m4 - 1 of packed
// are left as they are: the second product computes them and never stores them (gemm_*.wgsl).

override WG: u32 = 64u;

const EP_E_FLOOR: i32 = -100;
const EP_E_CEIL: i32 = 100;
const EP_MANT_BUMP: u32 = 0x7F0000u;

struct EpParams {
    m: u32,
    f: u32,
    f4: u32,
    m4: u32,
}

@group(0) @binding(0) var<uniform> ep: EpParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scales: array<i32>;
@group(0) @binding(3) var<storage, read_write> packed: array<u32>;
@group(0) @binding(4) var<storage, read_write> status: array<u32>;

// RNE_f32(v * 2^s) for an int32 v, one rounding: |v| < 2^31 normalised to the library's working
// format (leading one at bit 30), exponent s + 127 + 30 - (leading zeros - 1).
fn ep_scaled(v: i32, s: i32) -> u32 {
    if (v == 0) {
        return 0u;
    }
    let sign = select(0u, SF_SIGN, v < 0);
    let mag = u32(abs(v));
    let lz = countLeadingZeros(mag);
    return sf_round_pack(sign, s - i32(lz) + 158, mag << (lz - 1u));
}

// r of one cell: u when u > 0, else +0 (u's sign bit set, or u == +0).
fn ep_relu(i: u32, f: u32) -> u32 {
    let u = ep_scaled(acc[i * ep.f + f], scales[i] + scales[ep.m + f]);
    return select(0u, u, (u & SF_SIGN) == 0u);
}

// rint(r * 2^-e) of a non-negative finite r with r <= amax (quantize.wgsl's round_magnitude).
fn ep_round(bits: u32, e: i32) -> u32 {
    let biased = i32((bits >> 23u) & 0xFFu);
    var mant = bits & 0x7FFFFFu;
    var ex = -126;
    if (biased != 0) {
        mant = mant | 0x800000u;
        ex = biased - 127;
    }
    let r = 23 + e - ex;
    if (r >= 32) {
        return 0u;
    }
    if (r <= 0) {
        return mant << u32(-r);
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

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= ep.m) {
        return;
    }
    var amax = 0u;
    for (var f = 0u; f < ep.f; f++) {
        amax = max(amax, ep_relu(i, f));
    }
    var st = 0u;
    let big_e = i32(amax >> 23u) - 127;
    if (amax >= SF_INF) {
        st = 1u;
    } else if (big_e >= EP_E_CEIL) {
        st = 2u;
    }
    var e = big_e - 6 + select(0, 1, (amax & 0x7FFFFFu) >= EP_MANT_BUMP);
    let zero_row = big_e < EP_E_FLOOR || st != 0u;
    if (zero_row) {
        e = 0;
    }
    status[2u * i] = bitcast<u32>(e);
    status[2u * i + 1u] = st;
    for (var w = 0u; w < ep.f4; w++) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let f = w * 4u + lane;
            if (f < ep.f && !zero_row) {
                word = word | ((ep_round(ep_relu(i, f), e) & 0xFFu) << (8u * lane));
            }
        }
        packed[w * ep.m4 + i] = word;
    }
}
