// @ts-check
// The audit round of one attempt (step, round) at this peer (docs/TRUST.md, "Commit, then
// audit"). Mirror of server/daisychain/p2p/machine/audit.py: same phases, rules, decisions and
// decision order; tests/vectors/audit/rounds.json replays every case through both.
//
//   committing --every statement and carried statement held; reveal sent--> revealed
//   revealed --every reveal in, seen agrees--> drawn --not audited, or every item passed--> passed
//   drawn --a dispute or a proof--> disputed --every result in, every check concluded--> settled
//   committing/revealed --a proof--> disputed  (a proof needs no draw: the attempt never applies)
//   any but settled --the attempt abandoned--> cancelled
//
// The round works on signed statements ({statement, sig}: a statement's bytes and its author's
// Ed25519 signature), never on wire messages. Pure and synchronous like the rest of the machine:
// `now` comes with each event, and every event returns its decisions. Signing and verifying use
// numerics/ed25519.js directly (synchronous; Ed25519 is deterministic, so the signatures are the
// bytes Web Crypto or the Python twin would make): auditkey.js's Web Crypto path is asynchronous,
// which a synchronous core cannot await. Input that breaks a rule throws AuditRefused with its
// code; an audit result held from before the draw is refused later as a 'refuse' decision.

import * as ed25519 from '../../numerics/ed25519.js';
import { chunkBlocks } from '../allreduce.js';
import { checkPublicKey, signingSeed } from '../auditkey.js';
import * as draw from '../draw.js';
import * as st from '../statements.js';

export const RoundPhase = Object.freeze({
  COMMITTING: 'committing', // gathering commits; this peer has not revealed
  REVEALED: 'revealed', // reveal sent; waiting for every reveal
  DRAWN: 'drawn', // the draw is made; waiting for the items' results
  PASSED: 'passed', // not audited, or every item passed: the attempt may apply
  DISPUTED: 'disputed', // a dispute or a proof: this attempt never applies
  SETTLED: 'settled', // every result in, every check concluded; `proven` names who lied
  CANCELLED: 'cancelled', // the attempt was abandoned
});
/** @typedef {typeof RoundPhase[keyof typeof RoundPhase]} RoundPhaseName */

/** @type {Readonly<Record<RoundPhaseName, readonly RoundPhaseName[]>>} */
const ALLOWED = {
  committing: ['revealed', 'disputed', 'cancelled'],
  revealed: ['drawn', 'disputed', 'cancelled'],
  drawn: ['passed', 'disputed', 'cancelled'],
  passed: ['cancelled'], // passed, then a reduced chunk never came
  disputed: ['settled', 'cancelled'],
  settled: [],
  cancelled: [],
};

// An attempt has at most 64 contributions, 64 reductions and 64 carried items: the most audit
// results one peer can owe before this peer draws (they are held until then).
export const MAX_ITEMS = 3 * st.MAX_ROSTER;

/**
 * @typedef {'bad-signature' | 'bad-message' | 'fork' | 'other-roster'} Refusal
 * @typedef {'pass' | 'fail' | 'false-accusation'} Result
 * @typedef {'lied' | 'false-accusation' | 'equivocated' | 'bad-reveal'} ProvenKind
 * @typedef {'equivocation' | 'bad-reveal'} ProofKind
 * @typedef {{statement: Uint8Array, sig: Uint8Array}} Signed
 * @typedef {{round: number, peer: string, peers: readonly string[], shares: readonly number[]}} Carried
 * @typedef {{digests: readonly Uint8Array[], data: Uint8Array}} Outcome
 * @typedef {{type: 'send', signed: Signed, audited: Signed | null}} Send
 * @typedef {{type: 'recompute', of: Uint8Array, item: number, index: number, author: string,
 *   round: number, rank: number, shares: readonly number[], why: 'assigned' | 'check'}} Recompute
 * @typedef {{type: 'ask', peer: string}} AskStatements
 * @typedef {{type: 'proof', kind: ProofKind, first: Signed, second: Signed}} SendProof
 * @typedef {{type: 'concluded', item: number, index: number, author: string, auditor: string,
 *   result: Result}} Concluded
 * @typedef {{type: 'proven', peer: string, kind: ProvenKind, by: string}} Proven
 * @typedef {{type: 'refuse', peer: string, code: Refusal, message: string}} Refuse
 * @typedef {Send | Recompute | AskStatements | SendProof | Concluded | Proven | Refuse} Decision
 * @typedef {{round: number, peers: readonly string[], shares: readonly number[], digest: Uint8Array,
 *   empty: Set<number>}} Context
 * @typedef {{item: number, index: number, author: string, auditor: string, held: Signed,
 *   claim: Outcome, round: number, rank: number, shares: readonly number[],
 *   accusation: Outcome | null, result: Result | null, own: Outcome | null, asked: boolean}} AuditItem
 */

