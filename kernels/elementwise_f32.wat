;; elementwise_f32.wat -- the contract's block quantization in WebAssembly SIMD.
;;
;; The browser CPU tier's float32 elementwise work around its integer products (docs/NUMERICS.md
;; section 2; docs/KERNELS.md, "WebAssembly SIMD elementwise kernel"): the absolute maxima of the
;; blocks, the power-of-two fold of a gradient, and the one-, two- and three-limb int8 split.
;; Assembled by `daisychain wasm build` into static/wasm/elementwise_f32.wasm; driven by
;; static/js/numerics/wasmelementwise.js and gated by static/js/numerics/wasmeltgate.js against
;; the JS mirror (quant.js, gemm.js), which it must match bit for bit.
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
)
