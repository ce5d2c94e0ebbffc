"""The GEMM gate inputs as golden vectors (tests/vectors/gates.json; docs/KERNELS.md, "Exact
gates").

Every backend in both twins is gated on the same inputs: ``daisychain.gpu.gates`` (the Python
peer's numpy reference, cpu-int8, cpu-madd, the wgpu kernels) and ``static/js/gpu/gates.js`` (the
page's CPU tier, its WebAssembly GEMM and the WebGPU kernels). The page proves it in Chromium by
comparing its ``casesDigest()`` with Python's; this file lets Node prove it without a browser
(``tests/js/gates.test.mjs``), so a case added to one twin only fails a fast test, not the
browser suite alone. A change to the gate set is: both twins, then ``--write gates``.

Per integer case: its name, M, K, N and the SHA-256 of each operand's int8 bytes (C order); per
float case (the full quantized product): its name, M, K, N and the SHA-256 of ``aq, ae, bq, be``
as int8 / int32 little-endian. ``digest`` is ``casesDigest()``'s: SHA-256 over every case's
UTF-8 name and operand bytes in order (integer cases: a, b; float cases: aq, ae, bq, be).

    python tests/vectorgen --write gates   # regenerate tests/vectors/gates.json
    python tests/vectorgen --check gates   # recompute, compare (exit 1 if different)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.gates import GATE_SEED, gemm_cases, qmatmul_cases
from vectorgen.files import check_texts, write_texts

FILE = "gates.json"
FORMAT = "daisychain-gate-vectors"
FORMAT_VERSION = 1


def _le(arr: npt.NDArray[Any], dtype: str) -> bytes:
    return np.ascontiguousarray(arr).astype(dtype).tobytes()


def operands() -> list[tuple[str, tuple[int, int, int], list[bytes]]]:
    """Every GEMM gate case in gate order: (name, (M, K, N), its operands' bytes)."""
    out = [
        (name, (a.shape[0], a.shape[1], b.shape[1]), [_le(a, "i1"), _le(b, "i1")])
        for name, a, b in gemm_cases()
    ]
    for name, a_q, a_e, b_q, b_e in qmatmul_cases():
        shape = (a_q.shape[0], a_q.shape[1], b_q.shape[1])
        parts = [_le(a_q, "i1"), _le(a_e, "<i4"), _le(b_q, "i1"), _le(b_e, "<i4")]
        out.append((name, shape, parts))
    return out


def digest() -> str:
    """``casesDigest()`` of static/js/gpu/gates.js, from the Python gates."""
    h = hashlib.sha256()
    for name, _, parts in operands():
        h.update(name.encode())
        for part in parts:
            h.update(part)
    return h.hexdigest()


def build() -> dict[str, Any]:
    cases = operands()
    integer = len(gemm_cases())
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated_by": "python tests/vectorgen --write gates (daisychain.gpu.gates)",
        "gate_seed": GATE_SEED,
        "tile": [32, 32],
        "operands": {
            "integer": "sha256 = [a, b], each the int8 bytes of the operand, C order",
            "float": "sha256 = [aq, ae, bq, be]: aq, bq int8; ae, be int32 little-endian",
        },
        "digest_rule": (
            "SHA-256 over every case in order: its UTF-8 name, then its operands' bytes"
        ),
        "integer_cases": integer,
        "float_cases": len(cases) - integer,
        "digest": digest(),
        "cases": [
            {
                "kind": "integer" if i < integer else "float",
                "name": name,
                "m": m,
                "k": k,
                "n": n,
                "sha256": [hashlib.sha256(p).hexdigest() for p in parts],
            }
            for i, (name, (m, k, n), parts) in enumerate(cases)
        ],
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


def write(directory: Path) -> str:
    return write_texts(directory, {FILE: render()})


def check(directory: Path) -> str:
    why = (
        "the gate inputs changed: change static/js/gpu/gates.js the same way, then run "
        "`python tests/vectorgen --write gates`"
    )
    return check_texts(directory, {FILE: render()}, why)
