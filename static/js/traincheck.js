// The /train-check page: a golden `train_run` case (tests/vectors, generator
// server/daisychain/vectors.py) trained on this device's selected backend, every int8 product
// on the GPU when one passed its gates (accumulators from the GPU, limbs and dequantization on
// the CPU, every product audited), compared step by step with the Python reference's loss bits
// and state hashes. Result as JSON in <pre id="result">.
//
// Query: ?vectors=<manifest URL> (default /vectors/manifest.json, which the server computes from
// the Python reference on first request: server/daisychain/server/trainvectors.py),
// &case=train_run.tiny, &backend=cpu forces the CPU mirror, &audit=<random cells per product>
// (default 16).

import * as M from './model/index.js';
import { forwardBackwardAsync } from './model/gpt.js';
import { selectBackend, modelOps } from './gpu/backend.js';
import { Auditor } from './gpu/audit.js';
import { probeHash, REFERENCE_PROBE_HASH } from './gpu/probe.js';
import { sha256Hex } from './numerics/hash.js';

const $ = (id) => document.getElementById(id);
const TYPES = { int32: Int32Array, float32: Float32Array };

async function fetchBlob(field, manifestUrl, what) {
  const url = new URL(field.blob, manifestUrl);
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${what}: GET ${url} answered ${response.status}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  if (bytes.length !== field.bytes) throw new Error(`${what}: ${bytes.length} bytes`);
  if ((await sha256Hex(bytes)) !== field.sha256) throw new Error(`${what}: SHA-256 differs`);
  const Type = TYPES[field.dtype];
  if (!Type) throw new Error(`${what}: unexpected dtype ${field.dtype}`);
  return new Type(bytes.buffer);
}

const bitsOf = (x) => new Uint32Array(Float32Array.of(x).buffer)[0];
const hex = (u) => `0x${u.toString(16).padStart(8, '0')}`;

function td(content, cls) {
  const cell = document.createElement('td');
  cell.append(...[content].flat());
  if (cls) cell.className = cls;
  return cell;
}

function code(text, title) {
  const c = document.createElement('code');
  c.textContent = text;
  if (title) c.title = title;
  return c;
}

// One row per step, narrow enough for a phone: the loss to 4 places with its bits below, the
// hash shortened (the full one in its title and in the JSON), and what differs if anything.
function addRow(r) {
  const tr = document.createElement('tr');
  const wrong = [r.loss_ok ? null : 'loss', r.hash_ok ? null : 'hash'].filter(Boolean);
  const bits = Object.assign(code(r.loss_bits), { className: 'small' });
  tr.append(
    td(String(r.step), 'num'),
    td([r.loss.toFixed(4), document.createElement('br'), bits]),
    td(code(`${r.hash.slice(0, 8)}…`, r.hash)),
    td(wrong.length ? `NO: ${wrong.join(', ')}` : 'yes', wrong.length ? 'fail' : 'pass'),
    td(r.ms.toFixed(0), 'num'),
  );
  $('steps').tBodies[0].append(tr);
}

// The verdict box: the status line (aria-live) and, for a failure, what to do about it.
function verdict(text, good, hint) {
  $('status').textContent = text;
  $('verdict').classList.toggle('good', good === true);
  $('verdict').classList.toggle('bad', good === false);
  $('hint').textContent = hint ?? '';
  $('hint').hidden = !hint;
}

function hintFor(message) {
  if (/SHA-256 differs|bytes$|unexpected dtype/.test(message)) {
    return 'The reference vectors arrived damaged or changed; reload the page. If it persists, '
      + 'the server or a proxy alters them.';
  }
  if (/answered \d+|no train_run case|Failed to fetch/.test(message)) {
    return 'The reference vectors could not be loaded from this server; reload the page, and '
      + 'check that the server is a DaisyChain server of the same version as this page.';
  }
  return 'This device cannot run the check as it is; the full result below says where it '
    + 'stopped. Reload to try again, or add ?backend=cpu to use the CPU mirror.';
}

