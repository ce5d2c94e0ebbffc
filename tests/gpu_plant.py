"""Test hook: a GEMM kernel wrong by exactly ``delta`` in exactly one output cell of one shape.

Both GEMM kernels store every output cell through one line, ``out[i * params.n + j] = v[c];``.
``OneCellPlant.wgsl`` rewrites that line of the real kernel file so that cell ``(row, col)`` gets
``v[c] + delta`` -- only when the product's shape matches (M, ceil(K / 4), N as the kernel sees
them in its ``params``; a ``None`` field matches any). The planted text is compiled and run by the
very code under test: ``GpuGemm(source=...)`` / ``select_backend(sources=...)`` in Python, a
Playwright route on ``/kernels/<name>.wgsl`` or ``GpuGemm.create(gpu, kind, {source})`` in the
browser. Nothing in the product knows about plants: this module lives with the tests.

``live_products`` runs one real training step of a preset through a recording product provider
and returns the first product of every distinct shape with its operands, so a new product shape
in the model is covered by the plant tests without editing them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daisychain.gpu.audit import danger_lines, sample_cells
from daisychain.gpu.kernels import kernel_source
from daisychain.gpu.probe import hash_accumulator, probe_operands, step_probe_hash
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import IntGemmOps
from daisychain.model.params import init_params

STORE = "out[i * params.n + j] = v[c];"
KERNEL_NAMES = {"dp4a": "gemm_dp4a", "lut": "gemm_lut"}
Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


@dataclass(frozen=True)
class OneCellPlant:
    row: int
    col: int
    delta: int = 1
    m: int | None = None
    k: int | None = None  # matched as ceil(k / 4): the kernel only sees the packed K
    n: int | None = None

    def condition(self) -> str:
        terms = [f"i == {self.row}u", f"j == {self.col}u"]
        if self.m is not None:
            terms.append(f"params.m == {self.m}u")
        if self.k is not None:
            terms.append(f"params.k4 == {max(1, -(-self.k // 4))}u")
        if self.n is not None:
            terms.append(f"params.n == {self.n}u")
        return " && ".join(terms)

    def store(self) -> str:
        return f"out[i * params.n + j] = v[c] + select(0i, {self.delta}i, {self.condition()});"

    def wgsl(self, kind: str) -> str:
        """The real kernel file of ``kind`` ("dp4a" or "lut") with this plant."""
        source = kernel_source(KERNEL_NAMES[kind])
        assert source.count(STORE) == 1, f"plant target {STORE!r} must occur once in {kind}"
        return source.replace(STORE, self.store())

    def fires(self, m: int, k: int, n: int) -> bool:
        k4 = max(1, -(-k // 4))
        return (
            self.row < m
            and self.col < n
            and self.m in (None, m)
            and self.n in (None, n)
            and (self.k is None or max(1, -(-self.k // 4)) == k4)
        )

    def apply(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """What the planted kernel returns for ``a @ b`` (exact product, plus the plant)."""
        out = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
        if self.fires(a.shape[0], a.shape[1], b.shape[1]):
            out[self.row, self.col] += self.delta
        return out


def quiet_cell(
    m: int, n: int, samples: int = 16, tile: tuple[int, int] = (32, 32), seed: int = 0
) -> tuple[int, int]:
    """An interior cell of an (m, n) output that the audit's cells do not check at rotation 0.

    Neither structural (no danger row or column) nor scheduled: a one-unit error there is
    invisible to sampled cells on the first product of that shape; only the checksums see it.
    """
    rows = [i for i in range(m) if i not in set(danger_lines(m, tile[0]))]
    cols = [j for j in range(n) if j not in set(danger_lines(n, tile[1]))]
    assert rows and cols, f"({m}, {n}) has no interior cell"
    checked = set(sample_cells(m, n, tile, samples, seed, 0)[0])
    for i in rows[len(rows) // 2 :] + rows[: len(rows) // 2]:
        for j in cols[len(cols) // 2 :] + cols[: len(cols) // 2]:
            if (i, j) not in checked:
                return i, j
    raise AssertionError(f"every interior cell of ({m}, {n}) is sampled")


def planted_probe_hash(plant: OneCellPlant) -> str:
    """The probe hash a kernel with ``plant`` computes (what its gates see, not the reference)."""
    a, b = probe_operands()
    return hash_accumulator(plant.apply(a, b))


def planted_step_probe(plant: OneCellPlant) -> str:
    """The step probe a peer on a kernel with ``plant`` must publish (not the reference's)."""
    return step_probe_hash(plant.apply)


@dataclass(frozen=True)
class LiveProduct:
    shape: tuple[int, int, int]  # M, K, N
    a: Int8Array
    b: Int8Array


def live_products(preset_name: str = "tiny", seed: int = 1) -> list[LiveProduct]:
    """The first product of every distinct shape in one training step of ``preset_name``."""
    cfg = preset(preset_name)
    params = init_params(cfg, seed)
    rng = np.random.default_rng(seed)  # test tokens only
    x = rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len))
    y = rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len))
    seen: dict[tuple[int, int, int], LiveProduct] = {}

    def record(a: Int8Array, b: Int8Array) -> Int32Array:
        shape = (a.shape[0], a.shape[1], b.shape[1])
        seen.setdefault(shape, LiveProduct(shape, a.copy(), b.copy()))
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)

    gpt.forward_backward(params, cfg, x, y, IntGemmOps("recorder", record))
    return list(seen.values())
