// A WebGPU buffer pool that recycles buffers by size and usage, and can be poisoned.
//
// Mirrors server/daisychain/gpu/pool.py. Kernels must write every output cell they own. A kernel
// that instead assumes zeroed memory (`out += ...`, or a skipped cell left at 0) passes on fresh
// buffers, which WebGPU zero-fills, and fails only later on a recycled buffer. So before a sweep
// (the gates) the pool is poisoned: every free storage buffer is filled with 0xDEADBEEF, and
// while poisoned() runs, freshly created ones are too, so such a bug shows on the first case.

export const POISON_WORD = 0xdeadbeef;
const ALIGN = 16; // bytes: uniform bindings need 16, storage 4

const roundUp = (n) => Math.max(ALIGN, Math.ceil(n / ALIGN) * ALIGN);

export class BufferPool {
  constructor(gpu) {
    this.gpu = gpu;
    this.free = new Map(); // "size:usage" -> [GPUBuffer]
    this.poisonNew = false;
    this.created = 0; // buffers ever created (recycling is visible in this count)
  }

  static usage(kind) {
    const U = GPUBufferUsage;
    if (kind === 'uniform') return U.UNIFORM | U.COPY_DST;
    if (kind === 'staging') return U.MAP_READ | U.COPY_DST;
    return U.STORAGE | U.COPY_DST | U.COPY_SRC;
  }

  /** A buffer of at least `nbytes` (rounded up to 16); its contents are unspecified. */
  acquire(nbytes, kind = 'storage') {
    const usage = BufferPool.usage(kind);
    const size = roundUp(nbytes);
    const list = this.free.get(`${size}:${usage}`);
    if (list?.length) return list.pop();
    const buffer = this.gpu.device.createBuffer({ size, usage });
    this.created += 1;
    if (this.poisonNew && kind === 'storage') this.fill(buffer);
    return buffer;
  }

  release(...buffers) {
    for (const b of buffers) {
      const id = `${b.size}:${b.usage}`;
      if (!this.free.has(id)) this.free.set(id, []);
      this.free.get(id).push(b);
    }
  }

  /** A pooled buffer holding the bytes of the typed array `data` at offset 0. */
  upload(data, kind = 'storage') {
    const buffer = this.acquire(data.byteLength, kind);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const padded = bytes.length % 4 === 0 ? bytes : padTo4(bytes);
    this.gpu.queue.writeBuffer(buffer, 0, padded);
    return buffer;
  }

  fill(buffer) {
    this.gpu.queue.writeBuffer(buffer, 0, new Uint32Array(buffer.size / 4).fill(POISON_WORD));
  }

  /** Fills every free storage buffer with 0xDEADBEEF; returns how many were poisoned. */
  poison() {
    const storage = BufferPool.usage('storage');
    let count = 0;
    for (const list of this.free.values()) {
      for (const b of list) {
        if (b.usage === storage) {
          this.fill(b);
          count += 1;
        }
      }
    }
    return count;
  }

  /** Runs `fn` (async) with the free buffers poisoned and every new buffer poisoned too. */
  async poisoned(fn) {
    this.poison();
    const previous = this.poisonNew;
    this.poisonNew = true;
    try {
      return await fn();
    } finally {
      this.poisonNew = previous;
    }
  }
}

function padTo4(bytes) {
  const out = new Uint8Array((bytes.length + 3) & ~3);
  out.set(bytes);
  return out;
}
