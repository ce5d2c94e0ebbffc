// qkv_epilogue.wgsl - from the fused qkv product to attention's operands, on the GPU
// (docs/KERNELS.md "The attention chain").
//
// A block's attention starts with  qkv = qmatmul(a, wqkv)  (N x 3C), split into heads and
// quantized: q and k per (b, h, t) over d, v per (b, h, d) over t (docs/MODEL.md section 4, steps
// 2-3). This kernel is that split and quantization, so the scores' product can follow on the GPU:
//   qkv[n, j] = RNE_f32(acc[n, j] * 2^(row_e[n] + col_e[j]))    the contract's dequantization
//   q[b, h, t, d] = qkv[b T + t, h hd + d];  k: column C + h hd + d;  v: column 2C + h hd + d
// and writes, per head s = b H + h, the operands as the chain's products read them (gemm_*.wgsl's
// K-major packing): q as the scores' A (word [w][t] = q[t, 4w .. 4w+3]), k as their B (packed
// from k itself, the same layout), v as the second product's B (packed from v^T: word [w][d] =
// v[4w .. 4w+3, d]); and the exponents where the softmax epilogue reads them (q_e by query row,
// then k_e by key). Integer instructions only (epilogue.wgsl): the bits cannot depend on the
// device.
//
// Bindings (group 0):
//   0  params  uniform  { t, heads, hd, c, slices, a_stride, v_stride, hd4, t4, rows, pad... }
//              (u32; rows = slices * t; strides in words per head; hd4 = ceil(hd / 4),
//              t4 = ceil(t / 4))
//   1  acc     storage, read        array<i32>, N x 3C row-major (the qkv product)
//   2  scales  storage, read        array<i32>: N row exponents (a_e), then 3C column ones
//   3  q       storage, read_write  array<u32>: head s's hd4 x 4 t4 words at s * a_stride
//   4  k       storage, read_write  array<u32>: the same layout
//   5  v       storage, read_write  array<u32>: head s's t4 x 4 hd4 words at s * v_stride
//   6  next    storage, read_write  array<i32>: rows q_e, then rows k_e (the softmax's scales)
//   7  status  storage, read_write  array<u32>: [2r], [2r + 1] q row r's exponent (bits) and
//                                   status; at 2 rows + 2r the same for k; at 4 rows + 2u for v
//                                   column u = s hd + d (status: 0 ok, 1 non-finite, 2 too large)
// One invocation per q/k row (rows of them) and per v column (slices * hd); dispatch
// (ceil((rows + slices hd) / 64), 1, 1). Padding rows and columns past t and hd are never stored
// by the products that read these operands, so they are not written.

struct QkvParams {
    t: u32,
    heads: u32,
    hd: u32,
    c: u32,
    slices: u32,
    a_stride: u32,
    v_stride: u32,
    hd4: u32,
    t4: u32,
    rows: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> qp: QkvParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scales: array<i32>;
@group(0) @binding(3) var<storage, read_write> q_out: array<u32>;
@group(0) @binding(4) var<storage, read_write> k_out: array<u32>;
@group(0) @binding(5) var<storage, read_write> v_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> next_scales: array<i32>;
@group(0) @binding(7) var<storage, read_write> status: array<u32>;

// qkv[n, col], dequantized.
fn qkv_at(n: u32, col: u32) -> u32 {
    let n_tokens = qp.slices / qp.heads * qp.t;
    return ep_scaled(acc[n * 3u * qp.c + col], scales[n] + scales[n_tokens + col]);
}

// One row of q (part 0) or k (part 1): head s, position t, over d; written as packed words.
fn qkv_row(s: u32, t: u32, part: u32, r: u32) {
    let n = (s / qp.heads) * qp.t + t;
    let col0 = part * qp.c + (s % qp.heads) * qp.hd;
    var amax = 0u;
    for (var d = 0u; d < qp.hd; d++) {
        amax = max(amax, qkv_at(n, col0 + d) & SF_ABS);
    }
    let scale = ep_scale(amax);
    let base = s * qp.a_stride + t;
    for (var w = 0u; w < qp.hd4; w++) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let d = w * 4u + lane;
            if (d < qp.hd) {
                word = word | (ep_byte(qkv_at(n, col0 + d), scale) << (8u * lane));
            }
        }
        if (part == 0u) {
            q_out[base + w * 4u * qp.t4] = word;
        } else {
            k_out[base + w * 4u * qp.t4] = word;
        }
    }
    next_scales[part * qp.rows + r] = scale.e;
    status[2u * (part * qp.rows + r)] = bitcast<u32>(scale.e);
    status[2u * (part * qp.rows + r) + 1u] = scale.status;
}

// One column of v: head s, channel d, over t; written as packed words of v^T.
fn qkv_column(s: u32, d: u32, u: u32) {
    let col = 2u * qp.c + (s % qp.heads) * qp.hd + d;
    let n0 = (s / qp.heads) * qp.t;
    var amax = 0u;
    for (var t = 0u; t < qp.t; t++) {
        amax = max(amax, qkv_at(n0 + t, col) & SF_ABS);
    }
    let scale = ep_scale(amax);
    for (var w = 0u; w < qp.t4; w++) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let t = w * 4u + lane;
            if (t < qp.t) {
                word = word | (ep_byte(qkv_at(n0 + t, col), scale) << (8u * lane));
            }
        }
        v_out[s * qp.v_stride + w * 4u * qp.hd4 + d] = word;
    }
    status[4u * qp.rows + 2u * u] = bitcast<u32>(scale.e);
    status[4u * qp.rows + 2u * u + 1u] = scale.status;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    if (j < qp.rows) {
        qkv_row(j / qp.t, j % qp.t, 0u, j);
        qkv_row(j / qp.t, j % qp.t, 1u, j);
    } else if (j < qp.rows + qp.slices * qp.hd) {
        let u = j - qp.rows;
        qkv_column(u / qp.hd, u % qp.hd, u);
    }
}
