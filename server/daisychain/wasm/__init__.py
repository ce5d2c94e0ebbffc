"""A small assembler for the WebAssembly text format: DaisyChain's .wat kernels -> .wasm bytes.

The browser's CPU tier runs an exact int8 GEMM in WebAssembly SIMD (kernels/gemm_i8.wat, loaded
by static/js/numerics/wasmgemm.js). No WebAssembly toolchain is assumed anywhere (CI has Python
and Node only), so the binary is built by this package, written from the core specification
(chapter 5, binary format; chapter 6, text format) and the SIMD opcode table, for the subset the
kernels use. ``daisychain wasm build`` writes the committed binaries; a test rebuilds them and
compares the bytes (docs/KERNELS.md, "The WebAssembly assembler").

Modules, one concept each: ``sexpr`` (reading the S-expressions), ``literals`` (numbers),
``opcodes`` (the instruction table), ``instructions`` (function bodies), ``text`` (module
fields), ``module`` (what is built), ``binary`` (the encoding), ``leb128`` (its integers),
``build`` (which sources make which binaries), ``cli`` (the command).
"""

from __future__ import annotations

from daisychain.wasm.binary import encode
from daisychain.wasm.errors import WatError
from daisychain.wasm.sexpr import read
from daisychain.wasm.text import parse_module


def assemble(text: str, source: str = "<wat>") -> bytes:
    """The .wasm bytes of the module ``text`` describes; WatError (with position) if it can't."""
    return encode(parse_module(read(text, source)))


__all__ = ["WatError", "assemble"]
