"""Binary frames, control messages and gradient chunks: every validation rule, no network."""

from __future__ import annotations

import itertools
import json
import struct
import zlib

import numpy as np
import pytest

from daisychain.p2p import allreduce
from daisychain.p2p.versions import DATA_PROTOCOL_VERSION
from daisychain.wire import codec, frames, messages
from daisychain.wire.frames import FrameKind

LIMIT = 200_000


def limits(kind: FrameKind) -> int:
    return LIMIT if kind is not FrameKind.CHECKPOINT else 0


def feed_all(r: frames.Reassembler, parts: list[bytes]) -> frames.Payload | None:
    out = None
    for part in parts:
        out = r.feed(part)
    return out


@pytest.mark.parametrize("deflate", [False, True])
def test_fragment_and_reassemble_roundtrip(deflate: bool) -> None:
    payload = np.random.default_rng(1).integers(-20, 20, 150_000).astype(np.int8).tobytes()
    parts = list(
        frames.fragment(
            FrameKind.CONTRIBUTION, payload, transfer=9, step=4, round=1, chunk=2, deflate=deflate
        )
    )
    assert all(len(p) <= frames.MAX_FRAME_BYTES for p in parts)
    got = feed_all(frames.Reassembler(limits), parts)
    assert got == frames.Payload(FrameKind.CONTRIBUTION, 1, 2, 4, payload)


def test_interleaved_transfers_reassemble_independently() -> None:
    a = list(frames.fragment(FrameKind.REDUCED, b"a" * 100_000, transfer=1, step=1))
    b = list(frames.fragment(FrameKind.REDUCED, b"b" * 60_000, transfer=2, step=1))
    r = frames.Reassembler(limits)
    results = [r.feed(x) for x in (a[0], b[0], a[1], b[1], a[2])]
    done = [p.data for p in results if p is not None]
    assert done == [b"b" * 60_000, b"a" * 100_000]


def header(**changes: int) -> bytes:
    fields = {
        "version": 1,
        "kind": 1,
        "flags": 0,
        "round": 0,
        "chunk": 0,
        "transfer": 1,
        "step": 1,
        "total": 4,
        "offset": 0,
        "crc": zlib.crc32(b"abcd"),
    }
    fields.update(changes)
    return frames.HEADER.pack(b"DC", *fields.values())


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (b"", "too short"),
        (header()[:20], "too short"),
        (header(), "too short"),  # a header with no data
        (b"XX" + header()[2:] + b"abcd", "bad magic"),
        (header(version=2) + b"abcd", "frame version 2"),
        (header(kind=9) + b"abcd", "unknown frame kind"),
        (header(flags=0x80) + b"abcd", "unknown flags"),
        (header(total=2) + b"abcd", "exceeds total"),
        (header(offset=3, total=4) + b"ab", "exceeds total"),
        (header(total=LIMIT + 1) + b"abcd", "exceeds the limit"),
        (header(kind=3) + b"abcd", "not expected now"),
        (header(offset=4, total=8) + b"abcd", "starts at offset 4"),
        (b"DC" + bytes(frames.MAX_FRAME_BYTES), "exceeds 49152"),
    ],
)
def test_malformed_frames_are_rejected(frame: bytes, error: str) -> None:
    with pytest.raises(frames.FrameError, match=error):
        frames.Reassembler(limits).feed(frame)


def test_out_of_order_and_changed_header_fragments_are_rejected() -> None:
    parts = list(frames.fragment(FrameKind.REDUCED, bytes(120_000), transfer=5, step=2))
    r = frames.Reassembler(limits)
    r.feed(parts[0])
    with pytest.raises(frames.FrameError, match="expected 49124"):
        r.feed(parts[2])
    r = frames.Reassembler(limits)
    r.feed(parts[0])
    other_step = bytearray(parts[1])
    struct.pack_into("<I", other_step, 12, 3)
    with pytest.raises(frames.FrameError, match="header changed"):
        r.feed(bytes(other_step))


def test_too_many_open_transfers_are_rejected() -> None:
    r = frames.Reassembler(limits)
    for t in range(frames.MAX_OPEN_TRANSFERS):
        r.feed(next(frames.fragment(FrameKind.REDUCED, bytes(60_000), transfer=t, step=1)))
    with pytest.raises(frames.FrameError, match="transfers open"):
        r.feed(next(frames.fragment(FrameKind.REDUCED, bytes(60_000), transfer=99, step=1)))


