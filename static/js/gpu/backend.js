// Backend selection in the browser, best first: WebGPU DP4A -> WebGPU LUT -> the JS CPU mirror.
//
// Mirrors server/daisychain/gpu/backend.py. A WebGPU candidate is used only if it compiles on
// this device, passes EVERY exact gate (gates.js) on a poisoned pool and reproduces the
// reference probe hash; every candidate that does not is demoted with its reason kept, so the
// page can say why this device computes on the CPU. The CPU mirror is the last resort and is
// gated and probed too (it must pass; the node suite proves it against the golden vectors).

import { acquireGpu, DP4A_FEATURE } from './device.js';
import { CpuGemm, GpuGemm, productOps } from './gemm.js';
import { runGemmGates } from './gates.js';
import { probeHash, REFERENCE_PROBE_HASH } from './probe.js';
import { CPU_OPS } from '../model/ops.js';
import { bits, key } from '../numerics/prng.js';

export const GPU_ORDER = ['dp4a', 'lut'];
export const GOPS_SHAPE = [256, 256, 256]; // M, K, N of the selftest's throughput figure
export const CPU_ADAPTER = 'CPU (JS mirror, exact integer accumulation in doubles)';

/** Random int8 operands for timing only (never part of the contract). */
function timingOperands(n, stream) {
  const words = bits(key(0x7157, stream), n);
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = words[i] >>> 24;
  return out;
}

/** Best-of-`repeats` end-to-end throughput of gemm.matmulInt in GOP/s (2 M K N operations). */
export async function measureGops(gemm, [m, k, n] = GOPS_SHAPE, repeats = 3) {
  const a = timingOperands(m * k, 0);
  const b = timingOperands(k * n, 1);
  await gemm.matmulInt(a, b, m, k, n); // warm-up: pipeline, buffer pool
  let best = Infinity;
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    await gemm.matmulInt(a, b, m, k, n);
    best = Math.min(best, performance.now() - t0);
  }
  return (2 * m * k * n) / (best * 1e-3) / 1e9;
}

/** Gates and probe for one GEMM: {gemm, row} where row.gates_passed says whether it is usable. */
async function evaluate(gemm, adapter, { measure, pool }) {
  const report = await runGemmGates(gemm, { pool, tile: gemm.tile });
  const row = {
    name: gemm.name,
    adapter,
    gates_passed: false,
    cases_passed: report.casesPassed,
    failure: report.failure ? report.failure.describe() : null,
    probe_hash: null,
    gops: null,
  };
  if (report.failure) return row;
  try {
    row.probe_hash = await probeHash(gemm);
  } catch (exc) {
    row.failure = `${gemm.name}: kernel probe failed: ${exc.message}`;
    return row;
  }
  if (row.probe_hash !== REFERENCE_PROBE_HASH) {
    row.failure =
      `${gemm.name}: kernel probe hash ${row.probe_hash.slice(0, 16)}... != reference ` +
      `${REFERENCE_PROBE_HASH.slice(0, 16)}...`;
    return row;
  }
  row.gates_passed = true;
  if (measure) row.gops = await measureGops(gemm);
  return row;
}

function unusable(name, adapter, reason) {
  return {
    name, adapter, gates_passed: false, cases_passed: 0, failure: reason, probe_hash: null,
    gops: null,
  };
}

/**
 * Evaluates the backends of this device in order and selects the first usable one.
 * Options: `order` (GPU kinds to try, default GPU_ORDER; [] for the CPU mirror only), `all`
 * (evaluate every row even after one passed: the selftest table), `measure`
 * (GOP/s of each usable row), `kernelBase`, `lutBase`, `sources` ({dp4a, lut}: replacement
 * WGSL), `onProgress(message)`, `onEvent(message)` (device loss, uncaptured errors).
 * Resolves to {selected, adapter, gemm, onGpu, demotions: [{name, reason}], rows, device}.
 */
export async function selectBackend(options = {}) {
  const { all = false, measure = false, kernelBase, lutBase, sources = {} } = options;
  const order = options.order ?? GPU_ORDER;
  const progress = options.onProgress ?? (() => {});
  const rows = [];
  let chosen = null;
  let gpu = null;
  let noGpu = null;
  if (order.length) {
    try {
      gpu = await acquireGpu({ onEvent: options.onEvent });
    } catch (exc) {
      noGpu = exc.message;
    }
  }
  for (const kind of order) {
    const name = `webgpu-${kind}`;
    if (chosen && !all) break;
    if (!gpu) {
      rows.push(unusable(name, 'none', noGpu));
      continue;
    }
    if (kind === 'dp4a' && !gpu.hasDp4a) {
      rows.push(unusable(name, gpu.adapterName,
        `WGSL language feature ${DP4A_FEATURE} is missing on this browser/device`));
      continue;
    }
    progress(`gating ${name} on ${gpu.adapterName}`);
    let gemm;
    try {
      gemm = await GpuGemm.create(gpu, kind, { source: sources[kind], kernelBase, lutBase });
    } catch (exc) {
      rows.push(unusable(name, gpu.adapterName, exc.message));
      continue;
    }
    const row = await evaluate(gemm, gpu.adapterName, { measure, pool: gemm.pool });
    rows.push(row);
    if (row.gates_passed && !chosen) chosen = { gemm, row };
  }
  if (!chosen || all) {
    progress('gating the JS CPU mirror');
    const cpu = new CpuGemm();
    const row = await evaluate(cpu, CPU_ADAPTER, { measure, pool: null });
    rows.push(row);
    if (!chosen && row.gates_passed) chosen = { gemm: cpu, row };
  }
  if (!chosen) throw new Error(`no backend passes its gates: ${rows.at(-1).failure}`);
  const demotions = [];
  for (const row of rows) {
    if (row === chosen.row) break;
    demotions.push({ name: row.name, reason: row.failure });
  }
  const onGpu = chosen.gemm instanceof GpuGemm;
  return {
    selected: chosen.row.name,
    adapter: chosen.row.adapter,
    gemm: chosen.gemm,
    onGpu,
    demotions,
    rows,
    device: gpu
      ? {
          adapter: gpu.adapterName,
          features: gpu.features,
          wgsl_features: gpu.wgslFeatures,
          dp4a: gpu.hasDp4a,
          limits: gpu.limits,
          faults: gpu.faults,
        }
      : { adapter: null, reason: noGpu },
  };
}

/** The model's product provider for a selected backend (`audit` as in productOps). */
export function modelOps(backend, { audit } = {}) {
  return backend.onGpu ? productOps(backend.gemm, { audit }) : CPU_OPS;
}
