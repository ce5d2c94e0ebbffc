// grad_softmax_epilogue.wgsl - the causal softmax's backward, on the GPU (docs/KERNELS.md "The
// backward chain").
//
// Per query row (s, i) of T keys, with the forward's probabilities P, exactly as
// gpt.attention_backward (docs/MODEL.md section 6):
//   sum      = tree_sum(dP[s, i, j] * P[s, i, j] over j)     the pinned tree
//   dS[s, i, j] = (P[s, i, j] * (dP[s, i, j] - sum)) * scale
// in the softfloat library's arithmetic (masked keys have P = +0, so their dS is +-0 as the
// reference's). One workgroup per row, T <= EP_ROW_MAX.
//
// Bindings (group 0):
//   0  params  uniform  { rows: u32, t: u32, width: u32, scale_bits: u32 }
//              (rows = S T; width: the next power of two >= T; scale_bits: the float32 bits of
//              the scores' scale)
//   1  dp      storage, read        array<u32>: rows x T float32 bits, P's gradient
//   2  p       storage, read        array<u32>: rows x T, the forward's P
//   3  ds      storage, read_write  array<u32>: rows x T, the raw scores' gradient
// Dispatch (min(rows, 65535), ceil(rows / 65535), 1).

struct GsParams {
    rows: u32,
    t: u32,
    width: u32,
    scale_bits: u32,
}

@group(0) @binding(0) var<uniform> gs: GsParams;
@group(0) @binding(1) var<storage, read> dp: array<u32>;
@group(0) @binding(2) var<storage, read> p: array<u32>;
@group(0) @binding(3) var<storage, read_write> ds: array<u32>;

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let r = ep_row_of(wid);
    if (r >= gs.rows) {
        return;  // the whole workgroup: r is the same for all its invocations
    }
    let lid = local.x;
    let row = r * gs.t;
    for (var j = lid; j < gs.width; j += EP_WG) {
        var leaf = 0u;
        if (j < gs.t) {
            leaf = sf_mul(dp[row + j], p[row + j]);
        }
        ep_tree[j] = leaf;
    }
    let total = ep_wg_tree(lid, gs.width);
    for (var j = lid; j < gs.t; j += EP_WG) {
        let v = sf_mul(p[row + j], sf_sub(dp[row + j], total));
        ds[row + j] = sf_mul(v, gs.scale_bits);
    }
}