def test_damaged_payload_is_a_checksum_error_naming_the_piece() -> None:
    part = bytearray(
        next(frames.fragment(FrameKind.CONTRIBUTION, b"x" * 100, transfer=1, step=7, chunk=3))
    )
    part[-1] ^= 1
    with pytest.raises(frames.ChecksumError) as info:
        frames.Reassembler(limits).feed(bytes(part))
    assert (info.value.head.step, info.value.head.chunk) == (7, 3)


def test_deflate_bomb_is_refused() -> None:
    bomb = list(
        frames.fragment(FrameKind.REDUCED, bytes(LIMIT * 4), transfer=1, step=1, deflate=True)
    )
    with pytest.raises(frames.FrameError, match="inflates beyond"):
        feed_all(frames.Reassembler(limits), bomb)


def test_invalid_deflate_data_is_refused() -> None:
    raw = b"\xff" * 64
    body = frames.HEADER.pack(
        b"DC", 1, 2, frames.FLAG_DEFLATE, 0, 0, 1, 1, len(raw), 0, zlib.crc32(raw)
    )
    with pytest.raises(frames.FrameError, match="deflate"):
        frames.Reassembler(limits).feed(body + raw)


# -- control messages ----------------------------------------------------------------------

RUN = "0123456789abcdef"
HASH = "ab" * 32


SIG = "ab" * 64
STATEMENT = "0c" * 100


def test_every_message_roundtrips() -> None:
    spec = messages.ModelSpec(2048, 64, 2, 4, 32, 1, 4)
    samples: list[messages.Message] = [
        messages.Hello(DATA_PROTOCOL_VERSION, "ada"),
        messages.Config(
            RUN,
            "tiny",
            spec,
            messages.OptimSpec(0.003, 0, 0.1, 1.0),
            30,
            7,
            "builtin",
            HASH,
            0,
            None,
            16,
            "equal",
        ),
        messages.Ready(RUN, 0, HASH, ["a", "b"], 0.25),
        messages.SyncRequest(RUN),
        messages.Roster(RUN, 1, 0, ["a", "b"], [13, 3]),
        messages.StepHash(RUN, 1, 0, HASH, 7.5, HASH, "wgpu-dp4a", 0.0),
        messages.Missing(RUN, 1, 0, ["b"]),
        messages.Repair(RUN, 1, 0, "reduced", 1),
        messages.Save(RUN, 5),
        messages.Leave("bye"),
        messages.Stop(RUN, "fork", 3, "diverged", {"a": HASH}),
        messages.Error("bad-frame", "no", "fix it"),
        # version 7 (docs/TRUST.md, "Messages"): a statement is 95 to 2207 bytes, a signature 64
        messages.ContributionCommit(
            run=RUN, step=1, round=0, peer="a", roster=HASH, prev=HASH, chunks=[HASH, ""],
            data=HASH, nonce_hash=HASH, sig=SIG,
        ),
        messages.ContributionCommit(
            run=RUN, step=1, round=0, peer="b", roster=HASH, prev=HASH, chunks=["", HASH],
            data="", nonce_hash=HASH, private_data=True, sig=SIG,
        ),
        messages.ReducedCommit(
            run=RUN, step=1, round=0, peer="a", roster=HASH, chunk=1, digest=HASH, sig=SIG
        ),
        messages.Reveal(run=RUN, step=1, round=0, nonce=HASH, seen=HASH, sig=SIG),
        messages.AuditResult(
            run=RUN, step=1, round=0, item="contribution", index=1, of=HASH,
            digests=[HASH, ""], data=HASH, statement=STATEMENT, statement_sig=SIG, sig=SIG,
        ),
        messages.Proof(
            run=RUN, step=1, round=0, kind="equivocation", first=messages.Signed(STATEMENT, SIG),
            second=messages.Signed(STATEMENT[::-1], SIG),
        ),
    ]  # fmt: skip
    assert {m.type for m in samples} == set(messages.TYPES)
    for m in samples:
        assert messages.parse(messages.encode(m)) == m


