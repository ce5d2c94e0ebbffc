// Saved states in the browser's private storage for this site (the Origin Private File System,
// navigator.storage.getDirectory()): the keep panel's automatic saves (keep.js), offered again
// after a reload. Nothing here knows the checkpoint format; the bytes are checkpoint.js's.
//
// Layout: one directory `daisychain-saves`, one file per save, named
// `RUN-stepSTEP-MILLIS.safetensors` (run id, step, Date.now() when it was written), so listing
// needs no index file that could disagree with the files.
//
// Crash safety: a save never overwrites. It writes a new file through createWritable(), whose
// data goes to a swap file and only replaces the (new, empty) file when close() commits it; only
// then are the older saves beyond the newest KEEP removed. A crash or a closed tab mid-write
// leaves at worst an empty or unfinished new file, never a damaged previous save, and a reader
// validates the bytes (checkpoint.js decodeCheckpoint) before trusting them: `list()` drops
// empty files. A crash after the commit but before the removal leaves KEEP + 1 complete saves;
// `open()` removes the oldest of those, so a reloaded page offers the newest KEEP.

const DIR = 'daisychain-saves';
export const KEEP = 2; // the newest saves kept; older ones are removed after each save
const NAME = /^([0-9a-f]{1,64})-step(\d{1,10})-(\d{1,16})\.safetensors$/;

/** Why this browser cannot keep saves (a sentence), or null when it can. */
export function unavailableReason() {
  if (globalThis.isSecureContext === false) {
    return 'browsers keep files for a page only over https (this page is plain http)';
  }
  if (typeof navigator === 'undefined' || !navigator.storage?.getDirectory) {
    return 'this browser has no private file storage for pages (OPFS)';
  }
  if (typeof FileSystemFileHandle === 'undefined' || !('createWritable' in FileSystemFileHandle.prototype)) {
    return "this browser's private file storage cannot write files from a page";
  }
  return null;
}

/** The file name of a save of `run` at `step`, written at `at` (ms since the epoch). */
export function saveName(run, step, at) {
  return `${run || 'run'}-step${step}-${at}.safetensors`;
}

/** {run, step, at} from a save's file name, or null for any other file. */
export function parseName(name) {
  const m = NAME.exec(name);
  return m === null ? null : { run: m[1], step: Number(m[2]), at: Number(m[3]) };
}

export class SavedStates {
  /** Resolves to a SavedStates, or rejects with a sentence and a hint when storage is refused. */
  static async open() {
    const why = unavailableReason();
    if (why !== null) throw Object.assign(new Error(why), { hint: 'automatic saves are off; use Download' });
    const root = await navigator.storage.getDirectory();
    const store = new SavedStates(await root.getDirectoryHandle(DIR, { create: true }));
    await store.prune();
    return store;
  }

  constructor(dir) {
    this.dir = dir;
    this.writing = Promise.resolve(); // saves are written one after another, in order
  }

  /** Every complete-looking save, newest first: {name, run, step, at, size}. */
  async list() {
    const out = [];
    for await (const [name, handle] of this.dir.entries()) {
      const info = parseName(name);
      if (info === null || handle.kind !== 'file') continue;
      const file = await handle.getFile();
      if (file.size === 0) continue; // a save that never committed its data
      out.push({ name, ...info, size: file.size });
    }
    return out.sort((a, b) => b.at - a.at || b.step - a.step);
  }

  /** Write a new save, then remove all but the newest KEEP; resolves to its {name, ...}. */
  write(bytes, { run, step, at = Date.now() }) {
    const done = this.writing.then(async () => {
      const name = saveName(run, step, at);
      const handle = await this.dir.getFileHandle(name, { create: true });
      const stream = await handle.createWritable();
      try {
        await stream.write(bytes);
        await stream.close(); // the commit: before it, the file is empty
      } catch (exc) {
        await stream.abort().catch(() => {});
        await this.dir.removeEntry(name).catch(() => {});
        throw exc;
      }
      await this.prune();
      return { name, run, step, at, size: bytes.length };
    });
    this.writing = done.catch(() => {});
    return done;
  }

  /** Remove the complete saves older than the newest KEEP (empty ones may be another tab's
   *  write in progress: they are left alone and never listed). */
  async prune() {
    const saves = await this.list();
    for (const old of saves.slice(KEEP)) await this.dir.removeEntry(old.name).catch(() => {});
  }

  /** The bytes of save `name` (a Uint8Array). */
  async read(name) {
    const file = await (await this.dir.getFileHandle(name)).getFile();
    return new Uint8Array(await file.arrayBuffer());
  }

  async remove(name) {
    await this.dir.removeEntry(name);
  }
}
