// Outer runs on the JavaScript protocol machine (docs/PROTOCOL.md, "Outer runs"): every trace in
// tests/vectors/protocol_outer/ (written by protocol_traces.outer from the Python machine)
// replays to exactly the Python effects; a machine that reduces an outer round with the per-step
// rule fails the replay; a machine whose replica cannot train outer runs (the page's) refuses the
// config with rule page-outer; and runconfig's outerRuns option accepts and refuses outer configs
// exactly as Python's runconfig does, message and hint included.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { plantedFailures, python } from './protocol_helpers.mjs';
import { REPO } from './helpers.mjs';
import { TraceMismatch, buildMachine, replay } from './traces/playback.js';
import { TraceReplica } from './traces/trace_replica.js';
import { Machine, sameConfig } from '../../static/js/p2p/machine/machine.js';
import { settings as machineSettings } from '../../static/js/p2p/machine/settings.js';
import { trainsOuterRuns } from '../../static/js/p2p/machine/replica.js';
import { eventFromJson } from './traces/jsonform.js';
import * as M from '../../static/js/p2p/messages.js';
import * as R from '../../static/js/p2p/runconfig.js';

const DIR = path.join(REPO, 'tests', 'vectors', 'protocol_outer');
const TRACES = readdirSync(DIR).filter((n) => n.endsWith('.json')).sort()
  .map((file) => ({ file, trace: JSON.parse(readFileSync(path.join(DIR, file), 'utf8')) }));
const byName = (name) => TRACES.find((t) => t.trace.name === name).trace;

test('there are outer traces, named as their files, each configuring an outer run', () => {
  assert.ok(TRACES.length >= 1);
  for (const { file, trace } of TRACES) {
    assert.equal(`${trace.name}.json`, file);
    const configs = trace.steps.map((s) => s.event)
      .filter((e) => (e.event === 'message' && e.text.includes('"type":"config"')) || e.event === 'lead');
    assert.ok(configs.length > 0, `${file} configures no run`);
    const cfg = configs[0].event === 'lead' ? configs[0].config : JSON.parse(configs[0].text);
    assert.equal(cfg.sync, 'outer', file);
  }
});

for (const { file, trace } of TRACES) {
  test(`outer trace ${file} replays to exactly the Python effects`, async () => {
    const events = await replay(trace);
    assert.equal(events, trace.steps.length);
    assert.ok(events > 0);
  });
}