@pytest.mark.parametrize(
    ("raw", "code", "text"),
    [
        ("{", "bad-json", "not valid JSON"),
        ("[1]", "bad-message", "not a JSON object"),
        ('{"type": "shout"}', "unknown-type", "shout"),
        ('{"type": "hello", "version": 1, "name": ""}', "version-mismatch", "version 1"),
        ('{"type": "hello", "version": true, "name": ""}', "bad-message", "hello.version"),
        (
            f'{{"type": "roster", "run": "{RUN}", "step": 1, "round": 0, "peers": []}}',
            "bad-message",
            "non-empty",
        ),
        (
            f'{{"type": "roster", "run": "{RUN}", "step": 1, "round": 0, "peers": ["a", "a"]}}',
            "bad-message",
            "distinct",
        ),
        (  # version 2: one share per roster peer
            json.dumps({"type": "roster", "run": RUN, "step": 1, "round": 0, "peers": ["a"]}),
            "bad-message",
            "roster.shares",
        ),
        (
            json.dumps(
                {
                    "type": "roster",
                    "run": RUN,
                    "step": 1,
                    "round": 0,
                    "peers": ["a", "b"],
                    "shares": [4],
                }
            ),
            "bad-message",
            "list of 2 integers",
        ),
        (
            json.dumps(
                {
                    "type": "roster",
                    "run": RUN,
                    "step": 1,
                    "round": 0,
                    "peers": ["a", "b"],
                    "shares": [4, -1],
                }
            ),
            "bad-message",
            "roster.shares",
        ),
        (
            json.dumps(
                {
                    "type": "roster",
                    "run": RUN,
                    "step": 1,
                    "round": 0,
                    "peers": ["a", "b"],
                    "shares": [4, 4097],
                }
            ),
            "bad-message",
            r"\[0, 4096\]",
        ),
        (
            json.dumps(
                {
                    "type": "roster",
                    "run": RUN,
                    "step": 1,
                    "round": 0,
                    "peers": ["a", "b"],
                    "shares": [4, True],
                }
            ),
            "bad-message",
            "roster.shares",
        ),
        (
            json.dumps(
                {"type": "ready", "run": RUN, "step": 0, "hash": HASH, "peers": [], "seq_s": -1}
            ),
            "bad-message",
            "ready.seq_s",
        ),
        (
            json.dumps({"type": "ready", "run": RUN, "step": 0, "hash": HASH, "peers": []}),
            "bad-message",
            "ready.seq_s",
        ),
        (
            '{"type": "roster", "run": "nope", "step": 1, "round": 0, "peers": ["a"]}',
            "bad-message",
            "run",
        ),
        (
            json.dumps(
                {"type": "hash", "run": RUN, "step": 0, "round": 0, "hash": HASH, "loss": 1}
            ),
            "bad-message",
            "hash.step",
        ),
        (
            f'{{"type": "hash", "run": "{RUN}", "step": 1, "round": 0, "hash": "XY", "loss": 1}}',
            "bad-message",
            "SHA-256",
        ),
        (
            json.dumps({"type": "repair", "run": RUN, "step": 1, "round": 0, "piece": "all"}),
            "bad-message",
            "piece",
        ),
        (json.dumps({"type": "leave", "reason": "x" * 20_000}), "too-large", "larger"),
    ],
)
def test_malformed_messages_are_rejected(raw: str, code: str, text: str) -> None:
    with pytest.raises(messages.MessageError, match=text) as info:
        messages.parse(raw)
    assert info.value.code == code and info.value.hint


def test_unknown_fields_are_ignored_and_no_sender_field_is_read() -> None:
    raw = json.dumps({"type": "leave", "reason": "x", "from": "someone-else"})
    assert messages.parse(raw) == messages.Leave("x")


# -- chunk codec and the exchange arithmetic -----------------------------------------------


def test_codec_roundtrip_is_exact_and_bytes_are_checked() -> None:
    x = (np.random.default_rng(2).standard_normal(3 * codec.BLOCK) * 1e-3).astype(np.float32)
    payload, deq = codec.encode(x)
    assert len(payload) == 3 * (codec.BLOCK + 1)
    np.testing.assert_array_equal(codec.decode(payload, 3), deq)  # bit-exact
    assert np.max(np.abs(deq - x)) <= np.max(np.abs(x)) / 127
    with pytest.raises(codec.CodecError, match="bytes"):
        codec.decode(payload[:-1], 3)
    bad = bytearray(payload)
    bad[3] = 0x80  # -128 never occurs
    with pytest.raises(codec.CodecError, match="-128"):
        codec.decode(bytes(bad), 3)
    bad = bytearray(payload)
    bad[0] = 127  # exponent out of range
    with pytest.raises(codec.CodecError, match="exponent"):
        codec.decode(bytes(bad), 3)


