// Exact gates: a kernel is used only after it reproduces the reference to the bit on this device.
//
// Mirrors server/daisychain/gpu/gates.py case for case: the same names, shapes and inputs, drawn
// from the contract PRNG (seed GATE_SEED, streams (3, ...) and (4, ...)), so every device, the
// Python peer included, runs the very same gate inputs (casesDigest() lets a test prove it).
// Integer cases are compared exactly against a plain triple loop; the float cases of the full
// quantized product against the CPU mirror's qmatmul, by bit pattern (-0 and +0 differ). Every
// case runs on a POISONED buffer pool. The first mismatch is recorded (case, shape, index,
// expected vs got) and the kernel is demoted.

import { below, bits, key, uniform } from '../numerics/prng.js';
import { pow2d } from '../numerics/fmath.js';
import { quantizeCols, quantizeRows } from '../numerics/quant.js';
import { qmatmul } from '../numerics/gemm.js';
import { sha256Arrays } from '../numerics/hash.js';
import { productOps } from './gemm.js';

export const GATE_SEED = 0x6a7e;

/** Full-range int8 values from the contract PRNG (top byte of each word). */
export function randomInt8(purpose, gateCase, n) {
  const words = bits(key(GATE_SEED, 3, purpose, gateCase), n);
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = words[i] >>> 24;
  return out;
}

/** float32 values in (-1, 1) from the contract PRNG: f32(f32(u * 2) - 1). */
export function randomF32(purpose, gateCase, n) {
  const u = uniform(key(GATE_SEED, 4, purpose, gateCase), n);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.fround(u[i] * 2) - 1;
  return out;
}

function pattern(m, k, f) {
  const out = new Int8Array(m * k); // int64 -> int8 wraps, as numpy's astype does
  for (let i = 0; i < m; i++) for (let j = 0; j < k; j++) out[i * k + j] = f(i, j);
  return out;
}

/** Every integer GEMM case: {name, a (M x K), b (K x N), M, K, N}. */
export function gemmCases(tile = [32, 32]) {
  const [tm, tn] = tile;
  const shapes = [
    ['1x1x1', 1, 1, 1],
    ['K=4', 1, 4, 1],
    ['K=5', 1, 5, 1],
    ['2x3x2', 2, 3, 2],
    ['3x1x5', 3, 1, 5],
    ['4x4x4', 4, 4, 4],
    ['5x5x5', 5, 5, 5],
    ['7x8x9', 7, 8, 9],
  ];
  for (const dm of [-1, 0, 1]) {
    for (const dn of [-1, 0, 1]) {
      shapes.push([`tile edge M=${tm + dm} N=${tn + dn}`, tm + dm, 16, tn + dn]);
    }
  }
  shapes.push(['two tiles +-1', 2 * tm + 1, 9, 2 * tn - 1]);
  for (const k of [1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, 4096, 4099, 16385]) {
    shapes.push([`K=${k}`, 5, k, 6]);
  }
  const cases = shapes.map(([name, M, K, N], n) => ({
    name, M, K, N, a: randomInt8(0, n, M * K), b: randomInt8(1, n, K * N),
  }));
  // Boundary values at a shape that crosses a workgroup tile and the 1024 exactness bound.
  const M = tm + 1;
  const K = 1025;
  const N = tn + 3;
  const full = (n, v) => new Int8Array(n).fill(v);
  const at = (name, a, b) => ({ name, M, K, N, a, b });
  cases.push(
    at('all -128', full(M * K, -128), full(K * N, -128)),
    at('all 127', full(M * K, 127), full(K * N, 127)),
    at('-128 x 127', full(M * K, -128), full(K * N, 127)),
    at('alternating signs',
      pattern(M, K, (i, j) => ((i + j) % 2 === 0 ? 127 : -128)),
      pattern(K, N, (i, j) => ((i + j) % 2 === 0 ? -128 : 127))),
    at('zeros', full(M * K, 0), full(K * N, 0)),
    at('random x zeros', randomInt8(2, 0, M * K), full(K * N, 0)),
    at('index pattern',
      pattern(M, K, (i, j) => ((i * 7 + j) % 256) - 128),
      randomInt8(2, 1, K * N)),
  );
  // Long sums of odd products, tiny in M and N: +-4099 * 127 * 127 = +-66112771 is odd and past
  // 2^25, where float32 holds only multiples of 4, so no float32 accumulator returns it, whatever
  // its order; int32 holds it exactly. The boundary values above cannot show one: their partial
  // sums stay below 2^24 or (all -128) are multiples of 2^14, all exact in float32.
  const kb = 4099;
  const long = (name, b) => ({ name, M: 5, K: kb, N: 6, a: full(5 * kb, 127), b: full(kb * 6, b) });
  cases.push(long(`all 127, K=${kb}`, 127), long(`127 x -127, K=${kb}`, -127));
  // Seeded random shapes: K up to ~490, every residue mod 4.
  const dims = below(key(GATE_SEED, 3, 9), 24, 97);
  for (let r = 0; r < 8; r++) {
    const m = dims[3 * r] + 1;
    const k = (dims[3 * r + 1] + 1) * 5 + r;
    const n = dims[3 * r + 2] + 1;
    cases.push({ name: `random ${r}`, M: m, K: k, N: n,
      a: randomInt8(5, r, m * k), b: randomInt8(6, r, k * n) });
  }
  return cases;
}

