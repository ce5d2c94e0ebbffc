// "Download inference kit": one self-contained HTML file that generates from the current weights
// with no server and no network, opened straight from disk (file://). It holds
//   - the weights (every parameter, float32 little-endian, parameter order) in base64,
//   - the tokenizer file's bytes in base64,
//   - a JSON block: model config, tensor names and shapes, SHA-256 of both byte blocks,
//   - the program: kit/runtime.js with the model forward, tokenizer and sampler it imports,
//     joined into one inline module script (kit/bundle.js),
// and a Content-Security-Policy that allows exactly that script and style by hash and nothing
// else (default-src 'none': the file cannot fetch, connect or load anything even if asked).
//
// buildKit runs in the page (module sources fetched from the page's own origin) or under Node
// (pass `read`); the bytes of a kit depend only on its inputs. The form does not use the
// browser's own constraint checks (novalidate): the settings go through generate.js's checks,
// so the kit refuses exactly what `daisychain generate` refuses, with the same words.

import { bundle } from './bundle.js';
import { CONTRACT_VERSION } from '../numerics/index.js';
// Raw 32-byte digests for the CSP hashes and the byte blocks' records: Web Crypto in a secure
// context, the project's own SHA-256 otherwise (numerics/hash.js), the same bytes either way.
import { sha256Bytes as sha256 } from '../numerics/hash.js';
import { paramShapes, numel } from '../model/params.js';
import { KIT_FORMAT, KIT_FORMAT_VERSION } from './runtime.js';

const JS_ROOT = new URL('../', import.meta.url);
const ENTRY = new URL('./runtime.js', import.meta.url);

const STYLE = `
body { font: 16px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 1rem; max-width: 46rem; color: #1d1d1f;
  background: #fafaf7; }
main { display: grid; gap: 0.75rem; }
h1 { font-size: 1.3rem; margin: 0; }
#about { margin: 0; color: #4a4a4f; overflow-wrap: anywhere; }
form { display: grid; gap: 0.6rem 0.75rem; grid-template-columns: repeat(auto-fit, minmax(9rem, 1fr)); }
label { display: grid; gap: 0.2rem; grid-template-rows: 1fr auto; align-items: end; font-size: 0.9rem;
  font-weight: 600; }
label.wide { grid-column: 1 / -1; }
textarea, input, button { font: inherit; font-weight: 400; padding: 0.4rem 0.5rem; box-sizing: border-box;
  width: 100%; border: 1px solid #b9b9c0; border-radius: 0.4rem; background: #fff; }
textarea { min-height: 5rem; resize: vertical; }
button { cursor: pointer; background: #f6f6f7; border-color: #8a8a92; }
button:disabled { cursor: default; opacity: 0.55; }
#generate { background: #2d5a27; border-color: #2d5a27; color: #fff; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f1f1e8; padding: 0.7rem 0.8rem; margin: 0;
  border-radius: 0.4rem; font: 0.95rem/1.5 ui-monospace, monospace; }
#output:empty { display: none; }
#status { min-height: 1.45em; margin: 0; overflow-wrap: anywhere; }
`;

function toBase64(bytes) {
  let out = '';
  const CHUNK = 0x8000; // String.fromCharCode takes the chunk as arguments
  for (let i = 0; i < bytes.length; i += CHUNK) {
    out += String.fromCharCode.apply(null, bytes.subarray(i, i + CHUNK));
  }
  return btoa(out);
}

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
const cspHash = async (text) => `'sha256-${toBase64(await sha256(new TextEncoder().encode(text)))}'`;
const escapeHtml = (s) => s.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

/** Map name -> Float32Array, or the training worker's {names, arrays}: as a Map. */
function asMap(params) {
  if (params instanceof Map) return params;
  return new Map(params.names.map((n, i) => [n, params.arrays[i]]));
}

