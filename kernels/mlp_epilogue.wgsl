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
// The host prepends the softfloat library (softfloat.wgsl, cut before its entry point) and
// epilogue.wgsl: ep_scaled rounds the scaled integer once, ep_scale and ep_byte quantize.
//
// Bindings (group 0):
//   0  params   uniform  { m: u32, f: u32, f4: u32, m4: u32 }   f4 = ceil(F / 4), m4 = 4 ceil(M / 4)
//   1  acc      storage, read        array<i32>, M x F row-major (the first product's out)
//   2  scales   storage, read        array<i32>, M row exponents then F column exponents
//   3  packed   storage, read_write  array<u32>, f4 x m4 words: r_q K-major (every word of the
//                                    m rows written, zero bytes past F)
//   4  status   storage, read_write  array<u32>, 2 M words: [2i] r_e of row i (as bits),
//                                    [2i + 1] 0 ok, 1 non-finite, 2 |r| >= 2^E_CEIL
//   5  next     storage, read_write  array<i32>: r_e again at [i], the row exponents of the
//                                    second product's scales (a chain that dequantizes that
//                                    product on the GPU puts w2's column ones after M)
//   6  relu     storage, read_write  array<u32>, M x F: 1 where u > 0, else 0 (the ReLU's
//                                    mask, what the backward chain's combine reads)
// One workgroup per row (epilogue.wgsl's parallel helpers: its invocations take every EP_WG-th
// element, the row's amax is combined in workgroup memory); dispatch (min(m, 65535),
// ceil(m / 65535), 1). The padding rows m .. m4 - 1 of packed are left as they are: the second
// product computes them and never stores them (gemm_*.wgsl).

struct MlpParams {
    m: u32,
    f: u32,
    f4: u32,
    m4: u32,
}

@group(0) @binding(0) var<uniform> mp: MlpParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scales: array<i32>;
@group(0) @binding(3) var<storage, read_write> packed: array<u32>;
@group(0) @binding(4) var<storage, read_write> status: array<u32>;
@group(0) @binding(5) var<storage, read_write> next_scales: array<i32>;
@group(0) @binding(6) var<storage, read_write> relu: array<u32>;

// r of one cell: u when u > 0, else +0 (u's sign bit set, or u == +0).
fn mlp_relu(i: u32, f: u32) -> u32 {
    let u = ep_scaled(acc[i * mp.f + f], scales[i] + scales[mp.m + f]);
    return select(0u, u, (u & SF_SIGN) == 0u);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let i = ep_row_of(wid);
    if (i >= mp.m) {
        return;  // the whole workgroup: i is the same for all its invocations
    }
    let lid = local.x;
    var amax = 0u;
    for (var f = lid; f < mp.f; f += EP_WG) {
        amax = max(amax, mlp_relu(i, f));
    }
    let scale = ep_scale(ep_wg_max(lid, amax));
    if (lid == 0u) {
        status[2u * i] = bitcast<u32>(scale.e);
        status[2u * i + 1u] = scale.status;
        next_scales[i] = scale.e;
    }
    for (var w = lid; w < mp.f4; w += EP_WG) {
        var word = 0u;
        for (var lane = 0u; lane < 4u; lane++) {
            let f = w * 4u + lane;
            if (f < mp.f) {
                let r = mlp_relu(i, f);
                relu[i * mp.f + f] = select(0u, 1u, r != 0u);
                word = word | (ep_byte(r, scale) << (8u * lane));
            }
        }
        packed[w * mp.m4 + i] = word;
    }
}
