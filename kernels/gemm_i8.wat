;; gemm_i8.wat -- exact int8 x int8 -> int32 matrix product in WebAssembly SIMD.
;;
;; The browser CPU tier's integer products (docs/NUMERICS.md section 3; docs/KERNELS.md,
;; "WebAssembly SIMD GEMM"). Assembled by `python tests/wasm_build.py` (wasmtime's wat2wasm) into
;; static/wasm/gemm_i8.wasm; driven and gated by static/js/numerics/wasmgemm.js.
;;
;;   C[i, j] = sum_k A[i, k] * B[k, j]      exact, int32
;;
;; Exactness. Every operand byte is sign-extended to int16 (v128.load8x8_s) and multiplied by
;; i32x4.dot_i16x8_s, which forms two int16 x int16 products and adds them in 32 bits: with int8
;; values each product is at most 128 * 128 = 2^14 in magnitude and a pair at most 2^15, so the
;; instruction's one overflow case (both pairs -32768 * -32768) cannot occur. The lanes accumulate
;; with i32x4.add, which wraps modulo 2^32; the four lanes of a cell are then added (wrapping
;; too). Modular addition is exact whenever the true total fits in int32, whatever the partial
;; sums did on the way: |C| <= 2^14 * K < 2^31 for K < 2^17. The driver splits larger K.
;; No relaxed-SIMD instruction is used: i32x4.relaxed_dot_i8x16_i7x16_add_s leaves the product
;; of a -128 operand implementation-defined.
;;
;; Layouts (bytes in this module's exported memory; the driver packs them and zero-pads):
;;   A: row pairs. Pair p (rows 2p, 2p+1) is 16 * k8 bytes at a + 16 k8 p; its step s holds
;;      A[2p, 8s .. 8s+7] then A[2p+1, 8s .. 8s+7]. M is padded to even, K to a multiple of 8.
;;   B: column quads, from B^T. Quad q (columns 4q .. 4q+3) is 32 * k8 bytes at b + 32 k8 q; its
;;      step s holds B[8s .. 8s+7, 4q], then the same K range of columns 4q+1, 4q+2, 4q+3.
;;   C: int32 little-endian rows of ldc bytes; cell (i, j) at c + ldc * i + 4 j. Every cell of
;;      the m2 x n4 blocks is written with v128.store (never accumulated into), so memory left
;;      over from an earlier call cannot leak into the result.
;; m2, n4 and k8 must be >= 1: each loop runs its body before testing (the driver never calls
;; with an empty product). Addresses of A and B are multiples of 8, of C multiples of 16.
;;
;; `pack` lays the operands out (the driver copies them into this memory as they are stored and
;; zeroes the packed regions first); `combine` turns the int32 cells of one product, or of the
;; stacked limbs of a two- or three-limb gradient operand, into the exact integers as float64.

(module
  (memory (export "memory") 1)

  ;; (sum of v0's lanes, sum of v1's, sum of v2's, sum of v3's): the four cells of a 1 x 4 tile.
  ;; Pairs of lanes are added across two vectors by shuffles, twice.
  (func $hsum4 (param $v0 v128) (param $v1 v128) (param $v2 v128) (param $v3 v128)
    (result v128)
    (local $s01 v128) (local $s23 v128)
    ;; s01 = (v0.0 + v0.1, v1.0 + v1.1, v0.2 + v0.3, v1.2 + v1.3)
    (local.set $s01
      (i32x4.add
        (i8x16.shuffle 0 1 2 3 16 17 18 19 8 9 10 11 24 25 26 27
          (local.get $v0) (local.get $v1))
        (i8x16.shuffle 4 5 6 7 20 21 22 23 12 13 14 15 28 29 30 31
          (local.get $v0) (local.get $v1))))
    (local.set $s23
      (i32x4.add
        (i8x16.shuffle 0 1 2 3 16 17 18 19 8 9 10 11 24 25 26 27
          (local.get $v2) (local.get $v3))
        (i8x16.shuffle 4 5 6 7 20 21 22 23 12 13 14 15 28 29 30 31
          (local.get $v2) (local.get $v3))))
    ;; (s01.0 + s01.2, s01.1 + s01.3, s23.0 + s23.2, s23.1 + s23.3)
    (i32x4.add
      (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23
        (local.get $s01) (local.get $s23))
      (i8x16.shuffle 8 9 10 11 12 13 14 15 24 25 26 27 28 29 30 31
        (local.get $s01) (local.get $s23))))

  ;; C = A B on the packed layouts above: m2 row pairs, n4 column quads, k8 steps of 8 along K,
  ;; C rows ldc bytes apart. One 2 x 4 tile of C at a time, its eight accumulators in registers:
  ;; per step 2 loads of A, 4 of B, 8 dot products (64 multiply-adds).
  (func $gemm (export "gemm")
    (param $a i32) (param $b i32) (param $c i32)
    (param $m2 i32) (param $n4 i32) (param $k8 i32) (param $ldc i32)
    (local $arow i32)  ;; the current row pair's block of A
    (local $aend i32)  ;; its end, where the next pair's block starts
    (local $crow i32)  ;; C[2p, 0]
    (local $cq i32)    ;; C[2p, 4q]
    (local $bq i32)    ;; the current column quad's block of B
    (local $x i32)     ;; moving through A's pair block
    (local $y i32)     ;; moving through B's quad block
    (local $p i32)     ;; row pairs left
    (local $q i32)     ;; column quads left
    (local $a0 v128) (local $a1 v128) (local $w v128)
    (local $s00 v128) (local $s01 v128) (local $s02 v128) (local $s03 v128)
    (local $s10 v128) (local $s11 v128) (local $s12 v128) (local $s13 v128)
    (local.set $arow (local.get $a))
    (local.set $crow (local.get $c))
    (local.set $p (local.get $m2))
    (loop $pairs
      (local.set $aend (i32.add (local.get $arow) (i32.shl (local.get $k8) (i32.const 4))))
      (local.set $bq (local.get $b))
      (local.set $cq (local.get $crow))
      (local.set $q (local.get $n4))
      (loop $quads
        (local.set $x (local.get $arow))
        (local.set $y (local.get $bq))
        (local.set $s00 (v128.const i32x4 0 0 0 0))
        (local.set $s01 (v128.const i32x4 0 0 0 0))
        (local.set $s02 (v128.const i32x4 0 0 0 0))
        (local.set $s03 (v128.const i32x4 0 0 0 0))
        (local.set $s10 (v128.const i32x4 0 0 0 0))
        (local.set $s11 (v128.const i32x4 0 0 0 0))
        (local.set $s12 (v128.const i32x4 0 0 0 0))
        (local.set $s13 (v128.const i32x4 0 0 0 0))
        (loop $steps
          (local.set $a0 (v128.load8x8_s (local.get $x)))
          (local.set $a1 (v128.load8x8_s offset=8 (local.get $x)))
          (local.set $w (v128.load8x8_s (local.get $y)))
          (local.set $s00
            (i32x4.add (local.get $s00) (i32x4.dot_i16x8_s (local.get $a0) (local.get $w))))
          (local.set $s10
            (i32x4.add (local.get $s10) (i32x4.dot_i16x8_s (local.get $a1) (local.get $w))))
          (local.set $w (v128.load8x8_s offset=8 (local.get $y)))
          (local.set $s01
            (i32x4.add (local.get $s01) (i32x4.dot_i16x8_s (local.get $a0) (local.get $w))))
          (local.set $s11
            (i32x4.add (local.get $s11) (i32x4.dot_i16x8_s (local.get $a1) (local.get $w))))
          (local.set $w (v128.load8x8_s offset=16 (local.get $y)))
          (local.set $s02
            (i32x4.add (local.get $s02) (i32x4.dot_i16x8_s (local.get $a0) (local.get $w))))
          (local.set $s12
            (i32x4.add (local.get $s12) (i32x4.dot_i16x8_s (local.get $a1) (local.get $w))))
          (local.set $w (v128.load8x8_s offset=24 (local.get $y)))
          (local.set $s03
            (i32x4.add (local.get $s03) (i32x4.dot_i16x8_s (local.get $a0) (local.get $w))))
          (local.set $s13
            (i32x4.add (local.get $s13) (i32x4.dot_i16x8_s (local.get $a1) (local.get $w))))
          (local.set $y (i32.add (local.get $y) (i32.const 32)))
          (local.set $x (i32.add (local.get $x) (i32.const 16)))
          (br_if $steps (i32.lt_u (local.get $x) (local.get $aend))))
        ;; B's next quad starts where this one ended.
        (local.set $bq (local.get $y))
        (v128.store (local.get $cq)
          (call $hsum4 (local.get $s00) (local.get $s01) (local.get $s02) (local.get $s03)))
        (v128.store (i32.add (local.get $cq) (local.get $ldc))
          (call $hsum4 (local.get $s10) (local.get $s11) (local.get $s12) (local.get $s13)))
        (local.set $cq (i32.add (local.get $cq) (i32.const 16)))
        (br_if $quads (local.tee $q (i32.sub (local.get $q) (i32.const 1)))))
      (local.set $arow (local.get $aend))
      (local.set $crow (i32.add (local.get $crow) (i32.shl (local.get $ldc) (i32.const 1))))
      (br_if $pairs (local.tee $p (i32.sub (local.get $p) (i32.const 1))))))

  ;; Packs `count` lines (rows of A, or columns of B) of a K-chunk of kc values into the blocked
  ;; layout at dst, from stacked line `first` on: lines come in groups of 2^shift (shift 1: A's
  ;; row pairs; shift 2: B's column quads), and a group's step s holds 8 values of each of its
  ;; lines in turn. Element (line, k) is read at src + line * ls + k * ks, so one function packs
  ;; every stored layout (transposed or not). Only real values are written: the caller zeroes dst
  ;; first, which is K's zero padding and the zero lines that fill the last group.
  (func $pack (export "pack")
    (param $dst i32) (param $src i32) (param $first i32) (param $count i32)
    (param $kc i32) (param $k8 i32) (param $ls i32) (param $ks i32) (param $shift i32)
    (local $line i32) (local $end i32) (local $step i32) (local $d i32) (local $s i32)
    (local $from i32) (local $k i32) (local $n i32) (local $u i32)
    (local.set $step (i32.shl (i32.const 8) (local.get $shift)))
    (local.set $line (local.get $first))
    (local.set $end (i32.add (local.get $first) (local.get $count)))
    (local.set $from (local.get $src))
    (block $done
      (loop $lines
        (br_if $done (i32.ge_u (local.get $line) (local.get $end)))
        ;; d = dst + (line >> shift) * step * k8 + (line mod 2^shift) * 8
        (local.set $d
          (i32.add (local.get $dst)
            (i32.add
              (i32.mul (i32.shr_u (local.get $line) (local.get $shift))
                       (i32.mul (local.get $step) (local.get $k8)))
              (i32.shl
                (i32.and (local.get $line)
                         (i32.sub (i32.shl (i32.const 1) (local.get $shift)) (i32.const 1)))
                (i32.const 3)))))
        (local.set $s (local.get $from))
        (local.set $k (local.get $kc))
        (block $line_done
          (loop $steps
            (br_if $line_done (i32.eqz (local.get $k)))
            (if (i32.and (i32.eq (local.get $ks) (i32.const 1))
                         (i32.ge_u (local.get $k) (i32.const 8)))
              (then
                ;; 8 contiguous values: one 64-bit move (src may be unaligned)
                (i64.store (local.get $d) (i64.load align=1 (local.get $s)))
                (local.set $s (i32.add (local.get $s) (i32.const 8)))
                (local.set $k (i32.sub (local.get $k) (i32.const 8))))
              (else
                (local.set $n
                  (select (local.get $k) (i32.const 8) (i32.lt_u (local.get $k) (i32.const 8))))
                (local.set $u (i32.const 0))
                (loop $values
                  (i32.store8 (i32.add (local.get $d) (local.get $u)) (i32.load8_u (local.get $s)))
                  (local.set $s (i32.add (local.get $s) (local.get $ks)))
                  (br_if $values
                    (i32.lt_u (local.tee $u (i32.add (local.get $u) (i32.const 1)))
                              (local.get $n))))
                (local.set $k (i32.sub (local.get $k) (local.get $n)))))
            (local.set $d (i32.add (local.get $d) (local.get $step)))
            (br $steps)))
        (local.set $from (i32.add (local.get $from) (local.get $ls)))
        (local.set $line (i32.add (local.get $line) (i32.const 1)))
        (br $lines))))

  ;; dst (float64, m x n, row-major) = the exact integer of each cell from the int32 cells at c
  ;; (rows ldc bytes apart): with limbs > 1 a Horner sum in base 256 over the cells lstride bytes
  ;; apart, most significant first (the stacked [hi; lo] rows or [hi | lo] columns); plus dst's
  ;; previous value when `add` (a later K-chunk). Exact: every value and sum stays below 2^53,
  ;; and float64 arithmetic rounds only inexact results.
  (func $combine (export "combine")
    (param $dst i32) (param $c i32) (param $ldc i32) (param $limbs i32) (param $lstride i32)
    (param $m i32) (param $n i32) (param $add i32)
    (local $i i32) (local $j i32) (local $l i32) (local $p i32) (local $q i32) (local $row i32)
    (local $v f64)
    (local.set $q (local.get $dst))
    (local.set $row (local.get $c))
    (local.set $i (local.get $m))
    (block $done
      (loop $rows
        (br_if $done (i32.eqz (local.get $i)))
        (local.set $p (local.get $row))
        (local.set $j (local.get $n))
        (loop $cells
          (local.set $v (f64.convert_i32_s (i32.load (local.get $p))))
          (local.set $l (i32.const 1))
          (block $limbs_done
            (loop $horner
              (br_if $limbs_done (i32.ge_u (local.get $l) (local.get $limbs)))
              (local.set $v
                (f64.add (f64.mul (local.get $v) (f64.const 256))
                  (f64.convert_i32_s
                    (i32.load
                      (i32.add (local.get $p) (i32.mul (local.get $l) (local.get $lstride)))))))
              (local.set $l (i32.add (local.get $l) (i32.const 1)))
              (br $horner)))
          (if (local.get $add)
            (then (local.set $v (f64.add (local.get $v) (f64.load (local.get $q))))))
          (f64.store (local.get $q) (local.get $v))
          (local.set $p (i32.add (local.get $p) (i32.const 4)))
          (local.set $q (i32.add (local.get $q) (i32.const 8)))
          (br_if $cells (local.tee $j (i32.sub (local.get $j) (i32.const 1)))))
        (local.set $row (i32.add (local.get $row) (local.get $ldc)))
        (local.set $i (i32.sub (local.get $i) (i32.const 1)))
        (br $rows))))
)
