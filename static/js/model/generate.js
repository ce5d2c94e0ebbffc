// Text generation under the pinned sampling rule (docs/MODEL.md, "Sampling"): the twin of
// server/daisychain/generate.py, producing the same ids for the same weights, prompt, settings
// and seed. Logits are the contract forward's (bit-exact); the temperature is float32 `-` and
// `/`; candidates are ordered by (logit descending, id ascending); the softmax weights use the
// contract's exp and a left-to-right float32 sum; the draw is uniform(key(seed, 5, position)).
//
// `generate` runs to the end; `generateSteps` is a generator yielding one id at a time, so a
// page can await between tokens and stay responsive (`generateAsync`).

import { exp } from '../numerics/fmath.js';
import { key, uniform } from '../numerics/prng.js';
import { forwardLogits, Workspace } from './gpt.js';

const f32 = Math.fround;

export const SAMPLE_STREAM = 5; // key(seed, SAMPLE_STREAM, position) (NUMERICS.md section 7)
export const MAX_NEW_TOKENS = 1024;
export const MAX_PROMPT_TOKENS = 4096;
export const MAX_TEMPERATURE = 100;

/** A generation request that cannot run; `message` says what to change. */
export class GenerateError extends Error {
  constructor(message) {
    super(message);
    this.name = 'GenerateError';
  }
}

const isInt = (v) => typeof v === 'number' && Number.isInteger(v);

/**
 * Validated settings {temperature, topK (null: the whole vocabulary), seed, maxTokens}, the same
 * checks and texts as Python's `Settings`. Defaults: 0.8, 40, 1, 100.
 */
export function settings({ temperature = 0.8, topK = 40, seed = 1, maxTokens = 100 } = {}) {
  const t = temperature;
  if (typeof t !== 'number' || !Number.isFinite(t)) {
    throw new GenerateError(`temperature must be a finite number, got ${t}; use 0 for greedy decoding`);
  }
  if (t < 0) {
    throw new GenerateError(`temperature ${t} is negative; use 0 for greedy decoding or a ` +
      'positive value such as 0.8');
  }
  if (t > MAX_TEMPERATURE) {
    throw new GenerateError(`temperature ${t} is above ${MAX_TEMPERATURE}; such a temperature ` +
      "samples uniformly among the top-k; lower it (1.0 samples the model's own distribution)");
  }
  if (!(isInt(seed) && seed >= 0 && seed <= 4294967295)) {
    throw new GenerateError(`seed must be an integer in [0, 4294967295], got ${seed}`);
  }
  if (!(isInt(maxTokens) && maxTokens >= 1 && maxTokens <= MAX_NEW_TOKENS)) {
    throw new GenerateError(`max_tokens must be an integer in [1, ${MAX_NEW_TOKENS}], got ` +
      `${maxTokens}; ask for fewer tokens per request`);
  }
  if (topK !== null && !(isInt(topK) && topK >= 1)) {
    throw new GenerateError('top_k must be a positive integer (1 = greedy) or omitted for the ' +
      `whole vocabulary, got ${topK}`);
  }
  return Object.freeze({ temperature: t, topK, seed, maxTokens });
}

/** topK checked against the vocabulary (null means all of it). */
export function topKFor(s, vocabSize) {
  if (s.topK === null) return vocabSize;
  if (s.topK > vocabSize) {
    throw new GenerateError(`top_k ${s.topK} exceeds the vocabulary (${vocabSize} tokens); use ` +
      `at most ${vocabSize} or omit it`);
  }
  return s.topK;
}

/** Ids by logit descending, equal logits (+0 and -0 included) by id ascending. */
export function candidateOrder(logits) {
  for (let v = 0; v < logits.length; v++) {
    if (!Number.isFinite(logits[v])) {
      throw new GenerateError('the logits are not finite; the checkpoint has diverged');
    }
  }
  const order = Array.from({ length: logits.length }, (_, v) => v);
  order.sort((a, b) => (logits[a] > logits[b] ? -1 : logits[a] < logits[b] ? 1 : a - b));
  return order;
}

/**
 * The sampling rule for one position: the next id from the last position's logits
 * (a Float32Array of V values), temperature (float32-rounded here), topK, seed, position.
 */
