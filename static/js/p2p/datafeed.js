// A browser peer's batches for a run on a parquet dataset, fetched from its server a few steps
// ahead: the mirror of server/daisychain/p2p/datafeed.py (docs/PROTOCOL.md, "Training data").
//
// For config.data = "fineweb@REV" (or any dataset name, datanames.js: a Hub dataset, a server's
// own text files) the batch of rank r at step s is the window static/js/fineweb.js
// addresses, read through the server's addressed /data form (docs/SERVER.md, "Addressed
// windows"), its documents joined with the end-of-text token, encoded with the shipped tokenizer
// (static/js/tokenizer.js: the same ids as Python, tests/vectors/fineweb/) and cut into a batch.
// Part of the peer's I/O shell (peer.js): the machine's `compute` effect asks `batch()` and gets
// a batch that was fetched while earlier steps computed.
//
// Ahead of the step: each batch(address) also starts fetching the next `depth` steps of the same
// rank, here the lane (protocol v2: a device's share may span several lanes, each its own
// stream; lanes change only when the shares do; a wrong guess costs one fetch each).
// `stats` counts the batches that were ready and those the step waited for.
//
// Failure: a server that cannot be reached, answers an error or a malformed window rejects with
// DataUnavailable (message + hint). A 429 or 503 with Retry-After is retried while the wait fits
// in `patienceS`; a prefetch that failed is tried once more when its step comes. Nothing is kept
// that did not parse completely.
//
// Cache: where the Cache API exists (a secure context: https, or http on 127.0.0.1/localhost),
// every window that parsed completely is kept in the cache "daisychain-fineweb-REV" (another
// dataset: "daisychain-data-" and its name, since one commit's splits and columns share URLs)
// under its /data URL, which names the whole address; the same window asked again (a re-run of the same
// seed, a reload) is read from there, not from the server. A cached answer is checked like a
// fresh one; one that fails the check is deleted and fetched again. The cache holds windows (a
// few KB each), not row groups: the page never sees parquet.

import { parse as parseDataName } from '../datanames.js';
import * as fineweb from '../fineweb.js';

/** This peer cannot read the run's text; `message` and `hint` are for its user. */
export class DataUnavailable extends Error {
  constructor(message, hint) {
    super(message);
    this.name = 'DataUnavailable';
    this.hint = hint;
  }
}

