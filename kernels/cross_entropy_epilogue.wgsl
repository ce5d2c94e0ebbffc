// cross_entropy_epilogue.wgsl - the logits' gradient from the logits product, on the GPU
// (docs/KERNELS.md "The step chain").
//
// Per token n, exactly as gpt.cross_entropy (docs/MODEL.md section 5):
//   z[j]  = RNE_f32(acc[n, j] * 2^(row_e[n] + col_e[j]))    the logits, dequantized
//   m     = max_j z[j];  p[j] = exp(z[j] - m)                the contract's exp
//   s     = tree_sum(p[j] over j)                            the pinned pairwise-halving order
//   g[j]  = ((p[j] / s) - (j == y[n] ? 1 : 0)) / f32(N)      the mean loss's gradient
// in the softfloat library's arithmetic. A row of the vocabulary may be twice as long as the
// workgroup memory holds (EP_ROW_MAX): the tree's first level, p[i] + p[i + W/2], is taken as the
// leaves are made, which is the same order. p is kept in the output between the passes (each
// invocation reads back only what it wrote).
//
// Bindings (group 0):
//   0  params   uniform  { n: u32, v: u32, width: u32, n_bits: u32 }
//               (width: the next power of two >= V, at most 2 EP_ROW_MAX; n_bits: the float32
//               bits of f32(N))
//   1  acc      storage, read        array<i32>: N x V, the logits product
//   2  row_e    storage, read        array<i32>: the final operand's exponent of token n at [n]
//   3  col_e    storage, read        array<i32>: wte's exponent of vocabulary entry j at [j]
//   4  targets  storage, read        array<u32>: N, the next tokens
//   5  out      storage, read_write  array<u32>: N x V, the gradient's float32 bits
// One workgroup per token; dispatch (min(N, 65535), ceil(N / 65535), 1).

struct CeParams {
    n: u32,
    v: u32,
    width: u32,
    n_bits: u32,
}

@group(0) @binding(0) var<uniform> ce: CeParams;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> row_e: array<i32>;
@group(0) @binding(3) var<storage, read> col_e: array<i32>;
@group(0) @binding(4) var<storage, read> targets: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

fn ce_z(n: u32, j: u32) -> u32 {
    return ep_scaled(acc[n * ce.v + j], row_e[n] + col_e[j]);
}

// p[j] of token n (+0 past V), written to the output as it is made.
fn ce_p(n: u32, j: u32, m: u32) -> u32 {
    if (j >= ce.v) {
        return 0u;
    }
    let p = sf_exp(sf_sub(ce_z(n, j), m));
    out[n * ce.v + j] = p;
    return p;
}

// The gradient at j from p (read back from the output) and the row's sum.
fn ce_grad(n: u32, j: u32, s: u32) -> u32 {
    var g = sf_div(out[n * ce.v + j], s);
    if (j == targets[n]) {
        g = sf_sub(g, SF_ONE);
    }
    return sf_div(g, ce.n_bits);
}

@compute @workgroup_size(EP_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let n = ep_row_of(wid);
    if (n >= ce.n) {
        return;  // the whole workgroup: n is the same for all its invocations
    }
    let lid = local.x;
    var key = 0u;
    for (var j = lid; j < ce.v; j += EP_WG) {
        key = max(key, sf_key(ce_z(n, j)));
    }
    let m = ep_unkey(ep_wg_max(lid, key));
    let leaves = min(ce.width, EP_ROW_MAX);
    let half = ce.width / 2u;
    for (var i = lid; i < leaves; i += EP_WG) {
        if (ce.width > EP_ROW_MAX) {
            ep_tree[i] = sf_add(ce_p(n, i, m), ce_p(n, i + half, m));
        } else {
            ep_tree[i] = ce_p(n, i, m);
        }
    }
    let s = ep_wg_tree(lid, leaves);
    for (var i = lid; i < leaves; i += EP_WG) {
        if (i < ce.v) {
            out[n * ce.v + i] = ce_grad(n, i, s);
        }
        if (ce.width > EP_ROW_MAX && i + half < ce.v) {
            out[n * ce.v + i + half] = ce_grad(n, i + half, s);
        }
    }
}