async function main() {
  const params = new URLSearchParams(location.search);
  const manifestUrl = new URL(params.get('vectors') ?? '/vectors/manifest.json', location.href);
  const caseName = params.get('case') ?? 'train_run.tiny';
  const response = await fetch(manifestUrl);
  if (!response.ok) {
    throw new Error(`GET ${manifestUrl} answered ${response.status}; pass ?vectors=<manifest URL>`);
  }
  const c = (await response.json()).cases.find((k) => k.name === caseName);
  if (!c || c.kind !== 'train_run') throw new Error(`no train_run case ${caseName}`);
  const { model, optim, seed, steps } = c.params;
  const cfg = M.modelConfig(model);
  const x = await fetchBlob(c.inputs.x, manifestUrl, 'x');
  const y = await fetchBlob(c.inputs.y, manifestUrl, 'y');
  const loss = await fetchBlob(c.outputs.loss, manifestUrl, 'loss');
  const hashes = c.outputs.hashes.value;

  const forceCpu = params.get('backend') === 'cpu';
  $('status').textContent = 'selecting a backend…';
  const backend = await selectBackend({
    onProgress: (m) => { $('status').textContent = `${m}…`; },
    order: forceCpu ? [] : undefined,
  });
  const auditor = new Auditor({ samples: Number(params.get('audit') ?? 16) });
  const ops = modelOps(backend, { audit: (p, acc) => auditor.check(p, acc) });
  $('backend').textContent = `backend: ${backend.selected} on ${backend.adapter}`;
  $('demotions').replaceChildren(...backend.demotions.map((d) => {
    const li = document.createElement('li');
    li.textContent = `demoted ${d.name}: ${d.reason}`;
    return li;
  }));

  const products = () => (backend.onGpu ? backend.gemm.products : 0);
  let trainProducts = 0;
  const state = M.init(cfg, optim, seed);
  const bt = cfg.batch * cfg.seqLen;
  const rows = [];
  for (let s = 0; s < steps; s++) {
    $('status').textContent = `step ${s + 1} of ${steps}…`;
    const t0 = performance.now();
    const p0 = products();
    const xs = x.subarray(s * bt, (s + 1) * bt);
    const ys = y.subarray(s * bt, (s + 1) * bt);
    const { loss: l, grads } = await forwardBackwardAsync(state.params, cfg, xs, ys,
      { batch: cfg.batch, workspace: state.workspace, ops });
    trainProducts += products() - p0;
    const stats = M.applyGrads(state, grads);
    const hash = await M.stateHash(state);
    const row = {
      step: stats.step,
      loss: l,
      loss_bits: hex(bitsOf(l)),
      expected_loss_bits: hex(bitsOf(loss[s])),
      hash,
      expected_hash: hashes[s],
      ms: performance.now() - t0,
      // The per-step kernel probe through the live kernel (the same hash on every device).
      probe_hash: await probeHash(backend.gemm),
    };
    row.loss_ok = row.loss_bits === row.expected_loss_bits;
    row.hash_ok = hash === hashes[s] && row.probe_hash === REFERENCE_PROBE_HASH;
    rows.push(row);
    addRow(row);
  }
  const result = {
    case: caseName,
    backend: backend.selected,
    adapter: backend.adapter,
    on_gpu: backend.onGpu,
    demotions: backend.demotions,
    gpu_products: trainProducts,
    audit: { products: auditor.products, cells: auditor.cells },
    steps: rows,
    hashes: rows.map((r) => r.hash),
    all_match: rows.every((r) => r.loss_ok && r.hash_ok),
  };
  $('result').textContent = JSON.stringify(result, null, 2);
  const first = rows.find((r) => !(r.loss_ok && r.hash_ok));
  if (first === undefined) {
    verdict(`✓ all ${steps} steps match the Python reference on ${backend.selected}`, true);
  } else {
    const next = backend.onGpu ? 'Try ?backend=cpu (the CPU mirror), and please report'
      : 'The CPU mirror should match on every device: reload in case the page was cached, then'
        + ' please report';
    verdict(`✗ MISMATCH with the Python reference from step ${first.step} on ${backend.selected}`,
      false, 'This backend does not reproduce the reference bits, so this device must not '
        + `train with it. ${next} the full result below.`);
  }
  document.body.dataset.outcome = result.all_match ? 'match' : 'mismatch';
  document.body.dataset.state = 'done';
}

main().catch((exc) => {
  verdict(`✗ train check failed: ${exc.message}`, false, hintFor(exc.message));
  // An empty step table says nothing: hide it when no step ran.
  if ($('steps').tBodies[0].rows.length === 0) $('steps').closest('.scroll').hidden = true;
  $('result').textContent = JSON.stringify({ error: String(exc.stack ?? exc) }, null, 2);
  document.body.dataset.state = 'error';
  console.error(exc);
});
