// What the page's chains have in common (docs/KERNELS.md "Chains", "The forward chain"; mirrors
// server/daisychain/gpu/chain.py): a chain is GEMM dispatches and epilogues (the float work
// between two products, in kernels/softfloat.wgsl's integer arithmetic) recorded into ONE command
// encoder, with ONE readback of every output.
//
// - epilogueModule: the WGSL an epilogue compiles from (the soft-float library, the shared
//   epilogue.wgsl, the epilogue's own file), whole, so a test can plant a bug anywhere in it.
// - Recording: a chain's buffers by name (uploads, scratch, outputs), its dispatches, and run():
//   one submit, the outputs copied into one staging buffer, one mapAsync.
// - The packing helpers the layouts share with the GEMM (K-major int8 words, 256-byte slots).

import { compileKernel, fetchKernelSource } from './kernels.js';
import { f32 } from '../numerics/fmath.js';

export const SPAN_ALIGN = 256; // bytes: the binding offset every device accepts
export const SLOT_WORDS = SPAN_ALIGN / 4; // one params slot
export const ROW_MAX = 1024; // the longest row a parallel epilogue holds (EP_ROW_MAX)
export const MIN_STORAGE_BINDING = 64 * 1024 * 1024; // maxStorageBufferBindingSize's floor
const GRID_X = 65535; // the workgroups a dispatch may have along one axis
const LIBRARY_END = "// --- the gate's entry point"; // softfloat.wgsl: the library stops here

// Invocations per row of a parallel epilogue (epilogue.wgsl's EP_WG): narrow on an emulated
// adapter, where every workgroup barrier costs a context switch (measured on llvmpipe,
// docs/BENCHMARKS.md), a full workgroup on a real GPU. The bits are the same at every width.
export const EMULATED_WIDTH = 8;
export const GPU_WIDTH = 64;

/** EP_WG for `gpu` (a GpuDevice). */
export function epilogueWidth(gpu) {
  return gpu.emulated ? EMULATED_WIDTH : GPU_WIDTH;
}

/** The soft-float functions without softfloat.wgsl's gate entry point. */
export function softFloatLibrary(text) {
  const at = text.indexOf(LIBRARY_END);
  if (at < 0) throw new Error('softfloat.wgsl has lost its entry-point marker; cannot cut it');
  return text.slice(0, at);
}

/** The whole WGSL module of kernels/<name>.wgsl: soft-float library + epilogue.wgsl + file. */
export async function epilogueModule(name, base) {
  const [lib, shared, own] = await Promise.all(
    ['softfloat', 'epilogue', name].map((n) => fetchKernelSource(n, base)),
  );
  return softFloatLibrary(lib) + shared + own;
}

/** Compiles an epilogue (`source` replaces its whole module: the planted-bug tests). */
export async function compileEpilogue(gpu, name, bindings, { source, base, width } = {}) {
  const code = source ?? (await epilogueModule(name, base));
  return compileKernel(gpu, name, bindings, {
    source: code,
    constants: { EP_WG: width ?? epilogueWidth(gpu) },
  });
}

/** The dispatch of a one-workgroup-per-row epilogue (epilogue.wgsl's ep_row_of reads it). */
export function rowsGrid(rows) {
  return [Math.min(rows, GRID_X), Math.ceil(rows / GRID_X), 1];
}

/** `words` rounded up to whole 256-byte regions (at least one). */
export function alignedWords(words) {
  return Math.max(1, Math.ceil(words / SLOT_WORDS)) * SLOT_WORDS;
}

/** One params slot holding `values` (u32; floats pass as their bits: f32Bits), zero after. */
export function slot(values) {
  const out = new Uint32Array(SLOT_WORDS);
  values.forEach((v, i) => { out[i] = v >>> 0; });
  return out;
}

const bitsView = new DataView(new ArrayBuffer(4));
/** The float32 bit pattern of `x` (rounded to float32 first). */
export function f32Bits(x) {
  bitsView.setFloat32(0, f32(x), true);
  return bitsView.getUint32(0, true);
}

/** Int32 values (exponents) as an Int32Array of `row` zeros then `tail`. */
export function exps(row, tail = new Int32Array(0)) {
  const out = new Int32Array(row + tail.length);
  out.set(tail, row);
  return out;
}

/**
 * The (rows x k) int8 values of a K-major operand: `words` (Uint32Array) holds k4 x m4 words,
 * word [kk][r] = x[r, 4kk .. 4kk+3] little-endian (gemm.js packKMajor's layout).
 */
export function unpackKMajor(words, k4, m4, rows, k) {
  const bytes = new Int8Array(words.buffer, words.byteOffset, k4 * m4 * 4);
  const out = new Int8Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < k; c++) out[r * k + c] = bytes[((c >> 2) * m4 + r) * 4 + (c & 3)];
  }
  return out;
}

