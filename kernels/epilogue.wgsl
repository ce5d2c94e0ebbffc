// epilogue.wgsl - what every GPU epilogue between two products needs (docs/KERNELS.md "Chains").
//
// A library, no entry point: the host joins softfloat.wgsl's functions, these and an epilogue's
// own text (mlp_epilogue.wgsl, attention_epilogue.wgsl, norm_epilogue.wgsl) into one module.
// Integer instructions and the softfloat library only, so the bits cannot depend on the device:
//   ep_scaled(v, s)     RNE_f32(v * 2^s) of an int32 product cell: the contract's
//                       dequantization (docs/NUMERICS.md section 3), one rounding
//   ep_scale(amax)      a row's quantization scale from its largest magnitude's bits
//                       (NUMERICS.md section 2: E, the bump, the floor and the ceiling)
//   ep_byte(x, s)       the int8 q = rint(x * 2^-e) of one value, as the low byte of a u32
//   ep_unkey(key)       a value from its sort key (a row's float max is a u32 max of keys)
//   ep_wg_max, ep_wg_sum, ep_wg_tree   a row's max, checksum and pinned tree sum across the
//                       workgroup that handles the row (one row per workgroup, EP_WG wide)

const EP_E_FLOOR: i32 = -100;
const EP_E_CEIL: i32 = 100;
const EP_MANT_BUMP: u32 = 0x7F0000u;

// RNE_f32(v * 2^s) for an int32 v: |v| < 2^31 normalised to the softfloat working format (leading
// one at bit 30), so sf_round_pack rounds once, subnormal and overflowing results included.
fn ep_scaled(v: i32, s: i32) -> u32 {
    if (v == 0) {
        return 0u;
    }
    let sign = select(0u, SF_SIGN, v < 0);
    let mag = u32(abs(v));
    let lz = countLeadingZeros(mag);
    return sf_round_pack(sign, s - i32(lz) + 158, mag << (lz - 1u));
}

struct EpScale {
    e: i32,  // the row's exponent (0 for a zero row)
    status: u32,  // 0 ok, 1 a non-finite value, 2 |x| >= 2^E_CEIL
    zero: bool,  // every q of the row is 0 (negligible, or refused)
}

// The scale of a row whose largest magnitude has the bits `amax` (NaN and inf sort above all
// finite values as bit patterns, so a max over `x & SF_ABS` finds them).
fn ep_scale(amax: u32) -> EpScale {
    var st = 0u;
    let big_e = i32(amax >> 23u) - 127;
    if (amax >= SF_INF) {
        st = 1u;
    } else if (big_e >= EP_E_CEIL) {
        st = 2u;
    }
    let zero = big_e < EP_E_FLOOR || st != 0u;
    var e = big_e - 6 + select(0, 1, (amax & SF_MANT) >= EP_MANT_BUMP);
    if (zero) {
        e = 0;
    }
    return EpScale(e, st, zero);
}

// rint(|x| * 2^-e), ties to even, for a finite |x| <= the row's amax: the mantissa (with its
// implicit bit) shifted right by 23 + e - exponent(x); 32 or more means below half a unit.
fn ep_round(bits: u32, e: i32) -> u32 {
    let biased = i32((bits >> 23u) & 0xFFu);
    var mant = bits & SF_MANT;
    var ex = -126;
    if (biased != 0) {
        mant = mant | SF_HIDDEN;
        ex = biased - 127;
    }
    let sh = 23 + e - ex;
    if (sh >= 32) {
        return 0u;
    }
    if (sh <= 0) {
        return mant << u32(-sh);  // unreachable for |x| <= amax (kept total)
    }
    let shift = u32(sh);
    let qi = mant >> shift;
    let rem = mant & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (qi & 1u) == 1u)) {
        return qi + 1u;
    }
    return qi;
}

// q of one value x of a row with scale `s`, as a byte (two's complement) in the low 8 bits.
fn ep_byte(x: u32, s: EpScale) -> u32 {
    if (s.zero) {
        return 0u;
    }
    let mag = ep_round(x & SF_ABS, s.e);
    let q = select(i32(mag), -i32(mag), (x & SF_SIGN) != 0u);
    return bitcast<u32>(q) & 0xFFu;
}

// The value of a sort key (softfloat's sf_key inverted; a zero key gives +0). A row's max of
// float values is the max of their keys (a u32 max), turned back into a value with this.
fn ep_unkey(key: u32) -> u32 {
    if ((key & SF_SIGN) != 0u) {
        return key & SF_ABS;
    }
    return ~key;
}

// --- one row per workgroup ------------------------------------------------------------------
// A parallel epilogue runs one workgroup of EP_WG invocations per row: each takes every EP_WG-th
// element, and the row's max, sum and tree sum are combined through workgroup memory. A row
// holds at most EP_ROW_MAX values (longer rows: the host does not use the chain).

override EP_WG: u32 = 64u;  // a power of two, at most 64; the host picks it per device
const EP_ROW_MAX: u32 = 1024u;

var<workgroup> ep_red: array<u32, EP_WG>;
var<workgroup> ep_row: array<u32, 1024>;  // one row's values, kept between passes
var<workgroup> ep_tree: array<u32, 1024>;  // the tree sum's leaves, then its partial sums

// The largest of every invocation's v (as u32: bit patterns of values >= +0 sort as the values).
fn ep_wg_max(lid: u32, v: u32) -> u32 {
    ep_red[lid] = v;
    workgroupBarrier();
    for (var s = EP_WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            ep_red[lid] = max(ep_red[lid], ep_red[lid + s]);
        }
        workgroupBarrier();
    }
    let out = ep_red[0];
    workgroupBarrier();
    return out;
}

// The sum of every invocation's v mod 2^32 (a checksum: any order gives the same).
fn ep_wg_sum(lid: u32, v: u32) -> u32 {
    ep_red[lid] = v;
    workgroupBarrier();
    for (var s = EP_WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            ep_red[lid] = ep_red[lid] + ep_red[lid + s];
        }
        workgroupBarrier();
    }
    let out = ep_red[0];
    workgroupBarrier();
    return out;
}

// The pinned tree sum (NUMERICS.md section 4) of ep_tree[0 .. width), width a power of two, the
// leaves past the row's length +0: x[i] + x[i + width/2] for every i < width/2, then the same
// on the first half, to one value; exactly the reference's order.
fn ep_wg_tree(lid: u32, width: u32) -> u32 {
    workgroupBarrier();
    for (var h = width / 2u; h > 0u; h = h / 2u) {
        for (var i = lid; i < h; i += EP_WG) {
            ep_tree[i] = sf_add(ep_tree[i], ep_tree[i + h]);
        }
        workgroupBarrier();
    }
    let out = ep_tree[0];
    workgroupBarrier();
    return out;
}

// The row of the workgroup `wid` (dispatches are (min(rows, 65535), ceil(rows / 65535), 1)).
fn ep_row_of(wid: vec3<u32>) -> u32 {
    return wid.x + wid.y * 65535u;
}
