// WebGPU adapter and device acquisition (docs/KERNELS.md, "Browser").
//
// acquireGpu() checks up front what the kernels need and returns a GpuDevice, or throws
// GpuUnavailable whose message says why and what to do (the backend shows it as the demotion
// reason of every WebGPU row, and the CPU mirror computes the same bits meanwhile). Device loss
// and uncaptured errors are never silent: they are recorded on the GpuDevice, reported to the
// listener, and `check()` (called by every product) throws once one happened. Works the same in
// a page and in a dedicated worker (navigator.gpu is on WorkerNavigator too); the training
// worker (static/js/train/) rebuilds a lost device and gates it again (docs/JS_MIRROR.md).

export const DP4A_FEATURE = 'packed_4x8_integer_dot_product';

const HINT =
  'the CPU mirror computes the same bits meanwhile; for WebGPU use a browser with WebGPU ' +
  'enabled (Chromium: --enable-unsafe-webgpu on Linux) on a device whose GPU it supports';

/** No usable WebGPU adapter/device (the message says why and what to do). */
export class GpuUnavailable extends Error {
  constructor(message) {
    super(message);
    this.name = 'GpuUnavailable';
  }
}

/** The device was lost or reported an uncaptured error: its results cannot be trusted. */
export class GpuFault extends Error {
  constructor(message) {
    super(message);
    this.name = 'GpuFault';
  }
}

function describeAdapter(adapter) {
  const info = adapter.info ?? {};
  const parts = [info.vendor, info.architecture, info.device, info.description].filter(Boolean);
  const fallback = info.isFallbackAdapter ?? adapter.isFallbackAdapter;
  const name = parts.length ? parts.join(' ') : 'unknown adapter';
  return fallback ? `${name} (fallback adapter)` : name;
}

/** A WebGPU device with the facts the backends report. */
export class GpuDevice {
  constructor(adapter, device, onEvent) {
    this.adapter = adapter;
    this.device = device;
    this.adapterName = describeAdapter(adapter);
    this.features = [...adapter.features].sort();
    this.wgslFeatures = [...(navigator.gpu.wgslLanguageFeatures ?? [])].sort();
    this.limits = {
      maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
      maxBufferSize: device.limits.maxBufferSize,
      maxComputeWorkgroupsPerDimension: device.limits.maxComputeWorkgroupsPerDimension,
    };
    this.faults = [];
    this.lost = null;
    this.onEvent = onEvent;
    // Resolves to the loss message once the device is lost (destroy() included).
    this.whenLost = device.lost.then((info) => {
      this.lost = `device lost (${info.reason || 'unknown'}): ${info.message}`;
      this.faults.push(this.lost);
      this.onEvent?.(this.lost);
      return this.lost;
    });
    device.addEventListener('uncapturederror', (event) => {
      const message = `uncaptured WebGPU error: ${event.error?.message ?? event.error}`;
      this.faults.push(message);
      this.onEvent?.(message);
    });
  }

  get queue() {
    return this.device.queue;
  }

  /**
   * Whether the "GPU" is the CPU pretending (SwiftShader, llvmpipe, a fallback adapter): parallel
   * work there runs on the same few cores and every workgroup barrier is expensive, so the
   * chains' epilogues run narrow (gpu/chain.js epilogueWidth).
   */
  get emulated() {
    const info = this.adapter.info ?? {};
    if (info.isFallbackAdapter ?? this.adapter.isFallbackAdapter) return true;
    return /swiftshader|llvmpipe|lavapipe|\(cpu,/i.test(this.adapterName);
  }

  /** Whether WGSL's dot4I8Packed is available (the DP4A path). */
  get hasDp4a() {
    return this.wgslFeatures.includes(DP4A_FEATURE);
  }

  /** Throws GpuFault if the device was lost or reported an uncaptured error. */
  check() {
    if (this.faults.length) throw new GpuFault(this.faults[0]);
  }

  /**
   * Whether `error` (thrown by work on this device) means the device failed rather than the
   * computation: a GpuFault, a recorded fault, or a loss that is reported within `graceMs`
   * (a rejected mapAsync() may arrive before device.lost resolves; a loaded machine can delay
   * that resolution, and the wait is paid only on an error path). An audit failure or a bad
   * argument on a healthy device is not a device failure and must not be retried on a rebuilt
   * one; an audit failure on a device that then reports its loss is (the lost device's output
   * was garbage).
   */
  async failed(error, graceMs = 1000) {
    if (error instanceof GpuFault || this.faults.length) return true;
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve(false), graceMs); });
    try {
      return await Promise.race([this.whenLost.then(() => true), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Why `navigator.gpu` is missing, by what the context knows (docs/BROWSERS.md): a page that is
 * not a secure context (plain http at a network address) is refused WebGPU by every browser; a
 * secure one has a browser without it, or with it switched off (Firefox 153 ESR on Linux, measured;
 * Safari before 26). The two need different remedies, so the message names the one that applies.
 */
export function noWebGpuReason(secureContext) {
  return secureContext
    ? 'WebGPU is not available here (navigator.gpu is missing: this browser has no WebGPU, or ' +
        'has it switched off)'
    : 'WebGPU is not available here (navigator.gpu is missing: browsers offer it only to a ' +
        'secure context, https:// or localhost, and this page is plain http)';
}

/**
 * The page's WebGPU device (throws GpuUnavailable). `onEvent(message)` hears about device loss
 * and uncaptured errors later on.
 */
export async function acquireGpu({ onEvent } = {}) {
  const gpu = globalThis.navigator?.gpu;
  if (!gpu) throw new GpuUnavailable(`${noWebGpuReason(globalThis.isSecureContext !== false)}; ${HINT}`);
  let adapter;
  try {
    adapter = await gpu.requestAdapter();
  } catch (exc) {
    throw new GpuUnavailable(`requestAdapter() failed (${exc.message}); ${HINT}`);
  }
  if (!adapter) {
    throw new GpuUnavailable(
      `no WebGPU adapter (navigator.gpu.requestAdapter() returned null); ${HINT}`,
    );
  }
  let device;
  try {
    device = await adapter.requestDevice({ requiredLimits: largest(adapter) });
  } catch {
    try { // an adapter that refuses its own limits: the defaults still run every kernel
      device = await adapter.requestDevice();
    } catch (exc) {
      throw new GpuUnavailable(`the adapter refused a device (${exc.message}); ${HINT}`);
    }
  }
  return new GpuDevice(adapter, device, onEvent);
}

/**
 * The buffer limits to ask for: the adapter's own. A device gets WebGPU's defaults (256 MiB
 * buffers, 128 MiB storage bindings) unless it asks; a step chain reads a whole `small` step back
 * in one buffer of ~270 MB (gpu/step_chain.js), and checks what it got before it records one.
 */
function largest(adapter) {
  const want = {};
  for (const name of ['maxBufferSize', 'maxStorageBufferBindingSize']) {
    const most = adapter.limits?.[name];
    if (typeof most === 'number' && most > 0) want[name] = most;
  }
  return want;
}