/** A span of `size` bytes of `buffer` from `offset` bound as one binding (kernels.js encode). */
export function span(buffer, offset, size) {
  return { buffer, offset, size };
}

/** A chain's one readback would exceed the device's largest buffer: run it another way. */
export class ChainTooLarge extends Error {
  constructor(message) {
    super(message);
    this.name = 'ChainTooLarge';
  }
}

/** The named outputs of one run, read back together. */
export class Outputs {
  constructor(bytes, offsets, sizes) {
    this.bytes = bytes;
    this.offsets = offsets;
    this.sizes = sizes;
  }

  /** Output `name` as a typed array (`Type`: Uint32Array, Int32Array, Float32Array). */
  words(name, Type = Uint32Array) {
    const start = this.offsets.get(name);
    if (start === undefined) throw new Error(`chain output ${name} was not recorded`);
    return new Type(this.bytes.buffer, start, this.sizes.get(name) / Type.BYTES_PER_ELEMENT);
  }

  /** The outputs a Recording.scoped(prefix) recorded, by their names without the prefix. */
  scoped(prefix) {
    return { words: (name, Type) => this.words(prefix + name, Type) };
  }
}

/**
 * A chain's buffers, dispatches and outputs, named once each. Every buffer goes back to the
 * pool after run(), whatever happens; the outputs come back in one staging buffer.
 */
export class Recording {
  constructor(gpu, pool) {
    this.gpu = gpu;
    this.pool = pool;
    this.owned = new Map(); // every buffer once, by a unique name
    this.sizes = new Map(); // the outputs read back, by the same names
    this.steps = []; // [kernel, bindings, groups]
  }

  #own(name, buffer) {
    if (this.owned.has(name)) throw new Error(`chain buffer ${name} recorded twice`);
    this.owned.set(name, buffer);
    return buffer;
  }

  upload(name, array, kind = 'storage') {
    return this.#own(name, this.pool.upload(array, kind));
  }

  /** A buffer of `size` bytes the chain writes and reads, not read back. */
  scratch(name, size) {
    return this.#own(name, this.pool.acquire(size));
  }

  /** A buffer of `size` bytes read back under `name`. */
  output(name, size) {
    this.sizes.set(name, size);
    return this.scratch(name, size);
  }

  dispatch(kernel, bindings, groups) {
    this.steps.push([kernel, bindings, groups]);
  }

  /**
   * The same recording under names that start with `prefix`: a second chain recorded into the
   * same submit (the probe step beside the training step, gpu/step_chain.js) with the first
   * one's layouts and names; read it back with Outputs.scoped(prefix).
   */
  scoped(prefix) {
    const rec = this;
    return {
      gpu: rec.gpu,
      pool: rec.pool,
      get steps() { return rec.steps; },
      upload: (name, array, kind) => rec.upload(prefix + name, array, kind),
      scratch: (name, size) => rec.scratch(prefix + name, size),
      output: (name, size) => rec.output(prefix + name, size),
      dispatch: (kernel, bindings, groups) => rec.dispatch(kernel, bindings, groups),
    };
  }

  /** One encoder, one compute pass of every dispatch in order, the copies, one readback. */
  async run() {
    const { gpu, pool } = this;
    const offsets = new Map();
    let total = 0;
    for (const [name, size] of this.sizes) {
      offsets.set(name, total);
      total += Math.ceil(size / 16) * 16;
    }
    const most = gpu.device.limits.maxBufferSize;
    const widest = Math.max(0, ...[...this.owned.values()].map((b) => b.size));
    if (total > most || widest > most) {
      pool.release(...this.owned.values());
      throw new ChainTooLarge(`a chain of ${this.steps.length} dispatches reads back ` +
        `${total} bytes in one buffer, past this device's ${most}`);
    }
    const staging = pool.acquire(Math.max(total, 16), 'staging');
    try {
      gpu.check();
      const encoder = gpu.device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      for (const [kernel, bindings, groups] of this.steps) kernel.encode(pass, bindings, groups);
      pass.end();
      for (const [name, size] of this.sizes) {
        encoder.copyBufferToBuffer(this.owned.get(name), 0, staging, offsets.get(name), size);
      }
      gpu.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ, 0, Math.max(total, 16));
      const bytes = new Uint8Array(staging.getMappedRange(0, Math.max(total, 16)).slice(0));
      staging.unmap();
      gpu.check();
      return new Outputs(bytes, offsets, this.sizes);
    } finally {
      pool.release(staging, ...this.owned.values());
    }
  }
}
