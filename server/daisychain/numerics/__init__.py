"""The numerical contract's reference implementation (normative text: docs/NUMERICS.md).

Everything here is deterministic to the bit on any machine: integer-exact matrix products,
float32 elementwise operations limited to correctly rounded + - * / sqrt in a documented order,
pinned reduction trees, the project's own exp/log and a counter-based integer PRNG.
"""

from daisychain.numerics.fmath import exp, log, rint
from daisychain.numerics.gemm import (
    grad_matmul_left,
    grad_matmul_right,
    int_matmul,
    qmatmul,
    qmatmul_grad3_left,
    qmatmul_grad3_right,
    qmatmul_grad_left,
    qmatmul_grad_right,
)
from daisychain.numerics.hashing import sha256_arrays
from daisychain.numerics.quant import (
    QuantizationError,
    dequantize,
    pow2,
    quantize,
    quantize2,
    quantize3,
    to_int8,
    to_int8_c,
)
from daisychain.numerics.reduce import tree_sum

# 2: the logits gradient is quantized in three limbs (docs/NUMERICS.md section 6, issue 12).
CONTRACT_VERSION = 2

__all__ = [
    "CONTRACT_VERSION",
    "QuantizationError",
    "dequantize",
    "exp",
    "grad_matmul_left",
    "grad_matmul_right",
    "int_matmul",
    "log",
    "pow2",
    "qmatmul",
    "qmatmul_grad3_left",
    "qmatmul_grad3_right",
    "qmatmul_grad_left",
    "qmatmul_grad_right",
    "quantize",
    "quantize2",
    "quantize3",
    "rint",
    "sha256_arrays",
    "to_int8",
    "to_int8_c",
    "tree_sum",
]
