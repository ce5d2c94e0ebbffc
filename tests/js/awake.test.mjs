// Awake while training (static/js/page/wakelock.js, issue 46) without a browser: its state machine
// driven with a fake `navigator.wakeLock` and a fake `document` (each request settles a macrotask
// later, as a browser's does). Every transition, a refusal, the API missing, the lock taken again
// when the tab is visible again after the browser released it, the release at the run's end and
// when the person turns it off; and planted copies of wakelock.js (no re-acquire, no release at the
// end, a request from a hidden tab, a refusal retried in a loop, a late lock kept after the run,
// a missing API taken for "wanted") each caught by the scenario that guards against it. The page
// with Chromium's real wake lock: tests/page/test_page_wake_lock.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Awake } from '../../static/js/page/wakelock.js';
import { plantedCopy } from './protocol_helpers.mjs';

class FakeSentinel extends EventTarget {
  constructor() {
    super();
    this.released = false;
    this.type = 'screen';
  }

  /** As the browser's: released at once, `release` fired once. */
  release() {
    if (!this.released) {
      this.released = true;
      this.dispatchEvent(new Event('release'));
    }
    return Promise.resolve();
  }
}

class FakeWakeLock {
  constructor() {
    this.requests = []; // the type of each request()
    this.sentinels = []; // each lock granted
    this.refuse = null; // an Error to reject the next requests with
    this.hold = false; // true: requests wait until answer() is called
    this.waiting = [];
  }

  request(type) {
    this.requests.push(type);
    return new Promise((resolve, reject) => {
      const answer = () => {
        if (this.refuse) {
          reject(this.refuse);
        } else {
          const s = new FakeSentinel();
          this.sentinels.push(s);
          resolve(s);
        }
      };
      if (this.hold) this.waiting.push(answer);
      else setImmediate(answer);
    });
  }

  answer() {
    for (const a of this.waiting.splice(0)) a();
  }
}

class FakeDocument extends EventTarget {
  constructor() {
    super();
    this.visibilityState = 'visible';
  }

  /** The tab goes to the background: the browser releases every screen lock. */
  hide(lock) {
    this.visibilityState = 'hidden';
    this.dispatchEvent(new Event('visibilitychange'));
    for (const s of lock.sentinels) s.release();
  }

  show() {
    this.visibilityState = 'visible';
    this.dispatchEvent(new Event('visibilitychange'));
  }
}

const settle = async () => {
  for (let i = 0; i < 5; i += 1) await new Promise((resolve) => setTimeout(resolve, 2));
};

function notAllowed() {
  return Object.assign(new Error('Wake Lock permission request denied'), { name: 'NotAllowedError' });
}

/** A machine on fakes, with its log and its `change` events counted. */
function make(AwakeClass, options = {}) {
  const lock = 'wakeLock' in options ? options.wakeLock : new FakeWakeLock();
  const doc = new FakeDocument();
  const lines = [];
  const keeper = new AwakeClass({ wakeLock: lock, document: doc, log: (l) => lines.push(l), ...options });
  let changes = 0;
  keeper.addEventListener('change', () => {
    changes += 1;
  });
  return { keeper, lock, doc, lines, changes: () => changes };
}

