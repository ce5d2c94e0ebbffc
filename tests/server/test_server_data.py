"""``/data`` against a local HTTP range server serving FineWeb-Edu-shaped parquet shards."""

from __future__ import annotations

import asyncio
import json
import random
import re
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from daisychain import fineweb
from daisychain.bench.rig.fineweb_stub import StubMode, UpstreamStub, write_fineweb_shard
from daisychain.corpus import load_builtin_text
from daisychain.server.app import DATA, create_app
from daisychain.server.config import DataConfig
from daisychain.server.datasource import DataService
from daisychain.tokenizer import EOT_TOKEN, Tokenizer, default_path, fast, load_default
from daisychain.tokenizer.fast import (
    PIECE_CHARS,
    ServingTokenizer,
    TokenizerMismatch,
    encode_prefix,
)
from server_fixtures import FALLBACK_TEXT, ByteTokenizer, config, serve
from vectorgen.tokenizer import CASE_TEXTS

SHARDS = ("sample/10BT/000_00000.parquet", "sample/10BT/001_00000.parquet")
REVISION = "0123456789abcdef0123456789abcdef01234567"
ROW_GROUPS = 4


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for seed, shard in enumerate(SHARDS):
        write_fineweb_shard(
            root / shard, row_groups=ROW_GROUPS, rows_per_group=50, chars_per_row=400, seed=seed
        )
    return root


@asynccontextmanager
async def upstream(root: Path, mode: StubMode = "ok") -> AsyncIterator[UpstreamStub]:
    stub = UpstreamStub(root, mode=mode)
    async with TestServer(stub.app()) as server:
        stub.base_url = str(server.make_url("/")).rstrip("/")
        yield stub


def data_config(stub: UpstreamStub | None, **changes: Any) -> Any:
    base = stub.base_url if stub else "http://127.0.0.1:9"  # discard port: nothing listens
    data = replace(
        DataConfig(),
        base_url=base,
        revision=REVISION,
        shards=changes.pop("shards", SHARDS),
        timeout_s=changes.pop("timeout_s", 2.0),
        # Small probe so a cold shard needs the second footer GET, like the real 2 GB shards.
        footer_probe_bytes=changes.pop("footer_probe_bytes", 1024),
        burst=1000,
        **changes,
    )
    return config(data=data)


async def get_json(client: TestClient[Any, Any], query: str) -> dict[str, Any]:
    response = await client.get(f"/data?{query}")
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    assert response.headers["X-DaisyChain-Source"] == body["source"]
    return body