/** A statement, result or proof that breaks a rule (the codes of audit.py's AuditRefused). */
export class AuditRefused extends Error {
  /** @param {Refusal} code @param {string} message */
  constructor(code, message) {
    super(message);
    this.name = 'AuditRefused';
    this.code = code;
  }
}

/** @param {Uint8Array} b */
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
/** @param {Uint8Array} a @param {Uint8Array} b */
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
/** @param {Outcome} a @param {Outcome} b */
const sameOutcome = (a, b) => same(a.data, b.data) && a.digests.length === b.digests.length &&
  a.digests.every((d, i) => same(d, b.digests[i]));
/** @param {Uint8Array} d */
const absent = (d) => same(d, st.ABSENT);

/**
 * Whether `sig` is `key`'s over `statement` (auditkey.verify's rules, synchronously).
 * @param {Uint8Array} key @param {Uint8Array} statement @param {Uint8Array} sig
 */
function verifies(key, statement, sig) {
  try {
    checkPublicKey(key);
  } catch {
    return false;
  }
  return sig instanceof Uint8Array && sig.length === 64 && ed25519.verify(key, statement, sig);
}

/** What two statements of one author must not differ in. @param {st.Statement} s */
function slot(s) {
  let index = '';
  if (s.kind === st.Kind.REDUCED) index = String(s.chunk);
  else if (s.kind === st.Kind.AUDIT) index = hex(s.of);
  return `${s.kind}|${s.head.author}|${s.head.round}|${index}`;
}

export class AuditRound {
  /**
   * @param {{run: string, step: number, round: number, peers: readonly string[],
   *   shares: readonly number[], blocks: number, me: string, secret: Uint8Array, prev: Uint8Array,
   *   oneIn: number, keys: ReadonlyMap<string, Uint8Array>, private?: 'refuse' | 'unaudited',
   *   carry?: readonly Carried[], log?: import('../run.js').Log}} opts
   */
  constructor({ run, step, round, peers, shares, blocks, me, secret, prev, oneIn, keys,
    private: policy = 'refuse', carry = [], log = () => {} }) {
    if (!peers.includes(me)) throw new RangeError(`${me} is not in the roster [${peers.join(', ')}]`);
    if (!(Number.isInteger(oneIn) && oneIn >= 1 && oneIn <= draw.MAX_ONE_IN)) {
      throw new RangeError(`oneIn must be in [1, ${draw.MAX_ONE_IN}], not ${oneIn}`);
    }
    this.run = run;
    this.step = step;
    this.round = round;
    this.me = me;
    this.prev = prev;
    this.oneIn = oneIn;
    this.policy = policy;
    this.keys = new Map(keys);
    this.log = log;
    this._seed = signingSeed(secret);
    this._nonce = st.nonce(secret, run, step, round);
    this.context = context(round, peers, shares, blocks);
    this.peers = this.context.peers;
    this.shares = this.context.shares;
    this.blocks = blocks;
    this.chunks = this.peers.map((_, k) => k).filter((k) => !this.context.empty.has(k));
    this.carry = [...carry];
    this.carriedContext = this.carry.map((c) => context(c.round, c.peers, c.shares, blocks));
    for (const c of this.carry) {
      if (!c.peers.includes(c.peer) || c.round >= round) {
        throw new RangeError(`carry [${c.round}, ${c.peer}]: its peer is not in its roster, or its round is late`);
      }
    }
    /** @type {RoundPhaseName} */
    this.phase = RoundPhase.COMMITTING;
    this.since = 0; // when the phase last changed
    /** @type {Map<number, Signed>} rank -> contribution commit */
    this.commits = new Map();
    /** @type {Map<number, Signed>} chunk -> reduced commit */
    this.reduced = new Map();
    /** @type {Map<number, Signed>} place in carry -> its commit */
    this.carried = new Map();
    /** @type {Map<number, Signed>} rank -> reveal */
    this.reveals = new Map();
    /** @type {Uint8Array | null} */
    this.seen = null;
    /** @type {Uint8Array | null} */
    this.seed = null;
    /** @type {boolean | null} */
    this.audited = null;
    /** @type {number | null} an audit gets a whole step timer from here */
    this.drawnAt = null;
    /** @type {Map<string, AuditItem>} hex(of) -> item */
    this.items = new Map();
    /** @type {Map<string, Proven>} */
    this.proven = new Map();
    /** @type {Map<string, Signed>} slot -> statement, for equivocation */
    this._held = new Map();
    /** @type {[string, Signed][]} */
    this._earlyAudits = [];
    /** @type {Set<string>} */
    this._asked = new Set();
  }