const keyOf = (a) => `${a.split ?? 'train'}/${a.seed}/${a.step}/${a.rank}/${a.batch}x${a.seqLen}`;
const sameRun = (a, b) => (a.split ?? 'train') === (b.split ?? 'train') && a.seed === b.seed &&
  a.batch === b.batch && a.seqLen === b.seqLen;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class FineWebFeed {
  /**
   * @param {object} o
   * @param {string} o.server  the server's origin (http(s)://host:port)
   * @param {string} o.revision  the 40-hex revision of the run's text
   * @param {string} [o.dataName]  the run's data name (default: FineWeb-Edu at `revision`)
   * @param {{encode: (text: string) => number[]}} o.tokenizer  the shipped tokenizer
   * @param {number} [o.depth]  steps fetched ahead
   * @param {number} [o.timeoutS]  one GET's limit
   * @param {number} [o.patienceS]  how long 429/503 Retry-After waits may add up to
   * @param {typeof fetch} [o.fetch]
   * @param {CacheStorage|null} [o.caches]  where fetched windows are kept (null: nowhere)
   */
  constructor({ server, revision, dataName = null, tokenizer, depth = 4, timeoutS = 30, patienceS = 20,
    fetch: fetchFn = (...args) => globalThis.fetch(...args), caches = globalThis.caches ?? null }) {
    if (!(Number.isInteger(depth) && depth >= 0)) throw new RangeError(`bad prefetch depth ${depth}`);
    this.server = server.replace(/\/+$/, '').replace(/^ws/, 'http');
    this.revision = revision;
    this.dataName = dataName ?? fineweb.dataName(revision);
    const name = parseDataName(this.dataName);
    if (name === null || name.revision !== revision) {
      throw new RangeError(`${this.dataName} is not a dataset at revision ${revision}`);
    }
    this.source = name.source; // what the server's answers must say they are
    this.tokenizer = tokenizer;
    this.depth = depth;
    this.timeoutS = timeoutS;
    this.patienceS = patienceS;
    this.fetch = fetchFn;
    this.caches = caches;
    this.cacheName = name.kind === 'fineweb' ? `daisychain-fineweb-${revision}`
      : `daisychain-data-${this.dataName}`;
    this.stats = { ready: 0, waited: 0, fetched: 0, cached: 0, waitedSteps: [] };
    this.pending = new Map(); // key -> {address, promise, settled, failed, abort}
  }

  /** {x, y} (Int32Array, batch rows of seqLen ids) of address {seed, step, rank, batch,
   * seqLen, split?}; starts fetching the next `depth` steps too. Rejects with DataUnavailable. */
  async batch(address) {
    const key = keyOf(address);
    let entry = this.pending.get(key);
    this.pending.delete(key);
    if (entry !== undefined && entry.settled && !entry.failed) {
      this.stats.ready += 1;
    } else {
      this.stats.waited += 1;
      this.stats.waitedSteps.push(address.step);
      if (entry !== undefined && entry.settled) entry = undefined; // a failed prefetch: again, now
    }
    if (entry === undefined) entry = this.start(address);
    this.prefetch(address);
    return entry.promise;
  }

  prefetch(address) {
    // Drop guesses the run has passed (or made for another shape). A device's share can span
    // several lanes (protocol v2: the address's rank is the lane), asked one after the other
    // for the same step, so the other lanes' guesses of this step and later are kept; a lane it
    // no longer computes costs at most `depth` windows, dropped once the run passes them.
    for (const [key, e] of this.pending) {
      if (e.address.step < address.step || (e.address.step === address.step &&
        e.address.rank === address.rank) || !sameRun(e.address, address)) {
        e.abort.abort();
        this.pending.delete(key);
      }
    }
    for (let ahead = address.step + 1; ahead <= address.step + this.depth; ahead++) {
      const next = { ...address, step: ahead };
      if (!this.pending.has(keyOf(next))) this.pending.set(keyOf(next), this.start(next));
    }
  }

  start(address) {
    const abort = new AbortController();
    const entry = { address, settled: false, failed: false, abort, promise: null };
    entry.promise = this.fetchBatch(address, abort.signal).then((b) => {
      entry.settled = true;
      return b;
    }, (exc) => {
      entry.settled = true;
      entry.failed = true;
      throw exc;
    });
    entry.promise.catch(() => {}); // a prefetch's failure is raised when its step asks for it
    return entry;
  }

  close() {
    for (const e of this.pending.values()) e.abort.abort();
    this.pending.clear();
  }

  // -- one window ---------------------------------------------------------------------------

  async fetchBatch(a, signal) {
    const texts = await this.cachedWindow(a, signal);
    // The whole window at once: encode_prefix's pieces end where the pre-tokenizer cuts, so
    // they give the same ids (the golden cases, tests/js/fineweb_tokens.test.mjs).
    const need = a.batch * (a.seqLen + 1);
    const ids = this.tokenizer.encode(fineweb.join(texts)).slice(0, need);
    try {
      return fineweb.batchFromIds(ids, a.batch, a.seqLen);
    } catch (exc) {
      throw new DataUnavailable(`the window of step ${a.step} is unusable: ${exc.message}`,
        'check that the server runs the same DaisyChain version as this page');
    }
  }

  /** The window's texts from the cache, else from the server (then kept in the cache). */
  async cachedWindow(a, signal) {
    const url = this.server + fineweb.windowQuery({ ...a, revision: this.revision });
    let cache = null;
    try {
      cache = this.caches === null ? null : await this.caches.open(this.cacheName);
    } catch {
      cache = null; // no cache here (storage disabled): fetch every window
    }
    const hit = cache === null ? undefined : await cache.match(url).catch(() => undefined);
    if (hit !== undefined) {
      try {
        const texts = checked(await hit.json(), a, this.revision,
          fineweb.windowChars(a.batch, a.seqLen), this.source);
        this.stats.cached += 1;
        return texts;
      } catch {
        await cache.delete(url).catch(() => false); // damaged: fetch it again
      }
    }
    const texts = await this.window(a, signal);
    this.stats.fetched += 1;
    if (cache !== null) {
      const body = JSON.stringify({ source: this.source, revision: this.revision, split: a.split ?? 'train',
        seed: a.seed, step: a.step, rank: a.rank, chars: fineweb.windowChars(a.batch, a.seqLen), texts });
      // A full disk only costs the next read a GET.
      await cache.put(url, new Response(body, { headers: { 'content-type': 'application/json' } }))
        .catch(() => {});
    }
    return texts;
  }

  async window(a, signal) {
    const chars = fineweb.windowChars(a.batch, a.seqLen);
    const url = this.server + fineweb.windowQuery({ ...a, revision: this.revision });
    const giveUp = performance.now() + this.patienceS * 1000;
    for (;;) {
      let response;
      let body = null;
      // One GET's limit, or the guess being dropped (no AbortSignal.any before Node 20).
      const ctl = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => { timedOut = true; ctl.abort(); }, this.timeoutS * 1000);
      const drop = () => ctl.abort();
      signal.addEventListener('abort', drop);
      try {
        response = await this.fetch(url, { signal: ctl.signal });
        try {
          body = await response.json();
        } catch (exc) {
          if (ctl.signal.aborted) throw exc;
          body = null;
        }
      } catch (exc) {
        if (signal.aborted) throw new DataUnavailable('the fetch was dropped (not needed any more)', 'none');
        const reason = timedOut ? `timed out after ${this.timeoutS} s` : (exc.message || exc.name);
        throw new DataUnavailable(`cannot read training data from ${this.server}/data: ${reason}`,
          'check that the DaisyChain server is running and reachable from this page');
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', drop);
      }
      if (response.status === 200) return checked(body, a, this.revision, chars, this.source);
      const [error, hint] = errorOf(body, response.status);
      const retry = response.headers.get('Retry-After') ?? '';
      const retryAfter = /^\d+$/.test(retry) ? Number(retry) : null;
      if ((response.status === 429 || response.status === 503) && retryAfter !== null &&
          performance.now() + retryAfter * 1000 <= giveUp) {
        await sleep(retryAfter * 1000);
        if (signal.aborted) throw new DataUnavailable('the fetch was dropped (not needed any more)', 'none');
        continue;
      }
      throw new DataUnavailable(`the server could not give this page its data: ${error}`, hint);
    }
  }
}

