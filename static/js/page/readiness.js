// The "Readiness" panel of the page at `/` (see context.js): can this device train, on what,
// and how fast. From the backend selection record (replica.js chooseBackend, the training
// worker's rule: correct first, then measured fastest; docs/KERNELS.md "Backend choice"):
//
// - the backend chosen and its device (GPU adapter, or the JavaScript CPU tier);
// - every backend tried: passed its exact gates (✓), or why it is not used, said apart from a
//   failure: "no WebGPU here" (no adapter) or "this GPU lacks …" (a missing feature) is not a
//   failed gate;
// - on a GPU tier, whether its step chain is used (a whole step in one readback) or why not;
// - the kernel probe of the chosen backend against the reference hash (✓ when equal: only then
//   does this device train);
// - the measured speed: tokens per second of one `tiny` training step (the selection times one
//   step per usable backend); published to the group in the mesh hello (`tokens_per_s`);
// - over plain http (not a secure context), what the browser withholds and how to get it
//   (access.js insecureNotice: the server's https address when it offers one);
// - this device's name: editable, kept in localStorage, sent as the mesh name when the page
//   next connects (a reload; the signaling hello carries it) (?name= in the address overrides it).

import { count, fill, h } from './dom.js';
import { PRESETS } from '../model/config.js';
import { REFERENCE_PROBE_HASH } from '../gpu/probe.js';
import { insecureNotice } from './access.js';

export const NAME_KEY = 'daisychain.device-name';
export const MAX_NAME = 40; // the signaling hello keeps at most 40 characters

/** This device's name: ?name= first, else the remembered one, else ''. */
export function deviceName(params = new URLSearchParams(location.search)) {
  const given = params.get('name');
  if (given !== null) return given.slice(0, MAX_NAME);
  try {
    return (localStorage.getItem(NAME_KEY) ?? '').slice(0, MAX_NAME);
  } catch {
    return ''; // storage refused (private mode, a sandboxed frame)
  }
}

/** The chosen backend's row of the selection record, or null. */
function chosenRow(selection) {
  return selection?.rows?.find((r) => r.name === selection.backend) ?? null;
}

/**
 * Tokens per second of one `tiny` training step on the chosen backend, measured by the
 * selection (rounded), or null when it was not timed (a forced backend is not measured).
 */
export function measuredSpeed(selection) {
  const row = chosenRow(selection);
  if (row === null || !(row.step_ms > 0) || row.step_complete === false) return null;
  const { batch, seqLen } = PRESETS.tiny;
  return Math.round((batch * seqLen * 1000) / row.step_ms);
}

const short = (text, n = 140) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/** One line per backend tried, [mark, text, full reason or '']; the backends that could not
 * be tried for want of WebGPU share one line (which says why: not a secure context, or no
 * WebGPU in this browser). */
export function backendLines(selection, secureContext = true) {
  const rows = selection?.rows ?? [];
  const noGpu = rows.filter((r) => !r.gates_passed && r.adapter === 'none');
  const lines = rows.filter((r) => !noGpu.includes(r)).map((r) => {
    if (r.gates_passed) {
      const chosen = r.name === selection.backend ? ' (chosen)' : '';
      // The CPU row names the WebAssembly SIMD GEMM when it computes its integer products.
      // With a pool of workers sharing them (numerics/wasmpool.js), on how many threads.
      const threads = selection.wasm?.threads ?? 1;
      const via = /WebAssembly/.test(r.adapter ?? '')
        ? `, integer products in WebAssembly SIMD${threads > 1 ? ` on ${threads} threads` : ''}`
        : '';
      // The chosen backend's quantization and cross-entropy run in the WebAssembly SIMD
      // elementwise kernel.
      const quant = chosen && selection.elementwise?.enabled
        ? ', quantization and cross-entropy in WebAssembly SIMD' : '';
      return ['✓', `${r.name}: passed its exact gates${chosen}${via}${quant}`, ''];
    }
    const why = r.failure ?? 'unknown';
    if (/language feature .* is missing/.test(why)) {
      return ['–', `${r.name}: not available, this GPU lacks the feature it needs`, why];
    }
    return ['✗', `${r.name}: failed its gates, ${short(why)}`, why];
  });
  const wasm = selection?.wasm;
  if (wasm && wasm.name !== null && !wasm.enabled) { // tried, refused: the JS GEMM computes
    lines.push(['–', `WebAssembly SIMD GEMM: not used, ${short(wasm.reason)}`, wasm.reason]);
  }
  const elt = selection?.elementwise;
  if (elt && elt.name !== null && !elt.enabled) { // tried, refused: the JS quantizers compute
    lines.push(['–', `WebAssembly SIMD elementwise kernel: not used, ${short(elt.reason)}`,
      elt.reason]);
  }
  const chain = selection?.onGpu ? selection.chain : null;
  if (chain) { // a GPU tier's chains (docs/KERNELS.md "On the page"): used, or why not
    lines.push(chain.used
      ? ['✓', 'step chain: every training step in one submit and one readback', chain.reason]
      : ['–', `step chain: not used, ${short(chain.reason)}`, chain.reason]);
  }
  if (noGpu.length > 0) {
    const why = secureContext ? 'no WebGPU on this browser' : 'browsers offer WebGPU only over https';
    lines.unshift(['–', `${noGpu.map((r) => r.name).join(', ')}: not available, ${why}`,
      noGpu[0].failure ?? '']);
  }
  return lines;
}