def test_reduction_is_in_roster_order_with_float32_adds() -> None:
    parts = [
        np.array([1e8, 1.0], np.float32),
        np.array([1.0, 1e8], np.float32),
        np.array([-1e8, -1e8], np.float32),
    ]
    got = allreduce.reduce_chunk(parts, [1, 1, 1], 3)
    # ((1e8 + 1) - 1e8) = 0 in float32 but (1 + 1e8) - 1e8 = 0 too; order decides the rest:
    expected = ((parts[0] + parts[1]) + parts[2]) / np.float32(3)
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_the_weighted_reduction_multiplies_exactly_then_adds_in_roster_order() -> None:
    """sum(d * s) / G: d * s is exact for dequantized values (|q| * s < 2^24); the adds are
    rounded in roster order and one division by G follows."""
    rng = np.random.default_rng(5)
    q = rng.integers(-127, 128, size=(3, 2 * codec.BLOCK)).astype(np.float32)
    parts = [row * np.float32(2.0**-9) for row in q]  # dequantized values q * 2^e
    weights = [4094, 1, 2]
    got = allreduce.reduce_chunk(parts, weights, 4097)
    exact = [p.astype(np.float64) * w for p, w in zip(parts, weights, strict=True)]
    for p, w, e in zip(parts, weights, exact, strict=True):
        assert np.array_equal((p * np.float32(w)).astype(np.float64), e), "exact product"
    acc = np.float32(exact[0]) + np.float32(exact[1])
    expected = (acc.astype(np.float32) + np.float32(exact[2])) / np.float32(4097)
    np.testing.assert_array_equal(got, expected.astype(np.float32))
    with pytest.raises(AssertionError):
        allreduce.reduce_chunk(parts, [1, 2, 3], 7)  # shares must sum to G
    with pytest.raises(AssertionError):
        allreduce.reduce_chunk(parts, [1, 0, 2], 3)  # a share of 0 contributes nothing


def test_chunks_partition_the_blocks() -> None:
    for total in (1, 7, 913):
        for shares in ((1,), (1, 1), (2, 1, 1), (1, 1, 1, 1), (13, 3), (5, 0, 3), (0, 7)):
            n = len(shares)
            spans = [allreduce.chunk_blocks(total, shares, k) for k in range(n)]
            assert spans[0][0] == 0 and spans[-1][1] == total
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
            for k in range(n):
                if 2 * shares[k] < max(shares):
                    assert spans[k][0] == spans[k][1], "less than half the top share owns nothing"


def test_equal_shares_cut_the_blocks_as_version_1_did() -> None:
    for total in (1, 7, 913):
        for n in (1, 2, 3, 4):
            got = [allreduce.chunk_blocks(total, (8,) * n, k) for k in range(n)]
            assert got == [(total * k // n, total * (k + 1) // n) for k in range(n)]


def test_a_big_share_owns_a_big_chunk() -> None:
    assert allreduce.chunk_blocks(1000, (13, 7), 0) == (0, 650)
    assert allreduce.chunk_blocks(1000, (13, 7), 1) == (650, 1000)


def test_a_share_under_half_the_largest_owns_no_chunk() -> None:
    """Ownership (version 3): a much slower peer sends its part and waits for the result."""
    assert allreduce.ownership((13, 7)) == (13, 7)  # 14 >= 13: owns
    assert allreduce.ownership((13, 6)) == (13, 0)  # 12 < 13: owns nothing
    assert allreduce.ownership((5, 5, 2)) == (5, 5, 0)
    assert allreduce.ownership((6, 2, 4)) == (6, 0, 4)
    assert allreduce.ownership((8, 0, 4)) == (8, 0, 4)
    assert allreduce.chunk_blocks(1000, (13, 6), 0) == (0, 1000)
    assert allreduce.chunk_blocks(1000, (13, 6), 1) == (1000, 1000)
    # The exchange still averages every contributor: the slow peer's part reaches the owner.
    rng = np.random.default_rng(5)
    grads = [(rng.standard_normal(8 * codec.BLOCK) * 1e-2).astype(np.float32) for _ in range(2)]
    mean, _ = allreduce.exchange_locally(grads, (13, 3))
    want = (grads[0] * 13 + grads[1] * 3) / 16
    assert float(np.abs(mean - want).max()) < 0.05 * float(np.abs(want).max())


def test_local_exchange_bytes_ratio_at_four_peers() -> None:
    rng = np.random.default_rng(3)
    grads = [(rng.standard_normal(64 * codec.BLOCK) * 1e-2).astype(np.float32) for _ in range(4)]
    mean, sent = allreduce.exchange_locally(grads, (1, 1, 1, 1))
    float_mesh = 4 * grads[0].size * 3
    assert sent / float_mesh <= 1 / 8 + 1 / 256, "about 1/(2N) before compression"
    exact = sum(grads, np.zeros_like(grads[0])) / 4
    assert np.linalg.norm(mean - exact) / np.linalg.norm(exact) < 0.03
