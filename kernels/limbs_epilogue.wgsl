// limbs_epilogue.wgsl - a gradient quantized in two or three limbs for a backward product, on the
// GPU (docs/KERNELS.md "The backward pair").
//
// Every backward product takes a gradient G quantized in limbs (docs/NUMERICS.md sections 2 and
// 6): the forward operand's scales folded in first (an exact power-of-two multiply, unless it
// underflows, which rounds as float32 does), then per block (a row of G for dA = G @ b^T, a
// column for dB = a^T @ G):
//   x   = g * 2^fold                       f32 multiply (fold: per column for rows, per row for
//                                          columns: the forward operand's exponents)
//   e   = the block's scale (NUMERICS.md section 2, from the block's amax)
//   y   = x * 2^-e;  hi = rint(y)                                    |hi| <= 127
//   r   = (y - hi) * 256;  mid = clamp(rint(r), -127, 127)           the second limb
//   r2  = (r - mid) * 256;  lo = clamp(rint(r2), -127, 127)          three limbs only
// every operation one correctly rounded float32 operation of the softfloat library, so the bits
// cannot depend on the device. The limbs are written as the product's int8 operand, packed four
// per u32 along the product's summed axis (gemm_*.wgsl's K-major layout), limb l of slice s in
// region (l * slices + s):
//   mode 0 (rows, dA's A operand, K = n):  word [w][i] = limbs[i, 4w .. 4w+3]
//   mode 1 (columns, dB's B operand packed from its transpose, K = m):  word [w][j] =
//          limbs[4w .. 4w+3, j]
//
// Bindings (group 0):
//   0  params  uniform  { slices, m, n, limbs, mode, g_stride, fold_stride, out_stride, kw,
//                         width, blocks, fold_at, fold_step, pad0, pad1, pad2 }
//              (u32; G is slices x m x n floats, slice s at s * g_stride; fold of column j (mode
//              0) or row i (mode 1) of slice s at s * fold_stride + j (or + i); out_stride words
//              per (limb, slice) region; kw = words along K per row of the packing (ceil(n / 4)
//              or ceil(m / 4)); width = 4 ceil(m / 4) (mode 0) or 4 ceil(n / 4) (mode 1), the
//              words per K-word; blocks = slices x m (mode 0) or slices x n (mode 1); the fold
//              of index f is fold[fold_at + fold_step * f]: 1 for a plain array, 2 or 3 where an
//              epilogue's status words hold the exponents)
//   1  g       storage, read        array<u32>: G's float32 bits
//   2  fold    storage, read        array<i32>: the exponents folded into G
//   3  packed  storage, read_write  array<u32>: the limbs, limbs x slices regions
//   4  status  storage, read_write  array<u32>, 2 blocks words: [2b] the block's e (bits),
//                                   [2b + 1] 0 ok, 1 non-finite, 2 |x| >= 2^E_CEIL
// One workgroup per block (EP_WG wide); dispatch rows_grid(blocks). Padding rows (mode 0) and
// columns (mode 1) of the packing are not written: the product never stores what they feed.

struct LimbParams {
    slices: u32,
    m: u32,
    n: u32,
    limbs: u32,
    mode: u32,
    g_stride: u32,
    fold_stride: u32,
    out_stride: u32,
    kw: u32,
    width: u32,
    blocks: u32,
    fold_at: u32,
    fold_step: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> lp: LimbParams;
@group(0) @binding(1) var<storage, read> g: array<u32>;
@group(0) @binding(2) var<storage, read> fold: array<i32>;
@group(0) @binding(3) var<storage, read_write> packed: array<u32>;
@group(0) @binding(4) var<storage, read_write> status: array<u32>;

const LB_256: u32 = 0x43800000u;  // 256.0

// 2^k as float32 bits, for the exponents quantization makes (-126 <= k <= 127).
fn lb_pow2(k: i32) -> u32 {
    return u32(127 + k) << 23u;
}

// x = g * 2^fold of element k (0 .. along) of block (s, idx): along the row (mode 0) or the
// column (mode 1).
fn lb_x(s: u32, idx: u32, k: u32) -> u32 {
    var i = idx;
    var j = k;
    var f = k;
    if (lp.mode == 1u) {
        i = k;
        j = idx;
        f = k;
    }
    let v = g[s * lp.g_stride + i * lp.n + j];
    return sf_mul(v, lb_pow2(fold[lp.fold_at + lp.fold_step * (s * lp.fold_stride + f)]));
}

fn lb_clamp(v: i32) -> i32 {
    return clamp(v, -127, 127);
}

// The limbs (hi, mid, lo) of x at exponent e (lo 0 with two limbs), as integers.
fn lb_limbs(x: u32, e: i32) -> vec3<i32> {
    let y = sf_mul(x, lb_pow2(-e));
    let hi = sf_rint(y);
    let r = sf_mul(sf_sub(y, hi), LB_256);
    let mid = lb_clamp(sf_rint_to_int(sf_rint(r)));
    var lo = 0;
    if (lp.limbs == 3u) {
        let r2 = sf_mul(sf_sub(r, sf_from_int(mid)), LB_256);
        lo = lb_clamp(sf_rint_to_int(sf_rint(r2)));
    }
    return vec3<i32>(sf_rint_to_int(hi), mid, lo);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let b = ep_row_of(wid);
    if (b >= lp.blocks) {
        return;  // the whole workgroup: b is the same for all its invocations
    }
    let lid = local.x;
    var per = lp.m;  // blocks per slice
    var along = lp.n;  // elements per block
    if (lp.mode == 1u) {
        per = lp.n;
        along = lp.m;
    }
    let s = b / per;
    let idx = b % per;
    var amax = 0u;
    for (var k = lid; k < along; k += EP_WG) {
        amax = max(amax, lb_x(s, idx, k) & SF_ABS);
    }
    let scale = ep_scale(ep_wg_max(lid, amax));
    if (lid == 0u) {
        status[2u * b] = bitcast<u32>(scale.e);
        status[2u * b + 1u] = scale.status;
    }
    for (var w = lid; w < lp.kw; w += EP_WG) {
        var words = vec3<u32>(0u, 0u, 0u);
        for (var lane = 0u; lane < 4u; lane++) {
            let k = w * 4u + lane;
            if (k < along && !scale.zero) {
                let q = lb_limbs(lb_x(s, idx, k), scale.e);
                let bytes = bitcast<vec3<u32>>(q) & vec3<u32>(0xFFu);
                words = words | (bytes << vec3<u32>(8u * lane));
            }
        }
        for (var l = 0u; l < lp.limbs; l++) {
            packed[(l * lp.slices + s) * lp.out_stride + w * lp.width + idx] = words[l];
        }
    }
}
