"""What the chains have in common (``mlp_chain``, ``attention_chain``, ``block_chain``; docs/
KERNELS.md "Chains"): a chain is products and epilogues recorded into one command encoder, with
one readback, proven by a gate at backend start and used by training only once it passed.

- ``epilogue_module``: the WGSL an epilogue compiles from (the softfloat library, the shared
  ``epilogue.wgsl``, the epilogue's own file), whole, so a test can plant a bug anywhere in it.
- ``run_chain_gates``: every gate case through a chain on a poisoned pool against its numpy
  reference, every output compared exactly, a refusal where the reference refuses.
- ``attach``: compile and gate a chain on a GEMM and hang it on the GEMM for training, or say why
  not (the GEMM stays in use either way).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.gates import GATE_SEED, GateFailure, GateReport
from daisychain.gpu.gemm import ALIGN_WORDS
from daisychain.gpu.kernels import Copy, Step, dispatch_sequence, kernel_source
from daisychain.gpu.softfloat import library_source
from daisychain.numerics import prng

log = logging.getLogger(__name__)

# One params slot (256 bytes: every binding offset a device accepts) and strides in whole slots:
# the GEMM's own packing helpers (gemm.ALIGN_WORDS, gemm.aligned_words, gemm.side_by_side).
SLOT_WORDS = ALIGN_WORDS


def epilogue_module(name: str) -> str:
    """The whole WGSL module of ``kernels/<name>.wgsl``: the softfloat library, ``epilogue.wgsl``
    and the file itself."""
    return library_source() + kernel_source("epilogue") + kernel_source(name)


ROW_MAX = 1024  # the longest row a parallel epilogue holds (EP_ROW_MAX in epilogue.wgsl)
_GRID_X = 65535  # the workgroups a dispatch may have along one axis


# Invocations per row of a parallel epilogue (epilogue.wgsl's EP_WG). Measured on llvmpipe (2
# cores, tiny's 16 heads x 64 queries, docs/BENCHMARKS.md): the attention epilogue's chain took
# 43, 23, 16, 13, 15 and 31 ms at 1, 2, 4, 8, 16 and 64, since the emulator pays for every
# workgroup barrier; a real GPU runs 64 in lockstep for about the price of one. The bits are the
# same at every width (the gates pass at each).
EMULATED_WIDTH = 8
GPU_WIDTH = 64


def epilogue_width(gpu: Any) -> int:
    """EP_WG for ``gpu``: narrow on an emulated adapter, a full workgroup on a real GPU."""
    return EMULATED_WIDTH if getattr(gpu, "emulated", False) else GPU_WIDTH


def rows_grid(rows: int) -> tuple[int, int, int]:
    """The dispatch of a one-workgroup-per-row epilogue (``ep_row_of`` reads it back)."""
    return (min(rows, _GRID_X), -(-rows // _GRID_X), 1)


def gate_exps(stream: int, case: int, n: int, lo: int, hi: int) -> npt.NDArray[np.int32]:
    """``n`` scale exponents in ``[lo, hi]`` from the contract PRNG (stream ``(GATE_SEED,
    stream, case)``), so every device runs the same cases (int8 operands: ``gates.random_int8``)."""
    words = prng.bits(prng.key(GATE_SEED, stream, case), n)
    return (lo + (words % np.uint32(hi - lo + 1)).astype(np.int64)).astype(np.int32)


def f32_bits(x: float | np.floating[Any]) -> int:
    """The float32 bit pattern of ``x`` (a kernel's float parameter travels as its bits)."""
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def unpack_k_major(words: npt.NDArray[Any], rows: int, k: int) -> npt.NDArray[np.int8]:
    """(k4, m4) u32 words of a K-major int8 operand -> its (rows, k) int8 values."""
    k4, m4 = words.shape
    as_rows = np.ascontiguousarray(words.T).view(np.int8).reshape(m4, 4 * k4)
    return np.ascontiguousarray(as_rows[:rows, :k])


class Outputs:
    """The named outputs of one chain run, read back together (``run_and_read``)."""

    def __init__(self, raw: npt.NDArray[np.uint8], offsets: dict[str, int], sizes: dict[str, int]):
        self._raw, self._offsets, self._sizes = raw, offsets, sizes

    def words(self, name: str, dtype: str) -> npt.NDArray[Any]:
        """Output ``name``'s bytes as ``dtype`` (a view of the one readback)."""
        start = self._offsets[name]
        return self._raw[start : start + self._sizes[name]].view(dtype)

    def scoped(self, prefix: str) -> Outputs:
        """The outputs a ``Recording.scoped(prefix)`` recorded, by their names without it."""
        names = [n for n in self._offsets if n.startswith(prefix)]
        return Outputs(
            self._raw,
            {n[len(prefix) :]: self._offsets[n] for n in names},
            {n[len(prefix) :]: self._sizes[n] for n in names},
        )


def run_and_read(
    gpu: Any, pool: Any, steps: Sequence[Step], bufs: dict[str, Any], sizes: dict[str, int]
) -> Outputs:
    """Record ``steps`` into one command encoder, then copies of every output named in ``sizes``
    (``bufs[name]``, ``sizes[name]`` bytes) into one buffer, submit once and read that buffer
    once; every buffer goes back to ``pool`` whatever happens."""
    offsets, total = {}, 0
    for name, size in sizes.items():
        offsets[name] = total
        total += -(-size // 16) * 16
    result = pool.acquire(total)
    copies: list[Copy] = [(bufs[n], 0, result, offsets[n], size) for n, size in sizes.items()]
    try:
        dispatch_sequence(gpu, steps, copies)
        raw = np.frombuffer(pool.read(result, total), dtype=np.uint8)
    finally:
        pool.release(result, *bufs.values())
    return Outputs(raw, offsets, sizes)


def flat_outputs(out: Any, prefix: str = "") -> Iterator[tuple[str, npt.NDArray[Any]]]:
    """Every array of a chain's output (a dataclass, possibly of dataclasses and tuples) with
    its path (``blocks.0.qkv.acc1``), in field order."""
    if isinstance(out, tuple):
        for i, part in enumerate(out):
            yield from flat_outputs(part, f"{prefix}{i}.")
    elif dataclasses.is_dataclass(out):
        for field in dataclasses.fields(out):
            yield from flat_outputs(getattr(out, field.name), f"{prefix}{field.name}.")
    else:
        values = np.asarray(out)
        # float32 outputs compared by their bits: -0 and +0 differ, a NaN equals itself
        yield prefix.rstrip("."), values.view(np.uint32) if values.dtype == np.float32 else values


class Recording:
    """A long chain's buffers, dispatches and outputs, named once each (``forward_chain``,
    ``backward_chain``): every buffer is released after the run, the outputs are read back in
    one buffer (``run_and_read``)."""

    def __init__(self, gpu: Any, pool: Any) -> None:
        self.gpu, self.pool = gpu, pool
        self.owned: dict[str, Any] = {}  # every buffer once, by a unique name
        self.sizes: dict[str, int] = {}  # the outputs read back, by the same names
        self.steps: list[Step] = []

    def upload(self, name: str, array: npt.NDArray[Any], *, uniform: bool = False) -> Any:
        self.owned[name] = self.pool.upload(array, uniform=uniform)
        return self.owned[name]

    def scratch(self, name: str, size: int) -> Any:
        """A buffer of ``size`` bytes the chain writes and reads, not read back."""
        self.owned[name] = self.pool.acquire(size)
        return self.owned[name]

    def output(self, name: str, size: int) -> Any:
        """A buffer of ``size`` bytes read back under ``name``."""
        self.sizes[name] = size
        return self.scratch(name, size)

    def run(self) -> Outputs:
        return run_and_read(self.gpu, self.pool, self.steps, self.owned, self.sizes)

    def scoped(self, prefix: str) -> Recording:
        """This recording under names that start with ``prefix``: a second chain recorded into
        the same submit with the first one's layouts and names (the probe step beside a training
        step, ``step_chain.StepChain.run``); read it back with ``Outputs.scoped(prefix)``."""
        return _Scoped(self, prefix)


class _Scoped(Recording):
    """A ``Recording``'s view whose names carry a prefix (``Recording.scoped``)."""

    def __init__(self, parent: Recording, prefix: str) -> None:
        self.gpu, self.pool, self._parent, self._prefix = parent.gpu, parent.pool, parent, prefix
        self.owned, self.sizes, self.steps = parent.owned, parent.sizes, parent.steps

    def upload(self, name: str, array: npt.NDArray[Any], *, uniform: bool = False) -> Any:
        return self._parent.upload(self._prefix + name, array, uniform=uniform)

    def scratch(self, name: str, size: int) -> Any:
        return self._parent.scratch(self._prefix + name, size)

    def output(self, name: str, size: int) -> Any:
        return self._parent.output(self._prefix + name, size)

    def run(self) -> Outputs:
        raise RuntimeError("a scoped recording runs with the recording it is part of")


def slot(values: Sequence[int]) -> npt.NDArray[np.uint32]:
    """One params slot holding ``values`` (u32), zero after them."""
    out = np.zeros(SLOT_WORDS, dtype="<u4")
    out[: len(values)] = values
    return out


def f32_words(a: npt.NDArray[Any]) -> npt.NDArray[np.uint32]:
    """Float32 values as the u32 words a kernel reads."""
    return np.ascontiguousarray(a, dtype=np.float32).view("<u4")


def _mismatch(
    name: str, case: str, shape: tuple[int, ...], want: Any, got: Any
) -> GateFailure | None:
    """The first output of ``got`` that differs from ``want``'s, as a failure."""
    for (what, expect), (_, have) in zip(flat_outputs(want), flat_outputs(got), strict=True):
        wrong = np.argwhere(have != expect) if have.shape == expect.shape else np.zeros((0, 0))
        if have.shape != expect.shape or wrong.size:
            at = tuple(int(v) for v in wrong[0]) if wrong.size else None
            return GateFailure(
                name,
                f"{case} ({what})",
                shape,
                at,
                str(expect[at]) if at is not None else str(expect.shape),
                str(have[at]) if at is not None else str(have.shape),
            )
    return None


def run_chain_gates(
    name: str,
    pool: Any,
    cases: Sequence[tuple[str, Mapping[str, Any]]],
    run: Callable[..., Any],
    reference: Callable[..., Any],
    statuses: Sequence[str],
) -> GateReport:
    """Every case (``run(**kwargs)``) on a poisoned pool against ``reference(**kwargs)``: every
    output exactly (``flat_outputs``); where the reference refuses (None), a non-zero value in
    one of the ``statuses`` fields (named by the last part of their path)."""
    passed = 0
    for case, kwargs in cases:
        shape = tuple(np.shape(next(iter(kwargs.values()))))
        try:
            with pool.poisoned():
                got = run(**kwargs)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            return GateReport(name, passed, GateFailure(name, case, shape, None, "a result", why))
        want = reference(**kwargs)
        failure: GateFailure | None
        if want is None:
            refused = any(
                np.any(values != 0)
                for path, values in flat_outputs(got)
                if path.rsplit(".", 1)[-1] in statuses
            )
            failure = (
                None
                if refused
                else GateFailure(name, case, shape, None, "a non-zero status", "status 0")
            )
        else:
            failure = _mismatch(name, case, shape, want, got)
        if failure is not None:
            return GateReport(name, passed, failure)
        passed += 1
    return GateReport(name, passed, None)


def attach(
    gemm: Any, attr: str, build: Callable[[], Any], gates: Callable[[Any], GateReport]
) -> str | None:
    """Build a chain and run its gates; if they pass, ``gemm.<attr>`` is the chain (training
    uses it) and the result None, else ``gemm.<attr>`` is None and the result says why."""
    try:
        chain = build()
        report = gates(chain)
    except Exception as exc:
        why = f"{gemm.name}-{attr}: {exc}"
    else:
        if report.failure is None:
            setattr(gemm, attr, chain)
            return None
        why = report.failure.describe()
    log.warning("%s chain not used on %s: %s", attr, gemm.name, why)
    setattr(gemm, attr, None)
    return why
