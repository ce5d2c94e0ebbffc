// Backend selection in the browser: correct first, then measured fastest (docs/KERNELS.md,
// "Backend choice").
//
// Mirrors server/daisychain/gpu/backend.py and peer/backend.py. A candidate (WebGPU DP4A, WebGPU
// LUT, the JS CPU mirror, in that preference order) is usable only if it compiles on this device,
// passes EVERY exact gate (gates.js) on a poisoned pool and reproduces the reference probe hash;
// every candidate that does not is demoted with its reason kept, so the page can say why this
// device computes where it does. Among the usable ones, chooseBackend() takes the fastest
// measured at start on the step it will run (the caller's `timeStep`); without a measurement, the
// first usable one in preference order. The CPU mirror is gated and probed too (it must pass; the
// node suite proves it against the golden vectors).

import { activeIntKernel } from '../numerics/gemm.js';
import { acquireGpu, DP4A_FEATURE } from './device.js';
import { CpuGemm, GpuGemm, productOps } from './gemm.js';
import { runGemmGates } from './gates.js';
import { probeHash, REFERENCE_PROBE_HASH } from './probe.js';
import { CPU_OPS } from '../model/ops.js';
import { bits, key } from '../numerics/prng.js';

export const GPU_ORDER = ['dp4a', 'lut'];
export const GOPS_SHAPE = [256, 256, 256]; // M, K, N of the selftest's throughput figure
export const CPU_ADAPTER = 'CPU (JS mirror, exact integer accumulation in doubles)';
// The CPU row's adapter when the WebAssembly SIMD GEMM passed its gates and computes the CPU
// tier's integer products (numerics/wasmgate.js): what the page and the run's records show.
export const CPU_WASM_ADAPTER = 'CPU (JS mirror, integer products in WebAssembly SIMD)';

/** The CPU tier's adapter text: which kernel computes its integer products now (and on how
 * many threads, when a pool of workers shares them: numerics/wasmpool.js). */
export function cpuAdapter() {
  const kernel = activeIntKernel();
  if (kernel === null) return CPU_ADAPTER;
  const threads = kernel.threads ?? 1;
  return threads > 1 ? `${CPU_WASM_ADAPTER.slice(0, -1)}, ${threads} threads)` : CPU_WASM_ADAPTER;
}

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

/** Gates and probe for one GEMM: a row whose `gates_passed` says whether it is usable. */
export async function evaluateGemm(gemm, adapter, { measure = false, pool = null } = {}) {
  const report = await runGemmGates(gemm, { pool, tile: gemm.tile });
  const row = {
    name: gemm.name,
    adapter,
    gates_passed: false,
    cases_passed: report.casesPassed,
    failure: report.failure ? report.failure.describe() : null,
    probe_hash: null,
    gops: null,
    step_ms: null,
    step_complete: null,
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
    gops: null, step_ms: null, step_complete: null,
  };
}

const fmtMs = (ms) => `${ms.toFixed(ms < 100 ? 1 : 0)} ms`;

/**
 * The rule, as a pure function of the evaluated rows (in preference order): among the rows
 * that passed their gates and probe, the one with the smallest measured `step_ms`; ties go to
 * the earlier row. A row with `step_complete === false` was stopped once it had run longer than
 * a complete one, so its `step_ms` is a lower bound and it cannot be the fastest. When any usable
 * row has no measurement, the first usable row wins ("preference"). A row that failed its gates
 * is never chosen, whatever its timing says. `rounds` only says, in the reason, how many timings
 * each figure is the fastest of (timeRounds). Returns {selected, rule, reason, measurements}.
 */
export function chooseBackend(rows, { rounds = 1 } = {}) {
  const usable = rows.filter((r) => r.gates_passed);
  const measurements = rows
    .filter((r) => r.step_ms !== null && r.step_ms !== undefined)
    .map((r) => ({ name: r.name, step_ms: r.step_ms, complete: r.step_complete !== false }));
  if (!usable.length) {
    const why = rows.map((r) => `${r.name}: ${r.failure}`).join('; ');
    throw new Error(`no backend passes its gates (${why})`);
  }
  const timed = usable.filter((r) => typeof r.step_ms === 'number' && r.step_ms >= 0);
  if (timed.length !== usable.length) {
    const first = usable[0];
    return {
      selected: first.name,
      rule: 'preference',
      reason: `${first.name}: the first backend in preference order that passes its gates ` +
        '(speed not measured)',
      measurements,
    };
  }
  let best = null;
  for (const r of timed) {
    if (r.step_complete !== false && (best === null || r.step_ms < best.step_ms)) best = r;
  }
  if (best === null) throw new Error('every step measurement was stopped early: none to compare');
  for (const r of timed) {
    if (r.step_complete === false && r.step_ms < best.step_ms) {
      throw new Error(`${r.name}: measurement stopped at ${fmtMs(r.step_ms)}, below the best ` +
        `${fmtMs(best.step_ms)}: the cutoff must only stop a slower candidate`);
    }
  }
  const others = timed.filter((r) => r !== best)
    .map((r) => `${r.name} ${r.step_complete === false ? '>= ' : ''}${fmtMs(r.step_ms)}`);
  const failed = rows.filter((r) => !r.gates_passed).map((r) => r.name);
  return {
    selected: best.name,
    rule: 'measured',
    reason: `${best.name}: ${fmtMs(best.step_ms)} per step` +
      `${rounds > 1 ? ` (best of ${rounds})` : ''}, the fastest of the backends that ` +
      `pass their gates${others.length ? ` (${others.join(', ')})` : ''}` +
      `${failed.length ? `; failed their gates: ${failed.join(', ')}` : ''}`,
    measurements,
  };
}