  /** The one place the phase changes. @param {RoundPhaseName} next @param {number} now */
  _become(next, now) {
    const old = this.phase;
    if (!ALLOWED[old].includes(next)) throw new Error(`audit round ${this.key}: ${old} cannot become ${next}`);
    this.phase = next;
    this.since = now;
    this.log('debug', `audit round ${this.key}: ${old} -> ${next}`);
  }

  get key() {
    return `(${this.step}, ${this.round})`;
  }

  get rank() {
    return this.peers.indexOf(this.me);
  }

  /** apply-after-audit: every item the attempt audits passed (or none is audited). */
  get mayApply() {
    return this.phase === RoundPhase.PASSED;
  }

  get settled() {
    return this.phase === RoundPhase.SETTLED;
  }

  /** verify-before-reduce: the digest `rank` committed for `chunk` (null: no commit). @param {number} rank @param {number} chunk */
  committedChunk(rank, chunk) {
    const held = this.commits.get(rank);
    return held ? /** @type {st.Contribution} */ (st.parse(held.statement)).chunks[chunk] : null;
  }

  /** @param {number} chunk */
  committedReduced(chunk) {
    const held = this.reduced.get(chunk);
    return held ? /** @type {st.Reduced} */ (st.parse(held.statement)).digest : null;
  }

  // -- this peer's own statements

  /** @returns {st.Head} */
  _head() {
    return { run: this.run, step: this.step, round: this.round, author: this.me, roster: this.context.digest };
  }

  /** @param {Uint8Array} statement @returns {Signed} */
  _sign(statement) {
    return { statement, sig: ed25519.sign(this._seed, statement) };
  }

  /**
   * commit-first: this peer's compute is done (a share of 0 too).
   * @param {readonly Uint8Array[]} chunks @param {Uint8Array} data
   * @param {{privateData: boolean, now: number}} opts
   * @returns {Decision[]}
   */
  commitContribution(chunks, data, { privateData, now }) {
    if (this.commits.has(this.rank)) throw new RangeError(`audit round ${this.key}: this peer has committed already`);
    /** @type {st.Contribution} */
    const c = { kind: st.Kind.CONTRIBUTION, head: this._head(), private: privateData, prev: this.prev,
      nonceHash: st.nonceHash(this._nonce), data, chunks: [...chunks] };
    const why = layout(c, this.context);
    if (why) throw new RangeError(`this peer's own commit: ${why}`);
    const signed = this._sign(st.encode(c));
    this.commits.set(this.rank, signed);
    this._held.set(slot(c), signed);
    return [{ type: 'send', signed, audited: null }, ...this._advance(now)];
  }

  /** commit-reduced. @param {Uint8Array} digest @param {number} now @returns {Decision[]} */
  commitReduced(digest, now) {
    if (!this.chunks.includes(this.rank) || this.reduced.has(this.rank)) {
      throw new RangeError(`audit round ${this.key}: no reduced commit is due from this peer`);
    }
    /** @type {st.Reduced} */
    const r = { kind: st.Kind.REDUCED, head: this._head(), chunk: this.rank, digest };
    const signed = this._sign(st.encode(r));
    this.reduced.set(this.rank, signed);
    this._held.set(slot(r), signed);
    return [{ type: 'send', signed, audited: null }, ...this._advance(now)];
  }

  // -- statements from others