/** Float cases of the full quantized product: {name, aq, ae, bq, be, M, K, N}. */
export function qmatmulCases() {
  const specs = [
    ['float 33x64x35', 33, 64, 35, 0, 0],
    ['float K=1025 (reference path)', 5, 1025, 7, 0, 0],
    ['float tiny scales (subnormal results)', 6, 40, 5, -62, -62],
    ['float large scales', 4, 24, 9, 40, 40],
  ];
  return specs.map(([name, M, K, N, sa, sb], n) => {
    const a = randomF32(0, n, M * K).map((v) => v * pow2d(sa));
    const b = randomF32(1, n, K * N).map((v) => v * pow2d(sb));
    if (M > 1) a.fill(-0, 0, K); // a zero row: every product is a zero
    for (let k = 0; k < K; k++) b[k * N + N - 1] = 0; // a zero column against negative values
    const qa = quantizeRows(a, M, K);
    const qb = quantizeCols(b, K, N);
    return { name, M, K, N, aq: qa.q, ae: qa.e, bq: qb.q, be: qb.e };
  });
}

/**
 * SHA-256 over every case's name (UTF-8) and operand bytes in order (integer cases: a, b; float
 * cases: aq, ae, bq, be as int8 / int32 little-endian): equal to the Python gates' digest when
 * both run the same inputs.
 */
export function casesDigest(tile = [32, 32]) {
  const enc = new TextEncoder();
  const parts = [];
  for (const c of gemmCases(tile)) parts.push(enc.encode(c.name), c.a, c.b);
  for (const c of qmatmulCases()) parts.push(enc.encode(c.name), c.aq, c.ae, c.bq, c.be);
  return sha256Arrays(parts);
}

function exactProduct(a, b, M, K, N) {
  const out = new Int32Array(M * N);
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      let s = 0; // |s| <= 2^14 * K < 2^31 for the gate shapes: exact
      for (let k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];
      out[i * N + j] = s;
    }
  }
  return out;
}

const hex = (u) => `0x${(u >>> 0).toString(16).padStart(8, '0')}`;

/** The first failing gate case of a kernel. */
export class GateFailure {
  constructor(kernel, gateCase, shape, index, expected, got) {
    Object.assign(this, { kernel, case: gateCase, shape, index, expected, got });
  }

  describe() {
    const where = this.index ? `first mismatch at (${this.index.join(', ')})` : 'error';
    return (
      `${this.kernel} failed gate '${this.case}' shape (${this.shape.join(', ')}): ${where}: ` +
      `expected ${this.expected}, got ${this.got}`
    );
  }
}

function firstMismatch(expected, got, N) {
  for (let i = 0; i < expected.length; i++) {
    if (expected[i] !== got[i]) return [Math.floor(i / N), i % N];
  }
  return null;
}

/**
 * Runs every GEMM gate case through `gemm` (GpuGemm or CpuGemm), each on the poisoned `pool`
 * when one is given; stops at the first failure. Resolves to {kernel, casesPassed, failure}.
 */
export async function runGemmGates(gemm, { pool = null, tile = [32, 32] } = {}) {
  const kernel = gemm.name;
  const run = (fn) => (pool ? pool.poisoned(fn) : fn());
  let passed = 0;
  const fail = (c, index, expected, got) => ({
    kernel,
    casesPassed: passed,
    failure: new GateFailure(kernel, c.name, [c.M, c.K, c.N], index, expected, got),
  });
  for (const c of gemmCases(tile)) {
    const expected = exactProduct(c.a, c.b, c.M, c.K, c.N);
    let got;
    try {
      got = await run(() => gemm.matmulInt(c.a, c.b, c.M, c.K, c.N));
    } catch (exc) {
      return fail(c, null, 'a result', `${exc.name}: ${exc.message}`);
    }
    if (!(got instanceof Int32Array) || got.length !== expected.length) {
      return fail(c, null, `Int32Array(${expected.length})`, `${got?.constructor?.name}`);
    }
    const index = firstMismatch(expected, got, c.N);
    if (index) {
      const at = index[0] * c.N + index[1];
      return fail(c, index, String(expected[at]), String(got[at]));
    }
    passed += 1;
  }
  const ops = productOps(gemm);
  for (const c of qmatmulCases()) {
    const expected = qmatmul(c.aq, c.ae, c.bq, c.be, c.M, c.K, c.N);
    let got;
    try {
      got = await run(() => ops.qmatmul(c.aq, c.ae, c.bq, c.be, c.M, c.K, c.N));
    } catch (exc) {
      return fail(c, null, 'a result', `${exc.name}: ${exc.message}`);
    }
    const eb = new Uint32Array(expected.buffer);
    const gb = new Uint32Array(got.buffer, got.byteOffset, got.length);
    const index = firstMismatch(eb, gb, c.N);
    if (index) {
      const at = index[0] * c.N + index[1];
      return fail(c, index, hex(eb[at]), hex(gb[at]));
    }
    passed += 1;
  }
  return { kernel, casesPassed: passed, failure: null };
}
