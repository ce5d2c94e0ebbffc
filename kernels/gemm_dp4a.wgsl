// gemm_dp4a.wgsl - exact int8 x int8 -> int32 matrix product on dot4I8Packed (the DP4A path).
//
// Computes acc[i, j] = sum_k a[i, k] * b[k, j] exactly (docs/NUMERICS.md section 3; spec of this
// kernel: docs/KERNELS.md). Integer arithmetic only: the result is defined to the bit by the WGSL
// specification (|acc| <= 128 * 128 * K stays far below 2^31 for every K the model uses).
//
// Bindings (group 0):
//   0  params  uniform  { m: u32, n: u32, k4: u32, slice_index: u32 }   k4 = ceil(K / 4);
//                       slice_index: the slice's number in a batched product (0 for a 2-D one);
//                       nothing is computed from it (a test plant may name one slice with it)
//   1  a       storage, read  array<vec4<u32>>: A packed K-MAJOR, k4 x (M4 * 4) u32 words with
//                              M4 = ceil(M / 4): word [k][i] holds a[i, 4k .. 4k+3] as bytes,
//                              little-endian (byte 0 = lowest); read as vec4 [k * M4 + i / 4]
//   2  b       storage, read  array<vec4<u32>>: B packed the same way, k4 x (N4 * 4) words:
//                              word [k][j] holds b[4k .. 4k+3, j]; vec4 [k * N4 + j / 4]
//   3  out     storage, read_write  array<i32>, M x N row-major; every cell is WRITTEN (never
//                                    accumulated into), so the buffer's previous contents are
//                                    irrelevant (the gates run on a poisoned pool to prove it)
// Padding: K up to 4 * k4 and M, N up to multiples of 4, all with zero bytes (they add nothing;
// padded rows/columns are computed and never stored).
//
// Tiling: each invocation computes a 4 x 4 block of outputs in registers from ONE vec4 load of A
// and ONE of B per packed K word (16 dot4I8Packed per 2 loads; the K-major layout makes those
// loads contiguous). A workgroup covers (4 * WG_Y) x (4 * WG_X) outputs; dispatch
// (ceil(N / (4 * WG_X)), ceil(M / (4 * WG_Y)), 1). Register tiling beat shared-memory tiling
// (barriers) by 2x on llvmpipe (ENVIRONMENT.md). A batched product is one such dispatch per
// slice, recorded into one command encoder, each slice's A, B and out bound at its own offset of
// shared buffers (docs/KERNELS.md, "Batched products").

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

struct Params {
    m: u32,
    n: u32,
    k4: u32,
    slice_index: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> out: array<i32>;

fn store_row(i: u32, j0: u32, v: vec4<i32>) {
    if (i < params.m) {
        for (var c = 0u; c < 4u; c++) {
            let j = j0 + c;
            if (j < params.n) {
                out[i * params.n + j] = v[c];
            }
        }
    }
}

@compute @workgroup_size(WG_X, WG_Y, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i0 = gid.y * 4u;
    let j0 = gid.x * 4u;
    if (i0 >= params.m || j0 >= params.n) {
        return;
    }
    let m4 = (params.m + 3u) / 4u;
    let n4 = (params.n + 3u) / 4u;
    var ia = gid.y;
    var ib = gid.x;
    var c0 = vec4<i32>(0);
    var c1 = vec4<i32>(0);
    var c2 = vec4<i32>(0);
    var c3 = vec4<i32>(0);
    for (var k = 0u; k < params.k4; k++) {
        let av = a[ia];
        let bv = b[ib];
        c0 += vec4<i32>(dot4I8Packed(av.x, bv.x), dot4I8Packed(av.x, bv.y), dot4I8Packed(av.x, bv.z), dot4I8Packed(av.x, bv.w));
        c1 += vec4<i32>(dot4I8Packed(av.y, bv.x), dot4I8Packed(av.y, bv.y), dot4I8Packed(av.y, bv.z), dot4I8Packed(av.y, bv.w));
        c2 += vec4<i32>(dot4I8Packed(av.z, bv.x), dot4I8Packed(av.z, bv.y), dot4I8Packed(av.z, bv.z), dot4I8Packed(av.z, bv.w));
        c3 += vec4<i32>(dot4I8Packed(av.w, bv.x), dot4I8Packed(av.w, bv.y), dot4I8Packed(av.w, bv.z), dot4I8Packed(av.w, bv.w));
        ia += m4;
        ib += n4;
    }
    store_row(i0, j0, c0);
    store_row(i0 + 1u, j0, c1);
    store_row(i0 + 2u, j0, c2);
    store_row(i0 + 3u, j0, c3);
}