// One line planted in a copy of static/js/: the outer replay must name where it breaks.
const PLANTED = [
  ['the per-step rule reduces an outer round', 'p2p/machine/attempt.js',
    'const reduced = this.outer ? weightedMean(parts, weights)',
    'const reduced = false ? weightedMean(parts, weights)',
    /^outer-rounds: step \d+ \(frame at 1\): effects\[0\]\.sha256: expected "/],
  ['an outer round times out after one step timeout', 'p2p/machine/machine.js',
    'a.deadline = this.now + t.step_timeout_s * rounds;',
    'a.deadline = this.now + t.step_timeout_s;',
    /^outer-peer-lost: step \d+ \(frame at 9\.5\): next deadline 39, expected 129$/],
  ['an unweighted outer mean', 'outer/mean.js',
    'const out = tokens.map((t) => t / g);', 'const out = tokens.map((t) => (t > 0 ? 1 : 0));',
    /^outer-join: step \d+ \(frame at 4\): effects\[0\]\.sha256: expected "/],
];

for (const [what, file, from, to, expected] of PLANTED) {
  test(`a planted bug fails the outer replay: ${what}`, async () => {
    const failures = await plantedFailures(file, from, to, TRACES);
    assert.ok(failures.length > 0, 'no outer trace noticed the planted bug');
    assert.match(failures[0], expected);
  });
}

test('a machine whose replica cannot train outer runs (the page) refuses the config: page-outer', async () => {
  const trace = byName('outer-rounds');
  // The trace replica without setOuter: what the page's replica is to the machine.
  const pageLike = new TraceReplica();
  pageLike.setOuter = undefined;
  assert.ok(!trainsOuterRuns(pageLike) && trainsOuterRuns(new TraceReplica()));
  const machine = new Machine(machineSettings(trace.setup), pageLike);
  let refusal = null;
  for (const step of trace.steps) {
    const effects = await machine.handle(eventFromJson(step.event));
    refusal = effects.find((f) => f.type === 'send-message' && f.message.type === 'error');
    if (refusal) break;
  }
  assert.ok(refusal, 'the outer config was not refused');
  assert.equal(refusal.message.code, 'incompatible');
  assert.equal(refusal.message.hint, R.PAGE_OUTER_HINT);
  assert.equal(machine.config, null, 'the page stays in the lobby');
  // ... and the trace's replay notices: the config's answer is a ready, not an error.
  await assert.rejects(replay(trace, { build: (setup) => {
    const m = buildMachine(setup);
    m.replica.setOuter = undefined;
    return m;
  } }), TraceMismatch);
});

test('a config that differs only in its sync mode or outer loop is another run', () => {
  const cfg = (extra) => M.parse(JSON.stringify(raw(extra)));
  const outerRun = cfg({ sync: 'outer', outer: outer() });
  assert.ok(sameConfig(outerRun, cfg({ sync: 'outer', outer: outer() })));
  assert.ok(sameConfig(cfg(), cfg({ sync: 'step' })));
  assert.ok(!sameConfig(cfg(), outerRun) && !sameConfig(outerRun, cfg()));
  for (const other of [outer(4), outer(3, 0.5), outer(3, 0.7, 0.5)]) {
    assert.ok(!sameConfig(outerRun, cfg({ sync: 'outer', outer: other })), JSON.stringify(other));
  }
});

// ---------------------------------------------------------------------------------------------
// runconfig with outerRuns: Python's rules, messages and hints (tests/p2p/test_outer_config.py
// holds the page's default, page-outer, against Python the same way).

const SHA = '5a'.repeat(32);
const ARGS = { tokenizerSha256: SHA, vocabSize: 2048 };

function raw(extra = {}) {
  return {
    run: '0123456789abcdef', preset: null,
    model: { vocab_size: 2048, width: 64, layers: 2, heads: 4, seq_len: 64, batch: 4, mlp_mult: 4 },
    optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.1, clip: 1.5 },
    steps: 30, seed: 7, data: 'builtin', tokenizer_sha256: SHA, resume_step: 0,
    resume_hash: null, global_batch: 8, shares_by: 'speed', type: 'config', ...extra,
  };
}
const outer = (steps = 3, lr = 0.7, momentum = 0.9) => ({ steps, lr, momentum });

const CASES = {
  'per-step': raw(),
  outer: raw({ sync: 'outer', outer: outer() }),
  'outer-H1-averaging': raw({ sync: 'outer', outer: outer(1, 1.0, 0.0) }),
  'outer-H-at-most': raw({ sync: 'outer', outer: outer(Math.floor((2 ** 24 - 1) / 30)) }),
  'unknown-sync': raw({ sync: 'stream', outer: outer() }),
  'H-zero': raw({ sync: 'outer', outer: outer(0) }),
  'H-past-2^24': raw({ sync: 'outer', outer: outer(Math.floor((2 ** 24 - 1) / 30) + 1) }),
  'lr-zero': raw({ sync: 'outer', outer: outer(3, 0) }),
  'lr-f32-zero': raw({ sync: 'outer', outer: outer(3, 1e-46) }),
  'lr-past-10': raw({ sync: 'outer', outer: outer(3, 10.5) }),
  'momentum-one': raw({ sync: 'outer', outer: outer(3, 0.7, 1) }),
  'momentum-negative': raw({ sync: 'outer', outer: outer(3, 0.7, -0.25) }),
  'overlap-half': raw({ sync: 'outer', outer: { ...outer(), overlap: 0.5 } }),
  'overlap-past-1': raw({ sync: 'outer', outer: { ...outer(), overlap: 1.25 } }),
  'cut-batch': raw({ sync: 'outer', outer: { ...outer(), cut: 'batch' } }),
  'cut-unknown': raw({ sync: 'outer', outer: { ...outer(), cut: 'lanes' } }),
  'outer-memory-cap': raw({ sync: 'outer', outer: outer(),
    model: { vocab_size: 2048, width: 1024, layers: 8, heads: 16, seq_len: 256, batch: 4, mlp_mult: 4 } }),
};

const PY_PARSE = `
import json, sys
from daisychain.p2p import runconfig
from daisychain.wire import messages
cases = json.load(sys.stdin)
out = {}
for name, obj in cases.items():
    cfg = messages.parse(json.dumps(obj))
    try:
        run = runconfig.parse(cfg, tokenizer_sha256="${SHA}", vocab_size=2048)
    except runconfig.Incompatible as exc:
        out[name] = {"rule": exc.rule, "message": exc.message, "hint": exc.hint}
        continue
    o = run.outer
    out[name] = {"outer": None if o is None else
                 {"innerSteps": o.inner_steps, "lr": o.lr, "momentum": o.momentum,
                  "overlap": o.overlap, "cut": o.cut},
                 "mib": run.footprint.total / 2**20}
print(json.dumps(out))
`;

function jsParse(obj, options) {
  try {
    const run = R.parse(M.parse(JSON.stringify(obj)), { ...ARGS, ...options });
    return { outer: run.outer === null ? null : { ...run.outer }, mib: run.footprint.totalMb };
  } catch (exc) {
    if (!(exc instanceof R.Incompatible)) throw exc;
    return { rule: exc.rule, message: exc.message, hint: exc.hint };
  }
}

test('with outerRuns, runconfig accepts and refuses outer configs exactly as Python does', () => {
  const py = python(PY_PARSE, CASES);
  const rules = new Set();
  for (const [name, obj] of Object.entries(CASES)) {
    assert.deepEqual(jsParse(obj, { outerRuns: true }), py[name], name);
    rules.add(py[name].rule ?? 'ok');
  }
  assert.deepEqual([...rules].sort(),
    ['max-memory', 'ok', 'outer-cut', 'outer-lr', 'outer-momentum', 'outer-overlap', 'outer-steps',
      'sync']);
  assert.deepEqual(py.outer.outer, { innerSteps: 3, lr: 0.7, momentum: 0.9, overlap: 0, cut: 'share' });
  assert.deepEqual(py['overlap-half'].outer,
    { innerSteps: 3, lr: 0.7, momentum: 0.9, overlap: 0.5, cut: 'share' });
  assert.equal(py['cut-batch'].outer.cut, 'batch');
  assert.ok(py['overlap-half'].mib > py.outer.mib, 'the measured weights and the carry');
});

test('without outerRuns (the page), the same valid outer configs are refused with page-outer', () => {
  const py = python(PY_PARSE, CASES);
  for (const [name, obj] of Object.entries(CASES)) {
    const page = jsParse(obj, {});
    if (py[name].rule === undefined && py[name].outer !== null) {
      assert.equal(page.rule, 'page-outer', name);
    } else {
      assert.deepEqual(page, py[name], name); // per-step runs and every protocol refusal
    }
  }
});