function saveName(value) {
  try {
    localStorage.setItem(NAME_KEY, value);
    return true;
  } catch {
    return false;
  }
}

/** The notice of a page that is not a secure context: what it lacks and how to get it. */
function renderInsecure(box, notice) {
  fill(box,
    h('p', {}, h('strong', { text: 'Plain http: ' }),
      `this page trains, but without ${notice.lacks.join(', ')}.`),
    h('p', {}, notice.how, notice.url === null ? null : ' ',
      notice.url === null ? null : h('a', { href: notice.url, class: 'https-link', text: notice.url })),
    notice.check ? h('p', { class: 'note', text: notice.check }) : null);
}

export function mount(root, page) {
  const progress = h('p', { class: 'progress', text: 'Checking this device…' });
  const facts = h('dl', { class: 'facts', hidden: true });
  const nameInput = h('input', { type: 'text', id: 'device-name', maxlength: MAX_NAME,
    autocomplete: 'off', placeholder: 'unnamed device', value: page.name });
  const nameNote = h('p', { class: 'note', role: 'status' });
  const overridden = new URLSearchParams(location.search).has('name');
  root.append(h('h2', { text: 'Readiness' }), progress, facts,
    h('div', { class: 'name-row' }, h('label', { for: 'device-name', text: 'Device name' }), nameInput),
    nameNote,
    h('p', { class: 'note' }, h('a', { href: '/selftest', text: 'Run the full self-test' }),
      ' for every backend’s checks in detail.'));
  if (overridden) nameNote.textContent = 'Set by ?name= in the address for this visit.';
  if (globalThis.isSecureContext === false) {
    const notice = h('div', { class: 'insecure', role: 'note' });
    progress.before(notice);
    page.access.then((access) => renderInsecure(notice, insecureNotice(access, location, false)));
  }

  nameInput.addEventListener('change', () => {
    const value = nameInput.value.trim().slice(0, MAX_NAME);
    nameInput.value = value;
    const kept = saveName(value);
    nameNote.textContent = `${kept ? 'Remembered on this device' : 'Not remembered (this browser refuses storage)'}; ` +
      (overridden ? 'this visit keeps the name given by ?name= in the address.'
        : 'the group sees it when this page next connects (reload it to rename it now).');
  });

  page.addEventListener('progress', (e) => {
    progress.textContent = `Checking this device: ${e.detail.message}…`;
  });

  page.addEventListener('ready', () => {
    const s = page.selection;
    const row = chosenRow(s);
    const onGpu = s.onGpu;
    const speed = measuredSpeed(s);
    const probeOk = row?.probe_hash === REFERENCE_PROBE_HASH;
    const forced = (new URLSearchParams(location.search).get('backend') ?? 'auto') !== 'auto';
    const lines = backendLines(s, globalThis.isSecureContext !== false).map(([mark, text, full]) =>
      h('li', { title: full || null }, h('span', { class: `mark ${mark === '✓' ? 'ok' : mark === '✗' ? 'bad' : ''}`,
        'aria-hidden': 'true', text: mark }), ` ${text}`));
    facts.replaceChildren(
      h('dt', { text: 'Computes on' }),
      h('dd', { class: 'backend' }, h('strong', { text: s.backend }),
        onGpu ? ` (GPU: ${s.adapter})` : ' (JavaScript on the CPU)', forced ? ', as the address asks' : ''),
      h('dt', { text: 'Checks' }), h('dd', {}, h('ul', { class: 'checks' }, lines)),
      h('dt', { text: 'Probe' }),
      h('dd', { class: probeOk ? 'ok' : 'bad' }, probeOk
        ? `✓ matches the reference (${REFERENCE_PROBE_HASH.slice(0, 12)}…)`
        : `✗ ${row?.probe_hash ? `${row.probe_hash.slice(0, 12)}…` : 'none'} differs from the reference`),
      h('dt', { text: 'Speed' }),
      h('dd', { text: speed !== null
        ? `${count(speed)} tokens/s (one tiny step in ${row.step_ms.toFixed(0)} ms)`
        : 'not measured (a backend named in the address is not timed)' }));
    facts.hidden = false;
    progress.textContent = probeOk ? 'Ready to train.' : 'This device cannot train: its probe differs.';
    progress.className = `progress ${probeOk ? 'ok' : 'bad'}`;
  });

  page.addEventListener('error', (e) => {
    if (page.selection === null && e.detail.source === 'start') {
      progress.textContent = 'This device could not get ready: see Problems.';
      progress.className = 'progress bad';
    }
  });
}
