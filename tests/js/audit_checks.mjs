// The checks of tests/vectors/audit/ (docs/TRUST.md) against the JavaScript twin, as functions of
// the modules and the parsed files, so that Node (tests/js/audit_vectors.test.mjs,
// tests/js/ed25519.test.mjs) and Chromium (tests/browser/test_browser_audit.py) run the same
// ones, and a planted bug (a module loaded from changed source) goes through them too. Each
// returns the names of the cases that differ: [] is a pass. No imports: it runs anywhere.

export const fromHex = (s) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));
export const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');

/** A statement record (statements.js's shape) from a vector's fields. */
export function fromFields(f) {
  const head = { run: f.run, step: f.step, round: f.round, author: f.author, roster: fromHex(f.roster) };
  switch (f.kind) {
    case 1:
      return { kind: 1, head, private: f.private, prev: fromHex(f.prev), nonceHash: fromHex(f.nonce_hash),
        data: fromHex(f.data), chunks: f.chunks.map(fromHex) };
    case 2:
      return { kind: 2, head, chunk: f.chunk, digest: fromHex(f.digest) };
    case 3:
      return { kind: 3, head, nonce: fromHex(f.nonce), seen: fromHex(f.seen) };
    default:
      return { kind: 4, head, item: f.item, index: f.index, of: fromHex(f.of), data: fromHex(f.data),
        digests: f.digests.map(fromHex) };
  }
}

/** A statement record as JSON-comparable plain values (digests as hex). */
function plain(s) {
  return JSON.stringify(s, (_, v) => (v instanceof Uint8Array ? hex(v) : v));
}

/** statements.js against statements.json. */
export async function statementMismatches(st, doc) {
  const bad = [];
  for (const c of doc.rosters) {
    if (hex(st.rosterDigest(c.peers, c.shares)) !== c.digest) bad.push(`roster ${c.shares.slice(0, 4)}`);
  }
  for (const c of doc.chunks) {
    if (hex(await st.chunkDigest(fromHex(c.payload))) !== c.digest) bad.push(`chunk of ${c.payload.length / 2} bytes`);
  }
  for (const c of doc.data) {
    if (hex(await st.dataDigest(c.rows)) !== c.digest) bad.push(`data ${JSON.stringify(c.rows)}`);
  }
  for (const c of doc.nonces) {
    const n = st.nonce(fromHex(c.secret), c.run, c.step, c.round);
    if (hex(n) !== c.nonce || hex(st.nonceHash(n)) !== c.nonce_hash) bad.push(`nonce of step ${c.step}`);
  }
  for (const c of doc.statements) {
    const s = fromFields(c.fields);
    if (hex(st.encode(s)) !== c.bytes) bad.push(`encode ${c.what}`);
    else if (plain(st.parse(fromHex(c.bytes))) !== plain(s)) bad.push(`parse ${c.what}`);
  }
  for (const c of doc.seen) {
    const got = st.seen(c.contributions.map(fromHex), c.reduced.map(fromHex), c.carried.map(fromHex));
    if (hex(got) !== c.seen) bad.push(`seen ${c.contributions.length}`);
  }
  for (const c of doc.refused) {
    try {
      st.parse(fromHex(c.bytes));
      bad.push(`parsed ${c.what}`);
    } catch (exc) {
      if (!(exc instanceof st.BadStatement) || exc.message !== c.error) bad.push(`refusal of ${c.what}: ${exc}`);
    }
  }
  return bad;
}

/** auditkey.js against keys.json (whichever Ed25519 this context uses). */
export async function keyMismatches(ak, doc) {
  const bad = [];
  for (const c of doc.keys) {
    const k = await ak.SigningKey.fromSecret(fromHex(c.secret));
    if (hex(ak.signingSeed(fromHex(c.secret))) !== c.seed || k.publicHex !== c.public) bad.push(`key of ${c.secret.slice(0, 8)}`);
  }
  for (const c of doc.signatures) {
    const k = await ak.SigningKey.fromSecret(fromHex(c.secret));
    const sig = await k.sign(fromHex(c.statement));
    if (hex(sig) !== c.signature || !(await ak.verify(k.public, fromHex(c.statement), sig))) {
      bad.push(`signature of ${c.statement.slice(0, 16)}`);
    }
  }
  for (const c of [...doc.rfc8032, ...doc.random]) {
    if (!(await ak.verify(fromHex(c.public), fromHex(c.message), fromHex(c.signature)))) bad.push(`verify ${c.public.slice(0, 8)}`);
  }
  for (const c of doc.public_keys) {
    try {
      ak.checkPublicKey(fromHex(c.key));
      if (c.error) bad.push(`accepted ${c.what}`);
    } catch (exc) {
      if (!c.error || !(exc instanceof ak.BadKey) || exc.message !== c.error) bad.push(`refused ${c.what}: ${exc.message}`);
    }
  }
  for (const c of doc.failing) {
    if (await ak.verify(fromHex(c.public), fromHex(c.message), fromHex(c.signature))) bad.push(`verified ${c.what}`);
  }
  return bad;
}

/** numerics/ed25519.js and sha512.js on their own, against keys.json. */
export function ed25519Mismatches(ed, sha, doc) {
  const bad = [];
  for (const c of doc.sha512) {
    if (hex(sha.sha512(fromHex(c.data))) !== c.digest) bad.push(`sha512 of ${c.data.length / 2} bytes`);
  }
  for (const c of [...doc.rfc8032, ...doc.random]) {
    const seed = fromHex(c.seed);
    const msg = fromHex(c.message);
    if (hex(ed.publicKey(seed)) !== c.public) bad.push(`public ${c.seed.slice(0, 8)}`);
    else if (hex(ed.sign(seed, msg)) !== c.signature) bad.push(`sign ${c.seed.slice(0, 8)}`);
    else if (!ed.verify(fromHex(c.public), msg, fromHex(c.signature))) bad.push(`verify ${c.seed.slice(0, 8)}`);
  }
  for (const c of doc.failing) {
    if (c.what !== 'a key of small order' && ed.verify(fromHex(c.public), fromHex(c.message), fromHex(c.signature))) {
      bad.push(`verified ${c.what}`);
    }
  }
  return bad;
}

/** draw.js against draw.json. */
export function drawMismatches(dr, doc) {
  const bad = [];
  for (const c of doc.seeds) {
    const s = dr.seed(c.run, c.step, c.round, fromHex(c.roster), fromHex(c.prev), fromHex(c.seen), c.nonces.map(fromHex));
    if (hex(s) !== c.seed) bad.push(`seed of step ${c.step}`);
  }
  for (const c of doc.u) {
    if (dr.u(fromHex(c.seed), fromHex(c.label)) !== c.u) bad.push(`u(${c.label})`);
  }
  for (const c of doc.audited) {
    if (dr.audited(fromHex(c.seed), c.one_in) !== c.audited) bad.push(`audited 1 in ${c.one_in}`);
  }
  for (const c of doc.assignments) {
    const a = dr.assign(fromHex(c.seed), c.shares, {
      blocks: c.blocks, audited: c.audited, private: c.private ?? undefined, carried: c.carried,
    });
    const got = JSON.stringify([a.contributions, a.carried, a.reductions]);
    if (got !== JSON.stringify([c.contributions, c.carried_auditors, c.reductions])) bad.push(`assign ${c.what}`);
  }
  return bad;
}
