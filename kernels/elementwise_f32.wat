;; elementwise_f32.wat -- the contract's block quantization and cross-entropy in WebAssembly SIMD.
;;
;; The browser CPU tier's float32 elementwise work around its integer products (docs/NUMERICS.md
;; section 2; docs/KERNELS.md, "WebAssembly SIMD elementwise kernel"): the absolute maxima of the
;; blocks, the power-of-two fold of a gradient, and the one-, two- and three-limb int8 split;
;; and the per-token cross-entropy's O(N V) work (its section at the end of this file).
;; Assembled by `python tests/wasm_build.py` into static/wasm/elementwise_f32.wasm; driven by
;; static/js/numerics/wasmelementwise.js and gated by static/js/numerics/wasmeltgate.js against
;; the JS mirror (quant.js, gemm.js, xent.js), which it must match bit for bit.
;;
;; Why f32 lanes give the JS mirror's bits. Every f32 instruction used here (mul, sub, nearest,
;; abs, max) is IEEE-754 correctly rounded (round to nearest, ties to even; subnormals kept), and
;; each one stands for one JS expression `Math.fround(v)` or Float32Array store whose double `v`
;; is EXACT: a float32 times a power of two in [2^-126, 2^127] has at most 24 significant bits
;; and stays inside the double range; `x - hi * 2^e` and `r - mid * 2^(e - 8)` span at most 32
;; bits (NUMERICS.md section 2: the residuals are exact even in float32). Rounding an exact value
;; once is what both sides do, so the results agree to the bit, -0 included (the integer limbs
;; re-enter as f32x4.convert of the stored integers, +0 for a -0 rounding, as the JS reads them
;; back from its Int8Array). `f32x4.nearest` is rint (ties to even), the JS's `+ 1.5 * 2^52 -
;; 1.5 * 2^52` on the |v| <= 2^8 values it sees. The maxima compare the bits of |x| as unsigned
;; integers (i32x4.max_u after f32x4.abs): for non-negative floats the order of the bit patterns
;; is the order of the values (+0 is 0, +inf 0x7F800000), and any NaN pattern lies above +inf,
;; so a block holding a NaN gets a NaN maximum, as Math.max gives, and the driver then refuses
;; it exactly as quant.js does: no NaN bit pattern ever reaches a result. The limbs are
;; clamped to [-127, 127] with integer min/max after i32x4.trunc_sat_f32x4_s (exact on integers),
;; then narrowed to int8 with saturation, which changes nothing inside [-127, 127].
;;
;; Layouts (bytes in this module's exported memory; the driver copies operands in and out):
;;   x: float32, `batch` stacked (rows x cols) row-major matrices; cols a multiple of 4 (the
;;      driver keeps other shapes on the JS path), so every v128 lies inside one row.
;;   tables (`pow2_table`): for each block i with scale exponent k = e[i], five float32 tables
;;      ts bytes apart: 2^-k | 2^k | 2^(8 - k) | 2^(k - 8) | 2^(16 - k), each entry repeated 4
;;      times (`splat`: one v128 per block, for row blocks) or not (4 blocks per v128, for column
;;      blocks). The element (b, r, 4 c4) reads its scales at tab + b bs + r rs + c4 cs.
;;   limbs: int8, one byte per element, in x's order.
;; Nothing is read that was not written in the same call, so memory left over from an earlier
;; call (or poisoned by the gate) cannot reach a result.

(module
  (memory (export "memory") 1)

  ;; out[r] = max |x[r, c]| over the row, for `rows` rows of `cols` floats (float32 at out + 4 r).
  (func $absmax_rows (export "absmax_rows")
    (param $x i32) (param $rows i32) (param $cols i32) (param $out i32)
    (local $end i32) (local $m v128)
    (block $done
      (loop $rows
        (br_if $done (i32.eqz (local.get $rows)))
        (local.set $end (i32.add (local.get $x) (i32.shl (local.get $cols) (i32.const 2))))
        (local.set $m (v128.const i32x4 0 0 0 0))
        (loop $chunks
          (local.set $m (i32x4.max_u (local.get $m) (f32x4.abs (v128.load (local.get $x)))))
          (br_if $chunks
            (i32.lt_u (local.tee $x (i32.add (local.get $x) (i32.const 16))) (local.get $end))))
        ;; the four lanes' maximum: max with the halves swapped, then with the pairs swapped
        (local.set $m
          (i32x4.max_u (local.get $m)
            (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $m) (local.get $m))))
        (local.set $m
          (i32x4.max_u (local.get $m)
            (i8x16.shuffle 4 5 6 7 0 1 2 3 12 13 14 15 8 9 10 11 (local.get $m) (local.get $m))))
        (f32.store (local.get $out) (f32x4.extract_lane 0 (local.get $m)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (local.set $rows (i32.sub (local.get $rows) (i32.const 1)))
        (br $rows))))

  ;; out[b cols + c] = max |x[b, r, c]| over the rows of each of `batch` (rows x cols) matrices.
  (func $absmax_cols (export "absmax_cols")
    (param $x i32) (param $batch i32) (param $rows i32) (param $cols i32) (param $out i32)
    (local $o i32) (local $oend i32) (local $r i32) (local $bytes i32)
    (local.set $bytes (i32.shl (local.get $cols) (i32.const 2)))
    (block $done
      (loop $mats
        (br_if $done (i32.eqz (local.get $batch)))
        (local.set $oend (i32.add (local.get $out) (local.get $bytes)))
        ;; start from +0 (the JS's starting maximum), written here: never memory's old contents
        (local.set $o (local.get $out))
        (loop $zero
          (v128.store (local.get $o) (v128.const i32x4 0 0 0 0))
          (br_if $zero
            (i32.lt_u (local.tee $o (i32.add (local.get $o) (i32.const 16))) (local.get $oend))))
        (local.set $r (local.get $rows))
        (block $rows_done
          (loop $rows
            (br_if $rows_done (i32.eqz (local.get $r)))
            (local.set $o (local.get $out))
            (loop $chunks
              (v128.store (local.get $o)
                (i32x4.max_u (v128.load (local.get $o)) (f32x4.abs (v128.load (local.get $x)))))
              (local.set $x (i32.add (local.get $x) (i32.const 16)))
              (br_if $chunks
                (i32.lt_u (local.tee $o (i32.add (local.get $o) (i32.const 16)))
                          (local.get $oend))))
            (local.set $r (i32.sub (local.get $r) (i32.const 1)))
            (br $rows)))
        (local.set $out (local.get $oend))
        (local.set $batch (i32.sub (local.get $batch) (i32.const 1)))
        (br $mats))))

  ;; 2^k as float32 from its exponent bits; k must lie in [-126, 127] (the driver's exponents
  ;; do: block exponents in [-106, 94], fold exponents checked by gemm.js).
  (func $pow2 (param $k i32) (result f32)
    (f32.reinterpret_i32
      (i32.shl (i32.add (local.get $k) (i32.const 127)) (i32.const 23))))

  ;; The five scale tables of `n` blocks with int32 exponents at e (layout above).
  (func $pow2_table (export "pow2_table")
    (param $e i32) (param $n i32) (param $tab i32) (param $ts i32) (param $splat i32)
    (local $k i32) (local $p i32) (local $step i32)
    (local.set $step (select (i32.const 16) (i32.const 4) (local.get $splat)))
    (local.set $p (local.get $tab))
    (block $done
      (loop $blocks
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $k (i32.load (local.get $e)))
        (call $put (local.get $p) (local.get $splat)
          (call $pow2 (i32.sub (i32.const 0) (local.get $k))))
        (call $put (i32.add (local.get $p) (local.get $ts)) (local.get $splat)
          (call $pow2 (local.get $k)))
        (call $put (i32.add (local.get $p) (i32.shl (local.get $ts) (i32.const 1)))
          (local.get $splat)
          (call $pow2 (i32.sub (i32.const 8) (local.get $k))))
        (call $put (i32.add (local.get $p) (i32.mul (local.get $ts) (i32.const 3)))
          (local.get $splat)
          (call $pow2 (i32.sub (local.get $k) (i32.const 8))))
        (call $put (i32.add (local.get $p) (i32.shl (local.get $ts) (i32.const 2)))
          (local.get $splat)
          (call $pow2 (i32.sub (i32.const 16) (local.get $k))))
        (local.set $e (i32.add (local.get $e) (i32.const 4)))
        (local.set $p (i32.add (local.get $p) (local.get $step)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $blocks))))

  ;; One table entry: v at p, four times when `splat`.
  (func $put (param $p i32) (param $splat i32) (param $v f32)
    (if (local.get $splat)
      (then (v128.store (local.get $p) (f32x4.splat (local.get $v))))
      (else (f32.store (local.get $p) (local.get $v)))))

  ;; x *= 2^k in place, the scale of element (b, r, 4 c4) read at s + b bs + r rs + c4 cs (the
  ;; 2^k table of pow2_table): the fold of a gradient's scales (gemm.js foldColumns / foldRows).
  (func $scale (export "scale")
    (param $x i32) (param $batch i32) (param $rows i32) (param $cols i32)
    (param $s i32) (param $bs i32) (param $rs i32) (param $cs i32)
    (local $r i32) (local $srow i32) (local $p i32) (local $end i32)
    (block $done
      (loop $mats
        (br_if $done (i32.eqz (local.get $batch)))
        (local.set $srow (local.get $s))
        (local.set $r (local.get $rows))
        (block $rows_done
          (loop $rows
            (br_if $rows_done (i32.eqz (local.get $r)))
            (local.set $end (i32.add (local.get $x) (i32.shl (local.get $cols) (i32.const 2))))
            (local.set $p (local.get $srow))
            (loop $chunks
              (v128.store (local.get $x)
                (f32x4.mul (v128.load (local.get $x)) (v128.load (local.get $p))))
              (local.set $p (i32.add (local.get $p) (local.get $cs)))
              (br_if $chunks
                (i32.lt_u (local.tee $x (i32.add (local.get $x) (i32.const 16)))
                          (local.get $end))))
            (local.set $srow (i32.add (local.get $srow) (local.get $rs)))
            (local.set $r (i32.sub (local.get $r) (i32.const 1)))
            (br $rows)))
        (local.set $s (i32.add (local.get $s) (local.get $bs)))
        (local.set $batch (i32.sub (local.get $batch) (i32.const 1)))
        (br $mats))))

  ;; The int8 limbs of every element (NUMERICS.md section 2; quant.js quantize*), scales from
  ;; the tables at tab (layout above):
  ;;   hi  = rint(x * 2^-e)                                  limbs >= 1, at hi
  ;;   r   = x - hi * 2^e;   mid = clamp(rint(r * 2^(8 - e)))     limbs >= 2, at l2
  ;;   r2  = r - mid * 2^(e - 8);   lo = clamp(rint(r2 * 2^(16 - e)))    limbs = 3, at l3
  (func $quantize (export "quantize")
    (param $x i32) (param $batch i32) (param $rows i32) (param $cols i32)
    (param $tab i32) (param $ts i32) (param $bs i32) (param $rs i32) (param $cs i32)
    (param $hi i32) (param $l2 i32) (param $l3 i32) (param $limbs i32)
    (local $r i32) (local $srow i32) (local $p i32) (local $end i32) (local $i i32)
    (local $xv v128) (local $q v128) (local $res v128) (local $n v128)
    ;; The lane work is written out in place (no calls in the loop): an int32 vector q becomes
    ;; four int8 bytes by two saturating narrows and one 32-bit store; the lower limbs are
    ;; clamped to [-127, 127] with i32x4.min_s / max_s first.
    (local.set $i (i32.const 0))
    (block $done
      (loop $mats
        (br_if $done (i32.eqz (local.get $batch)))
        (local.set $srow (local.get $tab))
        (local.set $r (local.get $rows))
        (block $rows_done
          (loop $rows
            (br_if $rows_done (i32.eqz (local.get $r)))
            (local.set $end (i32.add (local.get $i) (local.get $cols)))
            (local.set $p (local.get $srow))
            (loop $chunks
              (local.set $xv
                (v128.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2)))))
              ;; hi = rint(x * 2^-e)
              (local.set $q
                (i32x4.trunc_sat_f32x4_s
                  (f32x4.nearest (f32x4.mul (local.get $xv) (v128.load (local.get $p))))))
              (local.set $n (i16x8.narrow_i32x4_s (local.get $q) (local.get $q)))
              (i32.store (i32.add (local.get $hi) (local.get $i))
                (i32x4.extract_lane 0 (i8x16.narrow_i16x8_s (local.get $n) (local.get $n))))
              (if (i32.gt_u (local.get $limbs) (i32.const 1))
                (then
                  ;; r = x - hi * 2^e;  mid = clamp(rint(r * 2^(8 - e)))
                  (local.set $res
                    (f32x4.sub (local.get $xv)
                      (f32x4.mul (f32x4.convert_i32x4_s (local.get $q))
                        (v128.load (i32.add (local.get $p) (local.get $ts))))))
                  (local.set $q
                    (i32x4.max_s
                      (i32x4.min_s
                        (i32x4.trunc_sat_f32x4_s
                          (f32x4.nearest
                            (f32x4.mul (local.get $res)
                              (v128.load (i32.add (local.get $p)
                                                  (i32.shl (local.get $ts) (i32.const 1)))))))
                        (v128.const i32x4 127 127 127 127))
                      (v128.const i32x4 -127 -127 -127 -127)))
                  (local.set $n (i16x8.narrow_i32x4_s (local.get $q) (local.get $q)))
                  (i32.store (i32.add (local.get $l2) (local.get $i))
                    (i32x4.extract_lane 0 (i8x16.narrow_i16x8_s (local.get $n) (local.get $n))))
                  (if (i32.gt_u (local.get $limbs) (i32.const 2))
                    (then
                      ;; r2 = r - mid * 2^(e - 8);  lo = clamp(rint(r2 * 2^(16 - e)))
                      (local.set $res
                        (f32x4.sub (local.get $res)
                          (f32x4.mul (f32x4.convert_i32x4_s (local.get $q))
                            (v128.load (i32.add (local.get $p)
                                                (i32.mul (local.get $ts) (i32.const 3)))))))
                      (local.set $q
                        (i32x4.max_s
                          (i32x4.min_s
                            (i32x4.trunc_sat_f32x4_s
                              (f32x4.nearest
                                (f32x4.mul (local.get $res)
                                  (v128.load (i32.add (local.get $p)
                                                      (i32.shl (local.get $ts) (i32.const 2)))))))
                            (v128.const i32x4 127 127 127 127))
                          (v128.const i32x4 -127 -127 -127 -127)))
                      (local.set $n (i16x8.narrow_i32x4_s (local.get $q) (local.get $q)))
                      (i32.store (i32.add (local.get $l3) (local.get $i))
                        (i32x4.extract_lane 0
                          (i8x16.narrow_i16x8_s (local.get $n) (local.get $n))))))))
              (local.set $p (i32.add (local.get $p) (local.get $cs)))
              (br_if $chunks
                (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 4)))
                          (local.get $end))))
            (local.set $srow (i32.add (local.get $srow) (local.get $rs)))
            (local.set $r (i32.sub (local.get $r) (i32.const 1)))
            (br $rows)))
        (local.set $tab (i32.add (local.get $tab) (local.get $bs)))
        (local.set $batch (i32.sub (local.get $batch) (i32.const 1)))
        (br $mats))))

  ;; ---------------------------------------------------------------------------------------
  ;; The per-token cross-entropy (gpt.js via numerics/xent.js crossEntropy; docs/MODEL.md
  ;; section 5): for each row of logits, m = max; z = x - m; p = exp(z); s = tree_sum(p); then
  ;; dlogits = ((p / s) - [v == y]) / N. The log of s and the loss stay in JS (N values).
  ;;
  ;; Layout: `rows` rows of `cols` floats (cols a multiple of 4) whose first `n` are the row; the
  ;; driver pads the rest with -inf, which no maximum picks and whose exp is never read. `y`
  ;; holds each row's target (int32, < n). Every result is a float32 operation of the JS on the
  ;; same operands, so the bits agree (see the header): f32x4.add / sub / mul / div / nearest
  ;; are IEEE-correct with subnormals kept, and nothing is fused.

  ;; exp of four float32 lanes, fmath.js `exp` operation for operation (NUMERICS.md section 5):
  ;;   k = rint(x * LOG2E);  r = ((x - k A) - k B) - k C  (ln 2 = A + B + C)
  ;;   p = Horner C6 .. C0 in r, one rounding per multiply and per add;  exp = p * 2^k
  ;; 2^k comes from its exponent bits, (k + 127) * 2^23; k lies in [-124, 127] for
  ;; x in [-86, 88], so 2^k is normal and the one multiply rounds p * 2^k once, to a subnormal
  ;; where it must. Lanes below -86 (-inf included) give +0 and lanes above 88 give +inf, as
  ;; the JS's two early returns; a NaN lane stays NaN through the arithmetic (its payload may
  ;; differ from the JS's: a NaN is never contract arithmetic, quant.js refuses it).
  (func $exp4 (param $x v128) (result v128)
    (local $k v128) (local $r v128) (local $p v128)
    (local.set $k (f32x4.nearest
      (f32x4.mul (local.get $x) (v128.const i32x4 0x3fb8aa3b 0x3fb8aa3b 0x3fb8aa3b 0x3fb8aa3b))))
    (local.set $r
      (f32x4.sub
        (f32x4.sub
          (f32x4.sub (local.get $x)
            (f32x4.mul (local.get $k)
              (v128.const i32x4 0x3f317200 0x3f317200 0x3f317200 0x3f317200)))
          (f32x4.mul (local.get $k)
            (v128.const i32x4 0x35bfbf00 0x35bfbf00 0x35bfbf00 0x35bfbf00)))
        (f32x4.mul (local.get $k)
          (v128.const i32x4 0xad630880 0xad630880 0xad630880 0xad630880))))
    (local.set $p (f32x4.add (f32x4.mul (local.get $r)
        (v128.const i32x4 0x3ab60b61 0x3ab60b61 0x3ab60b61 0x3ab60b61))
      (v128.const i32x4 0x3c088889 0x3c088889 0x3c088889 0x3c088889)))
    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r))
      (v128.const i32x4 0x3d2aaaab 0x3d2aaaab 0x3d2aaaab 0x3d2aaaab)))
    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r))
      (v128.const i32x4 0x3e2aaaab 0x3e2aaaab 0x3e2aaaab 0x3e2aaaab)))
    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r))
      (v128.const i32x4 0x3f000000 0x3f000000 0x3f000000 0x3f000000)))
    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r))
      (v128.const i32x4 0x3f800000 0x3f800000 0x3f800000 0x3f800000)))
    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r))
      (v128.const i32x4 0x3f800000 0x3f800000 0x3f800000 0x3f800000)))
    (local.set $p (f32x4.mul (local.get $p)
      (i32x4.mul
        (i32x4.add (i32x4.trunc_sat_f32x4_s (local.get $k)) (v128.const i32x4 127 127 127 127))
        (v128.const i32x4 0x800000 0x800000 0x800000 0x800000))))
    ;; x < -86: +0;  x > 88: +inf
    (local.set $p (v128.bitselect (v128.const i32x4 0 0 0 0) (local.get $p)
      (f32x4.gt (v128.const i32x4 0xc2ac0000 0xc2ac0000 0xc2ac0000 0xc2ac0000) (local.get $x))))
    (v128.bitselect (v128.const i32x4 0x7f800000 0x7f800000 0x7f800000 0x7f800000) (local.get $p)
      (f32x4.gt (local.get $x) (v128.const i32x4 0x42b00000 0x42b00000 0x42b00000 0x42b00000))))

  ;; The pinned tree sum of the n floats at x (reduce.js treeSumStrided, NUMERICS.md section
  ;; 4): pad to the next power of two with +0, then add the second half onto the first until
  ;; one is left. Every level adds element i + w onto element i, so four neighbouring i at a
  ;; time is the same additions; the lanes of the first level that straddle n, and levels
  ;; narrower than four, go one at a time. Work space: nextPow2(n) / 2 floats at `work`.
  (func $tree_sum (param $x i32) (param $n i32) (param $work i32) (result f32)
    (local $w i32) (local $i i32) (local $j i32) (local $bytes i32)
    (local.set $w (i32.const 1))
    (block $wide
      (loop $grow
        (br_if $wide (i32.ge_u (local.get $w) (local.get $n)))
        (local.set $w (i32.shl (local.get $w) (i32.const 1)))
        (br $grow)))
    ;; one element: no add at all (-0 stays -0)
    (if (i32.eq (local.get $w) (i32.const 1)) (then (return (f32.load (local.get $x)))))
    (local.set $w (i32.shr_u (local.get $w) (i32.const 1)))
    (local.set $bytes (i32.shl (local.get $w) (i32.const 2)))
    ;; first level, from x: work[i] = x[i] + (i + w < n ? x[i + w] : +0)
    (local.set $i (i32.const 0))
    (block $first_done
      (loop $first
        (br_if $first_done (i32.ge_u (local.get $i) (local.get $w)))
        (local.set $j (i32.add (local.get $i) (local.get $w)))
        (if (i32.and (i32.le_u (i32.add (local.get $i) (i32.const 4)) (local.get $w))
                     (i32.le_u (i32.add (local.get $j) (i32.const 4)) (local.get $n)))
          (then
            (v128.store (i32.add (local.get $work) (i32.shl (local.get $i) (i32.const 2)))
              (f32x4.add
                (v128.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2))))
                (v128.load (i32.add (local.get $x) (i32.shl (local.get $j) (i32.const 2))))))
            (local.set $i (i32.add (local.get $i) (i32.const 4))))
          (else
            (if (i32.and (i32.le_u (i32.add (local.get $i) (i32.const 4)) (local.get $w))
                         (i32.ge_u (local.get $j) (local.get $n)))
              (then
                (v128.store (i32.add (local.get $work) (i32.shl (local.get $i) (i32.const 2)))
                  (f32x4.add
                    (v128.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2))))
                    (v128.const i32x4 0 0 0 0)))
                (local.set $i (i32.add (local.get $i) (i32.const 4))))
              (else
                (f32.store (i32.add (local.get $work) (i32.shl (local.get $i) (i32.const 2)))
                  (f32.add
                    (f32.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2))))
                    (select
                      (f32.load (i32.add (local.get $x) (i32.shl (local.get $j) (i32.const 2))))
                      (f32.const 0)
                      (i32.lt_u (local.get $j) (local.get $n)))))
                (local.set $i (i32.add (local.get $i) (i32.const 1)))))))
        (br $first)))
    ;; the other levels, in work
    (block $levels_done
      (loop $levels
        (br_if $levels_done (i32.le_u (local.get $w) (i32.const 1)))
        (local.set $w (i32.shr_u (local.get $w) (i32.const 1)))
        (local.set $bytes (i32.shl (local.get $w) (i32.const 2)))
        (local.set $i (local.get $work))
        (local.set $j (i32.add (local.get $work) (local.get $bytes)))
        (if (i32.ge_u (local.get $w) (i32.const 4))
          (then
            (loop $chunks
              (v128.store (local.get $i)
                (f32x4.add (v128.load (local.get $i))
                  (v128.load (i32.add (local.get $i) (local.get $bytes)))))
              (br_if $chunks
                (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 16))) (local.get $j)))))
          (else
            (loop $singles
              (f32.store (local.get $i)
                (f32.add (f32.load (local.get $i))
                  (f32.load (i32.add (local.get $i) (local.get $bytes)))))
              (br_if $singles
                (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 4))) (local.get $j))))))
        (br $levels)))
    (f32.load (local.get $work)))

  ;; For each of `rows` rows at x (layout above): the row maximum m (the first strictly greater
  ;; value, as the JS's `if (x > m) m = x` from -inf, so a NaN is never picked); z = x - m at
  ;; the target, to zy + 4 r; p = exp(x - m) in place; s = tree_sum of the n values of p, to
  ;; sums + 4 r. Ties for the maximum can differ only in the sign of a zero, which changes no
  ;; result: x - (+0) and x - (-0) are equal for x != 0, exp(+0) = exp(-0) = 1, and the loss
  ;; log(s) - z[y] has log(s) != -0.
  (func $xent_rows (export "xent_rows")
    (param $x i32) (param $rows i32) (param $cols i32) (param $n i32) (param $y i32)
    (param $work i32) (param $sums i32) (param $zy i32)
    (local $p i32) (local $end i32) (local $m v128) (local $v v128) (local $t v128)
    (block $done
      (loop $each
        (br_if $done (i32.eqz (local.get $rows)))
        (local.set $end (i32.add (local.get $x) (i32.shl (local.get $cols) (i32.const 2))))
        ;; the maximum per lane (the first strictly greater), then across the four lanes
        (local.set $m (v128.const i32x4 0xff800000 0xff800000 0xff800000 0xff800000))
        (local.set $p (local.get $x))
        (loop $max
          (local.set $v (v128.load (local.get $p)))
          (local.set $m (v128.bitselect (local.get $v) (local.get $m)
            (f32x4.gt (local.get $v) (local.get $m))))
          (br_if $max
            (i32.lt_u (local.tee $p (i32.add (local.get $p) (i32.const 16))) (local.get $end))))
        (local.set $t
          (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $m) (local.get $m)))
        (local.set $m (v128.bitselect (local.get $t) (local.get $m)
          (f32x4.gt (local.get $t) (local.get $m))))
        (local.set $t
          (i8x16.shuffle 4 5 6 7 0 1 2 3 12 13 14 15 8 9 10 11 (local.get $m) (local.get $m)))
        (local.set $m (v128.bitselect (local.get $t) (local.get $m)
          (f32x4.gt (local.get $t) (local.get $m))))
        ;; z at the target, before p overwrites it
        (f32.store (local.get $zy)
          (f32.sub
            (f32.load (i32.add (local.get $x) (i32.shl (i32.load (local.get $y)) (i32.const 2))))
            (f32x4.extract_lane 0 (local.get $m))))
        ;; p = exp(x - m)
        (local.set $p (local.get $x))
        (loop $exp
          (v128.store (local.get $p)
            (call $exp4 (f32x4.sub (v128.load (local.get $p)) (local.get $m))))
          (br_if $exp
            (i32.lt_u (local.tee $p (i32.add (local.get $p) (i32.const 16))) (local.get $end))))
        (f32.store (local.get $sums)
          (call $tree_sum (local.get $x) (local.get $n) (local.get $work)))
        (local.set $x (local.get $end))
        (local.set $y (i32.add (local.get $y) (i32.const 4)))
        (local.set $sums (i32.add (local.get $sums) (i32.const 4)))
        (local.set $zy (i32.add (local.get $zy) (i32.const 4)))
        (local.set $rows (i32.sub (local.get $rows) (i32.const 1)))
        (br $each))))

  ;; dlogits in place from xent_rows' p and sums: (p / s) / N off the target and
  ;; ((p / s) - 1) / N at it (the JS divides every p by s, subtracts the one-hot, then divides
  ;; every value by N: the same three roundings per element).
  (func $xent_grad (export "xent_grad")
    (param $x i32) (param $rows i32) (param $cols i32) (param $y i32) (param $sums i32)
    (param $nf f32)
    (local $p i32) (local $end i32) (local $at i32) (local $s f32) (local $py f32)
    (local $sv v128) (local $nv v128)
    (local.set $nv (f32x4.splat (local.get $nf)))
    (block $done
      (loop $each
        (br_if $done (i32.eqz (local.get $rows)))
        (local.set $end (i32.add (local.get $x) (i32.shl (local.get $cols) (i32.const 2))))
        (local.set $s (f32.load (local.get $sums)))
        (local.set $sv (f32x4.splat (local.get $s)))
        (local.set $at (i32.add (local.get $x) (i32.shl (i32.load (local.get $y)) (i32.const 2))))
        (local.set $py (f32.load (local.get $at)))
        (local.set $p (local.get $x))
        (loop $chunks
          (v128.store (local.get $p)
            (f32x4.div (f32x4.div (v128.load (local.get $p)) (local.get $sv)) (local.get $nv)))
          (br_if $chunks
            (i32.lt_u (local.tee $p (i32.add (local.get $p) (i32.const 16))) (local.get $end))))
        (f32.store (local.get $at)
          (f32.div (f32.sub (f32.div (local.get $py) (local.get $s)) (f32.const 1))
            (local.get $nf)))
        (local.set $x (local.get $end))
        (local.set $y (i32.add (local.get $y) (i32.const 4)))
        (local.set $sums (i32.add (local.get $sums) (i32.const 4)))
        (local.set $rows (i32.sub (local.get $rows) (i32.const 1)))
        (br $each))))
)