async function defaultRead(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not read ${url} for the kit: HTTP ${response.status}`);
  return response.text();
}

/**
 * The kit as an HTML string. `model`: the model config (model/config.js); `params`: Map or
 * {names, arrays}; `tokenizerBytes`: the bytes of the tokenizer.json the weights were trained
 * with; `info`: {step, weight_hash} shown in the kit; `read(url)`: module source reader.
 */
export async function buildKit({ model, params, tokenizerBytes, info = {}, read = defaultRead }) {
  const map = asMap(params);
  const shapes = [...paramShapes(model)];
  let total = 0;
  for (const [name, shape] of shapes) {
    const a = map.get(name);
    if (!(a instanceof Float32Array) || a.length !== numel(shape)) {
      throw new TypeError(`parameter ${name}: expected a Float32Array of shape [${shape}]`);
    }
    total += a.length;
  }
  const weights = new Uint8Array(total * 4);
  let offset = 0;
  for (const [name] of shapes) {
    const a = map.get(name); // little-endian: every platform that runs the page
    weights.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), offset);
    offset += a.byteLength;
  }
  const tokBytes = tokenizerBytes instanceof Uint8Array ? tokenizerBytes : new Uint8Array(tokenizerBytes);
  const meta = {
    format: KIT_FORMAT,
    format_version: KIT_FORMAT_VERSION,
    contract_version: CONTRACT_VERSION,
    model: {
      vocab_size: model.vocabSize, width: model.width, layers: model.layers, heads: model.heads,
      seq_len: model.seqLen, batch: model.batch, mlp_mult: model.mlpMult,
      norm_eps_bits: new Uint32Array(Float32Array.of(model.normEps).buffer)[0],
    },
    tensors: shapes,
    weights_bytes: weights.length,
    weights_sha256: hex(await sha256(weights)),
    tokenizer_sha256: hex(await sha256(tokBytes)),
    info: { step: info.step ?? null, weight_hash: info.weight_hash ?? null },
  };
  const script = await bundle(ENTRY.href, JS_ROOT.href, read);
  const csp = [
    "default-src 'none'",
    `script-src ${await cspHash(script)}`,
    `style-src ${await cspHash(STYLE)}`,
    'img-src data:',
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
  const metaJson = JSON.stringify(meta).replace(/</g, '\\u003c');
  const title = `DaisyChain inference kit${info.step != null ? ` (step ${info.step})` : ''}`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body data-state="loading">
<main>
<h1>${escapeHtml(title)}</h1>
<p id="about">Works offline: the weights and the code are inside this file.</p>
<form id="form" novalidate>
<label class="wide">Prompt <textarea id="prompt" rows="4" placeholder="Empty: start a new document"></textarea></label>
<label>Temperature (0 = greedy) <input id="temperature" type="number" inputmode="decimal" min="0" max="100" step="0.05" value="0.8"></label>
<label>Top-k (empty = all) <input id="top-k" type="number" inputmode="numeric" min="1" step="1" value="40"></label>
<label>Seed <input id="seed" type="number" inputmode="numeric" min="0" max="4294967295" step="1" value="1"></label>
<label>Max tokens <input id="max-tokens" type="number" inputmode="numeric" min="1" max="1024" step="1" value="100"></label>
<button id="generate" type="submit" disabled>Generate</button>
<button id="stop" type="button" disabled>Stop</button>
</form>
<p id="status" role="status" aria-live="polite"></p>
<pre id="output" aria-label="Generated text"></pre>
<details><summary>Token ids</summary><pre id="ids"></pre></details>
</main>
<script type="application/json" id="kit-meta">${metaJson}</script>
<script type="application/octet-stream" id="kit-weights">${toBase64(weights)}</script>
<script type="application/octet-stream" id="kit-tokenizer">${toBase64(tokBytes)}</script>
<script type="module">${script}</script>
</body>
</html>
`;
}

/** A file name for the kit: daisychain-kit-step<N>-<hash prefix>.html. */
export function kitFileName(info = {}) {
  const step = info.step != null ? `-step${info.step}` : '';
  const hash = info.weight_hash ? `-${String(info.weight_hash).slice(0, 8)}` : '';
  return `daisychain-kit${step}${hash}.html`;
}

/** Offer `html` as a download (page only): a Blob URL on a temporary link, revoked after. */
export function downloadKit(html, name = kitFileName()) {
  const url = URL.createObjectURL(new Blob([html], { type: 'text/html;charset=utf-8' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
