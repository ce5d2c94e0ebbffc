// attention_epilogue.wgsl - the causal softmax between attention's two products, on the GPU
// (docs/KERNELS.md "The attention chain").
//
// Per head (a slice: one (b, h)) attention is  S = qmatmul(q, k^T);  P = softmax(S * c, causal);
// (P_q, P_e) = quantize(P per query row);  O = qmatmul(P, v)  (docs/MODEL.md section 4, steps
// 4-6). This kernel is the part between the two products, so both products and it go in one
// submit with one readback. For query row i of a slice, key j:
//   s[j]  = RNE_f32(acc[i, j] * 2^(row_e[i] + col_e[j]))    the contract's dequantization
//   s[j]  = s[j] * c  for j <= i,  -inf for j > i            (c: the exact power of two 1/sqrt(hd))
//   m     = max_j s[j];  p[j] = exp(s[j] - m)                the contract's exp (+0 for -inf)
//   den   = tree_sum(p[j] over j = 0 .. T-1)                 the pinned pairwise-halving order
//   P[j]  = p[j] / den
// then P quantized per row (NUMERICS.md section 2) and written as the second product's A operand:
// int8 packed four per u32 along the keys, K-MAJOR per slice (word [w][i] = P_q[i, 4w .. 4w+3]).
// All float arithmetic is the softfloat library's and the quantization epilogue.wgsl's (the host
// prepends both), so the bits are numpy's on every device.
//
// One workgroup per query row (epilogue.wgsl's parallel helpers): its invocations take every
// EP_WG-th key; the row's max, the pinned tree sum of p and the largest P are combined in
// workgroup memory, where p and then P are kept between passes (so exp runs once per score).
//
// Bindings (group 0):
//   0  params  uniform  { t: u32, rows: u32, acc_stride: u32, packed_stride: u32,
//                         t4: u32, m4: u32, width: u32, scale: u32 }
//              t keys (= queries) per slice; rows = slices * t; strides in words per slice;
//              t4 = ceil(t / 4); m4 = 4 ceil(t / 4); width = next power of two >= t
//              (<= EP_ROW_MAX);
//              scale: the float32 bits of c
//   1  acc     storage, read        array<i32>: slice s's t x t scores at s * acc_stride
//   2  scales  storage, read        array<i32>: rows row exponents (q_e), then rows column
//                                   exponents (k_e: slice s's key j at s * t + j)
//   3  packed  storage, read_write  array<u32>: slice s's t4 x m4 words at s * packed_stride
//   4  status  storage, read_write  array<u32>, 3 rows words: [3r] P_e of row r (bits),
//                                   [3r + 1] 0 ok, 1 non-finite, 2 |P| >= 2^E_CEIL,
//                                   [3r + 2] the sum of the row's P bit patterns mod 2^32 (the
//                                   host compares it with its own P: one ulp anywhere shows)
//   5  p_out   storage, read_write  array<u32>: rows x t, P's float32 bits (what the backward
//                                   chain's softmax backward reads)
// One workgroup per query row of every slice, t <= EP_ROW_MAX; dispatch
// (min(rows, 65535), ceil(rows / 65535), 1).

const AT_NEG_INF: u32 = 0xFF800000u;

struct AtParams {
    t: u32,
    rows: u32,
    acc_stride: u32,
    packed_stride: u32,
    t4: u32,
    m4: u32,
    width: u32,
    scale: u32,
}

@group(0) @binding(0) var<uniform> at: AtParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scales: array<i32>;
@group(0) @binding(3) var<storage, read_write> packed: array<u32>;
@group(0) @binding(4) var<storage, read_write> status: array<u32>;
@group(0) @binding(5) var<storage, read_write> p_out: array<u32>;

// The scaled, masked score s[j] of row r (slice s, query i).
fn at_score(r: u32, j: u32) -> u32 {
    let slice = r / at.t;
    let i = r % at.t;
    if (j > i) {
        return AT_NEG_INF;
    }
    let v = acc[slice * at.acc_stride + i * at.t + j];
    return sf_mul(ep_scaled(v, scales[r] + scales[at.rows + slice * at.t + j]), at.scale);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let r = ep_row_of(wid);
    if (r >= at.rows) {
        return;  // the whole workgroup: r is the same for all its invocations
    }
    let lid = local.x;
    // m = max_j s[j] (key 0 sorts below every score; key 0, the first, is never masked)
    var key = 0u;
    for (var j = lid; j < at.t; j += EP_WG) {
        key = max(key, sf_key(at_score(r, j)));
    }
    // (a zero max comes back +0: its sign does not matter, s - (+-0) and its exp give one p)
    let m = ep_unkey(ep_wg_max(lid, key));
    // p[j] = exp(s[j] - m), kept in ep_row; the leaves of the tree sum, +0 past t
    for (var j = lid; j < at.width; j += EP_WG) {
        var p = 0u;
        if (j < at.t) {
            p = sf_exp(sf_sub(at_score(r, j), m));
        }
        ep_row[j] = p;
        ep_tree[j] = p;
    }
    let den = ep_wg_tree(lid, at.width);
    // P[j] = p[j] / den, kept in ep_row; P >= +0 (or NaN): the largest bit pattern is the amax
    var amax = 0u;
    var bits_sum = 0u;
    for (var j = lid; j < at.t; j += EP_WG) {
        let pj = sf_div(ep_row[j], den);
        ep_row[j] = pj;
        p_out[r * at.t + j] = pj;
        amax = max(amax, pj & SF_ABS);
        bits_sum = bits_sum + pj;
    }
    let scale = ep_scale(ep_wg_max(lid, amax));
    let total = ep_wg_sum(lid, bits_sum);
    if (lid == 0u) {
        status[3u * r] = bitcast<u32>(scale.e);
        status[3u * r + 1u] = scale.status;
        status[3u * r + 2u] = total;
    }
    let base = (r / at.t) * at.packed_stride + r % at.t;
    for (var w = lid; w < at.t4; w += EP_WG) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let j = w * 4u + lane;
            if (j < at.t) {
                word = word | (ep_byte(ep_row[j], scale) << (8u * lane));
            }
        }
        packed[base + w * at.m4] = word;
    }
}
