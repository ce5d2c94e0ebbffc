"""The GEMM gate inputs as golden vectors (tests/vectors/gates.json, written by
``python tests/vectorgen --write gates`` from ``daisychain.gpu.gates``): the committed file is
what the Python gates give now, so a gate case changed in Python alone fails here, and one changed
in the page alone fails ``tests/js/gates.test.mjs`` (the page's cases against the same file)."""

from __future__ import annotations

import json

from daisychain.gpu.gates import gemm_cases, qmatmul_cases
from vectorgen.files import SOURCE_DIR
from vectorgen.gates import FILE, render

VECTORS = SOURCE_DIR / FILE


def test_committed_file_is_what_write_produces() -> None:
    assert VECTORS.read_text(encoding="utf-8") == render(), (
        "tests/vectors/gates.json differs from the Python gates: change static/js/gpu/gates.js "
        "the same way, then run `python tests/vectorgen --write gates`"
    )


def test_the_file_holds_every_case_in_gate_order_with_the_long_sums() -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    names = [c["name"] for c in doc["cases"]]
    assert names == [c[0] for c in gemm_cases()] + [c[0] for c in qmatmul_cases()]
    assert (doc["integer_cases"], doc["float_cases"]) == (48, 4)
    shapes = {c["name"]: (c["m"], c["k"], c["n"]) for c in doc["cases"]}
    assert shapes["all 127, K=4099"] == shapes["127 x -127, K=4099"] == (5, 4099, 6)
