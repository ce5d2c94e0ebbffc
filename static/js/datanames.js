// @ts-check
// The names a run gives its training text (config.data): mirror of
// server/daisychain/datanames.py (docs/PROTOCOL.md, "Training data"). Pure: no I/O.
//
//   builtin                      the corpus shipped with DaisyChain
//   fineweb@REV                  FineWeb-Edu sample/10BT at dataset commit REV (40 hex)
//   hf:REPO@REV:SPLIT:COLUMN     a Hugging Face parquet dataset's split at commit REV, its text column
//   local:LABEL@DIGEST           the text files a server was started on (DIGEST: 40 hex of their sha256)
//
// Every dataset name has a 40-hex revision (REV or DIGEST): what an addressed /data request names.
// tests/vectors/datanames/cases.json holds the cases this file and the Python one agree on.

import { pyLen, pySlice, strRepr } from './p2p/pyrepr.js';

export const MAX_LENGTH = 200;
export const BUILTIN = 'builtin';

const REPO = '[A-Za-z0-9][\\w.-]{0,95}/[A-Za-z0-9][\\w.-]{0,95}';
const SPLIT = '[A-Za-z0-9][\\w.-]*(?:/[A-Za-z0-9][\\w.-]*)*';
const COLUMN = '[A-Za-z_][\\w.-]{0,63}';
const LABEL = '[A-Za-z0-9][\\w.-]{0,47}';
const FINEWEB_RE = /^fineweb@([0-9a-f]{40})$/;
const HUB_RE = new RegExp(`^hf:(${REPO})@([0-9a-f]{40}):(${SPLIT}):(${COLUMN})$`);
const LOCAL_RE = new RegExp(`^local:(${LABEL})@([0-9a-f]{40})$`);

/**
 * null for 'builtin', {kind, revision, repo, split, column, label, source} for a dataset name,
 * RangeError naming what is wrong for anything else. `source` is the `source` field of the
 * server's answers: 'fineweb' for FineWeb-Edu, 'dataset' for any other.
 * @param {unknown} data
 */
export function parse(data) {
  if (data === BUILTIN) return null;
  if (typeof data !== 'string') throw new RangeError('a data name is a string');
  // Code points, as Python counts them.
  if (pyLen(data) > MAX_LENGTH) throw new RangeError(`data name longer than ${MAX_LENGTH} characters`);
  let m = FINEWEB_RE.exec(data);
  if (m !== null) return named('fineweb', m[1], {});
  m = HUB_RE.exec(data);
  if (m !== null && !m[3].includes('..')) {
    return named('hub', m[2], { repo: m[1], split: m[3], column: m[4] });
  }
  m = LOCAL_RE.exec(data);
  if (m !== null) return named('local', m[2], { label: m[1] });
  throw new RangeError(`unknown data source ${strRepr(pySlice(data, 64))}`);
}

/**
 * @param {'fineweb' | 'hub' | 'local'} kind
 * @param {string} revision
 * @param {{repo?: string, split?: string, column?: string, label?: string}} parts
 */
function named(kind, revision, { repo = '', split = '', column = '', label = '' }) {
  return Object.freeze({ kind, revision, repo, split, column, label,
    source: kind === 'fineweb' ? 'fineweb' : 'dataset' });
}

/**
 * The text a name stands for, for people (as datanames.describe; `data` must parse).
 * @param {string} data
 */
export function describe(data) {
  const name = parse(data);
  if (name === null) return 'the built-in corpus';
  const rev = name.revision.slice(0, 12);
  if (name.kind === 'fineweb') return `FineWeb-Edu at revision ${rev}`;
  if (name.kind === 'hub') return `${name.repo} (${name.split}, column ${name.column}) at revision ${rev}`;
  return `the text files '${name.label}' (${rev})`;
}
