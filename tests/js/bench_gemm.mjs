// GEMM throughput of the JS mirror (not a test): node tests/js/bench_gemm.mjs [M K N]
// Prints one JSON line: best-of-5 GOP/s (2*M*K*N operations) for the forward product and both
// two-limb gradient products at the given shape (default 1024 x 256 @ 256 x 768).
import * as N from '../../static/js/numerics/index.js';

const [M, K, Nn] = process.argv.slice(2, 5).map(Number).concat([1024, 256, 768]).slice(0, 3);
const rand = (n, seed) => {
  const u = N.uniform(N.key(seed), n);
  return u.map((v) => v - 0.5);
};
const a = N.quantizeRows(rand(M * K, 1), M, K);
const b = N.quantizeCols(rand(K * Nn, 2), K, Nn);
const dy = rand(M * Nn, 3);
const out = new Float32Array(M * Nn);

function gops(f) {
  f();
  let best = Infinity;
  for (let r = 0; r < 5; r++) {
    const t = performance.now();
    f();
    best = Math.min(best, performance.now() - t);
  }
  return Math.round((2 * M * K * Nn) / best / 1e4) / 100;
}

console.log(JSON.stringify({
  shape: [M, K, Nn],
  forward_gops: gops(() => N.qmatmul(a.q, a.e, b.q, b.e, M, K, Nn, { out })),
  grad_left_gops: gops(() => N.gradMatmulLeft(dy, b.e, b.q, M, Nn, K, { transB: true })),
  grad_right_gops: gops(() => N.gradMatmulRight(a.q, a.e, dy, K, M, Nn, { transA: true })),
}));
