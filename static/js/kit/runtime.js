// The inference kit's program (the entry the kit builder joins into the kit's one inline module
// script; it never runs on the DaisyChain page itself). It reads the weights and the tokenizer
// from the kit's own data blocks, checks them against the recorded SHA-256s, and generates with
// model/generate.js: the same ids as `daisychain generate` for the same weights and settings.
//
// The page's states, on <body data-state>: loading -> ready -> generating -> ready | error.
// `#ids` holds the last result as JSON ({prompt_ids, ids, stop}) for people and tests.

import { CONTRACT_VERSION } from '../numerics/index.js';
import { sha256Hex } from '../numerics/hash.js';
import { modelConfig } from '../model/config.js';
import { numel } from '../model/params.js';
import { Tokenizer } from '../tokenizer.js';
import { settings, generateAsync, GenerateError } from '../model/generate.js';

export const KIT_FORMAT = 'daisychain-kit';
export const KIT_FORMAT_VERSION = 1;

const $ = (id) => document.getElementById(id);

function setState(state, message = '') {
  document.body.dataset.state = state;
  $('status').textContent = message;
}

export function fromBase64(text) {
  const raw = atob(text.trim());
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

/** The kit's data: {cfg, params (Map), tokenizer, meta}; throws with what is wrong. */
export async function loadKitData(meta, weights, tokenizerBytes) {
  if (meta.format !== KIT_FORMAT || meta.format_version !== KIT_FORMAT_VERSION) {
    throw new Error(`this file is ${meta.format} version ${meta.format_version}, not a ` +
      `${KIT_FORMAT} version ${KIT_FORMAT_VERSION}; build the kit again from the DaisyChain page`);
  }
  if (meta.contract_version !== CONTRACT_VERSION) {
    throw new Error(`the kit's weights follow numerical contract ${meta.contract_version}, this ` +
      `code implements ${CONTRACT_VERSION}; build the kit again`);
  }
  if (weights.length !== meta.weights_bytes || await sha256Hex(weights) !== meta.weights_sha256) {
    throw new Error('the weights in this file are damaged (size or SHA-256 differs); download ' +
      'the kit again');
  }
  if (await sha256Hex(tokenizerBytes) !== meta.tokenizer_sha256) {
    throw new Error('the tokenizer in this file is damaged (SHA-256 differs); download the kit again');
  }
  const cfg = modelConfig(meta.model);
  const all = new Float32Array(weights.buffer, weights.byteOffset, weights.length / 4);
  const params = new Map();
  let offset = 0;
  for (const [name, shape] of meta.tensors) {
    params.set(name, all.subarray(offset, offset + numel(shape)));
    offset += numel(shape);
  }
  if (offset !== all.length) throw new Error('the tensor list does not cover the weights');
  const spec = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(tokenizerBytes));
  const tokenizer = new Tokenizer(spec, meta.tokenizer_sha256, 'kit tokenizer');
  return { cfg, params, tokenizer, meta };
}

function readSettings() {
  const num = (id) => (($(id).value.trim() === '') ? NaN : Number($(id).value));
  const topK = $('top-k').value.trim() === '' ? null : num('top-k');
  return settings({
    temperature: num('temperature'), topK, seed: num('seed'), maxTokens: num('max-tokens'),
  });
}

async function main() {
  setState('loading', 'Loading the weights…');
  const meta = JSON.parse($('kit-meta').textContent);
  const kit = await loadKitData(meta, fromBase64($('kit-weights').textContent),
    fromBase64($('kit-tokenizer').textContent));
  const { cfg } = kit;
  $('about').textContent = `Model: width ${cfg.width}, ${cfg.layers} layers, ${cfg.heads} heads, ` +
    `context ${cfg.seqLen}, vocabulary ${cfg.vocabSize}; trained ${meta.info.step ?? '?'} steps; ` +
    `weights ${String(meta.info.weight_hash ?? meta.weights_sha256).slice(0, 12)}…`;
  $('top-k').max = String(cfg.vocabSize);
  let controller = null;
  $('stop').addEventListener('click', () => controller?.abort());
  $('form').addEventListener('submit', async (event) => {
    event.preventDefault();
    let s;
    try {
      s = readSettings();
    } catch (exc) {
      setState('ready', exc.message);
      return;
    }
    controller = new AbortController();
    $('generate').disabled = true;
    $('stop').disabled = false;
    const prompt = $('prompt').value;
    $('output').textContent = prompt;
    setState('generating', 'Generating…');
    const started = performance.now();
    try {
      const out = await generateAsync(kit.params, cfg, kit.tokenizer, prompt, s, {
        signal: controller.signal,
        onToken: (_, ids) => {
          $('output').textContent = prompt + kit.tokenizer.decode(ids);
        },
      });
      const seconds = (performance.now() - started) / 1000;
      $('output').textContent = prompt + out.text;
      $('ids').textContent = JSON.stringify({ prompt_ids: out.promptIds, ids: out.ids, stop: out.stop });
      setState('ready', `${out.ids.length} tokens in ${seconds.toFixed(2)} s ` +
        `(${(out.ids.length / seconds).toFixed(1)} tokens/s), stop: ${out.stop}`);
    } catch (exc) {
      setState('ready', exc instanceof GenerateError ? exc.message : `error: ${exc.message}`);
    } finally {
      $('generate').disabled = false;
      $('stop').disabled = true;
    }
  });
  $('generate').disabled = false;
  setState('ready', 'Ready: type a prompt and press Generate.');
}

if (typeof document !== 'undefined' && document.getElementById('kit-meta')) {
  main().catch((exc) => setState('error', `This kit cannot run: ${exc.message}`));
}
