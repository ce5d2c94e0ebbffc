"""Static guard: no platform transcendental or unpinned reduction in the contract's code paths.

The numerical contract (docs/NUMERICS.md section 0) allows only + - * / sqrt on float32, the
project's own exp/log and pinned tree sums. This scans every implementation of it — the Python
reference, the JS mirror and the WGSL kernels — for calls that would silently break bit-identity
across platforms, and proves the scan catches a planted call. Comments are stripped first, so
documentation may still name the forbidden functions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY_FILES = [
    *sorted((ROOT / "server/daisychain/numerics").glob("*.py")),
    *(ROOT / "server/daisychain/model" / n for n in ("gpt.py", "params.py", "ops.py")),
    ROOT / "server/daisychain/optim.py",
    ROOT / "server/daisychain/generate.py",  # the sampling rule is contract arithmetic too
]
JS_FILES = [
    *sorted((ROOT / "static/js/numerics").glob("*.js")),
    *sorted((ROOT / "static/js/model").glob("*.js")),
    *sorted((ROOT / "static/js/p2p").glob("*.js")),  # codec, allreduce: the exchange's sums
]
WGSL_FILES = sorted((ROOT / "kernels").glob("*.wgsl"))
# Calls a file may make although the pattern forbids them in general, each with its reason.
ALLOWED = {
    # The sampling rule's running sum is float32 left to right; numpy's accumulate is exactly
    # that, and generate.py refuses to import on a numpy where it is not (_cumsum_is_sequential).
    "server/daisychain/generate.py": {"np.cumsum"},
}

PY_FORBIDDEN = re.compile(
    r"\b(?:np|numpy|math)\.(?:exp|exp2|expm1|log|log2|log10|log1p|power|tanh|sinh|cosh|sum|mean|"
    r"dot|einsum|average|nansum|cumsum|linalg)\b|\.(?:sum|mean|cumsum)\("
)
JS_FORBIDDEN = re.compile(
    r"\bMath\.(?:exp|expm1|log|log2|log10|log1p|pow|tanh|sinh|cosh|cbrt|hypot|round)\b"
)
WGSL_FORBIDDEN = re.compile(r"\b(?:exp|exp2|log|log2|pow|tanh|sinh|cosh|fma|inverseSqrt)\s*\(")


def _strip_comments(text: str, line_comment: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S) if line_comment == "//" else text
    if line_comment == "#":
        text = re.sub(r'"""(?:.|\n)*?"""', "", text)  # docstrings
    return "\n".join(line.split(line_comment, 1)[0] for line in text.splitlines())


def violations(text: str, pattern: re.Pattern[str], line_comment: str) -> list[str]:
    code = _strip_comments(text, line_comment)
    return [m.group(0) for m in pattern.finditer(code)]


@pytest.mark.parametrize(
    ("files", "pattern", "comment"),
    [
        (PY_FILES, PY_FORBIDDEN, "#"),
        (JS_FILES, JS_FORBIDDEN, "//"),
        (WGSL_FILES, WGSL_FORBIDDEN, "//"),
    ],
    ids=["python", "js", "wgsl"],
)
def test_contract_code_uses_no_platform_transcendental(
    files: list[Path], pattern: re.Pattern[str], comment: str
) -> None:
    assert files, "no files found: the scan would pass vacuously"
    found = {
        rel: v
        for f in files
        if (rel := str(f.relative_to(ROOT)))
        and (
            v := [
                call
                for call in violations(f.read_text(encoding="utf-8"), pattern, comment)
                if call not in ALLOWED.get(rel, set())
            ]
        )
    }
    assert not found, f"forbidden calls in the numerical contract: {found}"


@pytest.mark.parametrize(
    ("snippet", "pattern", "comment"),
    [
        ("y = np.exp(x)\n", PY_FORBIDDEN, "#"),
        ("s = x.sum(axis=-1)\n", PY_FORBIDDEN, "#"),
        ("const y = Math.exp(x);\n", JS_FORBIDDEN, "//"),
        ("const r = Math.round(v);\n", JS_FORBIDDEN, "//"),
        ("let y = exp(x);\n", WGSL_FORBIDDEN, "//"),
    ],
)
def test_the_scan_catches_a_planted_call(
    snippet: str, pattern: re.Pattern[str], comment: str
) -> None:
    assert violations(snippet, pattern, comment)
    assert not violations(f"{comment} {snippet}", pattern, comment)  # comments are exempt
