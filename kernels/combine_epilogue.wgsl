// combine_epilogue.wgsl - a backward product's limbs combined into the float32 gradient, placed
// where the next step reads it, on the GPU (docs/KERNELS.md "The backward chain").
//
// A backward product of a gradient in L limbs (limbs_epilogue.wgsl) is L exact int32 products,
// one per limb; the gradient is (docs/NUMERICS.md section 6)
//   v = RNE_f32((sum over l of acc_l * 256^(L-1-l)) * 2^(e - 8 (L-1)))
// with e the exponent of the limbs' block (a row of the product for dA, a column for dB): the
// integer sum is exact in 64 bits (|v| < 2^48), built here from u32 pairs, and rounded once to
// float32 (subnormal and overflowing results included) by the softfloat library. Then:
//   mask  (flag): v = mask != 0 ? v : +0         the ReLU's backward (mask = u > 0)
//   place 0: out[s, i, j]                          as the product is, (S, M, K) contiguous
//   place 1: tokens to heads: (n, c) of a (N, C) product -> out[b H + h, t, d] (n = b T + t,
//            c = h hd + d), the attention's dO
//   place 2: heads to the fused qkv gradient: (s, t, d) of a (S, T, hd) product (or (s, d, t)
//            with `transposed`, dk^T) -> out[b T + t, part C + h hd + d] (s = b H + h)
//
// Bindings (group 0):
//   0  params  uniform  { slices, m, k, limbs, e_mode, acc_stride, place, t, heads, hd, c, part,
//                         transposed, mask_on, pad0, pad1 }
//              (u32; the product is slices x m x k, limb l of slice s at (l slices + s) *
//              acc_stride; e_mode 0: e of row i of slice s at status[2 (s m + i)], 1: of column
//              j at status[2 (s k + j)])
//   1  acc     storage, read        array<i32>: the limbs' products
//   2  status  storage, read        array<u32>: the limbs' exponents (limbs_epilogue's status)
//   3  mask    storage, read        array<u32>: slices x m x k, read only with mask_on
//   4  out     storage, read_write  array<u32>: the gradient's float32 bits, placed
// One invocation per element; dispatch (min(g, 65535), ceil(g / 65535), 1), g = ceil(S M K / 64).

struct CombineParams {
    slices: u32,
    m: u32,
    k: u32,
    limbs: u32,
    e_mode: u32,
    acc_stride: u32,
    place: u32,
    t: u32,
    heads: u32,
    hd: u32,
    c: u32,
    part: u32,
    transposed: u32,
    mask_on: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> cp: CombineParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> status: array<u32>;
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

// RNE_f32(v * 2^sc) of the 64-bit two's complement integer (hi, lo).
fn cb_round64(hi_in: u32, lo_in: u32, sc: i32) -> u32 {
    if (hi_in == 0u && lo_in == 0u) {
        return 0u;
    }
    let neg = (hi_in >> 31u) == 1u;
    var mh = hi_in;
    var ml = lo_in;
    if (neg) {  // the magnitude: two's complement negation of the pair
        ml = ~lo_in + 1u;
        mh = ~hi_in + select(0u, 1u, ml == 0u);
    }
    var p = i32(firstLeadingBit(ml));  // the leading one's bit, 0 .. 63
    if (mh != 0u) {
        p = 32 + i32(firstLeadingBit(mh));
    }
    var sig = 0u;  // the leading one at bit 30, what is shifted out jammed into bit 0
    if (p > 30) {
        let sh = u32(p - 30);  // 1 .. 33
        var lost = 0u;
        if (sh < 32u) {
            sig = (ml >> sh) | (mh << (32u - sh));
            lost = ml & ((1u << sh) - 1u);
        } else {
            sig = mh >> (sh - 32u);
            lost = ml | (mh & ((1u << (sh - 32u)) - 1u));
        }
        sig = sig | select(0u, 1u, lost != 0u);
    } else {
        sig = ml << u32(30 - p);
    }
    return sf_round_pack(select(0u, SF_SIGN, neg), sc + p + 127, sig);
}

// The gradient at element (s, i, j) of the product.
fn cb_value(s: u32, i: u32, j: u32) -> u32 {
    var hi = 0u;
    var lo = 0u;
    for (var l = 0u; l < cp.limbs; l++) {
        // (hi, lo) = (hi, lo) * 256 + acc_l, in two's complement
        hi = (hi << 8u) | (lo >> 24u);
        lo = lo << 8u;
        let a = acc[(l * cp.slices + s) * cp.acc_stride + i * cp.k + j];
        let sum = lo + bitcast<u32>(a);
        hi = hi + select(0u, 0xFFFFFFFFu, a < 0) + select(0u, 1u, sum < lo);
        lo = sum;
    }
    var at = s * cp.m + i;
    if (cp.e_mode == 1u) {
        at = s * cp.k + j;
    }
    let e = bitcast<i32>(status[2u * at]);
    return cb_round64(hi, lo, e - 8 * i32(cp.limbs - 1u));
}

// Where element (s, i, j) goes (see the header's places).
fn cb_place(s: u32, i: u32, j: u32) -> u32 {
    if (cp.place == 1u) {
        let b = i / cp.t;
        let h = j / cp.hd;
        return ((b * cp.heads + h) * cp.t + i % cp.t) * cp.hd + j % cp.hd;
    }
    if (cp.place == 2u) {
        var t = i;
        var d = j;
        if (cp.transposed == 1u) {
            t = j;
            d = i;
        }
        let b = s / cp.heads;
        let h = s % cp.heads;
        return (b * cp.t + t) * 3u * cp.c + cp.part * cp.c + h * cp.hd + d;
    }
    return (s * cp.m + i) * cp.k + j;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let x = (wid.x + wid.y * 65535u) * 64u + lid;
    if (x >= cp.slices * cp.m * cp.k) {
        return;
    }
    let s = x / (cp.m * cp.k);
    let i = (x / cp.k) % cp.m;
    let j = x % cp.k;
    var v = cb_value(s, i, j);
    if (cp.mask_on == 1u && mask[x] == 0u) {
        v = 0u;
    }
    out[cb_place(s, i, j)] = v;
}
