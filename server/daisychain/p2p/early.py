"""Early chunks: a contributor's chunks leave as soon as the backward has produced them.

The backward produces parameter gradients from the last layer down to the embeddings
(``gpt.forward_backward``'s ``on_grad``), and the flat gradient is in parameter order, so the
chunks at its end are final long before the first one (which holds ``wte``, whose gradient
comes last). ``ChunkWatch`` follows the last lane piece's backward and encodes each chunk of
the roster (``allreduce.chunk_slice``) the moment every parameter it covers is in; ``emit``
hands it to the protocol machine as ``compute-partial``, so its contribution is on the wire
(and, for our own chunk, the reduction can start) while the rest is still being computed
(docs/PROTOCOL.md, "Early chunks").

The values are the mean gradient's exactly (``training.mean_gradient``): with one piece the
piece's own gradient; with more, ``(acc + g * r) / count`` elementwise in float32, the very
operations the whole-vector mean does on those elements. The chunks that are final only with
the last parameter are not emitted early (the ``compute-done`` that follows at once carries
them), and every chunk's bytes are kept for it, so no chunk is quantized twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from daisychain.model.gpt import GradHook
from daisychain.p2p import allreduce
from daisychain.wire import codec

FloatArray = npt.NDArray[np.float32]
Emit = Callable[[int, bytes], None]  # (chunk, payload), called on the compute thread


class ChunkWatch:
    def __init__(
        self,
        shapes: dict[str, tuple[int, ...]],
        shares: Sequence[int],
        count: int,
        emit: Emit,
    ) -> None:
        sizes = {name: int(np.prod(shape)) for name, shape in shapes.items()}
        total_blocks = codec.n_blocks(sum(sizes.values()))
        self._count = np.float32(count)
        self._emit = emit
        self._where: dict[str, tuple[int, int]] = {}
        pos = 0
        for name, size in sizes.items():
            self._where[name] = (pos, pos + size)
            pos += size
        self.slices: dict[int, slice] = {}
        self._needs: dict[int, set[str]] = {}
        for k in range(len(shares)):
            sl = allreduce.chunk_slice(total_blocks, shares, k)
            if sl.start == sl.stop:
                continue
            self.slices[k] = sl
            where = self._where.items()
            self._needs[k] = {n for n, (a, b) in where if a < sl.stop and b > sl.start}
        self.payloads: dict[int, bytes] = {}  # chunk -> its bytes, early or not
        self.early: list[int] = []  # the chunks emitted early, in the order they left

    def __call__(self, acc: FloatArray | None, weight: np.float32) -> GradHook:
        """The hook for the last piece's backward (``training.LastPieceWatch``)."""
        grads: dict[str, FloatArray] = {}

        def on_grad(name: str, grad: FloatArray) -> None:
            grads[name] = grad
            final = len(grads) == len(self._where)  # the last parameter: compute-done is next
            for k, needs in self._needs.items():
                if k not in self.payloads and needs.issubset(grads):
                    self.payloads[k] = codec.encode(self._values(k, grads, acc, weight))[0]
                    if not final:
                        self.early.append(k)
                        self._emit(k, self.payloads[k])

        return on_grad

    def _values(
        self, k: int, grads: dict[str, FloatArray], acc: FloatArray | None, weight: np.float32
    ) -> FloatArray:
        sl = self.slices[k]
        out = np.zeros(sl.stop - sl.start, dtype=np.float32)  # the flat vector's zero padding
        for name in self._needs[k]:
            a, b = self._where[name]
            lo, hi = max(a, sl.start), min(b, sl.stop)
            out[lo - sl.start : hi - sl.start] = grads[name].reshape(-1)[lo - a : hi - a]
        if acc is None:
            return out  # one piece: its own gradient is the mean
        np.multiply(out, weight, out=out)
        np.add(acc[sl], out, out=out)  # the same two rounded operations as mean_gradient's
        np.divide(out, self._count, out=out)
        return out

    def chunk_payloads(self, n: int, flat: FloatArray) -> tuple[bytes, ...]:
        """Every roster chunk's bytes for ``compute-done`` (empty bytes for an empty chunk),
        encoding from the whole mean ``flat`` what the backward did not report (the float
        reference backend reports nothing)."""
        for k, sl in self.slices.items():
            if k not in self.payloads:
                self.payloads[k] = codec.encode(flat[sl])[0]
        return tuple(self.payloads.get(k, b"") for k in range(n))
