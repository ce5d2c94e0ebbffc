// @ts-check
// The draw of an attempt: whether it is audited, and who recomputes which item (docs/TRUST.md,
// "The draw"). Mirror of server/daisychain/p2p/draw.py; tests/vectors/audit/draw.json pins both.
// Pure functions, no I/O. SHA-256 here is sha256.js, synchronously: the inputs are a few hundred
// bytes.

import { Sha256, sha256 } from '../numerics/sha256.js';
import { BadStatement, DIGEST, MAX_ROSTER, attemptBytes } from './statements.js';
import { chunkBlocks } from './allreduce.js';

export const MAX_ONE_IN = 65536; // config.audit.one_in: the draw's modulo bias stays below 2^-16
const ascii = (/** @type {string} */ s) => Uint8Array.from(s, (c) => c.charCodeAt(0));

/**
 * SHA-256("DCD1" || run || step || round || roster digest || prev || seen || nonce[0] || ... ||
 * nonce[N-1]), nonces in rank order.
 * @param {string} run
 * @param {number} step
 * @param {number} round
 * @param {Uint8Array} roster
 * @param {Uint8Array} prev
 * @param {Uint8Array} seen
 * @param {readonly Uint8Array[]} nonces
 */
export function seed(run, step, round, roster, prev, seen, nonces) {
  for (const [what, value] of /** @type {[string, Uint8Array][]} */ ([['roster', roster], ['prev', prev], ['seen', seen]])) {
    if (value.length !== DIGEST) throw new BadStatement(`${what} must be ${DIGEST} bytes, not ${value.length}`);
  }
  if (nonces.length < 1 || nonces.some((n) => n.length !== DIGEST)) {
    throw new BadStatement(`nonces must be one ${DIGEST}-byte nonce per roster peer`);
  }
  const h = new Sha256().update(ascii('DCD1')).update(attemptBytes(run, step, round));
  h.update(roster).update(prev).update(seen);
  for (const n of nonces) h.update(n);
  return h.digest();
}

/**
 * The first 4 bytes of SHA-256(seed || label) as a little-endian u32.
 * @param {Uint8Array} seed_
 * @param {Uint8Array} label
 */
export function u(seed_, label) {
  const both = new Uint8Array(seed_.length + label.length);
  both.set(seed_);
  both.set(label, seed_.length);
  const d = sha256(both);
  return (d[0] | (d[1] << 8) | (d[2] << 16) | (d[3] << 24)) >>> 0;
}

/**
 * A label with an index: the name's ASCII, then the index as one byte (a rank, a chunk or a
 * place in carry: below 64, which assign checks).
 * @param {string} name
 * @param {number} index
 */
function label(name, index) {
  const out = new Uint8Array(name.length + 1);
  out.set(ascii(name));
  out[name.length] = index;
  return out;
}

/**
 * Whether the attempt is audited: u("attempt") mod n == 0.
 * @param {Uint8Array} seed_
 * @param {number} oneIn
 */
export function audited(seed_, oneIn) {
  if (!(Number.isInteger(oneIn) && oneIn >= 1 && oneIn <= MAX_ONE_IN)) {
    throw new RangeError(`one_in must be an integer in [1, ${MAX_ONE_IN}], not ${oneIn}`);
  }
  return u(seed_, ascii('attempt')) % oneIn === 0;
}

/**
 * The auditor of one contribution item of `share` by `author` (null: a carried item, whose
 * author is no longer in the roster); null when no roster peer could audit it.
 * @param {Uint8Array} seed_
 * @param {Uint8Array} lbl
 * @param {readonly number[]} shares
 * @param {number} share
 * @param {number | null} author
 * @param {Set<number>} assigned
 */
function contributionAuditor(seed_, lbl, shares, share, author, assigned) {
  const others = shares.map((_, a) => a).filter((a) => a !== author);
  const contributors = others.filter((a) => shares[a] > 0);
  const free = contributors.filter((a) => !assigned.has(a));
  for (const candidates of [free.filter((a) => 2 * shares[a] >= share), free, contributors, others]) {
    if (candidates.length) return candidates[u(seed_, lbl) % candidates.length];
  }
  return null;
}

/**
 * @typedef {{contributions: [number, number][], carried: [number, number][],
 *   reductions: [number, number][]}} Assignment
 * Each pair is (item, auditor rank): a contribution's rank (in the order assigned: largest share
 * first), a carried item's place in `carry`, a reduced chunk's index.
 */

/**
 * The items of an attempt and their auditors (TRUST.md, "The draw"). Carried items are assigned
 * whatever `isAudited` says; contributions and reductions only when it is true.
 * @param {Uint8Array} seed_
 * @param {readonly number[]} shares the roster's, in rank order
 * @param {{blocks: number, audited: boolean, private?: readonly boolean[], carried?: readonly number[]}} opts
 *   blocks: the flat gradient's B blocks; private[j]: rank j trained on private text (no item);
 *   carried: the share each carried statement was committed with, in carry order
 * @returns {Assignment}
 */
export function assign(seed_, shares, { blocks, audited: isAudited, private: priv, carried = [] }) {
  const n = shares.length;
  const flags = priv ? [...priv] : new Array(n).fill(false);
  if (n < 1 || n > MAX_ROSTER || flags.length !== n || carried.length > MAX_ROSTER || !(Number.isInteger(blocks) && blocks >= 1)) {
    throw new RangeError(`assign: ${n} shares (1 to ${MAX_ROSTER}), ${flags.length} private flags, ` +
      `${carried.length} carried items (at most ${MAX_ROSTER}), ${blocks} blocks (at least 1)`);
  }
  /** @type {Set<number>} */
  const assigned = new Set();
  /** @type {Assignment} */
  const out = { contributions: [], carried: [], reductions: [] };
  if (isAudited && n > 1) {
    const order = shares.map((_, j) => j).filter((j) => shares[j] > 0 && !flags[j])
      .sort((a, b) => shares[b] - shares[a] || a - b);
    for (const j of order) {
      const a = /** @type {number} */ (contributionAuditor(seed_, label('auditor', j), shares, shares[j], j, assigned));
      out.contributions.push([j, a]);
      assigned.add(a);
    }
  }
  carried.forEach((share, c) => {
    const a = /** @type {number} */ (contributionAuditor(seed_, label('carried', c), shares, share, null, assigned));
    out.carried.push([c, a]);
    assigned.add(a);
  });
  if (isAudited && n > 1) {
    /** @type {Set<number>} */
    const reducing = new Set();
    for (let k = 0; k < n; k++) {
      const [first, end] = chunkBlocks(blocks, shares, k);
      if (end === first) continue;
      const others = shares.map((_, a) => a).filter((a) => a !== k);
      const free = others.filter((a) => !reducing.has(a));
      const candidates = free.length ? free : others;
      const a = candidates[u(seed_, label('reducer', k)) % candidates.length];
      out.reductions.push([k, a]);
      reducing.add(a);
    }
  }
  return out;
}