async def test_text_comes_from_fineweb_with_its_coordinates(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        body = await get_json(client, "seed=1&max_chars=2000")
        assert body["source"] == "fineweb"
        assert body["shard"] in SHARDS and 0 <= body["row_group"] < ROW_GROUPS
        assert 0 < body["chars"] <= 2000 and body["chars"] == sum(map(len, body["texts"]))
        seed = SHARDS.index(body["shard"])
        assert body["texts"][0].startswith(f"[{seed}:{body['row_group'] * 50 + body['first_row']}]")
        assert all(path.startswith(f"/datasets/HuggingFaceFW/fineweb-edu/resolve/{REVISION}/")
                   for _m, path, _r in stub.log)  # fmt: skip


async def test_warm_reads_cost_exactly_one_range_get_per_row_group(shard_root: Path) -> None:
    async with upstream(shard_root) as stub:
        cfg = data_config(stub, shards=SHARDS[:1])
        async with serve(cfg) as client:
            await get_json(client, "seed=0")
            cold = list(stub.log)
            assert len(cold) == 3, cold  # footer probe, rest of footer, one row group
            for seed in range(1, 6):
                before = len(stub.log)
                assert (await get_json(client, f"seed={seed}"))["source"] == "fineweb"
                new = stub.log[before:]
                assert len(new) == 1 and new[0][2] is not None, new
                assert new[0][2].startswith("bytes=") and "-" in new[0][2]


async def test_redirected_reads_reuse_the_cdn_url(shard_root: Path) -> None:
    async with (
        upstream(shard_root, mode="redirect") as stub,
        serve(data_config(stub, shards=SHARDS[:1])) as client,
    ):
        await get_json(client, "seed=0")
        before = len(stub.log)
        assert (await get_json(client, "seed=1"))["source"] == "fineweb"
        assert [path.split("/")[1] for _m, path, _r in stub.log[before:]] == ["cdn"]


async def test_different_requests_get_different_slices(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        slices = set()
        for seed in range(6):
            body = await get_json(client, f"seed={seed}&max_chars=300")
            slices.add((body["shard"], body["row_group"], body["first_row"]))
        assert len(slices) >= 4


async def test_the_same_seed_gets_the_same_slice(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        first = await get_json(client, "seed=42&max_chars=500")
        second = await get_json(client, "seed=42&max_chars=500")
        assert first == second


async def test_max_chars_bounds_the_text(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        body = await get_json(client, "seed=3&max_chars=7")
        assert body["chars"] == 7 and len(body["texts"]) == 1


async def test_upstream_down_falls_back_to_builtin_and_reports_why() -> None:
    async with serve(data_config(None)) as client:
        body = await get_json(client, "max_chars=100")
        assert body["source"] == "builtin" and body["shard"] is None
        assert body["texts"][0] in FALLBACK_TEXT * 2
        status = await (await client.get("/api/status")).json()
        assert status["data"]["state"] == "backoff"
        assert status["data"]["last_error"]
        assert status["data"]["served"] == {"fineweb": 0, "builtin": 1}


async def test_200_instead_of_206_falls_back(shard_root: Path) -> None:
    async with upstream(shard_root, mode="full") as stub, serve(data_config(stub)) as client:
        body = await get_json(client, "max_chars=100")
        assert body["source"] == "builtin"
        status = await (await client.get("/api/status")).json()
        assert "HTTP 200" in status["data"]["last_error"]


async def test_error_status_falls_back(shard_root: Path) -> None:
    async with upstream(shard_root, mode="error") as stub, serve(data_config(stub)) as client:
        assert (await get_json(client, "max_chars=100"))["source"] == "builtin"


async def test_timeout_falls_back(shard_root: Path) -> None:
    async with (
        upstream(shard_root, mode="slow") as stub,
        serve(data_config(stub, timeout_s=0.2)) as client,
    ):
        body = await get_json(client, "max_chars=100")
        assert body["source"] == "builtin"
        status = await (await client.get("/api/status")).json()
        assert status["data"]["last_error"].startswith("timed out")


async def test_backoff_skips_the_upstream_until_the_retry_time(shard_root: Path) -> None:
    async with (
        upstream(shard_root, mode="error") as stub,
        serve(data_config(stub, retry_initial_s=60.0)) as client,
    ):
        await get_json(client, "max_chars=10")
        tried = len(stub.log)
        stub.mode = "ok"
        assert (await get_json(client, "max_chars=10"))["source"] == "builtin"
        assert len(stub.log) == tried


async def test_upstream_is_retried_after_backoff(shard_root: Path) -> None:
    async with (
        upstream(shard_root, mode="error") as stub,
        serve(data_config(stub, retry_initial_s=0.0)) as client,
    ):
        assert (await get_json(client, "max_chars=10"))["source"] == "builtin"
        stub.mode = "ok"
        assert (await get_json(client, "max_chars=10"))["source"] == "fineweb"
        status = await (await client.get("/api/status")).json()
        assert status["data"]["state"] == "ok" and status["data"]["last_error"] is None


async def test_offline_never_contacts_the_upstream(shard_root: Path) -> None:
    async with upstream(shard_root) as stub:
        cfg = data_config(stub, offline=True)
        async with serve(cfg) as client:
            assert (await get_json(client, "max_chars=10"))["source"] == "builtin"
            assert stub.log == []


async def test_tokens_as_little_endian_binary(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        response = await client.get("/data?format=tokens&max_tokens=64&seed=5")
        assert response.status == 200
        assert response.headers["X-DaisyChain-Source"] == "fineweb"
        assert response.headers["X-DaisyChain-Token-Dtype"] == "uint16"
        body = await response.read()
        assert len(body) == 128
        tokens = struct.unpack("<64H", body)
        text = (await get_json(client, "seed=5&max_chars=64"))["texts"][0]
        assert bytes(tokens) == text.encode()  # the byte tokenizer: token == byte


async def test_tokens_as_json(shard_root: Path) -> None:
    async with upstream(shard_root) as stub, serve(data_config(stub)) as client:
        body = await get_json(client, "format=tokens&encoding=json&max_tokens=10&seed=5")
        assert body["source"] == "fineweb" and len(body["tokens"]) == 10
        assert body["dtype"] == "uint16" and body["tokenizer_sha256"] == "0" * 64


@pytest.mark.parametrize(
    "query",
    ["max_chars=0", "max_chars=2000000", "max_chars=abc", "format=xml", "seed=-1",
     "format=tokens&max_tokens=999999", "format=tokens&encoding=csv",
     # int() would take each of these; only plain ASCII digits are a number here.
     "max_chars=1_000", "max_chars=%D9%A5", "max_chars=%205", "max_chars=5%20", "max_chars=+5",
     "max_chars=%EF%BC%95", "max_chars=", "seed=0x10", "format=tokens&max_tokens=1e3",
     "seed=" + "1" * 20,
     # a parameter given twice is ambiguous (a cache and this server could read different ones)
     "max_chars=5&max_chars=6", "format=text&format=tokens"],
)  # fmt: skip
async def test_bad_parameters_get_400_with_a_hint(query: str) -> None:
    async with serve(config()) as client:
        response = await client.get(f"/data?{query}")
        assert response.status == 400
        body = await response.json()
        assert body["error"] and body["hint"]


async def test_leading_zeros_are_still_a_plain_number() -> None:
    async with serve(config()) as client:
        assert (await get_json(client, "max_chars=0007"))["chars"] == 7


async def test_data_requests_are_rate_limited_per_client() -> None:
    cfg = config(data=replace(DataConfig(), offline=True, requests_per_s=0.01, burst=2))
    async with serve(cfg) as client:
        for _ in range(2):
            assert (await client.get("/data?max_chars=5")).status == 200
        limited = await client.get("/data?max_chars=5")
        assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1


async def test_offline_serves_the_real_builtin_corpus_and_tokenizer() -> None:
    from daisychain.corpus import load_builtin_text
    from daisychain.server.app import create_app
    from daisychain.tokenizer import load_default

    app = create_app(config())  # the default loaders: the shipped corpus and tokenizer
    async with TestClient(TestServer(app)) as client:
        body = await get_json(client, "max_chars=300&seed=9")
        assert body["source"] == "builtin" and len(body["texts"][0]) == 300
        assert body["texts"][0] in load_builtin_text() * 2
        response = await client.get("/data?format=tokens&max_tokens=1000&seed=9")
        assert response.status == 200
        tokenizer = load_default()
        assert response.headers["X-DaisyChain-Tokenizer-Sha256"] == tokenizer.sha256
        assert response.headers["X-DaisyChain-Token-Dtype"] == "uint16"
        tokens = struct.unpack("<1000H", await response.read())
        assert max(tokens) < tokenizer.vocab_size


def limited_config(**changes: Any) -> Any:
    data = replace(DataConfig(), offline=True, requests_per_s=0.01, burst=2)
    return config(data=data, **changes)


async def statuses(client: TestClient[Any, Any], forwarded_for: list[list[str]]) -> list[int]:
    """One /data request per entry, each with these X-Forwarded-For lines."""
    out = []
    for lines in forwarded_for:
        headers = CIMultiDict(("X-Forwarded-For", line) for line in lines)
        out.append((await client.get("/data?max_chars=5", headers=headers)).status)
    return out


async def test_addresses_in_one_ipv6_slash_64_share_one_data_budget() -> None:
    async with serve(limited_config(trust_proxy=True)) as client:
        same_64 = [["2606:4700:10:20::1"], ["2606:4700:10:20:ffff::2"], ["2606:4700:10:20::3"]]
        assert await statuses(client, same_64) == [200, 200, 429]
        assert await statuses(client, [["2606:4700:10:21::1"]]) == [200]  # the next /64


async def test_a_forged_first_forwarded_for_line_does_not_buy_a_new_data_budget() -> None:
    # Each request forges a fresh first line; the proxy's line (last) names the real client.
    forged = [[f"1.1.1.{i}", "9.9.9.9"] for i in range(3)]
    async with serve(limited_config(trust_proxy=True)) as client:
        assert await statuses(client, forged) == [200, 200, 429]


def serving_pair() -> tuple[ServingTokenizer, Tokenizer]:
    return ServingTokenizer.from_file(default_path()), load_default()


def hard_texts() -> list[str]:
    """Inputs where a byte-level BPE most easily goes wrong, plus the shipped golden cases."""
    rng = random.Random(11)
    alphabet = "aZ09 \t\n\r\x0b\x0c!?.,'\"-_()\x00\x7féü日本😀👍🏽\u00a0\u2028\u3000\ufeff\u0301"
    randoms = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(60))) for _ in range(500)]
    return [
        *CASE_TEXTS.values(),
        *randoms,
        "",
        "a" * 100_000,
        " " * 5_000 + "x",
        "\n" * 3_000,
        "1234567890" * 2_000,
        f"doc one{EOT_TOKEN}{EOT_TOKEN}doc two {EOT_TOKEN}",
        "<|endoftext",  # a near miss of the special token is plain text
    ]


def test_serving_tokenizer_matches_the_shipped_encoder_on_hard_inputs() -> None:
    serving, oracle = serving_pair()
    assert (serving.sha256, serving.vocab_size) == (oracle.sha256, oracle.vocab_size)
    for text in hard_texts():
        assert serving.encode(text) == oracle.encode(text), repr(text[:80])


def test_serving_tokenizer_matches_the_shipped_encoder_on_the_corpus() -> None:
    serving, oracle = serving_pair()
    corpus = load_builtin_text()
    for start in (0, len(corpus) // 2, len(corpus) - 300_000):
        text = corpus[start : start + 300_000]  # what one max_tokens=37500 request encodes
        assert serving.encode(text) == oracle.encode(text)


def test_serving_tokenizer_refuses_a_library_that_disagrees(tmp_path: Path) -> None:
    import tokenizers

    # The same vocabulary without its merges: the library would return one id per byte.
    spec = json.loads(Path(default_path()).read_text(encoding="utf-8"))
    spec["model"]["merges"] = []
    library = tokenizers.Tokenizer.from_str(json.dumps(spec))
    with pytest.raises(TokenizerMismatch, match="disagree"):
        ServingTokenizer(load_default(), library)


async def test_a_tokenizer_file_we_cannot_match_is_a_503_with_a_hint(tmp_path: Path) -> None:
    spec = json.loads(Path(default_path()).read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    app = create_app(config(), tokenizer=lambda: ServingTokenizer.from_file(path))
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/data?format=tokens&max_tokens=10")
        assert response.status == 503
        body = await response.json()
        assert "pre-tokenizer" in body["error"] and body["hint"]


async def test_data_tokens_are_the_shipped_encoders_ids() -> None:
    app = create_app(config())  # the default loaders: the shipped corpus, the serving tokenizer
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/data?format=tokens&max_tokens=2000&seed=4")
        assert response.status == 200
        tokens = list(struct.unpack("<2000H", await response.read()))
        # The same seed picks the same slice; the token budget is 8 characters per token.
        text = (await get_json(client, "max_chars=16000&seed=4"))["texts"][0]
        assert tokens == load_default().encode(text)[:2000]


async def test_past_the_bound_data_is_refused_at_once_and_the_server_keeps_serving() -> None:
    """One slot and one place in line: while a request holds the slot (its corpus load is
    held back) and another waits, a third is a 503 at once with Retry-After and a hint, of
    every form; /healthz answers meanwhile; both held requests are then served, and so is the
    next one."""
    import threading

    release = threading.Event()

    def held_back() -> str:
        release.wait(10)
        return FALLBACK_TEXT

    cfg = config(data=replace(DataConfig(), offline=True, requests_at_once=1, requests_waiting=1))
    async with serve(cfg, fallback_text=held_back) as client:
        admission = client.app[DATA].admission
        await client.app[DATA].tokenizer()  # loaded, as `daisychain serve` preloads it
        try:
            first = asyncio.create_task(client.get("/data?max_chars=50&seed=1"))
            while admission.in_slots < 1:
                await asyncio.sleep(0.01)
            second = asyncio.create_task(client.get("/data?format=tokens&max_tokens=20&seed=2"))
            while admission.waiting < 1:
                await asyncio.sleep(0.01)
            window = (
                f"split=train&revision={DataConfig().revision}&seed=7&step=0&rank=0&max_chars=9"
            )
            for query in ("max_chars=50", "format=tokens&max_tokens=20", window):
                refused = await client.get(f"/data?{query}")
                body = await refused.json()
                assert refused.status == 503, (query, body)
                assert int(refused.headers["Retry-After"]) >= 1
                assert refused.headers["Cache-Control"] == "no-store"
                assert body["error"].startswith("the server is busy: 1 /data requests are waiting")
                assert body["hint"] == f"retry in {refused.headers['Retry-After']} s", body
            assert (await client.get("/healthz")).status == 200
            status = (await (await client.get("/api/status")).json())["data"]["requests"]
            assert status == {"at_once": 1, "in_slots": 1, "waiting": 1, "max_waiting": 1,
                              "refused": 3}, status  # fmt: skip
        finally:
            release.set()
        responses = [await first, await second]
        assert [r.status for r in responses] == [200, 200]
        assert (await responses[0].json())["chars"] == 50
        assert len(await responses[1].read()) == 2 * 20  # uint16 ids
        after = await client.get("/data?max_chars=50&seed=3")
        assert after.status == 200 and (await after.json())["chars"] == 50
        assert admission.in_slots == 0 and admission.waiting == 0


def test_json_bodies_written_piece_by_piece_are_the_same_json() -> None:
    """``/data``'s bodies are built in pieces (long texts cut anywhere, even inside what
    ``json.dumps`` escapes, ids in runs): the same JSON as one ``json.dumps``."""
    from daisychain.server.dataworker import JSON_PIECE_CHARS, JSON_PIECE_ITEMS, json_body

    awkward = 'é"\\\n\t\x00\u2028😀 plain'
    long = (awkward * (3 * JSON_PIECE_CHARS // len(awkward) + 1))[: 3 * JSON_PIECE_CHARS + 5]
    bodies: list[dict[str, Any]] = [
        {"source": "builtin", "shard": None, "texts": [long, "", "x" * JSON_PIECE_CHARS],
         "chars": 3},
        {"tokens": list(range(2 * JSON_PIECE_ITEMS + 3)), "dtype": "uint16"},
        {"texts": [], "tokens": []},
        {},
    ]  # fmt: skip
    for body in bodies:
        assert json.loads(json_body(body)) == body


async def test_concurrent_first_requests_load_the_corpus_once() -> None:
    loads: list[int] = []

    def counted() -> str:
        loads.append(1)
        return FALLBACK_TEXT

    async with serve(config(), fallback_text=counted) as client:
        responses = await asyncio.gather(*(client.get(f"/data?seed={i}") for i in range(8)))
        assert [r.status for r in responses] == [200] * 8
    assert len(loads) == 1


async def test_preload_loads_offline_needs_and_survives_a_missing_tokenizer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def missing() -> Tokenizer:
        raise FileNotFoundError("tokenizer file luts/tokenizer.json not found")

    service = DataService(
        replace(DataConfig(), offline=True), None, fallback_text=lambda: FALLBACK_TEXT,
        tokenizer=missing,
    )  # fmt: skip
    try:
        await service.preload()
        assert await service.builtin_text() == FALLBACK_TEXT
        assert "no tokenizer for /data?format=tokens" in caplog.text
        assert service.worker.status()["started"] == 1, "preload starts the data worker"
        with pytest.raises(FileNotFoundError):
            await service.tokenizer()  # tried again on use: the endpoint turns it into a 503
    finally:
        service.close()  # the worker process too


def cut_texts() -> list[str]:
    """Texts dense in whitespace runs around line ends: where a wrong cut point shows."""
    rng = random.Random(23)
    parts = ["\n", "\r\n", "\n\n", "\n ", "\n  ", " \n", "\t", "\t\n", "\x0b", "\x0c", " ",
             "  ", "a", "The", " b", "7", "123456", "!", "(", "é", "日本", "😀", EOT_TOKEN, "<|",
             "|>"]  # fmt: skip
    return [
        "".join(rng.choice(parts) for _ in range(rng.randrange(1, 200))) for _ in range(300)
    ] + ["x\n  b", "x\n\n<|endoftext|>y", "a\r\n\r\n b\n\tc"]


def test_encoding_piece_by_piece_gives_the_ids_of_the_whole() -> None:
    serving, oracle = serving_pair()
    corpus = load_builtin_text()[1_000_000:1_300_000]
    cases = [(text, piece) for text in cut_texts() for piece in (1, 5)] + [(corpus, 4096)]
    for text, piece in cases:
        whole = oracle.encode(text)
        for limit in sorted({0, 1, len(whole) // 2, len(whole), len(whole) + 5}):
            got = encode_prefix(serving.encode, text, limit, piece_chars=piece)
            assert got.tolist() == whole[:limit], (text[:80], piece, limit)


def test_cutting_after_any_whitespace_would_change_the_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cut rule is what keeps the ids: cutting after a space (before " b" is a token) breaks
    # them, and the comparison above would see it.
    _serving, oracle = serving_pair()
    monkeypatch.setattr(fast, "_CUT_RE", re.compile(r"\s"))
    wrong = [
        text
        for text in cut_texts()
        if encode_prefix(oracle.encode, text, 10**6, piece_chars=1).tolist() != oracle.encode(text)
    ]
    assert wrong, "a cut after any whitespace kept every id: the texts do not exercise the rule"


async def test_a_tokens_flood_is_tokenized_piece_by_piece_within_the_budget() -> None:
    calls: list[int] = []

    class Counting(ByteTokenizer):
        def encode(self, text: str) -> list[int]:
            calls.append(len(text))
            return super().encode(text)

    text = ("A line of the built-in corpus.\n" * 100_000)[: 8 * 131_072]
    app = create_app(config(), fallback_text=lambda: text, tokenizer=Counting)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/data?format=tokens&max_tokens=100000&seed=1")
        assert response.status == 200 and len(await response.read()) == 200_000
    # One byte per token: 100 000 characters are needed, so about seven 16 K pieces are encoded,
    # not the whole 1 MB sample.
    assert 100_000 <= sum(calls) < 100_000 + 2 * PIECE_CHARS, calls
    assert max(calls) < PIECE_CHARS + 100, calls


def addressed(step: int, rank: int, chars: int = 300) -> str:
    return f"/data?split=train&revision={REVISION}&seed=7&step={step}&rank={rank}&max_chars={chars}"


def _row_group_of(rank: int) -> tuple[int, int]:
    shard = fineweb.shard_of(7, 0, rank, "train", len(SHARDS))
    rows = [50] * ROW_GROUPS
    where = fineweb.window(7, 0, rank, "train", shard=shard, n_shards=len(SHARDS), rows=rows,
                           chars=300)  # fmt: skip
    return shard, where.row_group


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("refused", "the FineWeb-Edu upstream failed: ClientConnectorError"),
        ("error", "the FineWeb-Edu upstream failed: HTTP 500 for a range request"),
        ("truncated", "the FineWeb-Edu upstream failed: ClientPayloadError"),
        ("short", "the FineWeb-Edu upstream failed: asked for"),
        ("slow", "the FineWeb-Edu upstream failed: timed out"),
        ("garbage", "the FineWeb-Edu upstream failed: cannot decode row group"),
    ],
)
async def test_an_upstream_fault_is_a_503_with_the_reason_and_leaves_no_bad_state(
    shard_root: Path, mode: StubMode | Literal["refused"], error: str
) -> None:
    """Each fault hits a row group read once the footers are cached (the last read that can go
    wrong): the window is refused with the reason, never answered from the built-in corpus;
    /api/status shows it; and once the upstream is back the same address gives exactly what a
    fresh server gives (nothing half-read was kept)."""
    target = next(r for r in range(1, 64) if _row_group_of(r) != _row_group_of(0))
    async with (
        upstream(shard_root) as stub,
        # 1 s: under the slow mode's 2 s, above a loaded 2-core machine's first read.
        serve(data_config(stub, timeout_s=1.0, retry_initial_s=0.0)) as client,
    ):
        service = client.app[DATA]
        assert service.reader is not None
        assert (await client.get(addressed(0, 0))).status == 200
        for shard in SHARDS:  # every footer cached: the fault meets a row group read
            await service.reader.index(shard)
        healthy = service.reader.config
        if mode == "refused":
            service.reader.config = replace(healthy, base_url="http://127.0.0.1:9")
        else:
            stub.mode, stub.delay_s = mode, 2.0
        response = await client.get(addressed(0, target))
        body = await response.json()
        assert response.status == 503, body
        assert body["error"].startswith(error) and "/api/status" in body["hint"], body
        assert response.headers["Retry-After"] == "1"
        status = (await (await client.get("/api/status")).json())["data"]
        assert status["state"] == "backoff", status
        assert status["last_error"] in body["error"], (body, status)
        assert status["served"]["builtin"] == 0, "never the built-in corpus"
        stub.mode, service.reader.config = "ok", healthy
        healed = await client.get(addressed(0, target))
        assert healed.status == 200, await healed.text()
        got = await healed.json()
    async with upstream(shard_root) as stub, serve(data_config(stub)) as fresh:
        expected = await (await fresh.get(addressed(0, target))).json()
    assert got == expected and got["source"] == "fineweb"
