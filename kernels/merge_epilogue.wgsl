// merge_epilogue.wgsl - attention's heads merged into the output product's operand, on the GPU
// (docs/KERNELS.md "The forward chain").
//
// After attention a block computes  O = qmatmul(P, v)  per head (B, H, T, hd), merges the heads
// into tokens (N, C) and quantizes them per token for  qmatmul(o, wo)  (docs/MODEL.md section 4,
// steps 6-7). This kernel is that step, per token n = b T + i and column c = h hd + d:
//   o[n, c] = RNE_f32(acc[s, i, d] * 2^(p_e[s, i] + v_e[s, d]))    s = b H + h, the contract's
//             dequantization of the second product, one rounding
//   (o_q, o_e) = quantize(o per token)                              NUMERICS.md section 2
// and writes o_q as the output product's A operand: int8 packed four per u32 along C, K-MAJOR
// (word [w][n] = o_q[n, 4w .. 4w+3]), as gemm_*.wgsl reads it. Integer instructions only
// (epilogue.wgsl: ep_scaled, ep_scale, ep_byte): the bits cannot depend on the device. The
// exponents are read where the chain's earlier epilogues wrote them: p_e in the softmax's status
// (attention_epilogue.wgsl), v_e in the qkv split's (qkv_epilogue.wgsl).
//
// Bindings (group 0):
//   0  params    uniform  { t, heads, hd, c, m, m4, c4, out_stride, rows, pad0, pad1, pad2 }
//                (u32; m = tokens; m4 = 4 ceil(m / 4); c4 = ceil(C / 4); out_stride: words per
//                head of acc; rows = heads of the batch x t, the softmax's rows)
//   1  acc       storage, read        array<i32>: head s's t x hd product at s * out_stride
//   2  p_status  storage, read        array<u32>: [3r] P_e of softmax row r = s t + i (bits)
//   3  v_status  storage, read        array<u32>: [4 rows + 2u] v_e of v column u = s hd + d
//   4  packed    storage, read_write  array<u32>, c4 x m4 words: o_q K-major (every word of the
//                                     m rows written, zero bytes past C)
//   5  status    storage, read_write  array<u32>, 2 m words: [2n] o_e (bits), [2n + 1] 0 ok,
//                                     1 non-finite, 2 |o| >= 2^E_CEIL
//   6  next      storage, read_write  array<i32>: o_e again at [n], the row exponents of the
//                                     output product's scales (the host put wo's column ones
//                                     after m)
// One workgroup per token, EP_WG wide; dispatch (min(m, 65535), ceil(m / 65535), 1).

struct MergeParams {
    t: u32,
    heads: u32,
    hd: u32,
    c: u32,
    m: u32,
    m4: u32,
    c4: u32,
    out_stride: u32,
    rows: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> mg: MergeParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> p_status: array<u32>;
@group(0) @binding(3) var<storage, read> v_status: array<u32>;
@group(0) @binding(4) var<storage, read_write> packed: array<u32>;
@group(0) @binding(5) var<storage, read_write> status: array<u32>;
@group(0) @binding(6) var<storage, read_write> next_scales: array<i32>;

// o[n, c], dequantized from head s = b H + c / hd, query i = n mod T, channel d = c mod hd.
fn mg_o(n: u32, c: u32) -> u32 {
    let i = n % mg.t;
    let s = (n / mg.t) * mg.heads + c / mg.hd;
    let d = c % mg.hd;
    let p_e = bitcast<i32>(p_status[3u * (s * mg.t + i)]);
    let v_e = bitcast<i32>(v_status[4u * mg.rows + 2u * (s * mg.hd + d)]);
    return ep_scaled(acc[s * mg.out_stride + i * mg.hd + d], p_e + v_e);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let n = ep_row_of(wid);
    if (n >= mg.m) {
        return;  // the whole workgroup: n is the same for all its invocations
    }
    let lid = local.x;
    var amax = 0u;
    for (var c = lid; c < mg.c; c += EP_WG) {
        amax = max(amax, mg_o(n, c) & SF_ABS);
    }
    let scale = ep_scale(ep_wg_max(lid, amax));
    if (lid == 0u) {
        status[2u * n] = bitcast<u32>(scale.e);
        status[2u * n + 1u] = scale.status;
        next_scales[n] = scale.e;
    }
    for (var w = lid; w < mg.c4; w += EP_WG) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let c = w * 4u + lane;
            if (c < mg.c) {
                word = word | (ep_byte(mg_o(n, c), scale) << (8u * lane));
            }
        }
        packed[w * mg.m4 + n] = word;
    }
}
