// ESLint over the project's JavaScript (docs/TESTING.md, "How the JavaScript is checked").
// `npm run check` in this folder runs it from the repository root with `-c`, so the patterns
// below are relative to the root; then tsc (tsconfig.json, tsconfig.worker.json).
import js from '@eslint/js';
import globals from 'globals';

// The files that run as a module Worker: worker globals (self, postMessage), no DOM.
const WORKERS = [
  'static/js/train/worker.js',
  'static/js/model/genworker.js',
  'static/js/numerics/wasmhelper.js',
  'server/daisychain/bench/wasmpool_worker.mjs', // served under /bench/ to a page's Worker
  'tests/pages/fault_worker.js', // the test-only training worker (tests/repo_route.py serves it)
];
// Test-only browser modules: the test pages and the trace replay (which Node runs too).
const TEST_BROWSER = ['tests/pages/**/*.js', 'tests/js/traces/**/*.js'];

export default [
  { linterOptions: { reportUnusedDisableDirectives: 'error' } },
  {
    files: ['static/js/**/*.js', ...TEST_BROWSER, 'tests/js/**/*.mjs', 'tests/firefox/*.mjs',
      'server/**/*.mjs'],
    ...js.configs.recommended,
    languageOptions: { ecmaVersion: 2022, sourceType: 'module' },
    rules: {
      ...js.configs.recommended.rules,
      // `_` names a value a signature or a loop needs but the body does not (setOuter(_outer) of
      // a replica that ignores it; `for (const _ of text)` counting code points)
      'no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // beyond the recommended set: each is clean on the tree and catches a class of defect
      eqeqeq: ['error', 'smart'],
      'no-var': 'error',
      'prefer-const': 'error',
      'no-new': 'error',
      'no-throw-literal': 'error',
      'no-unused-expressions': 'error',
      'no-template-curly-in-string': 'error',
      'array-callback-return': 'error',
      'no-implicit-globals': 'error',
      'no-eval': 'error',
      'no-implied-eval': 'error',
    },
  },
  {
    files: ['static/js/**/*.js', ...TEST_BROWSER],
    ignores: WORKERS,
    languageOptions: { globals: globals.browser },
  },
  {
    files: ['tests/js/**/*.mjs', 'tests/firefox/*.mjs', 'server/**/*.mjs'],
    ignores: WORKERS,
    languageOptions: { globals: globals.node },
  },
  { files: WORKERS, languageOptions: { globals: globals.worker } },
];
