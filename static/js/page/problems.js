// The "Problems" panel of the page at `/` (see context.js): every error the page meets (mesh,
// signaling, server refusals, worker, run, data), each with its hint, in the order they came.
// The section is hidden while the list is empty; the list is an assertive live region, so a
// screen reader announces a problem when it appears. The same message repeated (a reconnect
// loop, one refusal per channel) is counted on its first line instead of listed again.

import { h } from './dom.js';

export function mount(root, page) {
  const list = h('ul', { class: 'problems', 'aria-live': 'assertive', 'aria-relevant': 'additions' });
  const clear = h('button', { type: 'button', class: 'quiet', text: 'Clear the list' });
  root.append(h('h2', { text: 'Problems' }), list, clear);
  root.hidden = true;
  const shown = new Map(); // "message\nhint" -> {item, times}

  clear.addEventListener('click', () => {
    list.replaceChildren();
    shown.clear();
    root.hidden = true;
  });

  page.addEventListener('error', (e) => {
    const { message, hint, source } = e.detail;
    const key = `${message}\n${hint}`;
    const seen = shown.get(key);
    if (seen !== undefined) {
      seen.times += 1;
      seen.badge.textContent = ` (${seen.times} times)`;
      return;
    }
    const badge = h('span', { class: 'times' });
    const item = h('li', { 'data-source': source ?? 'page' },
      h('span', { class: 'message', text: message }), badge,
      hint ? h('span', { class: 'hint', text: hint }) : null);
    shown.set(key, { item, times: 1, badge });
    list.append(item);
    root.hidden = false;
  });
}
