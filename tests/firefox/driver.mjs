// The Firefox tests' driver (docs/BROWSERS.md, docs/TESTING.md "Firefox"): Debian's firefox-esr
// over WebDriver BiDi through puppeteer-core, driven by the Python test that starts this file.
// The Python side owns the servers, the peers and the network namespace, as in the Chromium
// tests; this process only moves a browser's tabs. It speaks JSON lines: one request per line
// on stdin, one reply per line on stdout, in order.
//
// Requests ({"id": int, "op": ..., ...}; parsed and validated in parseRequest, nowhere else):
//   launch   {executable, prefs: {name: value}, acceptInsecureCerts: bool} -> {version, pid}
//   open     {url, hosts: [host]} -> {tab, status}   (a new tab; requests to other hosts, console
//            errors, page errors and responses >= 400 are collected from then on)
//   evaluate {tab, fn, arg} -> {value}   (fn: a function's source, called with arg; async is
//            awaited; the value comes back as JSON)
//   report   {tab} -> {errors, failed, foreign}   (what was collected so far)
//   close    {tab} -> {}
//   quit     {} -> {}   (then the process exits; so does the end of stdin)
// Replies: {"id", "ok": true, "result"} or {"id", "ok": false, "error", "hint"}. A line that is
// not a valid request gets an error reply (id null when it had none), never silence.

import { createInterface } from 'node:readline';

const OPS = {
  launch: { executable: 'string', prefs: 'object', acceptInsecureCerts: 'boolean' },
  open: { url: 'string', hosts: 'array' },
  evaluate: { tab: 'number', fn: 'string', arg: 'any' },
  report: { tab: 'number' },
  close: { tab: 'number' },
  quit: {},
};

class RequestError extends Error {
  constructor(message, hint) {
    super(message);
    this.hint = hint;
  }
}

const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/** One line as {id, op, ...fields}, or a RequestError that says what is wrong with it. */
function parseRequest(line) {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (exc) {
    throw new RequestError(`not JSON: ${exc.message}`, 'send one JSON object per line');
  }
  if (typeOf(msg) !== 'object') throw new RequestError(`a request is an object, not ${typeOf(msg)}`, 'send {"id": 1, "op": ...}');
  if (!Number.isInteger(msg.id)) throw new RequestError('the request has no integer id', 'number each request');
  const fields = OPS[msg.op];
  if (fields === undefined || !Object.hasOwn(OPS, msg.op)) {
    throw new RequestError(`unknown op ${JSON.stringify(msg.op)}`, `one of ${Object.keys(OPS).join(', ')}`);
  }
  for (const [name, kind] of Object.entries(fields)) {
    if (!(name in msg)) throw new RequestError(`${msg.op} needs ${name}`, `a ${kind}`);
    if (kind !== 'any' && typeOf(msg[name]) !== kind) {
      throw new RequestError(`${msg.op}: ${name} is ${typeOf(msg[name])}, not ${kind}`, `a ${kind}`);
    }
  }
  const extra = Object.keys(msg).filter((k) => k !== 'id' && k !== 'op' && !(k in fields));
  if (extra.length > 0) throw new RequestError(`${msg.op}: unknown field ${extra.join(', ')}`, `its fields: ${Object.keys(fields).join(', ') || 'none'}`);
  return msg;
}

/** The browser and its tabs: one instance per process. */
class Driver {
  browser = null;
  tabs = new Map(); // id -> {page, errors, failed, foreign}
  nextTab = 1;

  tab(id) {
    const tab = this.tabs.get(id);
    if (tab === undefined) throw new RequestError(`no tab ${id}`, 'use the tab an open reply gave');
    return tab;
  }

  needBrowser() {
    if (this.browser === null) throw new RequestError('no browser yet', 'send launch first');
    return this.browser;
  }

  async launch({ executable, prefs, acceptInsecureCerts }) {
    if (this.browser !== null) throw new RequestError('the browser is already running', 'launch once per driver');
    const { default: puppeteer } = await import('puppeteer-core');
    this.browser = await puppeteer.launch({
      browser: 'firefox', executablePath: executable, headless: true,
      extraPrefsFirefox: prefs, acceptInsecureCerts,
    });
    // Firefox runs in a process group of its own (puppeteer starts it detached): its id lets the
    // test end it should this driver hang.
    return { version: await this.browser.version(), pid: this.browser.process()?.pid ?? null };
  }

  async open({ url, hosts }) {
    const page = await this.needBrowser().newPage();
    const tab = { page, errors: [], failed: [], foreign: [] };
    const id = this.nextTab++;
    this.tabs.set(id, tab);
    page.on('console', (m) => {
      if (m.type() === 'error') tab.errors.push(m.text());
    });
    page.on('pageerror', (exc) => tab.errors.push(`page error: ${exc.message ?? exc}`));
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (['http:', 'https:', 'ws:', 'wss:'].includes(u.protocol) && !hosts.includes(u.hostname)) {
        tab.foreign.push(r.url());
      }
    });
    page.on('response', (r) => {
      if (r.status() >= 400) tab.failed.push(`${r.status()} ${r.url()}`);
    });
    const response = await page.goto(url);
    return { tab: id, status: response?.status() ?? null };
  }

  async evaluate({ tab, fn, arg }) {
    const { page } = this.tab(tab);
    // The function's source and its argument as one expression: the value the page's promise
    // resolves to comes back serialized by the BiDi protocol.
    const value = await page.evaluate(`(${fn})(${JSON.stringify(arg ?? null)})`);
    return { value: value ?? null }; // undefined has no JSON: a function that returns nothing

  }

  report({ tab }) {
    const { errors, failed, foreign } = this.tab(tab);
    return { errors, failed, foreign };
  }

  async close({ tab }) {
    await this.tab(tab).page.close();
    this.tabs.delete(tab);
    return {};
  }

  async quit() {
    const browser = this.browser;
    this.browser = null;
    if (browser !== null) await browser.close();
    return {};
  }
}

async function main() {
  const driver = new Driver();
  const reply = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    let id = null;
    try {
      const request = parseRequest(line);
      id = request.id;
      reply({ id, ok: true, result: await driver[request.op](request) });
      if (request.op === 'quit') break;
    } catch (exc) {
      if (id === null) {
        try {
          const raw = JSON.parse(line);
          if (Number.isInteger(raw?.id)) id = raw.id;
        } catch { /* not JSON: the reply's id stays null */ }
      }
      reply({ id, ok: false, error: String(exc?.message ?? exc),
        hint: exc instanceof RequestError ? exc.hint : 'see the driver\'s stderr' });
    }
  }
  await driver.quit();
  // A quit ends the process even while the test keeps its end of stdin open.
  lines.close();
  process.stdin.destroy();
}

main().catch((exc) => {
  process.stderr.write(`driver failed: ${exc?.stack ?? exc}\n`);
  process.exit(1);
});
