// The check of tests/vectors/audit/contributions.json (docs/TRUST.md, "What an auditor
// recomputes, and its cost") against the JavaScript CPU tier, as a function of the modules and
// the parsed file, so that Node (tests/js/audit_contributions.test.mjs) and Chromium
// (tests/browser/test_browser_audit.py) run the same one, and a planted bug (a module loaded
// from changed source) goes through it too. Returns the names of what differs: [] is a pass.
// No imports: it runs anywhere.
//
// Per state: a worker replica started from the vectors' seed takes the vectors' local steps
// (lane 0 of each batch index) and its hash must be the state's; the lane offsets of the step
// it reads are the state's `offsets`. Per case: the replica's pieces, then its `compute`
// (modelreplica.js: the lanes through `builtinLane` at the state's batch index, the piece mean,
// the chunks) gives each chunk's digest, the float32 mean's digest and, through `tokenRows` and
// statements.js `dataDigest`, the data digest.

const ABSENT = '0'.repeat(64);
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');

/**
 * @param {object} vectors  contributions.json, parsed
 * @param {object} m  the modules' functions: {WorkerReplica, tokenRows} (p2p/modelreplica.js),
 *   {modelConfig} (model/config.js), {adamwConfig} (model/optim.js), {sampleBatch,
 *   sampleOffsets} (model/batches.js), {chunkDigest, dataDigest} (p2p/statements.js)
 * @param {object} options  makeWorker: the replica's worker factory; early: hand chunks over
 *   early (the page's path) or only with compute-done
 */
export async function contributionMismatches(vectors, m, { makeWorker, early = true }) {
  const bad = [];
  const { model, optim, seed } = vectors;
  const text = Int32Array.from(vectors.text);
  const B = model.batch;
  const T = model.seq_len;
  const replicas = [];
  for (const [i, s] of vectors.states.entries()) {
    const replica = new m.WorkerReplica({ tokenizerSha256: 'ab'.repeat(32), vocabSize: model.vocab_size,
      backend: 'js-cpu', makeWorker });
    await replica.start(m.modelConfig(model), m.adamwConfig(optim), seed);
    let hash = replica.hash;
    for (let k = 0; k < s.steps; k++) {
      const { x, y } = m.sampleBatch(text, B, T, seed, k, 0);
      ({ hash } = await replica.worker.step(x, y, { hash: true }));
    }
    if (hash !== s.hash) bad.push(`state ${i}: hash`);
    s.offsets.forEach((want, lane) => {
      const got = Array.from(m.sampleOffsets(text.length, B, T, seed, s.steps, lane));
      if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(`state ${i}: offsets of lane ${lane}`);
    });
    replicas.push(replica);
  }
  for (const c of vectors.cases) {
    const what = `state ${c.state}, shares ${c.shares}, rank ${c.rank}`;
    const replica = replicas[c.state];
    const index = vectors.states[c.state].steps;
    const order = { step: index + 1, rank: c.rank, shares: c.shares };
    const parts = replica.piecesOf(order);
    if (JSON.stringify(parts.map((p) => [p.lane, p.row, p.rows])) !== JSON.stringify(c.pieces)) {
      bad.push(`${what}: pieces`);
    }
    let r;
    let rows;
    try {
      const laneOf = (lane) => replica.builtinLane(text, lane, index);
      r = await replica.compute(order, laneOf, early ? () => {} : null);
      rows = m.tokenRows(parts.map((p) => replica.rowsOf(laneOf(p.lane), p)), T);
    } catch (exc) {
      bad.push(`${what}: raised ${exc}`);
      continue;
    }
    const chunks = await Promise.all(r.payloads.map(async (p) => hex(await m.chunkDigest(p))));
    chunks.forEach((d, k) => { if (d !== c.chunks[k]) bad.push(`${what}: chunk ${k}`); });
    if (chunks.length !== c.chunks.length) bad.push(`${what}: ${chunks.length} chunks`);
    const data = rows.length ? hex(await m.dataDigest(rows)) : ABSENT;
    if (data !== c.data) bad.push(`${what}: data`);
    const mean = r.mean ? hex(await m.chunkDigest(new Uint8Array(r.mean.buffer, r.mean.byteOffset,
      r.mean.byteLength))) : '';
    if (mean !== c.mean) bad.push(`${what}: mean`);
  }
  for (const replica of replicas) replica.close();
  return bad;
}
