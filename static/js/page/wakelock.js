// @ts-check
// The Screen Wake Lock (https://w3c.github.io/screen-wake-lock/) as a state machine: hold the
// screen lock while this device is in a run. The page's line
// and checkbox that use it: awake.js.
//
// Its dependencies come in (`navigator.wakeLock`, `document`, whether the page is a secure
// context), so tests/js/awake.test.mjs drives it with fakes. Its facts are `running` (this
// device is in a run: peer.inRun, from the run's configuration to its `finished`; a device that
// follows a step without computing must keep up with the run all the same), `enabled` (the
// person's "Keep the screen on while training"), the lock it holds, a request in flight and the
// last refusal. One function, update(), derives the state from them, logs "old -> new" and
// emits `change` only on a change:
//
//   off          not in a run, or the person turned it off: no lock is held or asked for
//   wanted       in a run and on, no lock yet: asking, or waiting for the tab to be visible
//                (the browser refuses a hidden tab, and releases the lock when the tab is hidden)
//   held         the browser keeps the screen on
//   refused      the browser refused the request (NotAllowedError: a permission policy, a battery
//                saver); asked again when the tab becomes visible again, or at the next run
//   unavailable  no Screen Wake Lock here: plain http on a network address (not a secure
//                context) or a browser without it; text() says what to do instead

/** @typedef {'off' | 'wanted' | 'held' | 'refused' | 'unavailable'} AwakeState */
/**
 * What the machine uses of a WakeLockSentinel.
 * @typedef {{released: boolean, release(): Promise<void>,
 *   addEventListener(type: 'release', listener: () => void): void}} Sentinel
 * What it uses of `navigator.wakeLock` (undefined or null: the API is missing).
 * @typedef {{request(type: 'screen'): Promise<Sentinel>}} WakeLockApi
 * What it uses of `document`.
 * @typedef {{visibilityState: string,
 *   addEventListener(type: 'visibilitychange', listener: () => void): void}} DocumentLike
 */

export class Awake extends EventTarget {
  /**
   * @param {object} o
   * @param {WakeLockApi | null | undefined} o.wakeLock  `navigator.wakeLock`
   * @param {DocumentLike} o.document
   * @param {boolean} [o.secure]  `isSecureContext` (only says why the API is missing)
   * @param {boolean} [o.enabled]  the person's choice (default on)
   * @param {(line: string) => void} [o.log]
   */
  constructor({ wakeLock, document, secure = true, enabled = true, log }) {
    super();
    this.wakeLock = wakeLock ?? null;
    this.document = document;
    this.secure = secure;
    this.enabled = enabled;
    this.log = log ?? ((line) => console.debug(`daisychain awake: ${line}`));
    this.running = false;
    /** @type {Sentinel | null} the lock held now */
    this.sentinel = null;
    /** @type {Sentinel | null} the latest lock the browser gave (released or not) */
    this.last = null;
    this.pending = false; // a request() in flight
    /** @type {{name: string, message: string} | null} the last refused request */
    this.refusal = null;
    /** @type {AwakeState} */
    this.state = 'off';
    document.addEventListener('visibilitychange', () => this.visibilityChanged());
  }

  /** Whether the browser has the Screen Wake Lock API here. */
  get available() {
    return this.wakeLock !== null;
  }

  /** Whether the lock should be held now. */
  get wanted() {
    return this.running && this.enabled && this.available;
  }

  /**
   * This device entered a run (true) or its run ended (false).
   * @param {boolean} running
   */
  setRunning(running) {
    if (running === this.running) return;
    this.running = running;
    if (running) this.refusal = null; // a new run asks afresh
    this.sync();
  }

  /**
   * The person turned "Keep the screen on while training" on or off.
   * @param {boolean} enabled
   */
  setEnabled(enabled) {
    if (enabled === this.enabled) return;
    this.enabled = enabled;
    if (enabled) this.refusal = null; // turned on again: ask again
    this.sync();
  }

  visibilityChanged() {
    // The browser released the lock when the tab was hidden: ask again once it is visible. A
    // refusal is tried again too (the person may have plugged in or left battery saver).
    if (this.document.visibilityState !== 'visible') return;
    this.refusal = null;
    this.sync();
  }

  /** Ask for the lock or release it, as the facts say; then update the state. */
  sync() {
    if (this.wanted && this.sentinel === null && !this.pending && this.refusal === null &&
        this.document.visibilityState === 'visible') {
      this.request();
    } else if (!this.wanted && this.sentinel !== null) {
      const s = this.sentinel;
      this.sentinel = null;
      s.release().catch((/** @type {any} */ exc) => this.log(`release failed: ${exc?.message ?? exc}`));
    }
    this.update();
  }

  request() {
    const api = this.wakeLock;
    if (api === null) return;
    this.pending = true;
    api.request('screen').then((s) => {
      this.pending = false;
      this.last = s;
      this.sentinel = s;
      s.addEventListener('release', () => {
        // Released by the browser (the tab hidden), or by sync(): either way not held now.
        if (this.sentinel === s) this.sentinel = null;
        this.update();
      });
      this.sync(); // releases it at once when the run ended while the browser answered
    }, (/** @type {any} */ exc) => {
      this.pending = false;
      this.refusal = { name: String(exc?.name ?? 'Error'), message: String(exc?.message ?? exc) };
      this.log(`the browser refused: ${this.refusal.name}: ${this.refusal.message}`);
      this.sync();
    });
  }

  /** The one transition: the state the facts say, logged and emitted only on a change. */
  update() {
    /** @type {AwakeState} */
    let next;
    if (!this.running || !this.enabled) next = 'off';
    else if (!this.available) next = 'unavailable';
    else if (this.sentinel !== null) next = 'held';
    else if (this.refusal !== null) next = 'refused';
    else next = 'wanted';
    const old = this.state;
    if (next === old) return;
    this.state = next;
    this.log(`${old} -> ${next}`);
    this.dispatchEvent(new Event('change'));
  }

  /** The line the page shows: whether the screen is kept on, and what to do when it is not. */
  text() {
    const instead = 'keep this tab in front and the screen on, and plug the device in';
    const why = this.secure
      ? 'this browser has no Screen Wake Lock'
      : 'browsers allow it only over https (see Readiness for this page’s https address)';
    switch (this.state) {
    case 'held':
      return 'The screen is kept on while this device trains.';
    case 'wanted':
      if (this.pending) return 'Asking the browser to keep the screen on…';
      return this.document.visibilityState === 'visible'
        ? 'The browser let the screen lock go: it is asked again when you come back to this tab.'
        : 'The screen will be kept on again when this tab is in front.';
    case 'refused':
      return `The browser refused to keep the screen on (${this.refusal?.name}): ${instead} ` +
        '(a battery saver can refuse it); it is asked again when you come back to this tab.';
    case 'unavailable':
      return `The screen cannot be kept on (${why}): ${instead}.`;
    case 'off':
      if (!this.enabled) return `The screen is not kept on (you turned it off): ${instead}.`;
      if (!this.available) {
        return `The screen cannot be kept on (${why}): while this device trains, ${instead}.`;
      }
      return 'The screen will be kept on while this device trains.';
    default:
      return '';
    }
  }
}
