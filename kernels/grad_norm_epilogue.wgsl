// grad_norm_epilogue.wgsl - RMSNorm's backward and the residual add, on the GPU (docs/KERNELS.md
// "The backward chain").
//
// Per token n, with the forward's xhat (C values) and inv (one) and the gain g, exactly as
// gpt.rmsnorm_backward and the residual add after it (docs/MODEL.md section 6). With `from_x`
// the kernel is given the norm's input x instead and computes xhat and inv from it as the
// forward did (gpt.rmsnorm_forward: ss = tree_sum(x * x), inv = 1 / sqrt(ss / f32(C) + eps),
// xhat = x * inv), the same operations, so a chain need not keep them:
//   dxhat[c] = dy[n, c] * g[c]
//   mean     = tree_sum(dxhat[c] * xhat[n, c] over c) / f32(C)     the pinned tree
//   dx[c]    = (dxhat[c] - xhat[n, c] * mean) * inv[n]
//   out[n, c] = dh[n, c] + dx[c]      (with `add`; else out = dx: the final norm's backward)
// in the softfloat library's arithmetic. One workgroup per token (dxhat kept in workgroup
// memory), C <= EP_ROW_MAX.
//
// Bindings (group 0):
//   0  params  uniform  { m: u32, c: u32, width: u32, c_bits: u32, add: u32, from_x: u32,
//                         eps_bits: u32, pad }
//              (width: the next power of two >= C; c_bits, eps_bits: the float32 bits of f32(C)
//              and of eps, read with from_x)
//   1  dy      storage, read        array<u32>: m x C float32 bits, the norm output's gradient
//   2  g       storage, read        array<u32>: C, the gain
//   3  xhat    storage, read        array<u32>: m x C, the forward's normalised input (its
//                                   input x with from_x)
//   4  inv     storage, read        array<u32>: m, the forward's 1 / sqrt(ms + eps) (not read
//                                   with from_x)
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
    from_x: u32,
    eps_bits: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> gn: GnParams;
@group(0) @binding(1) var<storage, read> dy: array<u32>;
@group(0) @binding(2) var<storage, read> g: array<u32>;
@group(0) @binding(3) var<storage, read> xhat: array<u32>;
@group(0) @binding(4) var<storage, read> inv: array<u32>;
@group(0) @binding(5) var<storage, read> dh: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<u32>;

// xhat at index i: given, or x * inv with from_x.
fn gn_xhat(i: u32, inv_n: u32) -> u32 {
    if (gn.from_x == 1u) {
        return sf_mul(xhat[i], inv_n);
    }
    return xhat[i];
}

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
    var scale = 0u;  // inv
    if (gn.from_x == 1u) {
        for (var c = lid; c < gn.width; c += EP_WG) {
            var sq = 0u;
            if (c < gn.c) {
                sq = sf_mul(xhat[row + c], xhat[row + c]);
            }
            ep_tree[c] = sq;
        }
        let ms = sf_div(ep_wg_tree(lid, gn.width), gn.c_bits);
        scale = sf_div(SF_ONE, sf_sqrt(sf_add(ms, gn.eps_bits)));
    } else {
        scale = inv[n];
    }
    for (var c = lid; c < gn.width; c += EP_WG) {
        var leaf = 0u;
        if (c < gn.c) {
            let d = sf_mul(dy[row + c], g[c]);
            ep_row[c] = d;
            leaf = sf_mul(d, gn_xhat(row + c, scale));
        }
        ep_tree[c] = leaf;
    }
    let mean = sf_div(ep_wg_tree(lid, gn.width), gn.c_bits);
    for (var c = lid; c < gn.c; c += EP_WG) {
        let dx = sf_mul(sf_sub(ep_row[c], sf_mul(gn_xhat(row + c, scale), mean)), scale);
        var v = dx;
        if (gn.add == 1u) {
            v = sf_add(dh[row + c], dx);
        }
        out[row + c] = v;
    }
}
