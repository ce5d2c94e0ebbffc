// grad_norm_epilogue.wgsl - RMSNorm's backward and the residual add, on the GPU (docs/KERNELS.md
// "The backward chain").
//
// Per token n, with the forward's xhat (C values) and inv (one) and the gain g, exactly as
// gpt.rmsnorm_backward and the residual add after it (docs/MODEL.md section 6):
//   dxhat[c] = dy[n, c] * g[c]
//   mean     = tree_sum(dxhat[c] * xhat[n, c] over c) / f32(C)     the pinned tree
//   dx[c]    = (dxhat[c] - xhat[n, c] * mean) * inv[n]
//   out[n, c] = dh[n, c] + dx[c]      (with `add`; else out = dx: the final norm's backward)
// in the softfloat library's arithmetic. One workgroup per token (dxhat kept in workgroup
// memory), C <= EP_ROW_MAX.
//
// Bindings (group 0):
//   0  params  uniform  { m: u32, c: u32, width: u32, c_bits: u32, add: u32, pad0, pad1, pad2 }
//              (width: the next power of two >= C; c_bits: the float32 bits of f32(C))
//   1  dy      storage, read        array<u32>: m x C float32 bits, the norm output's gradient
//   2  g       storage, read        array<u32>: C, the gain
//   3  xhat    storage, read        array<u32>: m x C, the forward's normalised input
//   4  inv     storage, read        array<u32>: m, the forward's 1 / sqrt(ms + eps)
//   5  dh      storage, read        array<u32>: m x C, the residual's gradient before (read with
//                                   add only)
//   6  out     storage, read_write  array<u32>: m x C, the residual's gradient after
// Dispatch (min(m, 65535), ceil(m / 65535), 1).

struct GnParams {
    m: u32,
    c: u32,
    width: u32,
    c_bits: u32,
    add: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> gn: GnParams;
@group(0) @binding(1) var<storage, read> dy: array<u32>;
@group(0) @binding(2) var<storage, read> g: array<u32>;
@group(0) @binding(3) var<storage, read> xhat: array<u32>;
@group(0) @binding(4) var<storage, read> inv: array<u32>;
@group(0) @binding(5) var<storage, read> dh: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let n = ep_row_of(wid);
    if (n >= gn.m) {
        return;  // the whole workgroup: n is the same for all its invocations
    }
    let lid = local.x;
    let row = n * gn.c;
    for (var c = lid; c < gn.width; c += EP_WG) {
        var leaf = 0u;
        if (c < gn.c) {
            let d = sf_mul(dy[row + c], g[c]);
            ep_row[c] = d;
            leaf = sf_mul(d, xhat[row + c]);
        }
        ep_tree[c] = leaf;
    }
    let mean = sf_div(ep_wg_tree(lid, gn.width), gn.c_bits);
    let scale = inv[n];
    for (var c = lid; c < gn.c; c += EP_WG) {
        let dx = sf_mul(sf_sub(ep_row[c], sf_mul(xhat[row + c], mean)), scale);
        var v = dx;
        if (gn.add == 1u) {
            v = sf_add(dh[row + c], dx);
        }
        out[row + c] = v;
    }
}
