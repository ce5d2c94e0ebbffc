// The keep panel's pure parts (static/js/page/keep.js, opfs.js) without a browser: the names of
// downloads and saves, the hint a refused checkpoint gets, and a save that must never lose the
// previous one when its write fails (an in-memory stand-in for an OPFS directory). The panel
// itself, with real OPFS and checkpoints: tests/page/test_page_checkpoint.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileName, refusalHint } from '../../static/js/page/keep.js';
import { KEEP, SavedStates, parseName, saveName } from '../../static/js/page/opfs.js';

test('download and save names carry the run and the step', () => {
  assert.equal(fileName('0123456789abcdef', 40), 'daisychain-0123456789abcdef-step40.safetensors');
  const name = saveName('0123456789abcdef', 40, 1700000000000);
  assert.deepEqual(parseName(name), { run: '0123456789abcdef', step: 40, at: 1700000000000 });
  for (const other of ['notes.txt', '0123-step4.safetensors', 'ABC-step4-1.safetensors', `${name}.crswap`]) {
    assert.equal(parseName(other), null, other);
  }
});

test('a refused checkpoint gets the hint of its cause', () => {
  const tok = 'ab'.repeat(32);
  assert.match(refusalHint('x: trained with tokenizer 0f0f..., this run uses ab...', tok), /tokenizer abababababab/);
  assert.match(refusalHint("x: the checkpoint's vocabulary has 300 tokens", tok), /tokenizer/);
  assert.match(refusalHint('x: weight hash 1... does not match the recorded 2...; the file is corrupted', tok), /damaged/);
  assert.match(refusalHint('x: header length 99 exceeds the file (8 bytes); the file is truncated', tok), /damaged/);
  assert.match(refusalHint("x: metadata field 'format' is missing", tok), /written by DaisyChain/);
});

// An OPFS directory in memory: createWritable() commits on close(), as the real one does.
class MemoryDir {
  constructor() {
    this.files = new Map();
    this.failNextWrite = false;
  }
  async getFileHandle(name, { create = false } = {}) {
    if (!this.files.has(name)) {
      if (!create) throw new Error('NotFoundError');
      this.files.set(name, new Uint8Array());
    }
    const dir = this;
    return {
      kind: 'file',
      async getFile() {
        const bytes = dir.files.get(name);
        return { size: bytes.length, arrayBuffer: async () => bytes.slice().buffer };
      },
      async createWritable() {
        let pending = new Uint8Array();
        return {
          async write(b) {
            if (dir.failNextWrite) {
              dir.failNextWrite = false;
              throw Object.assign(new Error('quota'), { name: 'QuotaExceededError' });
            }
            pending = b.slice();
          },
          async close() { dir.files.set(name, pending); },
          async abort() {},
        };
      },
    };
  }
  async removeEntry(name) {
    if (!this.files.delete(name)) throw new Error('NotFoundError');
  }
  async *entries() {
    for (const name of [...this.files.keys()]) yield [name, await this.getFileHandle(name)];
  }
}

test('saves keep the newest two; a failed write keeps the previous save and leaves no file', async () => {
  const dir = new MemoryDir();
  const store = new SavedStates(dir);
  for (const step of [2, 4, 6]) await store.write(Uint8Array.of(step), { run: 'ab', step, at: 1000 + step });
  let saves = await store.list();
  assert.equal(KEEP, 2);
  assert.deepEqual(saves.map((s) => s.step), [6, 4]);
  assert.deepEqual([...(await store.read(saves[0].name))], [6]);
  dir.failNextWrite = true;
  await assert.rejects(store.write(Uint8Array.of(8), { run: 'ab', step: 8, at: 1008 }), /quota/);
  saves = await store.list();
  assert.deepEqual(saves.map((s) => s.step), [6, 4], 'the previous saves are untouched');
  assert.equal(dir.files.size, 2, 'the failed save left no file');
  dir.files.set(saveName('ab', 10, 1010), new Uint8Array()); // a crash before the commit
  assert.deepEqual((await store.list()).map((s) => s.step), [6, 4], 'an uncommitted save is not offered');
  await store.remove(saves[1].name);
  assert.deepEqual((await store.list()).map((s) => s.step), [6]);
});

test('a crash between a save and its clean-up leaves three saves; pruning (on open) keeps the newest two', async () => {
  const dir = new MemoryDir();
  for (const step of [2, 4, 6]) dir.files.set(saveName('ab', step, 1000 + step), Uint8Array.of(step));
  dir.files.set(saveName('ab', 8, 1008), new Uint8Array()); // a write still in progress elsewhere
  const store = new SavedStates(dir);
  assert.deepEqual((await store.list()).map((s) => s.step), [6, 4, 2]);
  await store.prune();
  assert.deepEqual((await store.list()).map((s) => s.step), [6, 4]);
  assert.ok(dir.files.has(saveName('ab', 8, 1008)), 'an empty file (maybe a write in progress) is left alone');
});
