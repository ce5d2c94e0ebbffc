"""The outer loop's pinned arithmetic (daisychain.outer, docs/OUTER.md).

Bit-identity of a round whatever order the peers' parts are computed in; the top-k tie rule,
and a planted nondeterministic one changing the hash; codec error bounds and hostile payloads;
the token-weighted mean; Nesterov against float64 and PyTorch; refusals with their hints.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest

from daisychain import outer, training
from daisychain.model.config import preset
from daisychain.numerics import sha256_arrays
from daisychain.optim import AdamWConfig
from daisychain.outer import payload
from daisychain.outer.mean import MAX_WEIGHT_SUM
from daisychain.p2p import allreduce
from daisychain.wire import codec

F32 = np.float32
BLOCK = codec.BLOCK
Params = dict[str, np.ndarray]


def _params() -> Params:
    """A small model's worth of named tensors (odd sizes: the flat vector gets padding), at
    zero so that a pseudo-gradient is exactly the step a peer took (``_locals``)."""
    shapes = {"wte": (37, 16), "h.0.g1": (16,), "h.0.w1": (16, 64), "gf": (16,)}
    return {n: np.zeros(s, dtype=F32) for n, s in shapes.items()}


# Peer k's step is SCALES[k % 4] times one shared direction: peers 0 and 2 cancel exactly, and
# peer 1's values are far below their ulp. So ((a0 + a1) + a2) rounds a1 away where
# ((a2 + a0) + a1) keeps it: the order of the sum shows in the bits, and only the roster order
# can make every replica agree.
SCALES = (1.0, 1e-7, -1.0, 1e-3)


def _locals(outer_params: Params, n: int, seed: int) -> list[Params]:
    """Each peer's weights after its inner steps (``SCALES``); every peer training one model
    moves in much the same direction, so top-k keeps mostly the same indices everywhere."""
    rng = np.random.default_rng(seed)
    profile = {n: rng.standard_normal(w.shape) * 10.0 ** rng.uniform(-3, 0, w.shape)
               for n, w in outer_params.items()}  # fmt: skip
    out = []
    for k in range(n):
        moved = {}
        for name, w in outer_params.items():
            wobble = 1 + 0.2 * rng.standard_normal(w.shape) if k % 2 else 1.0
            moved[name] = (w - (profile[name] * wobble * SCALES[k % 4]).astype(F32)).astype(F32)
        out.append(moved)
    return out


def _group(
    n: int = 4, seed: int = 0
) -> tuple[outer.OuterState, list[Params], list[int], list[np.ndarray | None]]:
    state = outer.init_outer(_params())
    local = _locals(state.params, n, seed + 1)
    tokens = [256, 512, 256, 1024][:n]  # unequal inner work: weights 1, 2, 1, 4
    return state, local, tokens, [None] * n


CFG = outer.OuterConfig(inner_steps=10)
HOWS = ["int8", "int8+ef", "topk:4", "topk:4+ef"]


def _two_rounds(how: outer.Compression, order: list[int]) -> tuple[str, list[bytes]]:
    """Two rounds (the second carries the first's residuals), parts computed in ``order``:
    the final hash and the residuals' bytes."""
    state, local, tokens, residuals = _group()
    result = outer.outer_round(state, CFG, how, local, tokens, residuals, order)
    local = _locals(state.params, len(local), 9)
    result = outer.outer_round(state, CFG, how, local, tokens, list(result.residuals), order)
    assert result.hash == outer.outer_hash(state)
    return result.hash, [b"" if r is None else r.tobytes() for r in result.residuals]


@pytest.mark.parametrize("spec", HOWS)
def test_a_round_has_the_same_bits_whatever_order_the_peers_compute_in(spec: str) -> None:
    how = outer.Compression.parse(spec)
    want = _two_rounds(how, [0, 1, 2, 3])
    for order in ([2, 0, 3, 1], [3, 2, 1, 0]):
        assert _two_rounds(how, order) == want, order


def test_the_roster_order_is_what_pins_the_sum() -> None:
    """The mean is not order-free in float32: presenting the peers in another roster order
    changes bits, so computing in roster order is a rule, not a formality."""
    rng = np.random.default_rng(3)
    values = [(rng.standard_normal(4096) * 10.0 ** rng.uniform(-3, 3)).astype(F32) for _ in "abc"]
    tokens = [1, 1, 1]
    mean = outer.weighted_mean(values, tokens)
    swapped = outer.weighted_mean([values[2], values[0], values[1]], tokens)
    assert mean.tobytes() != swapped.tobytes()
    np.testing.assert_allclose(mean, swapped, rtol=1e-6, atol=1e-6)


# --- top-k and its tie rule -------------------------------------------------------------------


def test_topk_takes_the_largest_magnitudes_and_breaks_ties_by_the_lower_index() -> None:
    block = np.zeros((1, BLOCK), dtype=F32)
    block[0, [5, 9, 200, 255]] = [-2.0, 2.0, 2.0, -3.0]  # three ties of magnitude 2 after -3
    assert payload.select_topk(block, 3).tolist() == [[5, 9, 255]]
    assert payload.select_topk(block, 1).tolist() == [[255]]
    assert payload.select_topk(block, 4).tolist() == [[5, 9, 200, 255]]
    # All equal magnitudes, -0 and +0 included: the lowest indices.
    ties = np.full((2, BLOCK), 0.5, dtype=F32)
    ties[0, ::2] = -0.5
    ties[1] = np.where(np.arange(BLOCK) % 2, F32(0.0), F32(-0.0))
    assert payload.select_topk(ties, 4).tolist() == [[0, 1, 2, 3]] * 2
    assert payload.select_topk(ties, BLOCK).tolist() == [list(range(BLOCK))] * 2


def _tied_round(select: Callable[[np.ndarray, int], np.ndarray] | None = None) -> str:
    """A round whose pseudo-gradients are full of equal magnitudes, so which of them top-k
    keeps decides the result."""
    state = outer.init_outer({"w": np.zeros(4 * BLOCK, dtype=F32)})
    rng = np.random.default_rng(5)
    local = []
    for _ in range(3):
        signs = rng.choice([-1.0, 1.0], size=4 * BLOCK)
        size = rng.choice([1.0, 2.0], size=4 * BLOCK) * 2.0**-10  # many exact ties
        local.append({"w": (signs * size).astype(F32)})
    how = outer.Compression.parse("topk:8+ef")
    return outer.outer_round(state, CFG, how, local, [1, 1, 1], [None] * 3).hash


def test_a_nondeterministic_tie_rule_changes_the_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hash check fires: a tie rule that depends on a shuffled order (what an unstable
    sort, or a platform's own top-k, would do) gives replicas different bits."""
    honest = _tied_round()
    assert _tied_round() == honest

    def shuffled(seed: int) -> Callable[[np.ndarray, int], np.ndarray]:
        def select(blocks: np.ndarray, k: int) -> np.ndarray:
            perm = np.random.default_rng(seed).permutation(blocks.shape[1])
            # Magnitude descending, ties in the shuffled order instead of by index.
            order = np.lexsort((perm[None, :].repeat(len(blocks), 0), -np.abs(blocks)), axis=1)
            return np.sort(order[:, :k], axis=1)

        return select

    hashes = set()
    for seed in (1, 2):
        monkeypatch.setattr(payload, "select_topk", shuffled(seed))
        hashes.add(_tied_round())
    assert honest not in hashes and len(hashes) == 2


# --- the codecs -------------------------------------------------------------------------------


def _blocks_of_spread_scales(seed: int = 0, blocks: int = 64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-8, 2, size=(blocks, 1))
    return (rng.standard_normal((blocks, BLOCK)) * scale).astype(F32).reshape(-1)


def test_the_int8_round_trip_error_is_at_most_half_a_step_of_its_block() -> None:
    x = _blocks_of_spread_scales()
    how = outer.Compression.parse("int8")
    data, d = outer.encode(x, how)
    assert len(data) == how.payload_bytes(x.size) == x.size // BLOCK * (BLOCK + 1)
    assert outer.decode(data, x.size, how).tobytes() == d.tobytes()
    err = np.abs(x.astype(np.float64) - d).reshape(-1, BLOCK).max(axis=1)
    amax = np.abs(x.astype(np.float64)).reshape(-1, BLOCK).max(axis=1)
    # The block's step 2^e sits in (amax / 127.5, amax / 63.75]: half of it, at most.
    assert np.all(err <= amax / 127.5), float((err / amax).max())


def test_topk_keeps_k_values_per_block_within_half_a_step_and_drops_only_smaller_ones() -> None:
    x = _blocks_of_spread_scales(1)
    how = outer.Compression.parse("topk:4")
    data, d = outer.encode(x, how)
    assert len(data) == x.size // BLOCK * 9
    assert outer.decode(data, x.size, how).tobytes() == d.tobytes()
    xb, db = x.reshape(-1, BLOCK).astype(np.float64), d.reshape(-1, BLOCK)
    kept = payload.select_topk(x.reshape(-1, BLOCK), 4)
    mask = np.zeros(xb.shape, dtype=bool)
    np.put_along_axis(mask, kept, True, axis=1)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    assert np.all(np.abs(xb - db)[mask].reshape(-1, 4) <= amax / 127.5)
    assert np.all(db[~mask] == 0)
    smallest_kept = np.abs(np.where(mask, xb, np.inf)).min(axis=1)
    assert np.all(np.abs(np.where(mask, 0, xb)).max(axis=1) <= smallest_kept)


@pytest.mark.parametrize("spec", ["int8+ef", "topk:4+ef"])
def test_error_feedback_keeps_exactly_what_was_not_sent(spec: str) -> None:
    how = outer.Compression.parse(spec)
    x = _blocks_of_spread_scales(2)
    _, d, r = outer.compress(x, how, None)
    assert r is not None
    # sent + residual is the input exactly (the residual subtraction never rounds).
    np.testing.assert_array_equal(d.astype(np.float64) + r.astype(np.float64), x)
    y = _blocks_of_spread_scales(3)
    _, d2, r2 = outer.compress(y, how, r)
    assert r2 is not None
    np.testing.assert_array_equal(d2.astype(np.float64) + r2, (y + r).astype(np.float64))


@pytest.mark.parametrize(
    ("spec", "mutate", "why"),
    [
        ("int8", lambda b: b[:-1], "must be"),
        ("topk:4", lambda b: b + b"\0", "must be 9 bytes"),
        ("topk:4", lambda b: bytes([101]) + b[1:], "exponent out of range"),
        ("topk:4", lambda b: b[:-1] + bytes([0x80]), "-128 never occurs"),
        ("topk:4", lambda b: b[:1] + bytes([3, 3, 4, 5]) + b[5:], "strictly ascending"),
        ("topk:4", lambda b: b[:1] + bytes([9, 3, 4, 5]) + b[5:], "strictly ascending"),
    ],
)
def test_a_bad_payload_is_refused(spec: str, mutate: Callable[[bytes], bytes], why: str) -> None:
    how = outer.Compression.parse(spec)
    data, _ = outer.encode(_blocks_of_spread_scales(4, blocks=1), how)
    with pytest.raises(ValueError, match=why):
        outer.decode(mutate(data), BLOCK, how)


# --- the token-weighted mean ------------------------------------------------------------------


def test_a_peer_with_no_tokens_leaves_exactly_the_mean_of_the_others() -> None:
    rng = np.random.default_rng(4)
    values = [(rng.standard_normal(1024) * 0.01).astype(F32) for _ in range(4)]
    others = outer.weighted_mean([values[0], values[2], values[3]], [512, 256, 768])
    got = outer.weighted_mean(values, [512, 0, 256, 768])
    assert got.tobytes() == others.tobytes()
    # Token counts and the same counts in coarser units (sequences) give the same bits.
    assert outer.weighted_mean(values, [2, 0, 1, 3]).tobytes() == others.tobytes()


def test_the_mean_is_the_pinned_sequence_and_close_to_float64() -> None:
    rng = np.random.default_rng(6)
    values = [(rng.standard_normal(512) * 0.01).astype(F32) for _ in range(3)]
    got = outer.weighted_mean(values, [3, 1, 2])
    want = ((values[0] * F32(3) + values[1] * F32(1)) + values[2] * F32(2)) / F32(6)
    assert got.tobytes() == want.tobytes()
    exact = (3.0 * values[0] + values[1] + 2.0 * values[2]) / 6.0
    np.testing.assert_allclose(got, exact, rtol=4e-7 * 3, atol=1e-12)
    # One contributor: its values unchanged (weight 1 after the gcd).
    assert outer.weighted_mean([values[1]], [4096]).tobytes() == values[1].tobytes()


# --- Nesterov ---------------------------------------------------------------------------------


def _nesterov_problem() -> tuple[outer.OuterState, list[np.ndarray]]:
    rng = np.random.default_rng(8)
    state = outer.init_outer({"a": rng.standard_normal((7, 5)).astype(F32), "b": np.ones(9, F32)})
    grads = [codec.flatten({"a": rng.standard_normal((7, 5)).astype(F32) * F32(0.01),
                            "b": rng.standard_normal(9).astype(F32) * F32(0.01)})
             for _ in range(5)]  # fmt: skip
    return state, grads


def test_nesterov_matches_float64_within_float32_rounding_and_pins_each_operation() -> None:
    state, grads = _nesterov_problem()
    mu, lr = F32(CFG.momentum), F32(CFG.lr)
    w64 = codec.flatten(state.params).astype(np.float64)
    m64 = np.zeros_like(w64)
    w32, m32 = codec.flatten(state.params), np.zeros_like(w64, dtype=F32)
    for g in grads:
        outer.apply_outer(state, CFG, g)
        g64 = g.astype(np.float64)
        m64 = m64 * float(mu) + g64
        w64 = w64 - (g64 + m64 * float(mu)) * float(lr)
        # The same sequence in float32 scalars: each operation rounded on its own, no FMA.
        m32 = (m32 * mu) + g
        w32 = w32 - ((g + (m32 * mu)) * lr)
    got_w, got_m = codec.flatten(state.params), codec.flatten(state.momentum)
    assert got_w.tobytes() == w32.tobytes() and got_m.tobytes() == m32.tobytes()
    np.testing.assert_allclose(got_w, w64, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_m, m64, rtol=0, atol=1e-7)
    assert state.step == len(grads)


def test_nesterov_is_pytorch_sgd_with_nesterov_momentum() -> None:
    torch = pytest.importorskip("torch")
    state, grads = _nesterov_problem()
    w = torch.tensor(codec.flatten(state.params), requires_grad=True)
    opt = torch.optim.SGD([w], lr=CFG.lr, momentum=CFG.momentum, nesterov=True)
    for g in grads:
        outer.apply_outer(state, CFG, g)
        w.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(codec.flatten(state.params), w.detach().numpy(), atol=1e-6)


def test_the_hash_covers_weights_then_momentum() -> None:
    state, grads = _nesterov_problem()
    outer.apply_outer(state, CFG, grads[0])
    want = sha256_arrays([*state.params.values(), *state.momentum.values()])
    assert outer.outer_hash(state) == want
    before = outer.outer_hash(state)
    state.momentum["b"][0] = np.nextafter(state.momentum["b"][0], F32(1))
    assert outer.outer_hash(state) != before, "one momentum bit changes the identity"


# --- rounds and bytes -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", HOWS)
def test_a_peer_with_no_tokens_changes_nothing_in_a_round(spec: str) -> None:
    how = outer.Compression.parse(spec)
    state, local, tokens, residuals = _group(3)
    alone = copy.deepcopy(state)
    got = outer.outer_round(state, CFG, how, local, [*tokens[:2], 0], residuals)
    want = outer.outer_round(alone, CFG, how, local[:2], tokens[:2], residuals[:2])
    assert got.hash == want.hash
    assert got.residuals[2] is None and got.bytes_sent[2] == 0, "it owns no chunk, sends nothing"


def test_int8_rounds_send_what_the_gradient_exchange_sends() -> None:
    """Equal token counts: the int8 transport is the gradient exchange's, byte for byte
    (``allreduce.exchange_locally`` counts its own)."""
    flat = np.zeros(40 * BLOCK, dtype=F32)
    for n in (1, 2, 3, 4):
        _, per_peer = allreduce.exchange_locally([flat] * n, [8] * n)
        got = outer.bytes_sent(outer.Compression.parse("int8"), flat.size, [1024] * n)
        assert max(got) == per_peer, n
    topk = outer.bytes_sent(outer.Compression.parse("topk:4+ef"), flat.size, [5, 0, 5])
    assert topk == (2 * 40 * 9, 0, 2 * 40 * 9)


def test_a_real_model_trains_to_the_same_outer_hash_twice() -> None:
    """Two tiny peers, 2 inner AdamW steps each on their own lanes, one outer round with top-k
    and error feedback: two runs, same bits."""
    from daisychain.batches import builtin_tokens

    tokens, vocab = builtin_tokens(20_000)
    cfg = preset("tiny", vocab_size=vocab)

    def run() -> str:
        peers = [training.init(cfg, AdamWConfig(lr=3e-3), 7) for _ in range(2)]
        state = outer.init_outer(peers[0].params)
        for _ in range(2):
            for k, peer in enumerate(peers):
                training.train_step(peer, *training.next_batch(peer, tokens, k), with_hash=False)
        how = outer.Compression.parse("topk:4+ef")
        local = [p.params for p in peers]
        n_tokens = [2 * cfg.batch * cfg.seq_len] * 2
        return outer.outer_round(state, CFG, how, local, n_tokens, [None, None]).hash

    first = run()
    assert run() == first


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: outer.OuterConfig(inner_steps=0), "H \\(inner steps per outer step\\)"),
        (lambda: outer.OuterConfig(lr=0.0), "outer lr"),
        (lambda: outer.OuterConfig(momentum=1.0), "outer momentum"),
        (lambda: outer.Compression.parse("topk"), "use int8, int8\\+ef, topk:K"),
        (lambda: outer.Compression.parse("topk:0"), "1..256"),
        (lambda: outer.Compression.parse("topk:257"), "1..256"),
        (lambda: outer.weighted_mean([np.zeros(4, F32)] * 2, [1, -1]), "negative token count"),
        (lambda: outer.weighted_mean([np.zeros(4, F32)] * 2, [0, 0]), "no peer trained"),
        (lambda: outer.weighted_mean([np.zeros(4, F32)] * 2, [1]), "2 pseudo-gradients but 1"),
        (lambda: outer.weighted_mean([np.zeros(4, F32), np.zeros(5, F32)], [1, 1]), "peer 1"),
        (lambda: outer.weighted_mean([np.zeros(4, F32)] * 2, [1, MAX_WEIGHT_SUM]), "coarser"),
        (lambda: outer.weighted_mean([np.zeros(4, F32)], [1.5]), "must be an integer"),
        (lambda: outer.encode(np.zeros(100, F32), outer.Compression()), "whole blocks"),
    ],
)
def test_bad_inputs_are_refused_with_a_hint(make: Callable[[], object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        make()


def test_a_round_refuses_mismatched_peers() -> None:
    state, local, tokens, residuals = _group(2)
    how = outer.Compression.parse("int8+ef")
    wrong = dict(local[1])
    wrong["wte"] = wrong["wte"][:3]
    with pytest.raises(outer.OuterError, match="wte: local weights"):
        outer.outer_round(state, CFG, how, [local[0], wrong], tokens, residuals)
    missing = {k: v for k, v in local[1].items() if k != "gf"}
    with pytest.raises(outer.OuterError, match="same model in the same parameter order"):
        outer.outer_round(state, CFG, how, [local[0], missing], tokens, residuals)
    with pytest.raises(outer.OuterError, match="one weight set, token count and residual"):
        outer.outer_round(state, CFG, how, local, tokens[:1], residuals)
    with pytest.raises(outer.OuterError, match="permutation of the roster"):
        outer.outer_round(state, CFG, how, local, tokens, residuals, order=[0, 0])
    with pytest.raises(outer.CompressionError, match="belongs to another model"):
        outer.outer_round(state, CFG, how, local, tokens, [np.zeros(3, F32), None])
    with pytest.raises(outer.CompressionError, match="keeps no residual"):
        plain = outer.Compression.parse("int8")
        outer.outer_round(state, CFG, plain, local, tokens, [np.zeros(3, F32), None])
    with pytest.raises(outer.OuterError, match="flat float32 vector"):
        outer.apply_outer(state, CFG, np.zeros(3, F32))
    nan = np.full(codec.flatten(state.params).size, np.nan, dtype=F32)
    with pytest.raises(outer.OuterError, match="diverged"):
        outer.apply_outer(state, CFG, nan)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"inner_steps": 0}, "H \\(inner steps per outer step\\) must be an integer >= 1"),
        ({"lr": 0.0}, "outer lr must be finite and > 0"),
        ({"momentum": 1.0}, "outer momentum must lie in \\[0, 1\\)"),
        ({"overlap": -0.1}, "overlap must lie in \\[0, 1\\], got -0.1"),
        ({"overlap": 1.5}, "overlap must lie in \\[0, 1\\], got 1.5"),
        ({"cut": "tokens"}, "cut must be share or batch, got 'tokens'"),
    ],
)
def test_an_outer_loop_refuses_each_wrong_setting(changes: dict[str, object], why: str) -> None:
    with pytest.raises(outer.OuterError, match=why):
        outer.OuterConfig(**changes)  # type: ignore[arg-type]
    assert outer.OuterConfig(overlap=1.0, cut="batch").overlap == 1.0  # the bounds are in
