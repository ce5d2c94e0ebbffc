"""Float32 in integer instructions (``kernels/softfloat.wgsl``, ``gpu/softfloat.py``): numpy's
bits on this device, and a gate that refuses each planted rounding bug (docs/KERNELS.md, "Float32
in integers"). Runs on whatever wgpu adapter the machine has (lavapipe here and on CI)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from daisychain.gpu.device import GpuDevice
from daisychain.gpu.kernels import compile_kernel, kernel_source
from daisychain.gpu.pool import BufferPool
from daisychain.gpu.softfloat import CANONICAL_NAN, OPS, UNARY, GpuSoftFloat, library_source
from daisychain.numerics import fmath
from softfloat_gate import reference, run_softfloat_gates, softfloat_cases


@pytest.fixture(scope="module")
def sf(gpu: GpuDevice) -> GpuSoftFloat:
    return GpuSoftFloat(gpu)


def bits(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32).view(np.uint32)


def from_bits(*words: int) -> np.ndarray:
    return np.array(words, dtype=np.uint32)


def test_the_gate_passes_every_case_on_this_device(sf: GpuSoftFloat) -> None:
    report = run_softfloat_gates(sf)
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(softfloat_cases()) * len(OPS) == 104


def test_the_gate_cases_reach_halfway_points_and_subnormals() -> None:
    """The gate is only as strong as its inputs: exact ties (where ties-to-even decides) and
    subnormal results must be among them, or a rounding bug there would pass."""
    ties = subnormal = 0
    for _, a, b in softfloat_cases():
        with np.errstate(all="ignore"):  # NaN and inf operands are cases too
            x = a.view(np.float32).astype(np.float64)
            y = b.view(np.float32).astype(np.float64)
            for exact in (x + y, x * y):
                ok = np.isfinite(exact) & (np.abs(exact) < 1e30)
                r = exact.astype(np.float32)
                up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
                ties += int(np.sum(ok & (exact == (r.astype(np.float64) + up) / 2)))
                subnormal += int(np.sum(ok & (r != 0) & (np.abs(r) < np.float32(2.0**-126))))
    assert ties > 500
    assert subnormal > 500


def test_the_gate_inputs_are_pinned() -> None:
    """Every device runs the same inputs: a change to any of them (a weaker case) shows here."""
    h = hashlib.sha256()
    for name, a, b in softfloat_cases():
        h.update(name.encode() + b"\0" + a.astype("<u4").tobytes() + b.astype("<u4").tobytes())
    assert h.hexdigest() == "55c82315cc54619b358f7fe03d873f7b4903546a445cfe9ef70403f66d19bdcf"


@pytest.mark.parametrize(
    ("op", "a", "b", "want"),
    [
        ("add", 1.0, 2.0**-24, 1.0),  # halfway, down to even
        ("add", 1.0 + 2.0**-23, 2.0**-24, 1.0 + 2.0**-22),  # halfway, up to even
        ("add", 1.0, 2.0**-24 + 2.0**-40, 1.0 + 2.0**-23),  # just above halfway
        ("sub", 1.0, 1.0, 0.0),
        ("sub", -0.0, 0.0, -0.0),
        ("mul", 2.0**-100, 2.0**-40, 2.0**-140),  # a subnormal result, exact
        ("mul", 2.0**100, 2.0**100, float("inf")),
        ("div", 1.0, 3.0, float(np.float32(1.0) / np.float32(3.0))),
        ("div", -1.0, 0.0, float("-inf")),
        ("sqrt", 2.0, 0.0, float(np.sqrt(np.float32(2.0)))),
        ("exp", 0.0, 0.0, 1.0),
        ("exp", -87.0, 0.0, 0.0),  # below EXP_LO: +0, never a subnormal
        ("exp", 1.0, 0.0, float(fmath.exp(np.float32([1.0]))[0])),
        ("log", 1.0, 0.0, 0.0),
        ("log", 2.0**-130, 0.0, float("-inf")),  # a subnormal
        ("rint", 2.5, 0.0, 2.0),
        ("rint", -0.5, 0.0, -0.0),
    ],
)
def test_known_results(sf: GpuSoftFloat, op: str, a: float, b: float, want: float) -> None:
    got = sf.apply(op, bits(a), None if op in UNARY else bits(b))
    assert got[0] == bits(want)[0], f"{op}({a}, {b}): {got[0]:#010x}, want {bits(want)[0]:#010x}"


def test_every_nan_is_the_canonical_one(sf: GpuSoftFloat) -> None:
    inf = float("inf")
    assert sf.apply("sub", bits(inf), bits(inf))[0] == CANONICAL_NAN
    assert sf.apply("mul", bits(0.0), bits(-inf))[0] == CANONICAL_NAN
    assert sf.apply("div", bits(0.0), bits(-0.0))[0] == CANONICAL_NAN
    assert sf.apply("sqrt", bits(-1.0))[0] == CANONICAL_NAN
    assert sf.apply("add", from_bits(0xFFC00123), bits(1.0))[0] == CANONICAL_NAN


def test_a_million_random_operations_match_numpy(sf: GpuSoftFloat) -> None:
    """Beyond the gate's 4096 per case: more of the same generator (the same cases at 2^18)."""
    report = run_softfloat_gates(sf, n=1 << 18)
    assert report.failure is None, report.failure.describe()


