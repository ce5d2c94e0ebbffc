// The Group panel with many devices (readable at 64 and more): past FOLD_AT devices the panel
// says the group in a few lines (how many of each backend, the spread of speeds, how many have
// a problem), lists the devices that need a look first (no data channel, then the slowest),
// and folds the full list, itself ordered problems first, then slowest first. Pure functions
// over plain entries, so node tests and the page test feed them any number of devices.
//
// An entry: {id, name, backend (string or null), tokensPerS (number or null), channel
// ('open' | 'connecting' | 'closed' | null for this device), self (bool)}; or, for the run's
// devices table (live.js), `problem` (text or null: "hash differs") in place of `channel`.

export const FOLD_AT = 8; // up to this many devices the list is short enough to read whole
export const FIRST_SLOWEST = 3; // the slowest devices named above the fold

const PROBLEM_RANK = { closed: 0, connecting: 1 };

/** 'disconnected' or 'not connected yet' (or the entry's own `problem`) for an entry with a
 * problem, else null. */
export function problemOf(entry) {
  if ('problem' in entry) return entry.problem ?? null;
  if (entry.self) return null;
  if (entry.channel === 'closed') return 'disconnected';
  if (entry.channel === 'connecting') return 'not connected yet';
  return null;
}

/** Problems first (disconnected, then connecting), then the slowest first, unknown speeds last;
 * ties by name, so the order does not jump between renders. */
export function ordered(entries) {
  const rank = (e) => (problemOf(e) === null ? 2 : PROBLEM_RANK[e.channel] ?? 0);
  const speed = (e) => (typeof e.tokensPerS === 'number' && e.tokensPerS > 0 ? e.tokensPerS : Infinity);
  return [...entries].sort((a, b) => rank(a) - rank(b) || speed(a) - speed(b) ||
    a.name.localeCompare(b.name));
}

/**
 * The group in numbers: {total, backends: [[name, n], ...] most first, speeds: {n, slowest,
 * median, fastest} over the devices that said theirs (null when none did), problems: {n,
 * disconnected, connecting}, first: the entries to show above the fold}.
 */
export function summarize(entries) {
  const counts = new Map();
  for (const e of entries) {
    const key = e.backend || 'unknown';
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const backends = [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const known = entries.map((e) => e.tokensPerS).filter((t) => typeof t === 'number' && t > 0)
    .sort((a, b) => a - b);
  const speeds = known.length === 0 ? null : {
    n: known.length, slowest: known[0], fastest: known.at(-1),
    median: known.length % 2 ? known[(known.length - 1) / 2]
      : (known[known.length / 2 - 1] + known[known.length / 2]) / 2,
  };
  const troubled = entries.filter((e) => problemOf(e) !== null);
  const problems = { n: troubled.length, disconnected: troubled.filter((e) => e.channel === 'closed').length,
    connecting: troubled.filter((e) => e.channel === 'connecting').length };
  const list = ordered(entries);
  const slowest = list.filter((e) => problemOf(e) === null && typeof e.tokensPerS === 'number' &&
    e.tokensPerS > 0).slice(0, FIRST_SLOWEST);
  return { total: entries.length, backends, speeds, problems, first: [...ordered(troubled), ...slowest] };
}

const fmt = (n) => Math.round(n).toLocaleString('en-US');

/** The summary's lines for people: [devices by backend, speeds, problems]. */
export function summaryLines(s) {
  const lines = [`${s.total} devices: ${s.backends.map(([name, n]) => `${n} ${name}`).join(', ')}.`];
  lines.push(s.speeds === null ? 'Speed: no device has said its speed yet.'
    : `Speed: slowest ${fmt(s.speeds.slowest)}, median ${fmt(s.speeds.median)}, fastest ` +
      `${fmt(s.speeds.fastest)} tokens/s (${s.speeds.n} of ${s.total} measured).`);
  const p = s.problems;
  lines.push(p.n === 0 ? 'Every device is connected.'
    : `${p.n} need${p.n === 1 ? 's' : ''} a look: ` +
      [p.disconnected ? `${p.disconnected} disconnected` : '', p.connecting ? `${p.connecting} not connected yet` : '']
        .filter(Boolean).join(', ') + '.');
  return lines;
}

/**
 * Render `entries` into `box` (the Group panel's members box) with `list` (its `ul.members`)
 * and `row(entry)` (an `li`): the whole list as it is up to FOLD_AT devices; past that, the
 * summary, the devices that need a look, and the full list folded in a <details> (kept open
 * when the person opened it).
 */
export function renderCrowd(box, list, entries, row, h) {
  if (entries.length <= FOLD_AT) {
    list.replaceChildren(...entries.map(row));
    box.replaceChildren(list);
    return;
  }
  const s = summarize(entries);
  const wasOpen = box.querySelector('details.crowd-all')?.open ?? false;
  list.replaceChildren(...ordered(entries).map(row));
  const first = h('ul', { class: 'crowd-first', 'aria-label': 'Devices that need a look' },
    ...s.first.map((e) => {
      const li = row(e);
      const problem = problemOf(e);
      li.prepend(h('span', { class: `flag ${problem === null ? 'slow' : 'problem'}`,
        text: problem ?? 'slowest' }));
      return li;
    }));
  box.replaceChildren(
    h('div', { class: 'crowd-summary', role: 'status' }, ...summaryLines(s).map((text) => h('p', { text }))),
    s.first.length ? h('h3', { text: s.problems.n ? 'Problems and the slowest' : 'The slowest' }) : null,
    s.first.length ? first : null,
    h('details', { class: 'crowd-all', open: wasOpen },
      h('summary', { text: `All ${s.total} devices (problems and the slowest first)` }), list));
}
