// transpose_pack.wgsl - an int8 operand's packing turned into its transpose's, on the GPU
// (docs/KERNELS.md "The step chain").
//
// The GEMMs read an operand X (R x K, int8) packed K-MAJOR: word [w][r] = X[r, 4w .. 4w+3]
// (gemm_*.wgsl), k4 = ceil(K / 4) words along K, each of 4 ceil(R / 4) words. A backward product
// reads the same values as X^T (K x R), packed the same way: word [w][k] = X[4w .. 4w+3, k].
// This kernel makes the second from the first, slice by slice (byte moves only), so an operand
// the forward made on the GPU serves the backward without a round trip. Bytes past R (in the
// output's last word of a column) are zero, as the GEMM requires of a K padding.
//
// Bindings (group 0):
//   0  params  uniform  { slices, r, k, in_stride, out_stride, in_m4, out_m4, pad }
//              (u32; words per slice in and out; in_m4 = 4 ceil(R / 4), out_m4 = 4 ceil(K / 4))
//   1  src     storage, read        array<u32>: X packed, slice s at s * in_stride
//   2  dst     storage, read_write  array<u32>: X^T packed, slice s at s * out_stride
// One invocation per output word (slices x ceil(R / 4) x K); dispatch
// (min(g, 65535), ceil(g / 65535), 1), g = ceil(words / 64).

struct TpParams {
    slices: u32,
    r: u32,
    k: u32,
    in_stride: u32,
    out_stride: u32,
    in_m4: u32,
    out_m4: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> tp: TpParams;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

// X[r, k] of slice s, as the low byte of a u32.
fn tp_byte(s: u32, r: u32, k: u32) -> u32 {
    let word = src[s * tp.in_stride + (k / 4u) * tp.in_m4 + r];
    return (word >> (8u * (k % 4u))) & 0xFFu;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let x = (wid.x + wid.y * 65535u) * 64u + lid;
    let r4 = (tp.r + 3u) / 4u;
    if (x >= tp.slices * r4 * tp.k) {
        return;
    }
    let s = x / (r4 * tp.k);
    let w = (x / tp.k) % r4;
    let k = x % tp.k;
    var word = 0u;
    for (var lane = 0u; lane < 4u; lane++) {
        let r = w * 4u + lane;
        if (r < tp.r) {
            word = word | (tp_byte(s, r, k) << (8u * lane));
        }
    }
    dst[s * tp.out_stride + w * tp.out_m4 + k] = word;
}
