// The generation worker: runs model/generate.js off the page's main thread and off the training
// worker's queue, so generating during a run neither freezes the page nor delays a step (the
// training worker only answers one `export` for the weights; the tokens are computed here).
// Started by static/js/page/use.js as a module worker; one generation at a time.
//
// Messages in (validated in `check`; anything else is answered with `refused`):
//   {type: 'tokenizer', bytes: Uint8Array}          the tokenizer.json the weights were trained with
//   {type: 'generate', id, model, params: {names, arrays}, prompt, settings: {temperature, topK,
//     seed, maxTokens}}                             model: a model config (config.js fields)
//   {type: 'stop', id}                              stop generation `id` after its current token
// Messages out:
//   {type: 'ready', sha256}                         the tokenizer is built
//   {type: 'token', id, count, text}                after each token: how many, the text so far
//   {type: 'done', id, promptIds, ids, text, stop}  stop: 'length' | 'eot' | 'aborted'
//   {type: 'failed', id, message, settings}         settings: true when the request's settings or
//                                                   prompt were refused (GenerateError)
//   {type: 'refused', message}                      a malformed message (a bug in the page)

import { Tokenizer } from '../tokenizer.js';
import { modelConfig } from './config.js';
import { settings, generateAsync, GenerateError } from './generate.js';

let tokenizer = null; // a Promise of the Tokenizer once the page sent its bytes
let running = null; // {id, controller}

const post = (message) => self.postMessage(message);

/** Why `m` is not a well-formed message, or '' when it is. */
function check(m) {
  if (m === null || typeof m !== 'object') return 'not an object';
  if (m.type === 'tokenizer') return m.bytes instanceof Uint8Array ? '' : 'tokenizer: bytes must be a Uint8Array';
  if (m.type === 'stop') return Number.isInteger(m.id) ? '' : 'stop: id must be an integer';
  if (m.type !== 'generate') return `unknown message type ${String(m.type)}`;
  if (!Number.isInteger(m.id)) return 'generate: id must be an integer';
  if (typeof m.prompt !== 'string') return 'generate: prompt must be a string';
  const p = m.params;
  if (!p || !Array.isArray(p.names) || !Array.isArray(p.arrays) || p.names.length !== p.arrays.length ||
      !p.arrays.every((a) => a instanceof Float32Array)) {
    return 'generate: params must be {names, arrays} of Float32Array';
  }
  if (!m.model || typeof m.model !== 'object' || !m.settings || typeof m.settings !== 'object') {
    return 'generate: model and settings must be objects';
  }
  return '';
}

async function generateOne(m) {
  const controller = new AbortController();
  running = { id: m.id, controller };
  try {
    if (tokenizer === null) throw new Error('the tokenizer is not loaded yet');
    const tok = await tokenizer;
    const cfg = modelConfig(m.model);
    const s = settings(m.settings);
    const params = new Map(m.params.names.map((name, i) => [name, m.params.arrays[i]]));
    const out = await generateAsync(params, cfg, tok, m.prompt, s, {
      signal: controller.signal,
      onToken: (_, ids) => post({ type: 'token', id: m.id, count: ids.length, text: tok.decode(ids) }),
    });
    post({ type: 'done', id: m.id, promptIds: out.promptIds, ids: out.ids, text: out.text, stop: out.stop });
  } catch (exc) {
    post({ type: 'failed', id: m.id, message: exc.message, settings: exc instanceof GenerateError });
  } finally {
    running = null;
  }
}

self.onmessage = async (event) => {
  const m = event.data;
  const wrong = check(m);
  if (wrong) {
    post({ type: 'refused', message: `generation worker: ${wrong}` });
    return;
  }
  if (m.type === 'tokenizer') {
    tokenizer = Tokenizer.fromBytes(m.bytes, 'page tokenizer');
    try {
      post({ type: 'ready', sha256: (await tokenizer).sha256 });
    } catch (exc) {
      // every later request fails with this reason too (generateOne awaits the same promise)
      post({ type: 'refused', message: `generation worker: the tokenizer cannot be built: ${exc.message}` });
    }
  } else if (m.type === 'stop') {
    if (running?.id === m.id) running.controller.abort();
  } else if (running !== null) {
    post({ type: 'failed', id: m.id, message: 'a generation is still running; stop it first', settings: false });
  } else {
    await generateOne(m);
  }
};
