"""The FineWeb-Edu golden cases (tests/vectors/fineweb/cases.json): what the generator writes,
and what the Python peer really computes for each address through the server's addressed
``/data`` form over a local range server serving the cases' documents as parquet."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from daisychain import fineweb
from daisychain.bench.rig.fineweb_stub import UpstreamStub, fineweb_table_of
from daisychain.p2p.datafeed import Address, FineWebFeed
from daisychain.server.app import serve_local
from daisychain.server.config import DataConfig, ServerConfig
from daisychain.tokenizer import load_default
from daisychain.tokenizer.fast import load_serving_tokenizer
from server_fixtures import ByteTokenizer
from vectorgen import fineweb as fineweb_vectors
from vectorgen import main as vectors_main

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "fineweb" / "cases.json"


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return data


def test_the_stored_cases_are_what_the_generator_writes() -> None:
    assert VECTORS.read_text(encoding="utf-8") == fineweb_vectors.text(), (
        "run `python tests/vectorgen --write fineweb` if addressing changed on purpose"
    )
    assert vectors_main(["--check", "fineweb", "--dir", str(VECTORS.parents[1])]) == 0


def test_the_check_fires_on_a_changed_id(tmp_path: Path, vectors: dict[str, Any]) -> None:
    changed = json.loads(json.dumps(vectors))
    changed["cases"][0]["ids"][3] += 1
    (tmp_path / "fineweb").mkdir()
    stored = tmp_path / "fineweb" / "cases.json"
    stored.write_text(json.dumps(changed, indent=1, ensure_ascii=False) + "\n")
    assert vectors_main(["--check", "fineweb", "--dir", str(tmp_path)]) == 1


def test_the_cases_cover_what_matters(vectors: dict[str, Any]) -> None:
    cases = vectors["cases"]
    assert vectors["tokenizer_sha256"] == load_default().sha256
    assert {c["split"] for c in cases} == {"train", "validation"}
    assert len({(c["shard"], c["row_group"]) for c in cases}) >= 3
    assert all(len(c["ids"]) == c["batch"] * (c["seq_len"] + 1) for c in cases)
    text = "".join(t for c in cases for t in c["texts"])
    assert any(ord(ch) > 0xFFFF for ch in text), "an astral character (JS strings differ there)"
    assert "<|endoftext|>" in "".join(t for c in cases for t in c["texts"])
    eot = load_default().encode("<|endoftext|>")
    assert any(eot[0] in c["ids"] for c in cases), "a document boundary inside the ids"


def test_the_serving_tokenizer_gives_the_cases_ids(vectors: dict[str, Any]) -> None:
    serving = load_serving_tokenizer()  # what the peer's feed encodes with
    for case in vectors["cases"]:
        assert serving.encode(fineweb.join(case["texts"]))[: len(case["ids"])] == case["ids"]


async def test_the_python_peer_reads_each_address_to_the_cases_ids(
    tmp_path: Path, vectors: dict[str, Any]
) -> None:
    """The documents as parquet shards (row groups as in the table), served like the Hugging
    Face resolve URL; the real server reads them by range; the peer's feed tokenizes."""
    for shard, groups in zip(vectors["shards"], vectors["documents"], strict=True):
        path = tmp_path / shard["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        texts = [doc for group in groups for doc in group]
        pq.write_table(fineweb_table_of(texts), path, row_group_size=len(groups[0]))
    stub = UpstreamStub(tmp_path)
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    data = replace(
        DataConfig(), base_url=f"http://127.0.0.1:{runner.addresses[0][1]}",
        revision=vectors["revision"], shards=tuple(s["path"] for s in vectors["shards"]),
        burst=1000,
    )  # fmt: skip
    try:
        async with serve_local(ServerConfig(data=data), tokenizer=ByteTokenizer) as url:
            feed = FineWebFeed(url, vectors["revision"], depth=0)
            try:
                for case in vectors["cases"]:
                    address = Address(case["seed"], case["step"], case["rank"], case["batch"],
                                      case["seq_len"], case["split"])  # fmt: skip
                    x, y = await feed.batch(address)
                    ex, ey = fineweb.batch_from_ids(case["ids"], case["batch"], case["seq_len"])
                    assert x.tolist() == ex.tolist() and y.tolist() == ey.tolist(), case
            finally:
                await feed.close()
    finally:
        await runner.cleanup()
