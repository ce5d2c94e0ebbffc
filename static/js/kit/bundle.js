// A small ES-module joiner for the inference kit: the project's own modules (and only the forms
// they use) become one classic-scope script that runs inside a single inline
// `<script type="module">`, so the kit needs no file besides itself and no network.
//
// Each module becomes a function scope whose result is a frozen exports object:
//   import { a, b as c } from './x.js'   ->  const { a, b: c } = __m["x.js"];
//   import * as ns from './x.js'         ->  const ns = __m["x.js"];
//   import('./x.js')                     ->  Promise.resolve(__m["x.js"])
//   export function|class|const|let f    ->  the declaration, f added to the exports
//   export { a, b as c }                 ->  added to the exports
//   export * from './x.js'               ->  x's exports merged in
// Modules run dependencies first, in the order they are first reached. Anything else (default
// exports or imports, `import.meta`, destructuring exports, cycles) is refused with the module's
// name, never silently mis-joined: the kit's test opens the result in a browser.

const IDENT = '[A-Za-z_$][\\w$]*';
const SPEC = '(?<q>[\'"])(?<spec>[^\'"]+)\\k<q>';
const RE = {
  named: new RegExp(`^import\\s*\\{([^}]*)\\}\\s*from\\s*${SPEC}\\s*;?`, 'gm'),
  namespace: new RegExp(`^import\\s*\\*\\s*as\\s+(${IDENT})\\s+from\\s*${SPEC}\\s*;?`, 'gm'),
  bare: new RegExp(`^import\\s*${SPEC}\\s*;?`, 'gm'),
  dynamic: new RegExp(`\\bimport\\(\\s*${SPEC}\\s*\\)`, 'g'),
  star: new RegExp(`^export\\s*\\*\\s*from\\s*${SPEC}\\s*;?`, 'gm'),
  list: /^export\s*\{([^}]*)\}\s*;?/gm,
  decl: new RegExp(`^export\\s+((?:async\\s+)?function\\s*\\*?|class|const|let|var)\\s+(${IDENT})`, 'gm'),
};

export class BundleError extends Error {
  constructor(message) {
    super(message);
    this.name = 'BundleError';
  }
}

/** Specifiers a module's source imports (static and dynamic), in source order. */
export function importsOf(source) {
  const found = [];
  for (const re of [RE.named, RE.namespace, RE.bare, RE.star, RE.dynamic]) {
    for (const m of source.matchAll(re)) found.push({ at: m.index, spec: m.groups.spec });
  }
  return found.sort((a, b) => a.at - b.at).map((f) => f.spec);
}

function aliases(list, where) {
  return list.split(',').map((s) => s.trim()).filter(Boolean).map((item) => {
    const m = item.match(new RegExp(`^(${IDENT})(?:\\s+as\\s+(${IDENT}))?$`));
    if (!m) throw new BundleError(`${where}: cannot join the import/export item '${item}'`);
    return [m[1], m[2] ?? m[1]];
  });
}

/**
 * One module's body as a function scope. `resolve(spec)` maps a specifier to its bundle key.
 * Returns the text `__m[key] = (() => { ... })();`.
 */
export function wrapModule(key, source, resolve) {
  const ref = (spec) => `__m[${JSON.stringify(resolve(spec))}]`;
  if (/\bimport\.meta\b/.test(source)) throw new BundleError(`${key}: import.meta cannot be joined`);
  const exported = [];
  const stars = [];
  let body = source.replace(/\r\n?/g, '\n');
  // with named groups the replacer's last argument is the groups object
  const g = (args) => args[args.length - 1];
  body = body.replace(RE.named, (_, list, ...rest) => {
    const { spec } = g(rest);
    const items = aliases(list, key).map(([a, b]) => (a === b ? a : `${a}: ${b}`));
    return `const { ${items.join(', ')} } = ${ref(spec)};`;
  });
  body = body.replace(RE.namespace, (_, name, ...rest) => `const ${name} = ${ref(g(rest).spec)};`);
  body = body.replace(RE.bare, () => '');
  body = body.replace(RE.dynamic, (...args) => `Promise.resolve(${ref(g(args).spec)})`);
  body = body.replace(RE.star, (...args) => {
    stars.push(ref(g(args).spec));
    return '';
  });
  body = body.replace(RE.list, (_, list) => {
    for (const [local, name] of aliases(list, key)) exported.push(`${name}: ${local}`);
    return '';
  });
  body = body.replace(RE.decl, (_, kind, name) => {
    exported.push(name);
    return `${kind} ${name}`;
  });
  const left = body.match(/^\s*(import|export)\b[^\n]*/m);
  if (left) throw new BundleError(`${key}: cannot join '${left[0].trim()}'`);
  const merged = [...stars, `{ ${exported.join(', ')} }`].join(', ');
  return `__m[${JSON.stringify(key)}] = (() => {\n${body}\nreturn Object.freeze(Object.assign(Object.create(null), ${merged}));\n})();\n`;
}

/**
 * Reads `entry` and everything it imports through `read(url) -> Promise<string>`; returns the
 * joined script. Keys are URLs relative to `root` (e.g. 'model/gpt.js'); every module must lie
 * under `root`.
 */
export async function bundle(entry, root, read) {
  const rootUrl = new URL(root);
  const keyOf = (url) => {
    if (!url.href.startsWith(rootUrl.href)) {
      throw new BundleError(`${url.href} lies outside ${rootUrl.href}; the kit joins only its own modules`);
    }
    return url.href.slice(rootUrl.href.length);
  };
  const order = [];
  const state = new Map(); // key -> 'visiting' | 'done'
  const texts = new Map();
  const visit = async (url, from) => {
    const key = keyOf(url);
    if (state.get(key) === 'done') return;
    if (state.get(key) === 'visiting') throw new BundleError(`import cycle through ${key} (from ${from})`);
    state.set(key, 'visiting');
    const source = await read(url.href);
    texts.set(key, source);
    for (const spec of importsOf(source)) {
      if (!spec.startsWith('.')) throw new BundleError(`${key}: import of '${spec}' is not a relative path`);
      await visit(new URL(spec, url), key);
    }
    state.set(key, 'done');
    order.push([key, url]);
  };
  await visit(new URL(entry), '<entry>');
  const parts = ['const __m = Object.create(null);\n'];
  for (const [key, url] of order) {
    parts.push(wrapModule(key, texts.get(key), (spec) => keyOf(new URL(spec, url))));
  }
  const script = parts.join('');
  if (/<\/script|<!--/i.test(script)) {
    // inside an HTML <script> element these would end it early or change how it is parsed
    throw new BundleError('a module contains "</script" or "<!--"; rewrite that text');
  }
  return script;
}