def test_shapes_survive_and_bad_calls_are_refused(sf: GpuSoftFloat) -> None:
    a = bits(1.0, 2.0, 3.0, 4.0, 5.0, 6.0).reshape(2, 3)
    assert sf.apply("mul", a, a).shape == (2, 3)
    assert sf.apply("add", a[:0], a[:0]).shape == (0, 3)
    with pytest.raises(ValueError, match="unknown soft-float operation"):
        sf.apply("pow", a, a)
    with pytest.raises(TypeError, match="uint32 bit patterns"):
        sf.apply("add", a.view(np.float32), a)
    with pytest.raises(ValueError, match="needs two operands"):
        sf.apply("div", a)
    with pytest.raises(ValueError, match="operands differ"):
        sf.apply("add", a, a.reshape(3, 2))


# --- planted bugs: each one a way soft-float arithmetic goes wrong, each refused by the gate -----


def plant(old: str, new: str) -> str:
    source = kernel_source("softfloat")
    assert source.count(old) == 1, f"planting target {old!r} must occur once in softfloat.wgsl"
    return source.replace(old, new)


PLANTS = {
    "ties away from zero instead of to even": (
        "        sig = sig & ~1u;  // exactly halfway: to even\n",
        "",
    ),
    "subnormal results flushed to zero": (
        "    if (exp < 1) {\n        sig = sf_shift_jam(sig, u32(1 - exp));",
        "    if (exp < 1) {\n        return sign;",
    ),
    "alignment drops the sticky bit": (
        "    return (x >> n) | select(0u, 1u, lost != 0u);",
        "    return x >> n;",
    ),
    "product loses the carry of its low word": (
        "+ select(0u, 1u, lo < p00);",
        ";",
    ),
    "product ignores its low 16 bits": (
        "    sig = sig | select(0u, 1u, (lo & 0xFFFFu) != 0u);\n",
        "",
    ),
    "quotient drops its remainder": (
        "return sf_round_pack(sign, exp, q | select(0u, 1u, num != 0u));",
        "return sf_round_pack(sign, exp, q);",
    ),
    "square root drops its remainder": (
        "(root << 5u) | select(0u, 1u, rem != 0u)",
        "(root << 5u)",
    ),
    "x - x is -0": ("        return 0u;  // x - x", "        return big & SF_SIGN;  // x - x"),
    "subnormal operand read with an implicit one": (
        "        return (a & SF_MANT) << 7u;\n",
        "        return ((a & SF_MANT) | SF_HIDDEN) << 7u;\n",
    ),
    "overflow to the largest finite instead of inf": (
        "    if (exp >= 0xFF) {\n        return sign | SF_INF;",
        "    if (exp >= 0xFF) {\n        return sign | 0x7F7FFFFFu;",
    ),
    "rint rounds halves up": (
        "    if (rem > half || (rem == half && (q & 1u) == 1u)) {\n        q = q + 1u;",
        "    if (rem >= half) {\n        q = q + 1u;",
    ),
    "exp's reduction drops its third part of ln 2": (
        "sf_mul(k, SF_LN2_B)), sf_mul(k, SF_LN2_C));",
        "sf_mul(k, SF_LN2_B)), 0u);",
    ),
    "exp's polynomial one coefficient short": (
        "    p = sf_add(sf_mul(p, r), 0x3D2AAAABu);\n",
        "",
    ),
    "log splits the mantissa one unit off sqrt(2)": (
        "mant > 0x3504F3u",
        "mant >= 0x3504F3u",
    ),
    "log adds its two parts in the other order": (
        "return sf_add(sf_mul(e, SF_LN2_A), sf_add(log_m, sf_mul(e, SF_LN2_LO)));",
        "return sf_add(sf_add(sf_mul(e, SF_LN2_A), log_m), sf_mul(e, SF_LN2_LO));",
    ),
    "a NaN passed through instead of the canonical one": (
        "    if (sf_is_nan(a) || sf_is_nan(b)) {\n        return SF_QNAN;\n    }\n"
        "    let ma = a & SF_ABS;",
        "    if (sf_is_nan(a)) {\n        return a;\n    }\n    if (sf_is_nan(b)) {\n"
        "        return b;\n    }\n    let ma = a & SF_ABS;",
    ),
}