  /**
   * A statement from `sender`: its own, or (`relayed`: answering this peer's repair) any
   * author's. Throws AuditRefused when it breaks a rule.
   * @param {Signed} signed @param {string} sender @param {number} now
   * @param {{relayed?: boolean}} [opts]
   * @returns {Decision[]}
   */
  receive(signed, sender, now, { relayed = false } = {}) {
    /** @type {st.Statement} */
    let s;
    try {
      s = st.parse(signed.statement);
    } catch (e) {
      if (!(e instanceof st.BadStatement)) throw e;
      throw new AuditRefused('bad-message', `not a statement from ${sender}: ${e.message}`);
    }
    const author = s.head.author;
    if (author !== sender && !relayed) {
      throw new AuditRefused('bad-signature', `${sender} sent a statement by ${author} that this peer did not ask for ` +
        '(statements travel from their author, or answer a repair)');
    }
    // The signature first: a relayed statement that fails the later rules (a fork above all)
    // must be its author's before it can blame anyone.
    this._verify(signed, author);
    if (s.head.run !== this.run || s.head.step !== this.step) {
      throw new AuditRefused('bad-message', `a statement of run ${s.head.run} step ${s.head.step} reached the ` +
        `audit round of run ${this.run} step ${this.step}`);
    }
    const ctx = this._contextOf(s);
    if (!same(s.head.roster, ctx.digest)) {
      throw new AuditRefused('other-roster', `${author}'s statement of attempt (${s.head.step}, ${s.head.round}) ` +
        "names another roster than this peer's: hold it until that roster is known, or the leader committed " +
        'two rosters for one attempt');
    }
    if (s.kind === st.Kind.CONTRIBUTION) {
      const why = layout(s, ctx);
      if (why) throw new AuditRefused('bad-message', `${author}'s contribution commit: ${why}`);
      if (!same(s.prev, this.prev)) {
        throw new AuditRefused('fork', `${author} computed step ${this.step} from state ${hex(s.prev).slice(0, 16)}, ` +
          `this peer from ${hex(this.prev).slice(0, 16)}: the replicas forked at step ${this.step - 1}`);
      }
      if (s.private && this.policy === 'refuse') {
        throw new AuditRefused('bad-message', `${author} committed a contribution on private text and this run ` +
          'refuses private data (config.audit.private)');
      }
    } else if (s.kind === st.Kind.REDUCED && (!this.chunks.includes(s.chunk) || ctx.peers[s.chunk] !== author)) {
      throw new AuditRefused('bad-message', `${author} committed a reduction of chunk ${s.chunk}, which it does ` +
        'not own or which is empty');
    }
    if (s.kind === st.Kind.AUDIT) return this._auditReceived(signed, s, now);
    const proof = this._equivocation(signed, s);
    if (proof !== null) return [...proof, ...this._advance(now)];
    if (s.kind === st.Kind.CONTRIBUTION) {
      if (s.head.round === this.round) setDefault(this.commits, ctx.peers.indexOf(author), signed);
      else setDefault(this.carried, this._carryPlace(s), signed);
    } else if (s.kind === st.Kind.REDUCED) {
      setDefault(this.reduced, s.chunk, signed);
    } else {
      setDefault(this.reveals, this.peers.indexOf(author), signed);
    }
    return this._advance(now);
  }

  /** @param {st.Statement} s @returns {Context} */
  _contextOf(s) {
    if (s.head.round === this.round) {
      if (!this.peers.includes(s.head.author)) {
        throw new AuditRefused('bad-message', `${s.head.author} is not in the roster of ${this.key}`);
      }
      return this.context;
    }
    if (s.kind === st.Kind.CONTRIBUTION) return this.carriedContext[this._carryPlace(s)];
    throw new AuditRefused('bad-message', `a statement of round ${s.head.round} reached the audit round of ${this.key}`);
  }

  /** @param {st.Statement} s */
  _carryPlace(s) {
    const c = this.carry.findIndex((e) => e.round === s.head.round && e.peer === s.head.author);
    if (c < 0) {
      throw new AuditRefused('bad-message', `a contribution commit of ${s.head.author} in round ${s.head.round} ` +
        `that the roster of ${this.key} does not carry`);
    }
    return c;
  }

  /** @param {Signed} signed @param {string} author */
  _verify(signed, author) {
    const key = this.keys.get(author);
    if (key === undefined) {
      throw new AuditRefused('bad-signature', `no audit key for ${author}: its statements cannot be checked`);
    }
    if (!verifies(key, signed.statement, signed.sig)) {
      throw new AuditRefused('bad-signature', `${author}'s signature over its statement does not verify under its audit key`);
    }
  }