export function pick(logits, temperature, topK, seed, position) {
  const order = candidateOrder(logits);
  const T = f32(temperature);
  if (T === 0) return order[0];
  const K = topK;
  const top0 = logits[order[0]];
  const c = new Float32Array(K); // cumulative weights, left to right
  let acc = 0;
  for (let i = 0; i < K; i++) {
    const z = f32(f32(logits[order[i]] - top0) / T);
    acc = f32(acc + exp(z));
    c[i] = acc;
  }
  const u = uniform(key(seed, SAMPLE_STREAM, position), 1)[0];
  const r = f32(u * c[K - 1]);
  for (let i = 0; i < K; i++) if (r < c[i]) return order[i];
  throw new Error('the sampling threshold must fall below the total'); // proven unreachable
}

/** The prompt's ids, or the start token alone when the prompt is empty. */
export function startContext(promptIds, eotId) {
  if (promptIds.length > MAX_PROMPT_TOKENS) {
    throw new GenerateError(`the prompt is ${promptIds.length} tokens, above ` +
      `${MAX_PROMPT_TOKENS}; the model reads only its last tokens anyway: shorten it`);
  }
  if (promptIds.length > 0) return [...promptIds];
  if (eotId === null || eotId === undefined) {
    throw new GenerateError('the prompt is empty and this tokenizer has no <|endoftext|> token ' +
      'to start from; give a prompt');
  }
  return [eotId];
}

/**
 * Yields generated ids one by one from `context` (start token in place). `params` is a Map
 * name -> Float32Array (model/params.js order), `cfg` a model config.
 */
export function* generateSteps(params, cfg, context, s, eotId, { workspace = new Workspace() } = {}) {
  if (context.length === 0) throw new GenerateError('the context is empty; start from a prompt or the start token');
  const K = topKFor(s, cfg.vocabSize);
  const V = cfg.vocabSize;
  const seq = [...context];
  for (let n = 0; n < s.maxTokens; n++) {
    const window = seq.slice(-cfg.seqLen);
    const logits = forwardLogits(params, cfg, window, { batch: 1, workspace });
    const token = pick(logits.subarray((window.length - 1) * V), s.temperature, K, s.seed, seq.length);
    seq.push(token);
    yield token;
    if (token === eotId) return;
  }
}

function checkTokenizer(tokenizer, cfg) {
  if (tokenizer.vocabSize !== cfg.vocabSize) {
    throw new GenerateError(`the tokenizer has ${tokenizer.vocabSize} tokens, the model ` +
      `${cfg.vocabSize}; use the tokenizer the checkpoint was trained with`);
  }
}

function encodePrompt(tokenizer, prompt) {
  try {
    return tokenizer.encode(prompt);
  } catch (exc) {
    throw new GenerateError(exc.message);
  }
}

function finish(tokenizer, promptIds, ids) {
  const stop = ids.length > 0 && ids[ids.length - 1] === tokenizer.eotId ? 'eot' : 'length';
  const text = tokenizer.decode(stop === 'eot' ? ids.slice(0, -1) : ids);
  return { promptIds, ids, text, stop };
}

/** Continue `prompt`: {promptIds, ids, text, stop ('length' | 'eot')}. */
export function generate(params, cfg, tokenizer, prompt, s) {
  checkTokenizer(tokenizer, cfg);
  const promptIds = encodePrompt(tokenizer, prompt);
  const context = startContext(promptIds, tokenizer.eotId);
  const ids = [...generateSteps(params, cfg, context, s, tokenizer.eotId)];
  return finish(tokenizer, promptIds, ids);
}

/**
 * `generate` that yields to the event loop between tokens; `onToken(id, idsSoFar)` is called
 * after each one, and `signal` (an AbortSignal) stops early (the result then has stop 'aborted').
 */
export async function generateAsync(params, cfg, tokenizer, prompt, s, { onToken, signal } = {}) {
  checkTokenizer(tokenizer, cfg);
  const promptIds = encodePrompt(tokenizer, prompt);
  const context = startContext(promptIds, tokenizer.eotId);
  const ids = [];
  for (const id of generateSteps(params, cfg, context, s, tokenizer.eotId)) {
    ids.push(id);
    if (onToken) onToken(id, ids);
    await new Promise((resolve) => setTimeout(resolve, 0));
    if (signal?.aborted) return { ...finish(tokenizer, promptIds, ids), stop: 'aborted' };
  }
  return finish(tokenizer, promptIds, ids);
}
