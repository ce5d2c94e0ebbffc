"""The cross-entropy kernel's 4-lane exp against fmath.js's exp, bit for bit, under Node.

kernels/elementwise_f32.wat's ``$exp4`` claims to be fmath.js ``exp`` operation for operation
(docs/NUMERICS.md section 5). The gate (wasmeltgate.js) sees it only through whole
cross-entropy rows, where a division can hide a one-ulp slip; here the kernel text gets one
extra export that applies ``$exp4`` to memory in place, and Node compares it with the JS exp on
float32 inputs: every 1031st bit pattern (both signs, NaNs and infinities included), every third
in [-96, -88), and all 2^12 patterns around each end of the range (-86, 88) and around points
where k steps (x * log2 e at .5). A NaN matches any NaN. The planted
kernel with one ulp off in lane 3 (tests/wasm_plant.py ``exp-lane-ulp``) must be refused.
Skipped without Node.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from daisychain.bench.rig.nodejs import NodeError, node_argv
from wasm_build import assemble
from wasm_plant import ELEMENTWISE, mutant

REPO = Path(__file__).resolve().parents[2]

# In place over n floats at p (n a multiple of 4).
EXPORT = """
  (func (export "exp_each") (param $p i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $p) (i32.shl (local.get $n) (i32.const 2))))
    (loop $chunks
      (v128.store (local.get $p) (call $exp4 (v128.load (local.get $p))))
      (br_if $chunks
        (i32.lt_u (local.tee $p (i32.add (local.get $p) (i32.const 16))) (local.get $end)))))
)
"""

RUNNER = r"""
import fs from 'node:fs';
import { exp, fromBits } from '__FMATH__';
const { instance } = await WebAssembly.instantiate(fs.readFileSync(process.argv[2]));
const e = instance.exports;
const list = [];
for (let b = 0; b < 2 ** 32; b += 1031) list.push(b);
for (let b = 0xc2b00000; b < 0xc2c00000; b += 3) list.push(b); // [-96, -88): the low cut
for (const v of [-86, 88, 0.5 / Math.LOG2E, -0.5 / Math.LOG2E, -85.5 / Math.LOG2E]) {
  const c = new Uint32Array(new Float32Array([v]).buffer)[0];
  for (let d = -2048; d < 2048; d++) list.push((c + d) >>> 0);
}
while (list.length % 4) list.push(0);
const inputs = Uint32Array.from(list);
const n = inputs.length;
const pages = Math.ceil((4 * n) / 65536) - e.memory.buffer.byteLength / 65536;
if (pages > 0) e.memory.grow(pages);
const x = new Float32Array(e.memory.buffer, 0, n);
const xb = new Uint32Array(e.memory.buffer, 0, n);
xb.set(inputs);
e.exp_each(0, n);
const want = new Float32Array(1);
const wb = new Uint32Array(want.buffer);
const wrong = [];
let count = 0;
for (let i = 0; i < n; i++) {
  want[0] = exp(fromBits(inputs[i]));
  if (wb[0] !== xb[i] && !(want[0] !== want[0] && x[i] !== x[i])) {
    count++;
    const hex = (v) => v.toString(16);
    if (wrong.length < 5) wrong.push([hex(inputs[i]), hex(wb[0]), hex(xb[i])]);
  }
}
console.log(JSON.stringify({ n, count, wrong }));
"""


def _node() -> tuple[str, ...]:
    try:
        return node_argv()
    except NodeError as exc:
        pytest.skip(str(exc))


def exp4_mismatches(tmp_path: Path, kernel_text: str) -> dict[str, object]:
    text = kernel_text.rstrip()
    assert text.endswith(")"), "the kernel text ends with its module's ')'"
    (tmp_path / "exp4.wasm").write_bytes(assemble(text[:-1] + EXPORT, "exp4-test.wat"))
    fmath = (REPO / "static" / "js" / "numerics" / "fmath.js").as_uri()
    (tmp_path / "run.mjs").write_text(RUNNER.replace("__FMATH__", fmath))
    proc = subprocess.run(
        [*_node(), str(tmp_path / "run.mjs"), str(tmp_path / "exp4.wasm")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_exp4_gives_the_js_exp_bits(tmp_path: Path) -> None:
    result = exp4_mismatches(tmp_path, ELEMENTWISE.read_text(encoding="utf-8"))
    assert isinstance(result["n"], int) and result["n"] > 4_000_000
    assert result["count"] == 0, result


def test_a_one_ulp_exp_in_one_lane_is_caught(tmp_path: Path) -> None:
    result = exp4_mismatches(tmp_path, mutant("exp-lane-ulp", "elementwise"))
    assert isinstance(result["count"], int) and result["count"] > 0, result