  /** Two valid signatures by one author over different statements of one slot: a proof. @param {Signed} signed @param {st.Statement} s @returns {Decision[] | null} */
  _equivocation(signed, s) {
    const key = slot(s);
    const held = setDefault(this._held, key, signed);
    if (same(held.statement, signed.statement)) return null;
    return [{ type: 'proof', kind: 'equivocation', first: held, second: signed },
      ...this._prove(s.head.author, 'equivocated', this.me)];
  }

  /**
   * A proof from `sender`: settled by checking its two signatures, no compute.
   * @param {ProofKind} kind @param {Signed} first @param {Signed} second @param {string} sender @param {number} now
   * @returns {Decision[]}
   */
  receiveProof(kind, first, second, sender, now) {
    /** @type {st.Statement} */
    let a;
    /** @type {st.Statement} */
    let b;
    try {
      a = st.parse(first.statement);
      b = st.parse(second.statement);
    } catch (e) {
      if (!(e instanceof st.BadStatement)) throw e;
      throw new AuditRefused('bad-message', `${sender}'s proof: ${e.message}`);
    }
    const author = a.head.author;
    const thisStep = (/** @type {st.Statement} */ x) => x.head.run === this.run && x.head.step === this.step;
    if (b.head.author !== author || !thisStep(a) || !thisStep(b)) {
      throw new AuditRefused('bad-message', `${sender}'s proof: not two statements of one author, this step`);
    }
    this._verify(first, author);
    this._verify(second, author);
    let ok;
    /** @type {ProvenKind} */
    let proven;
    if (kind === 'equivocation') {
      ok = slot(a) === slot(b) && !same(first.statement, second.statement);
      proven = 'equivocated';
    } else {
      ok = a.kind === st.Kind.CONTRIBUTION && b.kind === st.Kind.REVEAL && a.head.round === b.head.round &&
        !same(st.nonceHash(b.nonce), a.nonceHash);
      proven = 'bad-reveal';
    }
    if (!ok) throw new AuditRefused('bad-message', `${sender}'s ${kind} proof does not show what it claims`);
    return [...this._prove(author, proven, sender), ...this._advance(now)];
  }

  // -- audit results

  /** @param {Signed} signed @param {st.Audit} a @param {number} now @returns {Decision[]} */
  _auditReceived(signed, a, now) {
    if (this.seed === null) {
      if (this._earlyAudits.filter(([sender]) => sender === a.head.author).length >= MAX_ITEMS) {
        throw new AuditRefused('bad-message', `${a.head.author} sent more audit results before the draw than an ` +
          `attempt has items (${MAX_ITEMS})`);
      }
      this._earlyAudits.push([a.head.author, signed]);
      return [];
    }
    return this._auditResult(signed, a, now);
  }

  /** @param {Signed} signed @param {st.Audit} a @param {number} now @returns {Decision[]} */
  _auditResult(signed, a, now) {
    const item = this.items.get(hex(a.of));
    if (item === undefined || item.item !== a.item || item.index !== a.index) {
      throw new AuditRefused('bad-message', `${a.head.author}'s audit of item ${a.item} ${a.index} names no item ` +
        `of the draw of ${this.key}`);
    }
    if (item.auditor !== a.head.author) {
      throw new AuditRefused('bad-message', `${a.head.author} sent an audit of item ${item.item} ${item.index}, ` +
        `which the draw assigned to ${item.auditor}: only the assigned auditor may dispute`);
    }
    const proof = this._equivocation(signed, a);
    if (proof !== null) return [...proof, ...this._advance(now)];
    if (item.result !== null || item.accusation !== null) return []; // the same result again
    if (this.phase === RoundPhase.SETTLED || this.phase === RoundPhase.CANCELLED) return [];
    /** @type {Outcome} */
    const result = { digests: a.digests, data: a.data };
    if (sameOutcome(result, item.claim)) {
      item.result = 'pass';
      return [concluded(item, 'pass'), ...this._advance(now)];
    }
    item.accusation = result;
    if (this.phase === RoundPhase.DRAWN) this._become(RoundPhase.DISPUTED, now);
    return [...this._askCheck(item), ...this._advance(now)];
  }

  /** check-yourself. @param {AuditItem} item @returns {Decision[]} */
  _askCheck(item) {
    if (item.own !== null || item.asked) return [];
    item.asked = true;
    return [recompute(item, 'check')];
  }

