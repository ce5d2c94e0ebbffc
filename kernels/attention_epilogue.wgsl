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
// The tree sum is epilogue.wgsl's (leaves in bit-reversed order, a stack of partial sums).
//
// Bindings (group 0):
//   0  params  uniform  { t: u32, rows: u32, acc_stride: u32, packed_stride: u32,
//                         t4: u32, m4: u32, width: u32, scale: u32 }
//              t keys (= queries) per slice; rows = slices * t; strides in words per slice;
//              t4 = ceil(t / 4); m4 = 4 ceil(t / 4); width = next power of two >= t;
//              scale: the float32 bits of c
//   1  acc     storage, read        array<i32>: slice s's t x t scores at s * acc_stride
//   2  scales  storage, read        array<i32>: rows row exponents (q_e), then rows column
//                                   exponents (k_e: slice s's key j at s * t + j)
//   3  packed  storage, read_write  array<u32>: slice s's t4 x m4 words at s * packed_stride
//   4  status  storage, read_write  array<u32>, 3 rows words: [3r] P_e of row r (bits),
//                                   [3r + 1] 0 ok, 1 non-finite, 2 |P| >= 2^E_CEIL,
//                                   [3r + 2] the sum of the row's P bit patterns mod 2^32 (the
//                                   host compares it with its own P: one ulp anywhere shows)
// One invocation per query row of every slice; dispatch (ceil(rows / WG), 1, 1).

override WG: u32 = 64u;

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

// The max of row r's scores (exact: a comparison), never below s[0] (key 0 is never masked).
fn at_max(r: u32) -> u32 {
    var m = at_score(r, 0u);
    for (var j = 1u; j < at.t; j++) {
        let s = at_score(r, j);
        if (sf_is_nan(s) || sf_is_nan(m)) {
            m = SF_QNAN;
        } else if (sf_lt(m, s)) {
            m = s;
        }
    }
    return m;
}

fn at_p(r: u32, j: u32, m: u32) -> u32 {
    return sf_exp(sf_sub(at_score(r, j), m));
}

// P[j] of row r, given the row's max and tree sum (every pass computes it the same way).
fn at_prob(r: u32, j: u32, m: u32, den: u32) -> u32 {
    return sf_div(at_p(r, j, m), den);
}

// tree_sum(p over j = 0 .. t-1), padded with +0 to width leaves (see the header).
fn at_den(r: u32, m: u32) -> u32 {
    var tree: EpTree;
    let bits = firstTrailingBit(at.width);
    for (var pos = 0u; pos < at.width; pos++) {
        let j = ep_reverse(pos, bits);
        ep_tree_add(&tree, select(0u, at_p(r, j, m), j < at.t));
    }
    return tree.value[0];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    if (r >= at.rows) {
        return;
    }
    let m = at_max(r);
    let den = at_den(r, m);
    // P >= +0 everywhere (or NaN): the max of the bit patterns is the max value, NaN above all.
    var amax = 0u;
    var bits_sum = 0u;
    for (var j = 0u; j < at.t; j++) {
        let pj = at_prob(r, j, m, den);
        amax = max(amax, pj & SF_ABS);
        bits_sum = bits_sum + pj;
    }
    let scale = ep_scale(amax);
    status[3u * r] = bitcast<u32>(scale.e);
    status[3u * r + 1u] = scale.status;
    status[3u * r + 2u] = bits_sum;
    let base = (r / at.t) * at.packed_stride + r % at.t;
    for (var w = 0u; w < at.t4; w++) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let j = w * 4u + lane;
            if (j < at.t) {
                word = word | (ep_byte(at_prob(r, j, m, den), scale) << (8u * lane));
            }
        }
        packed[base + w * at.m4] = word;
    }
}
