// Load the WGSL kernels from /kernels/ and build their compute pipelines (docs/KERNELS.md).
//
// The browser and the Python peer read the very same kernels/*.wgsl files. The bind group layout
// is explicit (it must match the file's header), not derived from the shader, so a kernel that
// stops using a buffer still binds exactly what the host passes. Compilation errors are read
// from getCompilationInfo() and raised as KernelError naming the kernel and the first message.

export const KERNEL_BASE = '/kernels/';

/** A kernel failed to load, compile or dispatch on this device (the message names it). */
export class KernelError extends Error {
  constructor(message) {
    super(message);
    this.name = 'KernelError';
  }
}

/** The WGSL text of kernels/<name>.wgsl under `base`. */
export async function fetchKernelSource(name, base = KERNEL_BASE) {
  const url = `${base}${name}.wgsl`;
  const response = await fetch(url, { cache: 'no-cache' });
  if (!response.ok) {
    throw new KernelError(
      `kernel ${name}: GET ${url} answered ${response.status}; is the page served by ` +
        'the DaisyChain server (python -m daisychain.server)?',
    );
  }
  return response.text();
}

const BUFFER_TYPES = { uniform: 'uniform', read: 'read-only-storage', write: 'storage' };

/** One compiled compute pipeline (entry point `main`, bind group 0). */
export class ComputeKernel {
  constructor(gpu, name, pipeline, layout) {
    this.gpu = gpu;
    this.name = name;
    this.pipeline = pipeline;
    this.layout = layout;
  }

  /**
   * Encodes one dispatch into `pass` with `buffers` bound to bindings 0, 1, ... in order: each a
   * GPUBuffer (bound whole) or a span {buffer, offset, size} of one (how a chain's slices and
   * params slots share a buffer; offsets are multiples of 256 bytes, gpu/chain.js).
   */
  encode(pass, buffers, groups) {
    const bindGroup = this.gpu.device.createBindGroup({
      layout: this.layout,
      entries: buffers.map((b, binding) => ({
        binding,
        resource: b instanceof GPUBuffer ? { buffer: b } : { buffer: b.buffer, offset: b.offset,
          size: b.size },
      })),
    });
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(...groups);
  }
}

/**
 * Compiles kernels/<name>.wgsl (or `source`) with its `override` constants. `bindings` lists
 * group 0's buffers in order: "uniform", "read" (read-only storage) or "write" (read_write).
 */
export async function compileKernel(gpu, name, bindings, { source, constants = {}, base } = {}) {
  const code = source ?? (await fetchKernelSource(name, base));
  const device = gpu.device;
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ label: name, code });
  const info = await module.getCompilationInfo();
  const errors = info.messages.filter((m) => m.type === 'error');
  const scopeError = await device.popErrorScope();
  if (errors.length || scopeError) {
    const first = errors.length
      ? `line ${errors[0].lineNum}: ${errors[0].message}`
      : scopeError.message;
    throw new KernelError(
      `kernel ${name}: the device rejected the WGSL (${first}); the next backend in line is used`,
    );
  }
  const layout = device.createBindGroupLayout({
    label: name,
    entries: bindings.map((kind, binding) => ({
      binding,
      visibility: GPUShaderStage.COMPUTE,
      buffer: { type: BUFFER_TYPES[kind] },
    })),
  });
  let pipeline;
  try {
    pipeline = await device.createComputePipelineAsync({
      label: name,
      layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: 'main', constants },
    });
  } catch (exc) {
    throw new KernelError(`kernel ${name}: pipeline creation failed (${exc.message})`);
  }
  return new ComputeKernel(gpu, name, pipeline, layout);
}