  /**
   * This peer's recomputation of item `of`: the digests of what it computed.
   * @param {Uint8Array} of @param {readonly Uint8Array[]} digests @param {Uint8Array} data @param {number} now
   * @returns {Decision[]}
   */
  recomputed(of, digests, data, now) {
    const item = this.items.get(hex(of));
    if (item === undefined || !item.asked || item.own !== null) {
      throw new RangeError(`audit round ${this.key}: no recomputation of ${hex(of).slice(0, 16)} is due`);
    }
    item.own = { digests: [...digests], data };
    /** @type {Decision[]} */
    const out = [];
    if (item.auditor === this.me && item.result === null && item.accusation === null) {
      /** @type {st.Audit} */
      const a = { kind: st.Kind.AUDIT, head: this._head(), item: item.item, index: item.index, of, data,
        digests: [...digests] };
      const signed = this._sign(st.encode(a));
      this._held.set(slot(a), signed);
      const disputes = !sameOutcome(item.own, item.claim);
      out.push({ type: 'send', signed, audited: disputes || item.round !== this.round ? item.held : null });
      out.push(...this._auditResult(signed, a, now));
    }
    return [...out, ...this._advance(now)];
  }

  /** check-yourself, concluded. @param {AuditItem} item @returns {Decision[]} */
  _verdict(item) {
    const own = /** @type {Outcome} */ (item.own);
    /** @type {Decision[]} */
    const out = [];
    let result;
    if (sameOutcome(own, /** @type {Outcome} */ (item.accusation))) {
      result = 'fail';
      out.push(...this._prove(item.author, 'lied', item.auditor));
    } else if (sameOutcome(own, item.claim)) {
      result = 'false-accusation';
      out.push(...this._prove(item.auditor, 'false-accusation', this.me));
    } else {
      result = 'fail';
      out.push(...this._prove(item.author, 'lied', this.me));
      out.push(...this._prove(item.auditor, 'false-accusation', this.me));
    }
    item.result = /** @type {Result} */ (result);
    return [concluded(item, item.result), ...out];
  }

  /** @param {string} peer @param {ProvenKind} kind @param {string} by @returns {Decision[]} */
  _prove(peer, kind, by) {
    if (this.proven.has(peer)) return [];
    /** @type {Proven} */
    const p = { type: 'proven', peer, kind, by };
    this.proven.set(peer, p);
    this.log('info', `audit round ${this.key}: ${peer} proven (${kind}, by ${by})`);
    return [p];
  }

  // -- progress: reveal, draw, results, settle

  /** @param {number} now @returns {Decision[]} */
  _advance(now) {
    /** @type {Decision[]} */
    const out = [];
    const early = /** @type {RoundPhaseName[]} */ ([RoundPhase.COMMITTING, RoundPhase.REVEALED, RoundPhase.DRAWN]);
    if (this.proven.size && early.includes(this.phase)) this._become(RoundPhase.DISPUTED, now);
    if (this.phase === RoundPhase.COMMITTING && this._missingStatements().size === 0) out.push(...this._reveal(now));
    if (this.phase === RoundPhase.REVEALED) {
      out.push(...this._badReveals());
      if (this.proven.size === 0 && this.reveals.size === this.peers.length) out.push(...this._draw(now));
    }
    if (this.proven.size && (this.phase === RoundPhase.REVEALED || this.phase === RoundPhase.DRAWN)) {
      this._become(RoundPhase.DISPUTED, now);
    }
    if (this.phase === RoundPhase.DISPUTED) {
      for (const item of this.items.values()) {
        if (item.accusation !== null && item.own !== null && item.result === null) out.push(...this._verdict(item));
      }
      // Settled once every item has its result (a proven auditor's aside): peers that heard the
      // disputes in another order must still reach the same `proven`.
      if ([...this.items.values()].every((i) => i.result !== null || this.proven.has(i.auditor))) {
        this._become(RoundPhase.SETTLED, now);
      }
    }
    if (this.phase === RoundPhase.DRAWN && [...this.items.values()].every((i) => i.result === 'pass')) {
      this._become(RoundPhase.PASSED, now);
    }
    return out;
  }

  _missingStatements() {
    const out = new Set(this.peers.filter((_, j) => !this.commits.has(j)));
    for (const k of this.chunks) if (!this.reduced.has(k)) out.add(this.peers[k]);
    this.carry.forEach((c, i) => {
      if (!this.carried.has(i)) out.add(c.peer);
    });
    return out;
  }

