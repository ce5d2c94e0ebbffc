// The Group panel at many devices (static/js/page/crowd.js): summaries by backend and speed,
// the devices that need a look (problems, then the slowest), the full list ordered the same way.
import test from 'node:test';
import assert from 'node:assert/strict';
import { FOLD_AT, ordered, problemOf, summarize, summaryLines } from '../../static/js/page/crowd.js';

const BACKENDS = ['webgpu-dp4a', 'js-cpu', 'numpy'];

/** 64 devices: this one, 2 disconnected, 1 connecting, speeds 100..6400 except 4 unmeasured. */
function crowd() {
  return Array.from({ length: 64 }, (_, i) => ({
    id: `p${i}`, name: i === 0 ? 'me (this device)' : `device-${String(i).padStart(2, '0')}`,
    backend: BACKENDS[i % 3], tokensPerS: i % 16 === 5 ? null : (64 - i) * 100,
    channel: i === 0 ? null : i === 7 || i === 9 ? 'closed' : i === 11 ? 'connecting' : 'open',
    self: i === 0,
  }));
}

test('summarize: backends most first, speed spread over the measured, problems counted', () => {
  const s = summarize(crowd());
  assert.equal(s.total, 64);
  assert.deepEqual(s.backends, [['webgpu-dp4a', 22], ['js-cpu', 21], ['numpy', 21]]);
  assert.equal(s.speeds.n, 60);
  assert.equal(s.speeds.slowest, 100); // device 63
  assert.equal(s.speeds.fastest, 6400); // this device
  assert.deepEqual(s.problems, { n: 3, disconnected: 2, connecting: 1 });
  // Problems first (disconnected before connecting), then the three slowest connected ones.
  assert.deepEqual(s.first.map((e) => e.id), ['p9', 'p7', 'p11', 'p63', 'p62', 'p61']);
  assert.deepEqual(summaryLines(s), [
    '64 devices: 22 webgpu-dp4a, 21 js-cpu, 21 numpy.',
    // 60 measured of 100..6400 less 1100, 2700, 4300, 5900: the 30th and 31st are 3200, 3300.
    'Speed: slowest 100, median 3,250, fastest 6,400 tokens/s (60 of 64 measured).',
    '3 need a look: 2 disconnected, 1 not connected yet.',
  ]);
});

test('ordered: problems, then slowest first, unmeasured last; this device is never a problem', () => {
  const list = ordered(crowd());
  assert.deepEqual(list.slice(0, 4).map((e) => e.id), ['p9', 'p7', 'p11', 'p63']);
  assert.deepEqual(list.slice(-4).map((e) => e.id), ['p5', 'p21', 'p37', 'p53']);
  assert.equal(problemOf({ self: true, channel: 'closed' }), null);
  assert.equal(problemOf({ self: false, channel: 'connecting' }), 'not connected yet');
  assert.equal(list.length, 64);
});

test('summaries of an unmeasured, healthy group say so; the fold starts past FOLD_AT', () => {
  const few = crowd().slice(0, FOLD_AT + 1).map((e) => ({ ...e, tokensPerS: null, channel: e.self ? null : 'open' }));
  const lines = summaryLines(summarize(few));
  assert.equal(lines[1], 'Speed: no device has said its speed yet.');
  assert.equal(lines[2], 'Every device is connected.');
  assert.equal(summarize(few).first.length, 0);
  assert.equal(summaryLines(summarize([{ id: 'a', name: 'a', backend: null, tokensPerS: 5, channel: 'closed', self: false }]))[2],
    '1 needs a look: 1 disconnected.');
});
