"""Early chunks (p2p/early.py): each chunk of a contributor's gradient is encoded, and handed
over, as soon as the backward has produced every value in it; the bytes are exactly what the
whole mean gradient encodes to (docs/PROTOCOL.md, "Early chunks")."""

from __future__ import annotations

import numpy as np
import pytest

from daisychain import training
from daisychain.model import gpt
from daisychain.model.config import ModelConfig
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig
from daisychain.p2p import allreduce, early
from daisychain.wire import codec

CFG = ModelConfig(vocab_size=256, width=32, layers=3, heads=2, seq_len=16, batch=4)


def _state() -> training.TrainState:
    return training.init(CFG, AdamWConfig(), seed=3)


def _rows(rows: list[int], seed: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, CFG.vocab_size, size=(sum(rows), CFG.seq_len))
    y = np.roll(x, -1, axis=1)
    out, at = [], 0
    for r in rows:
        out.append((x[at : at + r], y[at : at + r]))
        at += r
    return out


def _watch(shares: tuple[int, ...], count: int) -> tuple[early.ChunkWatch, list[int]]:
    """A watch that records what it emits, checking each payload is the one it keeps."""
    sent: list[int] = []

    def emit(k: int, payload: bytes) -> None:
        assert payload == watch.payloads[k] and payload, k
        sent.append(k)

    watch = early.ChunkWatch(param_shapes(CFG), shares, count, emit)
    return watch, sent


# (5, 1, 5): an empty chunk between two others; (5, 5, 5, 5, 6): chunk 1 starts exactly where
# wpe ends (block 34), so it must not wait for wpe.
SHAPES = [(4, 4, 4), (6, 3, 3), (10, 2), (2, 2, 2, 2, 2), (5, 1, 5), (5, 5, 5, 5, 6)]


@pytest.mark.parametrize("pieces", [[4], [4, 4, 2], [3, 1]])
@pytest.mark.parametrize("shares", SHAPES)
def test_every_chunk_is_the_whole_means_bytes(pieces: list[int], shares: tuple[int, ...]) -> None:
    state = _state()
    count = sum(pieces)
    watch, sent = _watch(shares, count)
    loss, flat = training.mean_gradient(state, _rows(pieces), count, watch)
    want_loss, want = training.mean_gradient(state, _rows(pieces), count)
    assert flat is not None and want is not None and loss == want_loss
    np.testing.assert_array_equal(flat, want)  # watching changes nothing
    blocks = codec.n_blocks(sum(g.size for g in state.params.values()))
    got = watch.chunk_payloads(len(shares), flat)
    for k in range(len(shares)):
        sl = allreduce.chunk_slice(blocks, shares, k)
        assert got[k] == (codec.encode(want[sl])[0] if sl.start < sl.stop else b""), k
    # The chunks at the end of the flat vector are final first; chunk 0, which holds the
    # embeddings (wte, wpe: their gradients come last, and here they fit in chunk 0), only with
    # the last parameter, so it never leaves early: every other non-empty chunk does.
    nonempty = [k for k in range(len(shares)) if got[k]]
    assert sent == [k for k in reversed(nonempty) if k != 0] == watch.early


def _emitted_at(shares: tuple[int, ...]) -> dict[int, str]:
    """chunk -> the parameter whose report made it leave."""
    reported: list[str] = []
    at: dict[int, str] = {}
    watch = early.ChunkWatch(param_shapes(CFG), shares, 4,
                             lambda k, _: at.setdefault(k, reported[-1]))  # fmt: skip
    inner = watch(None, np.float32(4))

    def hook(name: str, g: np.ndarray) -> None:
        reported.append(name)
        inner(name, g)

    gpt.forward_backward(_state().params, CFG, *_rows([4])[0], on_grad=hook)
    return at


def test_a_chunk_leaves_with_the_first_parameter_it_holds() -> None:
    """Chunks other than the embeddings' are complete when the backward reaches their lowest
    parameter (the one holding the chunk's first value), not one parameter later."""
    starts, pos = {}, 0
    for name, shape in param_shapes(CFG).items():
        starts[name] = (pos, pos + int(np.prod(shape)))
        pos += int(np.prod(shape))
    blocks = codec.n_blocks(pos)
    for shares in [(4, 4, 4), (2, 2, 2, 2, 2), (3, 3, 3, 3, 3, 3, 3, 3)]:
        at = _emitted_at(shares)
        assert at, shares
        for k, name in at.items():
            first = allreduce.chunk_slice(blocks, shares, k).start
            a, b = starts[name]
            assert a <= first < b, (shares, k, name)


def test_without_a_backward_report_every_chunk_comes_from_the_whole_mean() -> None:
    """The float reference backend reports nothing early: compute-done's chunks are then
    encoded from the whole mean."""
    rng = np.random.default_rng(4)
    blocks = codec.n_blocks(sum(int(np.prod(s)) for s in param_shapes(CFG).values()))
    flat = rng.standard_normal(blocks * codec.BLOCK).astype(np.float32)
    watch, sent = _watch((4, 4, 4), 12)
    got = watch.chunk_payloads(3, flat)
    for k in range(3):
        assert got[k] == codec.encode(flat[allreduce.chunk_slice(blocks, (4, 4, 4), k)])[0]
    assert sent == []


def _watched(plant: bool) -> early.ChunkWatch:
    """Three pieces through a watch whose last-piece hook sees one cell of gf moved by the
    largest value of gf (several quantization units) when ``plant``."""
    watch, _ = _watch((4, 4, 4), 12)

    def outer(acc: np.ndarray | None, weight: np.float32) -> gpt.GradHook:
        inner = watch(acc, weight)

        def hook(name: str, g: np.ndarray) -> None:
            if plant and name == "gf":
                g = g.copy()
                g[0] += np.abs(g).max()
            inner(name, g)

        return hook

    training.mean_gradient(_state(), _rows([4, 4, 4]), 12, outer)
    return watch


def test_a_planted_error_in_one_value_of_the_last_piece_is_seen() -> None:
    """The comparison above is not vacuous: one wrong cell of the last piece's gf (in chunk 2)
    changes chunk 2's bytes and no other chunk's."""
    honest, planted, again = _watched(False), _watched(True), _watched(False)
    assert again.payloads == honest.payloads
    assert planted.payloads[2] != honest.payloads[2]
    assert planted.payloads[0] == honest.payloads[0] and planted.payloads[1] == honest.payloads[1]


def test_the_backward_reports_each_parameter_once_last_layers_first() -> None:
    seen: list[str] = []
    state = _state()
    x, y = _rows([2])[0]
    _, grads = gpt.forward_backward(state.params, CFG, x, y, on_grad=lambda n, _: seen.append(n))
    assert sorted(seen) == sorted(param_shapes(CFG)) and len(seen) == len(set(seen))
    assert seen[0] == "gf" and seen[-2:] == ["wte", "wpe"]
    assert seen.index("h.2.w2") < seen.index("h.0.g1")
    _, plain = gpt.forward_backward(state.params, CFG, x, y)
    assert list(grads) == list(plain)
    for name in plain:
        np.testing.assert_array_equal(grads[name], plain[name])
