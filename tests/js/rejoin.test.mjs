// The run a tab remembers (static/js/page/rejoin.js) without a browser: a fake
// sessionStorage. A tab that comes back into the run it was in learns why it had left (reloaded,
// frozen, disconnected); a run that ended for good, another run, a memory that is not ours
// (damaged JSON, a wrong run id, an unknown reason) or a storage that refuses every call are all
// "not rejoined", and the guards refuse wrong input. The page with Chromium: the reload and
// freeze tests of tests/browser/test_browser_lifecycle.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RUN_KEY, RunMemory, rejoinedText } from '../../static/js/page/rejoin.js';

class FakeStorage {
  constructor() {
    this.items = new Map();
  }

  getItem(k) {
    return this.items.has(k) ? this.items.get(k) : null;
  }

  setItem(k, v) {
    this.items.set(k, String(v));
  }

  removeItem(k) {
    this.items.delete(k);
  }
}

const RUN = '0123456789abcdef';
const OTHER = 'fedcba9876543210';

test('a reloaded tab is back in the run it was in, and says why', () => {
  const storage = new FakeStorage();
  const before = new RunMemory(storage);
  assert.equal(before.entered(RUN), null, 'the first time in a run is no rejoin');
  before.leaving('reloaded');
  // The reloaded page: a new RunMemory over the same storage.
  const after = new RunMemory(storage);
  assert.equal(after.entered(RUN), 'reloaded');
  assert.match(rejoinedText('reloaded', 'py-lead'),
    /^Rejoined py-lead’s run by itself: this tab was reloaded\./);
  // Entering again without leaving (the same session's second phase event) is no new rejoin.
  assert.equal(after.entered(RUN), 'disconnected');
});

test('the first reason to leave is kept: a freeze that ends in a lost connection was a freeze', () => {
  const m = new RunMemory(new FakeStorage());
  m.entered(RUN);
  m.leaving('frozen');
  m.leaving('disconnected');
  assert.equal(m.entered(RUN), 'frozen');
  assert.match(rejoinedText('frozen', 'A'), /the browser had paused this tab/);
});

test('another run, or a run that ended for good, is no rejoin', () => {
  const m = new RunMemory(new FakeStorage());
  m.entered(RUN);
  m.leaving('disconnected');
  assert.equal(m.entered(OTHER), null, 'a different run is followed, not rejoined');
  m.ended(OTHER);
  assert.equal(m.read(), null, 'forgotten once it ended');
  assert.equal(m.entered(RUN), null);
  m.ended(OTHER); // another run's end leaves this one's memory alone
  assert.deepEqual(m.read(), { run: RUN, why: null });
});

test('leaving outside a run remembers nothing', () => {
  const m = new RunMemory(new FakeStorage());
  m.leaving('reloaded');
  assert.equal(m.read(), null);
  assert.equal(m.entered(RUN), null);
});

test('a memory that is not ours is ignored, never trusted', () => {
  for (const text of ['{not json', 'null', '[]', '{"run": 5, "why": null}',
    '{"run": "0123456789ABCDEF", "why": null}', '{"run": "0123", "why": null}',
    `{"run": "${RUN}", "why": "bored"}`, `{"run": "${RUN}"}`]) {
    const storage = new FakeStorage();
    storage.setItem(RUN_KEY, text);
    const m = new RunMemory(storage);
    assert.equal(m.read(), null, text);
    assert.equal(m.entered(RUN), null, text);
  }
});

test('a storage that refuses every call: the page still works, it only cannot say so', () => {
  const refusing = {
    getItem() { throw new Error('SecurityError'); },
    setItem() { throw new Error('QuotaExceededError'); },
    removeItem() { throw new Error('SecurityError'); },
  };
  for (const storage of [refusing, null]) {
    const m = new RunMemory(storage);
    assert.equal(m.entered(RUN), null);
    m.leaving('reloaded');
    m.ended(RUN);
    assert.equal(m.entered(RUN), null);
  }
});

test('wrong input is refused with what was given', () => {
  const m = new RunMemory(new FakeStorage());
  assert.throws(() => m.entered('not-a-run'), /not a run id: "not-a-run"/);
  assert.throws(() => m.leaving(/** @type {any} */ ('bored')), /not a way of leaving a run: "bored"/);
});
