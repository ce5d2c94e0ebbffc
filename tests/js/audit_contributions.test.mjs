// Contributions recomputed bit for bit by the page's CPU tier (docs/TRUST.md, "What an auditor
// recomputes, and its cost"): tests/vectors/audit/contributions.json, written by the Python peer's
// numpy reference (tests/audit_vectors.py), against p2p/modelreplica.js's `compute` on a real
// Trainer (tests/js/local_worker.mjs), with the WebAssembly SIMD kernels the CPU tier gates and
// with the plain JavaScript GEMM and quantizers, early chunks on and off; and planted bugs seen
// to fail, each in the part it breaks: a piece mean summed in another order, positions one row
// late, a row's window one token late, a lane's offsets wrong, the data digest over int64 ids,
// the last piece's rows dropped. The checks are tests/js/contribution_checks.mjs, which Chromium
// runs too (tests/browser/test_browser_audit.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { REPO } from './helpers.mjs';
import { LocalWorker } from './local_worker.mjs';
import { parseRequest } from '../../static/js/train/messages.js';
import { contributionMismatches } from './contribution_checks.mjs';
import { WorkerReplica, tokenRows } from '../../static/js/p2p/modelreplica.js';
import { modelConfig } from '../../static/js/model/config.js';
import { adamwConfig } from '../../static/js/model/optim.js';
import { sampleBatch, sampleOffsets } from '../../static/js/model/batches.js';
import { chunkDigest, dataDigest } from '../../static/js/p2p/statements.js';
import { disableWasmGemm, wasmGemmStatus } from '../../static/js/numerics/wasmgate.js';
import { disableWasmElementwise, wasmElementwiseStatus } from '../../static/js/numerics/wasmeltgate.js';

const VECTORS = JSON.parse(fs.readFileSync(
  path.join(REPO, 'tests', 'vectors', 'audit', 'contributions.json'), 'utf-8'));
const MODULES = { WorkerReplica, tokenRows, modelConfig, adamwConfig, sampleBatch, sampleOffsets,
  chunkDigest, dataDigest };
const makeWorker = () => new LocalWorker();

/**
 * A worker that keeps the plain JavaScript GEMM and quantizers: its init carries the trainer's
 * `wasm: false` (no message field: a page always gates the WebAssembly kernels), after the
 * request's validation.
 */
class PlainWorker extends LocalWorker {
  async init(options) {
    const req = parseRequest({ id: ++this.id, type: 'init', ...options });
    return (await this.trainer.handle({ ...req, wasm: false })).result;
  }
}

test('the vectors hold what the checks rely on', () => {
  const shares = VECTORS.cases.map((c) => c.shares[c.rank]);
  assert.ok(shares.includes(0) && shares.includes(1));
  assert.ok(VECTORS.cases.some((c) => c.pieces.length >= 3), 'a share of three pieces');
  assert.deepEqual(VECTORS.states.map((s) => s.steps), [0, 2]);
});

test('the CPU tier with its WebAssembly kernels gives the vectors, early chunks on and off', async () => {
  for (const early of [true, false]) {
    assert.deepEqual(await contributionMismatches(VECTORS, MODULES, { makeWorker, early }), [],
      `early ${early}`);
  }
  // the kernels the init gated really computed it (a skipped gate would test the JS GEMM twice)
  assert.equal(wasmGemmStatus().enabled, true, wasmGemmStatus().reason);
  assert.equal(wasmElementwiseStatus().enabled, true, wasmElementwiseStatus().reason);
});

test('the CPU tier with the plain JavaScript GEMM and quantizers gives the vectors', async () => {
  disableWasmGemm();
  disableWasmElementwise();
  try {
    assert.deepEqual(await contributionMismatches(VECTORS, MODULES,
      { makeWorker: () => new PlainWorker() }), []);
    assert.equal(wasmGemmStatus().enabled, false);
    assert.equal(wasmElementwiseStatus().enabled, false);
  } finally {
    disableWasmGemm();
    disableWasmElementwise();
  }
});

