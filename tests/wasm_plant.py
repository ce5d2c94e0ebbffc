"""Test hook: the WebAssembly kernels (kernels/*.wat) with one planted bug each.

Each mutant is the real kernel text with one substitution (asserted to occur exactly once, so a
change to the kernel cannot silently turn a plant into a no-op), assembled as the committed
binaries are (tests/wasm_build.py). ``python tests/wasm_plant.py OUTDIR`` writes
``OUTDIR/<name>.wasm`` for every plant of the GEMM (kernels/gemm_i8.wat) and prints their names
as JSON; tests/js/wasmgemm.test.mjs loads them and shows which check of the gate
(static/js/numerics/wasmgate.js) stops each one.
``python tests/wasm_plant.py OUTDIR elementwise`` does the same for the elementwise kernel
(kernels/elementwise_f32.wat; tests/js/wasmelementwise.test.mjs, gate wasmeltgate.js). Nothing
in the product knows about plants: this module lives with the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wasm_build import assemble

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / "gemm_i8.wat"
ELEMENTWISE = KERNEL.with_name("elementwise_f32.wat")

STORE_ROW0 = """(v128.store (local.get $cq)
          (call $hsum4 (local.get $s00) (local.get $s01) (local.get $s02) (local.get $s03)))"""
STORE_ROW1 = """(v128.store (i32.add (local.get $cq) (local.get $ldc))
          (call $hsum4 (local.get $s10) (local.get $s11) (local.get $s12) (local.get $s13)))"""
K_LOOP = "(br_if $steps (i32.lt_u (local.get $x) (local.get $aend)))"
HORNER = "(f64.mul (local.get $v) (f64.const 256))"


def _plus_one_at_row0(condition: str) -> str:
    """Row 0's store with +1 in the tile's first cell when ``condition`` holds."""
    return f"""(v128.store (local.get $cq)
          (i32x4.add
            (call $hsum4 (local.get $s00) (local.get $s01) (local.get $s02) (local.get $s03))
            (select (v128.const i32x4 1 0 0 0) (v128.const i32x4 0 0 0 0) {condition})))"""


# The probe's product, 64 x 96 @ 96 x 80 (gpu/probe.js), as the kernel sees it: 32 row pairs,
# 20 column quads, 12 steps of K; the cell (40, 48).
PROBE_CELL = (
    "(i32.and (i32.and (i32.eq (local.get $m2) (i32.const 32)) (i32.eq (local.get $n4) "
    "(i32.const 20))) (i32.and (i32.eq (local.get $k8) (i32.const 12)) (i32.eq (local.get $cq) "
    "(i32.add (local.get $c) (i32.add (i32.mul (local.get $ldc) (i32.const 40)) "
    "(i32.const 192))))))"
)
# Only a product with K above 32768 (k8 > 4096): no gate case has one (the largest K is 16385),
# the probe neither (K = 96); the gate's K-split dispatch case does.
DEEP_K = (
    "(i32.and (i32.gt_u (local.get $k8) (i32.const 4096)) (i32.eq (local.get $cq) (local.get $c)))"
)

# name -> (text to replace, replacement): one bug each.
PLANTS: dict[str, tuple[str, str]] = {
    # the last step of 8 along K is dropped (and B's next quad starts one step early)
    "k-loop-short": (
        K_LOOP,
        "(br_if $steps (i32.lt_u (i32.add (local.get $x) (i32.const 16)) (local.get $aend)))",
    ),
    # C accumulated into instead of written: right only on zeroed memory
    "store-accumulates": (
        STORE_ROW0,
        """(v128.store (local.get $cq)
          (i32x4.add (v128.load (local.get $cq))
            (call $hsum4 (local.get $s00) (local.get $s01) (local.get $s02) (local.get $s03))))""",
    ),
    # the second row of every pair is never stored
    "second-row-dropped": (STORE_ROW1, "(nop)"),
    # one unit off in one cell of the probe's product only: every gate case passes
    "probe-cell": (STORE_ROW0, _plus_one_at_row0(PROBE_CELL)),
    # one unit off in cell (0, 0) of a product with K > 32768 only
    "deep-k-cell": (STORE_ROW0, _plus_one_at_row0(DEEP_K)),
    # limbs combined in base 255: single-limb products (every gate case) are unaffected
    "limb-base-255": (HORNER, "(f64.mul (local.get $v) (f64.const 255))"),
}


HI_ROUND = "(f32x4.nearest (f32x4.mul (local.get $xv) (v128.load (local.get $p))))"
# the second limb's lower clamp (the third limb's sits deeper, with other indentation)
CLAMP = """(v128.const i32x4 -127 -127 -127 -127)))
                  (local.set $n"""
FOLD = "(f32x4.mul (v128.load (local.get $x)) (v128.load (local.get $p)))"
MAX_START = "(v128.store (local.get $o) (v128.const i32x4 0 0 0 0))"
EXP_SCALE = """(f32x4.mul (local.get $p)
      (i32x4.mul
        (i32x4.add (i32x4.trunc_sat_f32x4_s (local.get $k)) (v128.const i32x4 127 127 127 127))
        (v128.const i32x4 0x800000 0x800000 0x800000 0x800000)))"""
ROW_MAX = "(f32x4.gt (local.get $v) (local.get $m))"
DIVIDE = "(f32x4.div (f32x4.div (v128.load (local.get $p)) (local.get $sv)) (local.get $nv))"
TREE_PAD = "(i32.lt_u (local.get $j) (local.get $n))"

# The elementwise kernel's plants: name -> (text to replace, replacement).
ELEMENTWISE_PLANTS: dict[str, tuple[str, str]] = {
    # the first limb rounds ties up: + 2^-17 before rint moves only exact .5 values (in
    # [-128, 128) no other float lies within 2^-17 below a .5), so only tie inputs see it
    "hi-ties-up": (
        HI_ROUND,
        "(f32x4.nearest (f32x4.add (f32x4.mul (local.get $xv) (v128.load (local.get $p)))"
        " (v128.const f32x4 0x1p-17 0x1p-17 0x1p-17 0x1p-17)))",
    ),
    # the second limb clamps at -128 from below: -128 survives (the int8 narrow keeps it)
    "clamp-low-missing": (
        CLAMP,
        CLAMP.replace("-127 -127 -127 -127", "-128 -128 -128 -128"),
    ),
    # the fold one ulp off in lane 3: invisible to every plain quantizer case (they do not fold)
    "fold-lane-ulp": (FOLD, f"(i32x4.add {FOLD} (v128.const i32x4 0 0 0 1))"),
    # column maxima start from memory's old contents instead of +0
    "maxima-not-zeroed": (MAX_START, "(nop)"),
    # the cross-entropy's exp one ulp off in lane 3 (one bit added to p * 2^k)
    "exp-lane-ulp": (EXP_SCALE, f"(i32x4.add {EXP_SCALE} (v128.const i32x4 0 0 0 1))"),
    # the row maximum never looks at lane 3 of a chunk: z > 0 where the maximum sits there
    "max-skips-lane-3": (
        ROW_MAX,
        f"(v128.bitselect {ROW_MAX} (v128.const i32x4 0 0 0 0) (v128.const i32x4 -1 -1 -1 0))",
    ),
    # dlogits as (p / N) / s instead of (p / s) / N: equal in value, not always in rounding
    "divide-order": (
        DIVIDE,
        "(f32x4.div (f32x4.div (v128.load (local.get $p)) (local.get $nv)) (local.get $sv))",
    ),
    # the tree sum's first level drops the row's last value when it falls in a lane done alone
    "tree-sum-drops-last": (
        TREE_PAD,
        "(i32.lt_u (local.get $j) (i32.sub (local.get $n) (i32.const 1)))",
    ),
}

KERNELS: dict[str, tuple[Path, dict[str, tuple[str, str]]]] = {
    "gemm": (KERNEL, PLANTS),
    "elementwise": (ELEMENTWISE, ELEMENTWISE_PLANTS),
}


def mutant(name: str, kernel: str = "gemm") -> str:
    """The text of ``kernel`` (a KERNELS key) with plant ``name``."""
    path, plants = KERNELS[kernel]
    old, new = plants[name]
    text = path.read_text(encoding="utf-8")
    count = text.count(old)
    assert count == 1, f"plant {name}: its target occurs {count} times in {path.name}"
    return text.replace(old, new)


def main(out: Path, kernel: str = "gemm") -> None:
    out.mkdir(parents=True, exist_ok=True)
    path, plants = KERNELS[kernel]
    for name in plants:
        (out / f"{name}.wasm").write_bytes(assemble(mutant(name, kernel), f"{path.name}+{name}"))
    print(json.dumps(sorted(plants)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