/**
 * Times each entry ({row, candidate}, preference order) `rounds` times, interleaved, and writes
 * row.step_ms / row.step_complete: the fastest complete time, else the longest stopped one (a
 * lower bound). Why rounds: a device busy for a moment (another tab loading) slows whichever
 * candidate runs then, and one timing would pick the wrong backend for the whole run; load only
 * ever adds time, so the fastest of a few interleaved timings is the device's figure. A timing
 * is stopped once past the best complete time so far (it cannot win), which bounds a round by
 * about one best step per candidate. A candidate whose timing throws (e.g. the live audit caught
 * a wrong product at a step shape no gate has) is marked failed and timed no more.
 */
export async function timeRounds(entries, timeStep, rounds = 3, progress = () => {}) {
  if (!Number.isInteger(rounds) || rounds < 1) {
    throw new Error(`rounds must be a whole number >= 1, not ${rounds}`);
  }
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    for (const { row, candidate } of entries) {
      if (!row.gates_passed) continue;
      progress(`timing one step on ${row.name}` + (rounds > 1 ? ` (${round + 1}/${rounds})` : ''));
      let t;
      try {
        t = await timeStep(candidate, best);
      } catch (exc) {
        row.gates_passed = false;
        row.failure = `${row.name}: failed while timing a step: ${exc.message}`;
        row.step_ms = null;
        row.step_complete = null;
        continue;
      }
      const had = typeof row.step_ms === 'number';
      if (t.complete) {
        best = Math.min(best, t.ms);
        if (!had || row.step_complete === false || t.ms < row.step_ms) row.step_ms = t.ms;
        row.step_complete = true;
      } else if (!had || (row.step_complete === false && t.ms > row.step_ms)) {
        row.step_ms = t.ms;
        row.step_complete = false;
      }
    }
  }
}

/**
 * Evaluates the backends of this device and selects one by the rule above.
 * Options: `order` (GPU kinds to try, default GPU_ORDER; [] for the CPU mirror only), `all`
 * (evaluate every row even after one passed: the selftest table; implied by `timeStep`),
 * `measure` (GOP/s of each usable row at GOPS_SHAPE, for display), `timeStep(candidate,
 * limitMs)` (async; candidate {name, gemm, onGpu, gpu}; resolves to {ms, complete}: the time of
 * the step that backend would run, stopped once past `limitMs` (Infinity for the first) with
 * complete: false), `kernelBase`, `lutBase`, `sources` ({dp4a, lut}: replacement WGSL),
 * `rounds` (timings of each candidate, interleaved; default 3: its figure is the fastest),
 * `onProgress(message)`, `onEvent(message)` (device loss, uncaptured errors).
 * Resolves to {selected, adapter, gemm, onGpu, gpu, demotions: [{name, reason}], rows, choice,
 * device}; `demotions` are the rows that failed their gates, `choice` says by which rule and why.
 */
export async function selectBackend(options = {}) {
  const { measure = false, kernelBase, lutBase, sources = {}, timeStep = null } = options;
  const rounds = options.rounds ?? 3;
  const all = options.all ?? timeStep !== null;
  const order = options.order ?? GPU_ORDER;
  const progress = options.onProgress ?? (() => {});
  const candidates = []; // {row, gemm}
  const passed = () => candidates.some((c) => c.row.gates_passed);
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
    if (passed() && !all) break;
    if (!gpu) {
      candidates.push({ row: unusable(name, 'none', noGpu), gemm: null });
      continue;
    }
    if (kind === 'dp4a' && !gpu.hasDp4a) {
      candidates.push({ row: unusable(name, gpu.adapterName,
        `WGSL language feature ${DP4A_FEATURE} is missing on this browser/device`), gemm: null });
      continue;
    }
    progress(`gating ${name} on ${gpu.adapterName}`);
    let gemm;
    try {
      gemm = await GpuGemm.create(gpu, kind, { source: sources[kind], kernelBase, lutBase });
    } catch (exc) {
      candidates.push({ row: unusable(name, gpu.adapterName, exc.message), gemm: null });
      continue;
    }
    candidates.push({ row: await evaluateGemm(gemm, gpu.adapterName, { measure,
      pool: gemm.pool }), gemm });
  }
  if (!passed() || all) {
    progress('gating the JS CPU mirror');
    const cpu = new CpuGemm();
    candidates.push({ row: await evaluateGemm(cpu, cpuAdapter(), { measure }), gemm: cpu });
  }
  if (timeStep) {
    const timed = candidates.filter((c) => c.row.gates_passed).map(({ row, gemm }) => {
      const onGpu = gemm instanceof GpuGemm;
      return { row, candidate: { name: row.name, gemm, onGpu, gpu: onGpu ? gpu : null } };
    });
    await timeRounds(timed, timeStep, rounds, progress);
  }
  const rows = candidates.map((c) => c.row);
  const choice = chooseBackend(rows, { rounds: timeStep ? rounds : 1 });
  const chosen = candidates.find((c) => c.row.name === choice.selected);
  const demotions = rows.filter((r) => !r.gates_passed)
    .map((r) => ({ name: r.name, reason: r.failure }));
  const onGpu = chosen.gemm instanceof GpuGemm;
  return {
    selected: choice.selected,
    adapter: chosen.row.adapter,
    gemm: chosen.gemm,
    onGpu,
    gpu: onGpu ? gpu : null,
    demotions,
    rows,
    choice,
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