// Each scenario takes the Awake class (the real one, or a planted copy's) and asserts.
const scenarios = {
  async 'held while in a run, released at its end'(A) {
    const { keeper, lock, lines, changes } = make(A);
    assert.equal(keeper.state, 'off');
    assert.match(keeper.text(), /will be kept on while this device trains/);
    keeper.setRunning(true);
    assert.equal(keeper.state, 'wanted');
    assert.match(keeper.text(), /Asking the browser/);
    await settle();
    assert.equal(keeper.state, 'held');
    assert.deepEqual(lock.requests, ['screen']);
    const [s] = lock.sentinels;
    assert.equal(s.released, false);
    assert.equal(keeper.last, s);
    assert.equal(keeper.text(), 'The screen is kept on while this device trains.');
    keeper.setRunning(false);
    assert.equal(keeper.state, 'off');
    assert.equal(s.released, true, 'the run ended: the lock is released');
    await settle();
    assert.deepEqual(lock.requests, ['screen'], 'nothing asked after the run');
    assert.deepEqual(lines, ['off -> wanted', 'wanted -> held', 'held -> off']);
    assert.equal(changes(), 3, 'one change event per transition, none without one');
  },

  async 'taken again when the tab is visible after the browser released it'(A) {
    const { keeper, lock, doc, lines } = make(A);
    keeper.setRunning(true);
    await settle();
    doc.hide(lock);
    assert.equal(keeper.state, 'wanted', 'the browser released it: not held');
    assert.match(keeper.text(), /kept on again when this tab is in front/);
    await settle();
    assert.equal(lock.requests.length, 1, 'a hidden tab does not ask (it would be refused)');
    doc.show();
    await settle();
    assert.equal(keeper.state, 'held');
    assert.equal(lock.requests.length, 2);
    assert.equal(lock.sentinels[0].released, true);
    assert.equal(lock.sentinels[1].released, false);
    assert.equal(keeper.last, lock.sentinels[1]);
    assert.deepEqual(lines, ['off -> wanted', 'wanted -> held', 'held -> wanted', 'wanted -> held']);
  },

  async 'a run that starts in a hidden tab asks once the tab is visible'(A) {
    const { keeper, lock, doc } = make(A);
    doc.visibilityState = 'hidden';
    keeper.setRunning(true);
    await settle();
    assert.equal(keeper.state, 'wanted');
    assert.deepEqual(lock.requests, []);
    doc.show();
    await settle();
    assert.equal(keeper.state, 'held');
  },

  async 'the person turns it off and on again'(A) {
    const { keeper, lock } = make(A);
    keeper.setRunning(true);
    await settle();
    keeper.setEnabled(false);
    assert.equal(keeper.state, 'off');
    assert.equal(lock.sentinels[0].released, true, 'turned off: released');
    assert.match(keeper.text(), /not kept on \(you turned it off\): keep this tab in front/);
    await settle();
    assert.equal(lock.requests.length, 1);
    keeper.setEnabled(true);
    await settle();
    assert.equal(keeper.state, 'held');
    assert.equal(lock.requests.length, 2);
  },

  async 'turned off before the run: never asked'(A) {
    const { keeper, lock } = make(A, { enabled: false });
    keeper.setRunning(true);
    await settle();
    assert.equal(keeper.state, 'off');
    assert.deepEqual(lock.requests, []);
  },

  async 'a refusal is shown with what to do, and asked again only on coming back'(A) {
    const { keeper, lock, doc, lines } = make(A);
    lock.refuse = notAllowed();
    keeper.setRunning(true);
    try {
      await settle();
      assert.equal(keeper.state, 'refused');
      assert.match(keeper.text(), /refused to keep the screen on \(NotAllowedError\): keep this tab in front and the screen on, and plug the device in/);
      await settle();
      assert.equal(lock.requests.length, 1, 'a refusal is not retried in a loop');
    } catch (exc) {
      keeper.setRunning(false); // a planted loop stops asking
      throw exc;
    }
    lock.refuse = null; // plugged in, battery saver off
    doc.show();
    await settle();
    assert.equal(keeper.state, 'held');
    assert.deepEqual(lines, ['off -> wanted', 'the browser refused: NotAllowedError: Wake Lock permission request denied',
      'wanted -> refused', 'refused -> wanted', 'wanted -> held']);
  },

  async 'a refusal is forgotten at the next run'(A) {
    const { keeper, lock } = make(A);
    lock.refuse = notAllowed();
    keeper.setRunning(true);
    await settle();
    keeper.setRunning(false);
    assert.equal(keeper.state, 'off');
    lock.refuse = null;
    keeper.setRunning(true);
    await settle();
    assert.equal(keeper.state, 'held');
  },

  async 'a lock granted after the run ended is released at once'(A) {
    const { keeper, lock } = make(A);
    lock.hold = true;
    keeper.setRunning(true);
    keeper.setRunning(false);
    lock.answer();
    await settle();
    assert.equal(keeper.state, 'off');
    assert.equal(lock.sentinels[0].released, true);
    assert.equal(keeper.sentinel, null);
  },

  async 'no API: unavailable, saying what to do'(A) {
    const { keeper } = make(A, { wakeLock: undefined });
    assert.equal(keeper.available, false);
    assert.match(keeper.text(), /cannot be kept on \(this browser has no Screen Wake Lock\): while this device trains, keep this tab in front/);
    keeper.setRunning(true);
    assert.equal(keeper.state, 'unavailable');
    assert.match(keeper.text(), /keep this tab in front and the screen on, and plug the device in/);
    keeper.setRunning(false);
    assert.equal(keeper.state, 'off');
  },

  async 'no API over plain http: points to https'(A) {
    const { keeper } = make(A, { wakeLock: undefined, secure: false });
    keeper.setRunning(true);
    assert.equal(keeper.state, 'unavailable');
    assert.match(keeper.text(), /only over https .*: keep this tab in front/);
  },
};

for (const [name, scenario] of Object.entries(scenarios)) {
  test(name, () => scenario(Awake));
}

// Each planted defect of wakelock.js and the scenario that must catch it.
const PLANTS = [
  ['not taken again when the tab is visible', "    if (this.document.visibilityState !== 'visible') return;\n",
    '    return;\n', 'taken again when the tab is visible after the browser released it'],
  ['not released at the run end', '} else if (!this.wanted && this.sentinel !== null) {', '} else if (false) {',
    'held while in a run, released at its end'],
  ['asked from a hidden tab', " &&\n        this.document.visibilityState === 'visible') {", ') {',
    'a run that starts in a hidden tab asks once the tab is visible'],
  ['a refusal retried in a loop', '!this.pending && this.refusal === null &&', '!this.pending &&',
    'a refusal is shown with what to do, and asked again only on coming back'],
  ['a late lock kept after the run', '      this.sync(); // releases it at once', '      this.update(); //',
    'a lock granted after the run ended is released at once'],
  ['a missing API taken for wanted', "    else if (!this.available) next = 'unavailable';\n", '',
    'no API: unavailable, saying what to do'],
];

for (const [what, from, to, scenario] of PLANTS) {
  test(`planted: ${what} is caught by "${scenario}"`, async () => {
    const copy = plantedCopy('page/wakelock.js', from, to);
    try {
      const { Awake: Planted } = await import(copy.url('page/wakelock.js'));
      await assert.rejects(scenarios[scenario](Planted), assert.AssertionError);
    } finally {
      copy.dispose();
    }
  });
}