  /** reveal-after-all. @param {number} now @returns {Decision[]} */
  _reveal(now) {
    const held = (/** @type {Map<number, Signed>} */ m, /** @type {number} */ k) => /** @type {Signed} */ (m.get(k)).statement;
    this.seen = st.seen(this.peers.map((_, j) => held(this.commits, j)), this.chunks.map((k) => held(this.reduced, k)),
      this.carry.map((_, c) => held(this.carried, c)));
    /** @type {st.Reveal} */
    const r = { kind: st.Kind.REVEAL, head: this._head(), nonce: this._nonce, seen: this.seen };
    const signed = this._sign(st.encode(r));
    this.reveals.set(this.rank, signed);
    this._held.set(slot(r), signed);
    this._become(RoundPhase.REVEALED, now);
    return [{ type: 'send', signed, audited: null }];
  }

  /** @returns {Decision[]} */
  _badReveals() {
    /** @type {Decision[]} */
    const out = [];
    for (const [j, signed] of this.reveals) {
      const commit = /** @type {Signed} */ (this.commits.get(j));
      const r = /** @type {st.Reveal} */ (st.parse(signed.statement));
      const c = /** @type {st.Contribution} */ (st.parse(commit.statement));
      if (!same(st.nonceHash(r.nonce), c.nonceHash) && !this.proven.has(this.peers[j])) {
        out.push({ type: 'proof', kind: 'bad-reveal', first: commit, second: signed });
        out.push(...this._prove(this.peers[j], 'bad-reveal', this.me));
      }
    }
    return out;
  }

  /** seen-agree, then the draw. @param {number} now @returns {Decision[]} */
  _draw(now) {
    /** @type {Decision[]} */
    const out = [];
    const reveal = (/** @type {number} */ j) => /** @type {st.Reveal} */ (st.parse(/** @type {Signed} */ (this.reveals.get(j)).statement));
    const seen = /** @type {Uint8Array} */ (this.seen);
    const differ = this.peers.filter((_, j) => !same(reveal(j).seen, seen));
    if (differ.length) {
      for (const p of differ) {
        if (!this._asked.has(p)) {
          this._asked.add(p);
          out.push({ type: 'ask', peer: p });
        }
      }
      return out;
    }
    const nonces = this.peers.map((_, j) => reveal(j).nonce);
    this.seed = draw.seed(this.run, this.step, this.round, this.context.digest, this.prev, seen, nonces);
    this.audited = draw.audited(this.seed, this.oneIn);
    const priv = this.peers.map((_, j) => {
      const c = st.parse(/** @type {Signed} */ (this.commits.get(j)).statement);
      return c.kind === st.Kind.CONTRIBUTION && c.private;
    });
    const carriedShares = this.carry.map((c) => c.shares[c.peers.indexOf(c.peer)]);
    const assignment = draw.assign(this.seed, this.shares, { blocks: this.blocks, audited: this.audited,
      private: priv, carried: carriedShares });
    this._items(assignment);
    this.drawnAt = now;
    this._become(RoundPhase.DRAWN, now);
    for (const item of this.items.values()) {
      if (item.auditor === this.me) {
        item.asked = true;
        out.push(recompute(item, 'assigned'));
      }
    }
    const early = this._earlyAudits;
    this._earlyAudits = [];
    for (const [sender, signed] of early) {
      const a = /** @type {st.Audit} */ (st.parse(signed.statement));
      try {
        out.push(...this._auditResult(signed, a, now));
      } catch (e) {
        if (!(e instanceof AuditRefused)) throw e;
        out.push({ type: 'refuse', peer: sender, code: e.code, message: e.message });
      }
    }
    return out;
  }

  /** @param {draw.Assignment} assignment */
  _items(assignment) {
    for (const [j, a] of assignment.contributions) {
      const held = /** @type {Signed} */ (this.commits.get(j));
      const c = /** @type {st.Contribution} */ (st.parse(held.statement));
      this._add(st.Item.CONTRIBUTION, j, held, { digests: c.chunks, data: c.data }, a, this.round, j, this.shares);
    }
    for (const [place, a] of assignment.carried) {
      const held = /** @type {Signed} */ (this.carried.get(place));
      const c = /** @type {st.Contribution} */ (st.parse(held.statement));
      const entry = this.carry[place];
      this._add(st.Item.CONTRIBUTION, place, held, { digests: c.chunks, data: c.data }, a, entry.round,
        entry.peers.indexOf(entry.peer), entry.shares);
    }
    for (const [k, a] of assignment.reductions) {
      const held = /** @type {Signed} */ (this.reduced.get(k));
      const r = /** @type {st.Reduced} */ (st.parse(held.statement));
      this._add(st.Item.REDUCTION, k, held, { digests: [r.digest], data: st.ABSENT }, a, this.round, k, this.shares);
    }
  }