function errorOf(body, status) {
  if (body !== null && typeof body === 'object' && typeof body.error === 'string') {
    return [body.error.slice(0, 300), typeof body.hint === 'string' ? body.hint : 'see docs/SERVER.md'];
  }
  return [`HTTP ${status}`, 'check that the server runs the same DaisyChain version'];
}

/** The window's texts, if the answer is the window asked for; else DataUnavailable. */
function checked(body, a, revision, chars, source = 'fineweb') {
  const expected = { source, revision, split: a.split ?? 'train', seed: a.seed,
    step: a.step, rank: a.rank, chars };
  const ok = body !== null && typeof body === 'object' &&
    Object.entries(expected).every(([k, v]) => body[k] === v);
  const texts = ok ? body.texts : null;
  if (!Array.isArray(texts) || !texts.every((t) => typeof t === 'string')) {
    throw new DataUnavailable("the server's /data answered something other than the window asked for",
      'check that the server runs the same DaisyChain version as this page');
  }
  const got = texts.reduce((n, t) => n + fineweb.codePoints(t), 0);
  if (got !== chars) {
    throw new DataUnavailable(`the server's window holds ${got} characters, not ${chars}`,
      'check that the server runs the same DaisyChain version as this page');
  }
  return texts;
}

/**
 * The feed of `server` if it reads a dataset at a pinned revision (its /api/status: data.name,
 * FineWeb-Edu or its --dataset; a server from before data names is FineWeb-Edu), else null: this
 * page then reads only the built-in corpus and refuses a dataset run with `incompatible` (as the
 * Python peer's fineweb_feed).
 */
export async function fineWebFeed(server, tokenizer, { fetch: fetchFn = (...a) => globalThis.fetch(...a),
  ...options } = {}) {
  const base = server.replace(/\/+$/, '').replace(/^ws/, 'http');
  let data;
  try {
    const response = await fetchFn(`${base}/api/status`);
    data = (await response.json()).data;
  } catch {
    return null;
  }
  if (data === null || typeof data !== 'object' || data.state === 'offline') return null;
  if (typeof data.revision !== 'string' || !/^[0-9a-f]{40}$/.test(data.revision)) return null;
  const dataName = data.name ?? fineweb.dataName(data.revision);
  let name;
  try {
    name = parseDataName(dataName);
  } catch {
    return null; // a name this version cannot train on: such a run is refused with a hint
  }
  if (name === null || name.revision !== data.revision) return null;
  return new FineWebFeed({ server: base, revision: data.revision, dataName, tokenizer, fetch: fetchFn,
    ...options });
}
