// norm_epilogue.wgsl - the residual add and RMSNorm between attention's output product and the
// MLP, on the GPU (docs/KERNELS.md "The block chain").
//
// After attention, a block computes  h = h + qmatmul(o, wo);  bn = rmsnorm(h, g2);
// (b_q, b_e) = quantize(bn per token)  (docs/MODEL.md section 4, steps 7-8), and bn's quantized
// form is the MLP's first operand. This kernel is the part between the output product and the
// MLP chain, per token n:
//   y[c]  = RNE_f32(acc[n, c] * 2^(row_e[n] + col_e[c]))     the contract's dequantization
//   h1[c] = h[n, c] + y[c]
//   ss    = tree_sum(h1[c] * h1[c] over c)                    the pinned pairwise-halving order
//   d     = sqrt(ss / f32(C) + eps);  inv = 1 / d
//   bn[c] = (h1[c] * inv) * g[c]
// then bn quantized per row (NUMERICS.md section 2) and written as the MLP's first A operand,
// int8 packed four per u32 along C, K-MAJOR (word [w][n] = b_q[n, 4w .. 4w+3]). All float
// arithmetic is the softfloat library's and the quantization epilogue.wgsl's (the host prepends
// both). One workgroup per token (epilogue.wgsl's parallel helpers: the pinned tree sum of the
// squares in workgroup memory, h1 and then bn kept there between passes).
//
// The forward chain (docs/KERNELS.md "The forward chain") runs the same kernel after the MLP as
// well: there acc is the MLP's second product (its row exponents r_e from the MLP epilogue),
// h the residual stream h_out of the block's first instance, g the next block's first gain (or
// the final norm's), and packed the next qkv product's A operand (or the logits product's).
//
// Bindings (group 0):
//   0  params  uniform  { m: u32, c: u32, c4: u32, m4: u32, width: u32, c_bits: u32,
//                         eps_bits: u32, pad: u32 }
//              m tokens; c4 = ceil(C / 4); m4 = 4 ceil(m / 4); width = next power of two >= C
//              (<= EP_ROW_MAX);
//              c_bits, eps_bits: the float32 bits of f32(C) and eps
//   1  acc     storage, read        array<i32>, m x C row-major (the output product)
//   2  scales  storage, read        array<i32>, m row exponents (o_e) then C column ones (wo_e)
//   3  h       storage, read        array<u32>, m x C float32 bits: the residual stream before
//   4  g       storage, read        array<u32>, C float32 bits: the norm's gain
//   5  packed  storage, read_write  array<u32>, c4 x m4 words: b_q K-major (every word of the m
//                                   rows written, zero bytes past C)
//   6  status  storage, read_write  array<u32>, 3 m words: [3n] b_e (bits), [3n + 1] 0 ok,
//                                   1 non-finite, 2 |bn| >= 2^E_CEIL, [3n + 2] the sum of the
//                                   row's bn bit patterns mod 2^32 (the host's check)
//   7  next    storage, read_write  array<i32>: b_e again at [n], the row exponents of the MLP
//                                   epilogue's scales (the host put w1's column ones after m)
//   8  h_out   storage, read_write  array<u32>, m x C float32 bits: h1, the residual stream
//                                   after the add (the next residual add starts from it)
// One workgroup per token, C <= EP_ROW_MAX; dispatch (min(m, 65535), ceil(m / 65535), 1).


struct NmParams {
    m: u32,
    c: u32,
    c4: u32,
    m4: u32,
    width: u32,
    c_bits: u32,
    eps_bits: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> nm: NmParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scales: array<i32>;
@group(0) @binding(3) var<storage, read> h: array<u32>;
@group(0) @binding(4) var<storage, read> g: array<u32>;
@group(0) @binding(5) var<storage, read_write> packed: array<u32>;
@group(0) @binding(6) var<storage, read_write> status: array<u32>;
@group(0) @binding(7) var<storage, read_write> next_scales: array<i32>;
@group(0) @binding(8) var<storage, read_write> h_out: array<u32>;

// h1[c] of token n: the residual stream after the output product.
fn nm_h1(n: u32, c: u32) -> u32 {
    let y = ep_scaled(acc[n * nm.c + c], scales[n] + scales[nm.m + c]);
    return sf_add(h[n * nm.c + c], y);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let n = ep_row_of(wid);
    if (n >= nm.m) {
        return;  // the whole workgroup: n is the same for all its invocations
    }
    let lid = local.x;
    // h1 kept in ep_row; its squares the leaves of the tree sum, +0 past C
    for (var c = lid; c < nm.width; c += EP_WG) {
        var sq = 0u;
        if (c < nm.c) {
            let x = nm_h1(n, c);
            ep_row[c] = x;
            h_out[n * nm.c + c] = x;
            sq = sf_mul(x, x);
        }
        ep_tree[c] = sq;
    }
    let ms = sf_div(ep_wg_tree(lid, nm.width), nm.c_bits);
    let inv = sf_div(SF_ONE, sf_sqrt(sf_add(ms, nm.eps_bits)));
    // bn = (h1 * inv) * g, kept in ep_row
    var amax = 0u;
    var bits_sum = 0u;
    for (var c = lid; c < nm.c; c += EP_WG) {
        let b = sf_mul(sf_mul(ep_row[c], inv), g[c]);
        ep_row[c] = b;
        amax = max(amax, b & SF_ABS);
        bits_sum = bits_sum + b;
    }
    let scale = ep_scale(ep_wg_max(lid, amax));
    let total = ep_wg_sum(lid, bits_sum);
    if (lid == 0u) {
        status[3u * n] = bitcast<u32>(scale.e);
        status[3u * n + 1u] = scale.status;
        status[3u * n + 2u] = total;
        next_scales[n] = scale.e;
    }
    for (var w = lid; w < nm.c4; w += EP_WG) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let c = w * 4u + lane;
            if (c < nm.c) {
                word = word | (ep_byte(ep_row[c], scale) << (8u * lane));
            }
        }
        packed[w * nm.m4 + n] = word;
    }
}