// -- planted bugs

// encodeURIComponent leaves ' alone, and these URLs sit inside quoted import specifiers
const dataUrl = (source) => `data:text/javascript,${encodeURIComponent(source).replace(/'/g, '%27')}`;

/**
 * The source of static/js/`relative` with each [from, to] applied (each `from` must occur once),
 * then its relative imports made absolute, as a data: URL.
 */
function plantedUrl(relative, replacements) {
  const file = path.join(REPO, 'static', 'js', relative);
  let source = fs.readFileSync(file, 'utf-8');
  for (const [from, to] of replacements) {
    assert.equal(source.split(from).length, 2, `'${from}' must occur once in ${relative}`);
    source = source.replace(from, to);
  }
  return dataUrl(source.replace(/from '(\.{1,2}\/[^']+)'/g,
    (_, rel) => `from '${pathToFileURL(path.resolve(path.dirname(file), rel)).href}'`));
}

/** The modules with a planted copy of `relative` (and of modelreplica.js, which imports it). */
async function plantedModules(relative, replacements) {
  const url = plantedUrl(relative, replacements);
  const mod = await import(url);
  if (relative === 'p2p/modelreplica.js') {
    return { ...MODULES, WorkerReplica: mod.WorkerReplica, tokenRows: mod.tokenRows };
  }
  if (relative === 'p2p/statements.js') return { ...MODULES, dataDigest: mod.dataDigest };
  assert.equal(relative, 'model/batches.js');
  const replica = await import(plantedUrl('p2p/modelreplica.js',
    [["from '../model/batches.js'", `from '${url}'`]]));
  return { ...MODULES, WorkerReplica: replica.WorkerReplica, sampleBatch: mod.sampleBatch,
    sampleOffsets: mod.sampleOffsets };
}

test('planted: unchanged copies pass (the loading route is sound)', async () => {
  for (const [relative, same] of [['p2p/modelreplica.js', 'export class WorkerReplica'],
    ['model/batches.js', 'export function sampleOffsets']]) {
    const m = await plantedModules(relative, [[same, same]]);
    assert.deepEqual(await contributionMismatches(VECTORS, m, { makeWorker }), [], relative);
  }
});

for (const [what, relative, replacements, where] of [
  ['a piece mean summed in another order', 'p2p/modelreplica.js',
    [['of rowsOf.entries()', 'of [...rowsOf].reverse().entries()']], ': mean'],
  ['a row off by one position (positions one row late)', 'p2p/modelreplica.js',
    [['pieces(offsets(shares)[rank], shares[rank]', 'pieces(offsets(shares)[rank] + 1, shares[rank]']],
    ': pieces'],
  ["a row's window one token late", 'model/batches.js',
    [['x[b * seqLen + t] = tokens[o + t];', 'x[b * seqLen + t] = tokens[o + t + 1];']], ': data'],
  ["a lane's offsets wrong", 'model/batches.js',
    [['below(key(seed, BATCH_STREAM, step, rank)', 'below(key(seed, BATCH_STREAM, step, rank && rank + 1)']],
    'offsets of lane 1'],
  ['the data digest over int64 ids', 'p2p/statements.js',
    [['new Uint8Array(rows.length * width * 4)', 'new Uint8Array(rows.length * width * 8)'],
      ['view.setInt32(4 * (r * width + i), v, true)', 'view.setBigInt64(8 * (r * width + i), BigInt(v), true)']],
    ': data'],
  ["the last piece's rows dropped", 'p2p/modelreplica.js',
    [['for (const { x, y, rows } of pieces) {', 'for (const { x, y, rows } of pieces.slice(0, -1)) {']],
    ': data'],
]) {
  test(`planted bug fails the vectors: ${what}`, async () => {
    const bad = await contributionMismatches(VECTORS, await plantedModules(relative, replacements),
      { makeWorker });
    assert.ok(bad.some((m) => m.includes(where)), JSON.stringify(bad));
  });
}
