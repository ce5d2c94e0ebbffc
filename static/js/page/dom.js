// Small DOM helpers shared by the page's panels (static/js/page/*.js): build an element in one
// expression, format seconds for people, and one-second tickers for the live counters
// (request waits, countdowns, reconnect delays). No framework: each panel owns its DOM.

/**
 * An element: `h('button', {type: 'button', onclick: f, 'aria-label': 'Copy'}, 'Copy')`.
 * Props: `class`, `text`, `on<event>` (a listener), `true` (a boolean attribute: `hidden`,
 * `disabled`, `readonly`), anything else as an attribute; null/undefined/false are skipped.
 * Children: nodes or strings; null, undefined and false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  el.append(...present(children));
  return el;
}

/**
 * `el`'s children replaced by `children`, skipped and flattened as `h` does them. The DOM's own
 * `replaceChildren` writes a null child as the text "null" (`cond ? node : null` showed it).
 */
export function fill(el, ...children) {
  el.replaceChildren(...present(children));
  return el;
}

/** Children as `h` and `fill` take them: arrays flattened; null, undefined and false skipped. */
function present(children) {
  return children.flat().filter((c) => c !== null && c !== undefined && c !== false);
}

/** "45 s", "2 min 5 s", "1 h 3 min": whole seconds, for counters a person reads. */
export function seconds(s) {
  const n = Math.max(0, Math.round(s));
  if (n < 60) return `${n} s`;
  if (n < 3600) return `${Math.floor(n / 60)} min${n % 60 ? ` ${n % 60} s` : ''}`;
  return `${Math.floor(n / 3600)} h${Math.floor((n % 3600) / 60) ? ` ${Math.floor((n % 3600) / 60)} min` : ''}`;
}

/** "12,300": a whole number with the reader's grouping. */
export function count(n) {
  return Math.round(n).toLocaleString('en-US');
}

/**
 * Calls `render()` now and then once a second until the returned stop() is called; a counter
 * that shows elapsed or remaining time re-reads the clock each time (a throttled background
 * tab's late tick shows the true time, not one second more).
 */
export function everySecond(render) {
  render();
  const timer = setInterval(render, 1000);
  return () => clearInterval(timer);
}
