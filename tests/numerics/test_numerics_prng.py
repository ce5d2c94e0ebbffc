"""The counter-based PRNG (docs/NUMERICS.md section 7) against plain Python integers.

The reference below re-implements the spec with Python ints masked to 32 bits (as a JavaScript
port with ``Math.imul`` and ``>>> 0`` would), and a few literal known answers pin it further:
``mix32(1) = 0x514E28B7`` is murmur3's published fmix32 value.
"""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.numerics import prng

MASK = 0xFFFFFFFF


def ref_mix32(x: int) -> int:
    x &= MASK
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK
    x ^= x >> 16
    return x


def ref_key(seed: int, *ids: int) -> int:
    k = ref_mix32(seed ^ 0x6A09E667)
    for i in ids:
        k = ref_mix32(k ^ ref_mix32(i + 0x9E3779B9))
    return k


def ref_bits(k: int, i: int) -> int:
    return ref_mix32(ref_mix32((i & MASK) ^ k) + 0x9E3779B9)


def test_known_answers() -> None:
    # Literal values, computed once with the reference above and pinned here.
    assert ref_mix32(1) == 0x514E28B7  # murmur3 fmix32(1)
    mix_cases = {0: 0, 1: 0x514E28B7, MASK: 0x81F16F39, 0x12345678: 0xE37CD1BC}
    got = prng.mix32(np.array(list(mix_cases), dtype=np.uint32))
    assert [int(v) for v in got] == list(mix_cases.values())
    assert prng.key(0) == 0x09F45F69
    assert prng.key(1) == 0x461C483F
    assert prng.key(42, 0, 3) == 0x835C8F98
    assert prng.key(42, 1, 7, 0) == 0xA6E9EAE1
    assert prng.key(MASK, MASK) == 0x53A35162
    k = 0xA6E9EAE1
    assert [int(v) for v in prng.bits(k, 4)] == [0xAE47289A, 0x49166999, 0xE90D5ABE, 0xF8ABD8FC]
    expected_u = [(b >> 8) / 2**24 for b in (0xAE47289A, 0x49166999, 0xE90D5ABE, 0xF8ABD8FC)]
    assert [float(v) for v in prng.uniform(k, 4)] == expected_u


def test_mix32_matches_reference_on_random_inputs() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 10_000, dtype=np.uint64).astype(np.uint32)
    got = prng.mix32(x)
    assert got.dtype == np.uint32
    assert [int(v) for v in got] == [ref_mix32(int(v)) for v in x]


def test_mix32_on_a_0d_input_wraps_without_warnings() -> None:
    # pytest turns warnings into errors: numpy scalar overflow warnings would fail here.
    assert int(prng.mix32(np.array(MASK, dtype=np.uint32))) == ref_mix32(MASK)


@pytest.mark.parametrize(
    "ids",
    [(7,), (0,), (0, 0), (0, 5), (1, 0, 0), (1, 123456, 3), (MASK,), (1, MASK, MASK - 1)],
)
@pytest.mark.parametrize("seed", [0, 1, 1337, MASK])
def test_key_matches_reference(seed: int, ids: tuple[int, ...]) -> None:
    assert prng.key(seed, *ids) == ref_key(seed, *ids)


def test_bits_and_uniform_match_reference_including_counter_wrap() -> None:
    for k, start in ((ref_key(5, 0, 1), 0), (ref_key(9, 1, 2, 3), 1000), (MASK, 2**32 - 3)):
        b = prng.bits(k, 8, start)
        expected = [ref_bits(k, start + i) for i in range(8)]
        assert [int(v) for v in b] == expected
        u = prng.uniform(k, 8, start)
        assert u.dtype == np.float32
        assert [float(v) for v in u] == [(x >> 8) * 2.0**-24 for x in expected]


def test_uniform_is_in_unit_interval_with_24_bit_resolution() -> None:
    u = prng.uniform(prng.key(2024, 1, 0), 200_000)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    scaled = u.astype(np.float64) * 2.0**24
    assert np.array_equal(scaled, np.floor(scaled)), "not a multiple of 2^-24"
    # 24 bits: about n^2 / 2^25 = 1192 birthday collisions expected among 200000 draws.
    assert np.unique(u).size > 198_600
    # The extremes are reachable exactly: bits >> 8 of 0 and 0xFFFFFFFF.
    assert float(np.float32(0xFFFFFF) * np.float32(2.0**-24)) == 1.0 - 2.0**-24
    assert abs(float(u.mean()) - 0.5) < 0.005


def test_blocks_of_a_stream_are_slices_of_the_stream() -> None:
    k = prng.key(77, 1, 3, 0)
    whole = prng.bits(k, 1000)
    assert np.array_equal(prng.bits(k, 300, start=700), whole[700:])
    assert np.array_equal(prng.uniform(k, 10, start=5), prng.uniform(k, 15)[5:])


def test_streams_are_independent() -> None:
    keys = [prng.key(1, 0, t) for t in range(16)] + [prng.key(1, 1, s, 0) for s in range(16)]
    keys += [prng.key(2, 0, t) for t in range(16)]
    assert len(set(keys)) == len(keys), "distinct ids must give distinct keys"
    assert prng.key(1, 2, 3) != prng.key(1, 3, 2), "id order matters"
    assert prng.key(1, 0) != prng.key(1, 0, 0), "id count matters"
    streams = np.stack([prng.uniform(k, 20_000).astype(np.float64) for k in keys[:8]])
    corr = np.asarray(np.corrcoef(streams), dtype=np.float64)
    off_diag = np.abs(corr - np.eye(corr.shape[0]))
    assert float(off_diag.max()) < 0.04, "streams are correlated"
    # Neighbouring counters of one stream are uncorrelated too.
    u = streams[0]
    assert abs(float(np.corrcoef(u[:-1], u[1:])[0, 1])) < 0.04


def test_below_is_bits_mod_bound() -> None:
    k = prng.key(3, 4)
    got = prng.below(k, 64, 10)
    assert got.dtype == np.int64
    assert [int(v) for v in got] == [ref_bits(k, i) % 10 for i in range(64)]
    assert np.array_equal(prng.below(k, 8, 2**32), prng.bits(k, 8).astype(np.int64))


@pytest.mark.parametrize(("seed", "ids"), [(-1, ()), (2**32, ()), (0, (-1,)), (0, (1, 2**32))])
def test_key_rejects_out_of_range(seed: int, ids: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="2\\^32"):
        prng.key(seed, *ids)


@pytest.mark.parametrize("bound", [0, -3, 2**32 + 1])
def test_below_rejects_bad_bounds(bound: int) -> None:
    with pytest.raises(ValueError, match="bound"):
        prng.below(1, 4, bound)