@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_gate_refuses_a_planted_bug(gpu: GpuDevice, bug: str) -> None:
    old, new = PLANTS[bug]
    planted = GpuSoftFloat(gpu, source=plant(old, new))
    report = run_softfloat_gates(planted)
    assert report.failure is not None, f"the gate passed a soft-float with {bug}"
    assert report.failure.index is not None  # a wrong value, not an error


# --- the library, as an epilogue builds on it --------------------------------------------------

FMA_ENTRY = """
@group(0) @binding(0) var<storage, read> xa: array<u32>;
@group(0) @binding(1) var<storage, read> xb: array<u32>;
@group(0) @binding(2) var<storage, read> xc: array<u32>;
@group(0) @binding(3) var<storage, read_write> xout: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&xout)) {
        xout[i] = sf_add(sf_mul(xa[i], xb[i]), xc[i]);
    }
}
"""


def test_an_epilogue_built_on_the_library_never_fuses(gpu: GpuDevice) -> None:
    """``a * b + c`` written with the library rounds twice, as the contract says, on inputs where
    one rounding (a fused multiply-add, which WGSL's own f32 may use) gives other bits."""
    n = 4096
    name, a, b = softfloat_cases(n)[5]  # in [1, 2): every product inexact
    assert name == "odd short mantissas"
    prod = reference("mul", a, b)
    c = (prod ^ np.uint32(0x80000000)) + np.uint32(3)  # nearly cancels the product
    want = reference("add", prod, c)
    exact = a.view(np.float32).astype(np.float64) * b.view(np.float32).astype(np.float64) + c.view(
        np.float32
    ).astype(np.float64)
    with np.errstate(all="ignore"):
        fused = exact.astype(np.float32).view(np.uint32)
    assert np.sum(fused != want) > 100  # a fused result would differ here

    kernel = compile_kernel(
        gpu, "softfloat-fma-test", ["read", "read", "read", "write"], library_source() + FMA_ENTRY
    )
    pool = BufferPool(gpu)
    bufs = [pool.upload(a), pool.upload(b), pool.upload(c), pool.acquire(n * 4)]
    kernel.dispatch(bufs, (n // 64, 1, 1))
    got = np.frombuffer(pool.read(bufs[3], n * 4), dtype="<u4")
    assert np.array_equal(got, want)


def test_the_library_is_cut_at_its_marker() -> None:
    lib = library_source()
    assert "fn sf_sqrt" in lib and "@compute" not in lib
    with pytest.raises(ValueError, match="entry-point marker"):
        library_source("fn sf_add() {}")
