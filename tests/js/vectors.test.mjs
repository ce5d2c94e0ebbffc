// Every golden vector in tests/vectors/manifest.json, reproduced bit for bit by the JS mirror.
//
// The manifest (written by `python tests/vectorgen --write`, server/daisychain/vectors/contract.py) lists
// cases of named kinds with inputs and expected outputs: arrays as little-endian blobs with
// dtype, shape and SHA-256, small integers inline as {"value": ...}. Each kind maps below onto
// the mirror's API; a kind with no mapping fails the suite (a vector the mirror does not check
// is a gap, not a pass) unless it is listed in PENDING with the reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import * as N from '../../static/js/numerics/index.js';
import { REPO, assertBitsEqual } from './helpers.mjs';

const DIR = path.join(REPO, 'tests', 'vectors');
const MANIFEST = path.join(DIR, 'manifest.json');
// kind -> why the JS mirror does not check it yet (keep empty unless a kind is truly pending).
const PENDING = new Map();
// kind -> the test file that checks it (whole training runs: async, too long for this loop).
const CHECKED_ELSEWHERE = new Map([['train_run', 'tests/js/train_run.test.mjs']]);

const TYPES = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int8: Int8Array };

function load(field, what) {
  if ('value' in field) return field.value;
  const raw = fs.readFileSync(path.join(DIR, field.blob));
  assert.equal(raw.length, field.bytes, `${what}: blob size`);
  assert.equal(createHash('sha256').update(raw).digest('hex'), field.sha256, `${what}: blob hash`);
  const Type = TYPES[field.dtype];
  assert.ok(Type, `${what}: unknown dtype ${field.dtype}`);
  const copy = new Uint8Array(raw); // aligned copy
  const array = new Type(copy.buffer, 0, raw.length / Type.BYTES_PER_ELEMENT);
  const count = field.shape.reduce((a, b) => a * b, 1);
  assert.equal(array.length, count, `${what}: shape ${field.shape}`);
  return Object.assign(array, { shape: field.shape });
}

// Quantized values arrive as float32 holding integers; the mirror takes int8 (Int8Array), or
// Int16Array when an operand uses +128, which the reference's GEMM also accepts (|x| <= 128).
function int8(q, what) {
  let wide = false;
  for (let i = 0; i < q.length; i++) {
    assert.ok(Number.isInteger(q[i]) && q[i] >= -128 && q[i] <= 128, `${what}[${i}] = ${q[i]}`);
    if (q[i] === 128) wide = true;
  }
  return wide ? Int16Array.from(q) : Int8Array.from(q);
}
const asF32 = (q) => Float32Array.from(q); // int8 -> float32 (+0 for zero, as the reference)

// (outer, length, inner) around `axis` of `shape`.
function around(shape, axis) {
  const a = axis < 0 ? axis + shape.length : axis;
  const prod = (s) => s.reduce((x, y) => x * y, 1);
  return [prod(shape.slice(0, a)), shape[a], prod(shape.slice(a + 1))];
}

// A matrix operand (..., R, C): [batch, R, C].
function mat(x) {
  const s = x.shape;
  return [s.slice(0, -2).reduce((a, b) => a * b, 1), s[s.length - 2], s[s.length - 1]];
}

function quantizeAlong(x, axis, twoLimbs) {
  const [outer, len, inner] = around(x.shape, axis);
  if (inner === 1) return twoLimbs ? N.quantize2Rows(x, outer, len) : N.quantizeRows(x, outer, len);
  const quantize = twoLimbs ? N.quantize2Cols : N.quantizeCols;
  return quantize(x, len, inner, {}, outer);
}

function quantize3Along(x, axis) {
  const [outer, len, inner] = around(x.shape, axis);
  if (inner === 1) return N.quantize3Rows(x, outer, len);
  return N.quantize3Cols(x, len, inner, outer);
}

