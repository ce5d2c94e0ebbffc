// @ts-check
// The line "The screen is kept on while this device trains" and the checkbox "Keep the screen on
// while training" (default on, remembered in localStorage) in the live panel's head (live.js
// mounts it there: the run's own place on the page). The
// decisions are wakelock.js's (Awake): this module feeds it each session's peer (`phase`,
// `finished`: peer.inRun) and the checkbox, and shows its text().
//
// Tests read `wake` (this module's export, as live.js `live`): the state, the words shown, and
// the latest WakeLockSentinel the browser gave (kept after its release, so a test can read its
// `released`).

import { h } from './dom.js';
import { Awake } from './wakelock.js';

export const ENABLED_KEY = 'daisychain.awake';

/** @typedef {import('../p2p/peer.js').BrowserPeer} BrowserPeer */

/** What tests and the console read: the state, the words shown, the latest sentinel. */
export const wake = {
  /** @type {import('./wakelock.js').AwakeState} */ state: 'off',
  text: '',
  /** @type {import('./wakelock.js').Sentinel | null} */ sentinel: null,
};

/** The remembered choice (default on). */
function readEnabled() {
  try {
    return localStorage.getItem(ENABLED_KEY) !== '0';
  } catch {
    return true; // storage refused (a private window's policy): the default
  }
}

/** @param {boolean} enabled */
function saveEnabled(enabled) {
  try {
    localStorage.setItem(ENABLED_KEY, enabled ? '1' : '0');
  } catch {
    // storage refused: the choice holds for this page only
  }
}

/**
 * The line and the checkbox in `root` (an element of the live panel); follows every session.
 * @param {HTMLElement} root
 * @param {EventTarget & {peer: BrowserPeer | null}} page  the page's context (context.js Page)
 */
export function mount(root, page) {
  const keeper = new Awake({
    wakeLock: navigator.wakeLock, document, secure: isSecureContext, enabled: readEnabled(),
  });
  const line = h('p', { class: 'awake-state', role: 'status', 'aria-live': 'polite' });
  const box = /** @type {HTMLInputElement} */ (h('input', { type: 'checkbox', id: 'awake-on' }));
  box.checked = keeper.enabled;
  box.addEventListener('change', () => {
    saveEnabled(box.checked);
    keeper.setEnabled(box.checked);
  });
  root.append(line, h('label', { for: 'awake-on' }, box, ' Keep the screen on while training'));

  const render = () => {
    wake.state = keeper.state;
    wake.sentinel = keeper.last;
    wake.text = keeper.text();
    line.textContent = wake.text;
    line.dataset.state = keeper.state;
  };
  keeper.addEventListener('change', render);
  // The 'wanted' line names the tab's visibility: say it again when that changes.
  document.addEventListener('visibilitychange', render);

  /** @type {BrowserPeer | null} the session's peer */
  let peer = null;
  /** @param {BrowserPeer | null} p */
  const attach = (p) => {
    peer = p;
    keeper.setRunning(Boolean(p?.inRun));
    if (!p) return;
    p.addEventListener('phase', () => {
      if (peer === p) keeper.setRunning(p.inRun);
    });
    p.addEventListener('finished', () => {
      if (peer === p) keeper.setRunning(false);
    });
  };
  page.addEventListener('session', (e) => attach(/** @type {CustomEvent} */ (e).detail.peer));
  attach(page.peer);
  render();
}
