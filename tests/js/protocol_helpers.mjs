// Helpers for the protocol machine's Node tests (not a test file itself): the stored traces, a
// copy of static/js/ with one line changed (a planted bug), and the Python reference's answers
// for runconfig, codec and allreduce (the tests only spawn Python; static/ never does).
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO } from './helpers.mjs';

export const TRACES = path.join(REPO, 'tests', 'vectors', 'protocol');
/** The trace replay (test-only: tests/js/traces/), as a plantedCopy() module name. */
export const TRACE_REPLAY = 'tests/js/traces/playback.js';

/** Every stored trace: [{file, trace}] sorted by file name. */
export function loadTraces() {
  return readdirSync(TRACES).filter((n) => n.endsWith('.json')).sort()
    .map((file) => ({ file, trace: JSON.parse(readFileSync(path.join(TRACES, file), 'utf8')) }));
}

/**
 * A copy of the JavaScript in a temporary folder, laid out as in the repository (static/js/ and
 * the test-only modules of tests/js/traces/, which import static/js/ by relative paths), with
 * `from` replaced by `to` in `file` (`from` must occur exactly once). `file` and url(module) are
 * relative to static/js/, or to the repository when they start with `tests/`.
 * Returns {url(module), dispose()}.
 */
export function plantedCopy(file, from, to) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dc-plant-'));
  const at = (rel) => path.join(dir, ...(rel.startsWith('tests/') ? [rel] : ['static', 'js', rel]));
  for (const rel of ['static/js', 'static/package.json', 'tests/js/traces', 'tests/package.json']) {
    cpSync(path.join(REPO, rel), path.join(dir, rel), { recursive: true });
  }
  const target = at(file);
  const src = readFileSync(target, 'utf8');
  const count = src.split(from).length - 1;
  if (count !== 1) throw new Error(`${file}: the planted line occurs ${count} times, not once`);
  writeFileSync(target, src.replace(from, to));
  return {
    url: (module) => pathToFileURL(at(module)).href,
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * The failure messages, in trace order, of replaying every trace of `traces` ({trace} records)
 * on a plantedCopy(file, from, to) of the JavaScript machine (empty: no trace noticed).
 */
export async function plantedFailures(file, from, to, traces) {
  const copy = plantedCopy(file, from, to);
  try {
    const { replay } = await import(copy.url(TRACE_REPLAY));
    const failures = [];
    for (const { trace } of traces) {
      try {
        await replay(trace);
      } catch (exc) {
        failures.push(exc.message);
      }
    }
    return failures;
  } finally {
    copy.dispose();
  }
}

/** Runs Python code with the reference (PYTHON or python; PYTHONPATH=server), JSON in and out. */
export function python(script, input) {
  return runPython(['-c', script], input);
}

/** Runs a Python file of the repository (e.g. tests/protocol_variants.py), JSON in and out. */
export function pythonFile(file, input) {
  return runPython([path.join(REPO, file)], input);
}

function runPython(args, input) {
  const py = process.env.PYTHON ?? 'python';
  const res = spawnSync(py, args, {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: path.join(REPO, 'server') },
    input: JSON.stringify(input),
    encoding: 'utf-8',
    timeout: 120_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (res.status !== 0) throw new Error(`Python reference failed: ${res.error ?? ''}\n${res.stderr}`);
  return JSON.parse(res.stdout);
}
