// The /selftest page: every backend of this device (WebGPU DP4A, WebGPU LUT, the JS CPU
// mirror) gated, probed and timed, as a table and as JSON in <pre id="result"> (the shape of
// `daisychain selftest --json`, plus `selected`, `choice`, `demotions` and the gate inputs'
// digest). The selection is the training worker's rule (docs/KERNELS.md, "Backend choice"):
// correct first, then the fastest measured on one `tiny` training step.
// Query: ?gops=0 skips the timing (then the first correct backend in preference order).

import { selectBackend } from './gpu/backend.js';
import { casesDigest } from './gpu/gates.js';
import { REFERENCE_PROBE_HASH } from './gpu/probe.js';
import { initParams, preset } from './model/index.js';
import { stepTimer } from './train/timing.js';

export const TIMING_PRESET = 'tiny';

const $ = (id) => document.getElementById(id);

const COLUMNS = ['backend', 'adapter', 'gates', 'failing case', 'probe hash', 'GOP/s',
  'tiny step ms'];

// data-label names the column for the phone layout (selftest.html shows rows as cards there).
function cell(text, className) {
  const td = document.createElement('td');
  td.setAttribute('role', 'cell');
  if (className) td.className = className;
  if (text instanceof Node) td.append(text);
  else td.textContent = text;
  return td;
}

function code(text, title) {
  const c = document.createElement('code');
  c.textContent = text;
  if (title) c.title = title;
  return c;
}

function probe(hash, reference) {
  const span = document.createElement('span');
  span.append(code(`${hash.slice(0, 12)}…`, hash),
    hash === reference ? ' ✓ reference' : ' ✗ not the reference');
  span.className = hash === reference ? 'pass' : 'fail';
  return span;
}

function render(result) {
  const body = $('backends').tBodies[0];
  body.replaceChildren(
    ...result.backends.map((row) => {
      const tr = document.createElement('tr');
      tr.setAttribute('role', 'row');
      tr.dataset.backend = row.name;
      const gates = row.gates_passed ? `passed (${row.cases_passed})` : 'FAILED';
      tr.append(
        cell(code(row.name)),
        cell(row.adapter),
        cell(gates, row.gates_passed ? 'pass' : 'fail'),
        cell(row.failure ?? '—'),
        // Shortened: the full hash is in the title and the JSON; ✓ when it is the reference's.
        cell(row.probe_hash ? probe(row.probe_hash, result.reference_probe_hash) : '—', 'hash'),
        cell(row.gops === null ? '—' : row.gops.toFixed(2), 'num'),
        cell(row.step_ms === null ? '—'
          : `${row.step_complete ? '' : '≥ '}${row.step_ms.toFixed(0)}`, 'num'),
      );
      tr.querySelectorAll('td').forEach((td, i) => { td.dataset.label = COLUMNS[i]; });
      return tr;
    }),
  );
  $('summary').replaceChildren('Selected backend: ', Object.assign(
    document.createElement('strong'), { textContent: result.selected }), ` on ${result.adapter}`);
  $('choice').textContent = `Why: ${result.choice.reason}.`;
  $('demotions').replaceChildren(
    ...result.demotions.map((d) => {
      const li = document.createElement('li');
      li.append('demoted ', code(d.name), `: ${d.reason}`);
      return li;
    }),
  );
  $('result').textContent = JSON.stringify(result, null, 2);
}

async function main() {
  const params = new URLSearchParams(location.search);
  const events = [];
  const timing = params.get('gops') !== '0';
  const cfg = preset(TIMING_PRESET);
  const backend = await selectBackend({
    all: true,
    measure: timing,
    timeStep: timing ? stepTimer(cfg, initParams(cfg, 1)) : null,
    onProgress: (m) => { $('status').textContent = `${m}…`; },
    onEvent: (m) => events.push(m),
  });
  const result = {
    backends: backend.rows,
    selected: backend.selected,
    adapter: backend.adapter,
    choice: backend.choice,
    demotions: backend.demotions,
    reference_probe_hash: REFERENCE_PROBE_HASH,
    gate_cases_digest: await casesDigest(),
    device: backend.device,
    events,
    user_agent: navigator.userAgent,
  };
  render(result);
  $('status').textContent = `✓ done: this device trains on ${result.selected}`;
  $('verdict').classList.add('good');
  document.body.dataset.state = 'done';
}

$('again').addEventListener('click', () => location.reload());

main().catch((exc) => {
  $('status').textContent = `selftest failed: ${exc.message}`;
  $('verdict').classList.add('bad');
  $('hint').textContent = 'Reload to try again. If it fails again, this browser cannot run '
    + 'DaisyChain as it is; the full result below says where it stopped.';
  $('hint').hidden = false;
  $('result').textContent = JSON.stringify({ error: String(exc.stack ?? exc) }, null, 2);
  document.body.dataset.state = 'error';
  console.error(exc);
});