  /**
   * @param {number} item @param {number} index @param {Signed} held @param {Outcome} claim
   * @param {number} auditor @param {number} round @param {number} rank @param {readonly number[]} shares
   */
  _add(item, index, held, claim, auditor, round, rank, shares) {
    const author = st.parse(held.statement).head.author;
    this.items.set(hex(st.statementHash(held.statement)), { item, index, author, auditor: this.peers[auditor], held,
      claim, round, rank, shares, accusation: null, result: null, own: null, asked: false });
  }

  /** The attempt was abandoned: audits stop. @param {number} now */
  cancel(now) {
    if (this.phase !== RoundPhase.SETTLED && this.phase !== RoundPhase.CANCELLED) this._become(RoundPhase.CANCELLED, now);
  }

  /** Whom the round waits for (the machine's `missing`; this peer never). @returns {Set<string>} */
  waitingFor() {
    /** @type {Set<string>} */
    let out = new Set();
    if (this.phase === RoundPhase.COMMITTING) out = this._missingStatements();
    else if (this.phase === RoundPhase.REVEALED) out = new Set(this.peers.filter((_, j) => !this.reveals.has(j)));
    else if (this.phase === RoundPhase.DRAWN || this.phase === RoundPhase.DISPUTED) {
      for (const i of this.items.values()) if (i.result === null && !this.proven.has(i.auditor)) out.add(i.auditor);
    }
    out.delete(this.me);
    return out;
  }

  /** The items (hex of `of`) whose recompute is out and unanswered. */
  get recomputing() {
    return new Set([...this.items].filter(([, i]) => i.asked && i.own === null).map(([of]) => of));
  }
}

/**
 * @param {number} round @param {readonly string[]} peers @param {readonly number[]} shares @param {number} blocks
 * @returns {Context}
 */
function context(round, peers, shares, blocks) {
  const empty = new Set();
  peers.forEach((_, k) => {
    const [first, end] = chunkBlocks(blocks, shares, k);
    if (first === end) empty.add(k);
  });
  return { round, peers: [...peers], shares: [...shares], digest: st.rosterDigest(peers, shares), empty };
}

/** Why a contribution commit's digests do not fit its roster ('' when they do). @param {st.Contribution} c @param {Context} ctx */
function layout(c, ctx) {
  const n = ctx.peers.length;
  if (c.chunks.length !== n) return `${c.chunks.length} chunk digests for a roster of ${n}`;
  const share = ctx.shares[ctx.peers.indexOf(c.head.author)];
  for (let k = 0; k < n; k++) {
    const want = share === 0 || ctx.empty.has(k);
    if (absent(c.chunks[k]) !== want) {
      return `chunk ${k}'s digest must be ${want ? 'absent' : 'present'} (share ${share}, chunk ` +
        `${ctx.empty.has(k) ? 'empty' : 'not empty'})`;
    }
  }
  if (absent(c.data) !== (share === 0 || c.private)) return 'the data digest is absent exactly for a share of 0 or private data';
  return '';
}

/** @param {AuditItem} item @param {'assigned' | 'check'} why @returns {Recompute} */
function recompute(item, why) {
  return { type: 'recompute', of: st.statementHash(item.held.statement), item: item.item, index: item.index,
    author: item.author, round: item.round, rank: item.rank, shares: item.shares, why };
}

/** @param {AuditItem} item @param {Result} result @returns {Concluded} */
function concluded(item, result) {
  return { type: 'concluded', item: item.item, index: item.index, author: item.author, auditor: item.auditor, result };
}

/**
 * The value at `key`, set to `value` first when there is none.
 * @template K, V
 * @param {Map<K, V>} map @param {K} key @param {V} value
 */
function setDefault(map, key, value) {
  const held = map.get(key);
  if (held !== undefined) return held;
  map.set(key, value);
  return value;
}