const KINDS = {
  quantize({ x }, { axis }) {
    const { q, e } = quantizeAlong(x, axis, false);
    return { q: asF32(q), e };
  },
  quantize2({ x }, { axis }) {
    const { hi, lo, e } = quantizeAlong(x, axis, true);
    return { hi: asF32(hi), lo: asF32(lo), e };
  },
  quantize3({ x }, { axis }) {
    const { hi, mid, lo, e } = quantize3Along(x, axis);
    return { hi: asF32(hi), mid: asF32(mid), lo: asF32(lo), e };
  },
  qmatmul({ a_q, a_e, b_q, b_e }) {
    const [batch, M, K] = mat(a_q);
    const N_ = b_q.shape.at(-1);
    return { y: N.qmatmul(int8(a_q, 'a_q'), a_e, int8(b_q, 'b_q'), b_e, M, K, N_, { batch }) };
  },
  qmatmul_grad_left({ g_hi, g_lo, g_e, b_q }) {
    const [batch, M, K] = mat(g_hi);
    const N_ = b_q.shape.at(-1);
    const y = N.qmatmulGradLeft(int8(g_hi, 'g_hi'), int8(g_lo, 'g_lo'), g_e, int8(b_q, 'b_q'),
      M, K, N_, { batch });
    return { y };
  },
  qmatmul_grad_right({ a_q, g_hi, g_lo, g_e }) {
    const [batch, M, K] = mat(a_q);
    const N_ = g_hi.shape.at(-1);
    const y = N.qmatmulGradRight(int8(a_q, 'a_q'), int8(g_hi, 'g_hi'), int8(g_lo, 'g_lo'), g_e,
      M, K, N_, { batch });
    return { y };
  },
  grad_matmul_left({ g, fold_e, b_q }) {
    const [batch, M, K] = mat(g);
    const limbs = {};
    const opts = { batch, limbs };
    const y = N.gradMatmulLeft(g, fold_e, int8(b_q, 'b_q'), M, K, b_q.shape.at(-1), opts);
    return { hi: asF32(limbs.hi), lo: asF32(limbs.lo), e: limbs.e, y };
  },
  grad_matmul_right({ a_q, fold_e, g }) {
    const [batch, M, K] = mat(a_q);
    const limbs = {};
    const opts = { batch, limbs };
    const y = N.gradMatmulRight(int8(a_q, 'a_q'), fold_e, g, M, K, g.shape.at(-1), opts);
    return { hi: asF32(limbs.hi), lo: asF32(limbs.lo), e: limbs.e, y };
  },
  grad_matmul3_left({ g, fold_e, b_q }) {
    const [batch, M, K] = mat(g);
    const limbs = {};
    const opts = { batch, limbs, limbCount: 3 };
    const y = N.gradMatmulLeft(g, fold_e, int8(b_q, 'b_q'), M, K, b_q.shape.at(-1), opts);
    return { hi: asF32(limbs.hi), mid: asF32(limbs.mid), lo: asF32(limbs.lo), e: limbs.e, y };
  },
  grad_matmul3_right({ a_q, fold_e, g }) {
    const [batch, M, K] = mat(a_q);
    const limbs = {};
    const opts = { batch, limbs, limbCount: 3 };
    const y = N.gradMatmulRight(int8(a_q, 'a_q'), fold_e, g, M, K, g.shape.at(-1), opts);
    return { hi: asF32(limbs.hi), mid: asF32(limbs.mid), lo: asF32(limbs.lo), e: limbs.e, y };
  },
  exp: ({ x }) => ({ y: N.expArray(x) }),
  log: ({ x }) => ({ y: N.logArray(x) }),
  tree_sum({ x }, { axis }) {
    const [outer, len, inner] = around(x.shape, axis);
    if (inner === 1) return { y: N.treeSumLast(x, outer, len) };
    const y = new Float32Array(outer * inner);
    for (let t = 0; t < outer; t++) {
      const block = x.subarray(t * len * inner, (t + 1) * len * inner);
      N.treeSumRows(block, len, inner, y.subarray(t * inner, (t + 1) * inner));
    }
    return { y };
  },
  prng_key: ({ seed, ids }) => ({ key: N.key(seed, ...ids) }),
  prng_stream: ({ key, n, start }) => ({
    bits: N.bits(key, n, start),
    uniform: N.uniform(key, n, start),
  }),
};

const manifest = fs.existsSync(MANIFEST) ? JSON.parse(fs.readFileSync(MANIFEST, 'utf-8')) : null;

test('the golden vector manifest exists and speaks this contract version', () => {
  assert.ok(manifest, `${MANIFEST} is missing: run \`python tests/vectorgen --write\``);
  assert.equal(manifest.format, 'daisychain-vectors');
  assert.equal(manifest.format_version, 1);
  assert.equal(manifest.contract_version, N.CONTRACT_VERSION,
    `vectors are for contract ${manifest.contract_version}, the JS mirror implements ` +
      `${N.CONTRACT_VERSION}`);
  assert.ok(manifest.cases.length > 0);
});

test('every kind in the manifest has a JS check (or is explicitly pending)', () => {
  const kinds = new Set(Object.keys(manifest?.kinds ?? {}));
  for (const c of manifest?.cases ?? []) kinds.add(c.kind);
  const missing = [...kinds].filter((k) => !(k in KINDS) && !PENDING.has(k) && !CHECKED_ELSEWHERE.has(k));
  assert.deepEqual(missing, [], 'golden-vector kinds the JS mirror does not check');
});

for (const c of manifest?.cases ?? []) {
  if (CHECKED_ELSEWHERE.has(c.kind)) continue;
  const check = KINDS[c.kind];
  if (!check) {
    const todo = PENDING.get(c.kind) ?? `no JS check for kind ${c.kind}`;
    test(`vector ${c.name}`, { todo }, () => {});
    continue;
  }
  test(`vector ${c.name}`, () => {
    const inputs = Object.fromEntries(
      Object.entries(c.inputs).map(([k, f]) => [k, load(f, `${c.name} input ${k}`)]));
    const got = check(inputs, c.params ?? {});
    const names = Object.keys(c.outputs).sort();
    assert.deepEqual(Object.keys(got).sort(), names, `${c.name}: output names`);
    for (const [k, f] of Object.entries(c.outputs)) {
      const want = load(f, `${c.name} output ${k}`);
      if (typeof want === 'number') assert.equal(got[k], want, `${c.name}: ${k}`);
      else assertBitsEqual(got[k], want, `${c.name}: ${k}`);
    }
  });
}
