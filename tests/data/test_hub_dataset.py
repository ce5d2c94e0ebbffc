"""Any Hugging Face parquet dataset as a run's text (``daisychain serve --dataset``), through the
real ``huggingface_hub`` library against a local stand-in for the Hub (``bench.rig.fineweb_stub``:
the API answers the library asks for and range reads of the files, on loopback; the real Hub
cannot be reached here).

The dataset is a small one in the Hub's usual layout (``data/train-0000K-of-00002.parquet``,
``data/test-...``), with its text in a column named ``content`` next to others: resolving pins
its commit and lists the split's files; every refusal says why with a hint; the library reader
reads the same texts as DaisyChain's own; two headless peers train a run on it through the
library reader over real aiortc data channels with identical hashes; the token the server holds
never reaches ``/api/status``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest

from daisychain import datanames
from daisychain.bench.rig.fineweb_stub import UpstreamStub, fineweb_table
from daisychain.server import hubdataset, main
from daisychain.server.config import DataConfig
from daisychain.server.parquetreader import FineWebReader, UpstreamError
from fineweb_helpers import dataset_run, fineweb_server, upstream
from mesh_helpers import needs_namespace

REPO = "someone/notes"
COMMIT = "5eedc0de" * 5
TOKEN = "hf_test_secret_token_0123456789"
STEPS = 6


def write_dataset(root: Path) -> Path:
    """Two training files of 3 row groups and one test file; the text in ``content``."""
    import pyarrow.parquet as pq

    for k in range(2):
        table = fineweb_table(3 * 30, 500, seed=10 + k).rename_columns(
            ["content", "id", "dump", "url", "file_path", "language", "language_score",
             "token_count", "score", "int_score"]
        )  # fmt: skip
        path = root / "data" / f"train-{k:05d}-of-00002.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=30, compression="snappy")
    pq.write_table(fineweb_table(10, 100, seed=99), root / "data" / "test-00000-of-00001.parquet")
    (root / "README.md").write_text("# notes\n")
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("hub"))


def hub_stub(root: Path, token: str | None = None) -> UpstreamStub:
    return UpstreamStub(root, repo=REPO, commit=COMMIT, refs={"v1": COMMIT}, token=token)


def resolve(stub: UpstreamStub, dataset: str, split: str = "train", column: str = "content",
            token: str | None = None) -> DataConfig:  # fmt: skip
    base = replace(DataConfig(), base_url=stub.base_url, token=token)
    return hubdataset.resolve(hubdataset.parse_spec(dataset, split, column), base)


async def test_resolve_pins_the_commit_and_lists_the_split(dataset: Path) -> None:
    async with upstream(hub_stub(dataset)) as stub:
        for spec in (REPO, f"{REPO}@main", f"{REPO}@v1", f"{REPO}@{COMMIT}"):
            cfg = await asyncio.to_thread(resolve, stub, spec)
            assert cfg.revision == COMMIT and cfg.split == "train"
            assert cfg.shards == tuple(f"data/train-{k:05d}-of-00002.parquet" for k in range(2))
            assert cfg.sizes == tuple((dataset / s).stat().st_size for s in cfg.shards)
            assert cfg.name == datanames.hub(REPO, COMMIT, "train", "content")
            assert cfg.source == "dataset" and cfg.label == REPO
        test = await asyncio.to_thread(resolve, stub, REPO, "test", "text")
        assert test.shards == ("data/test-00000-of-00001.parquet",)


@pytest.mark.parametrize(
    ("dataset_id", "split", "column", "message", "hint"),
    [
        ("someone/other", "train", "content", "dataset someone/other not found", "HF_TOKEN"),
        (f"{REPO}@v9", "train", "content", "has no revision 'v9'", "branch, a tag or a commit"),
        (REPO, "validation", "content", "no parquet files for split 'validation'",
         "look like splits test, train"),
        (REPO, "train", "nope", "column 'nope' of someone/notes does not exist",
         "--text-column: content, id, dump"),
        (REPO, "train", "score", "column 'score' of someone/notes is not text", "--text-column"),
    ],
)  # fmt: skip
async def test_resolve_refuses_with_a_hint(
    dataset: Path, dataset_id: str, split: str, column: str, message: str, hint: str
) -> None:
    async with upstream(hub_stub(dataset)) as stub:
        with pytest.raises(hubdataset.DatasetError) as info:
            await asyncio.to_thread(resolve, stub, dataset_id, split, column)
    assert message in info.value.message and hint in info.value.hint, info.value.__dict__


@pytest.mark.parametrize(
    ("dataset_id", "split", "column", "says"),
    [
        ("notes", "train", "text", "not a Hub dataset id"),
        ("someone/no tes", "train", "text", "not a Hub dataset id"),
        (f"{REPO}@a b", "train", "text", "not a branch, tag or commit"),
        (REPO, "../etc", "text", "not a split name"),
        (REPO, "train", "1col", "not a column name"),
    ],
)
def test_parse_spec_refuses_what_no_name_can_hold(
    dataset_id: str, split: str, column: str, says: str
) -> None:
    with pytest.raises(hubdataset.DatasetError, match=says) as info:
        hubdataset.parse_spec(dataset_id, split, column)
    assert info.value.hint


@pytest.mark.parametrize("reader", ["http", "hub"])
async def test_a_private_dataset_needs_the_token_and_the_token_stays_on_the_server(
    dataset: Path, reader: Literal["http", "hub"]
) -> None:
    async with upstream(hub_stub(dataset, token=TOKEN)) as stub:
        with pytest.raises(hubdataset.DatasetError, match="private and the server has no token"):
            await asyncio.to_thread(resolve, stub, REPO)
        with pytest.raises(hubdataset.DatasetError, match="not found"):
            await asyncio.to_thread(resolve, stub, REPO, token="hf_wrong")
        cfg = await asyncio.to_thread(resolve, stub, REPO, token=TOKEN)
    assert cfg.token == TOKEN and TOKEN not in repr(cfg)
    server = fineweb_server(dataset, replace(cfg, reader=reader), hub_stub(dataset, TOKEN))
    async with server as (url, _stub), aiohttp.ClientSession() as session:
        async with session.get(f"{url}/data", params={"max_chars": "2000"}) as r:
            assert r.status == 200 and r.headers["X-DaisyChain-Source"] == "dataset"
            assert TOKEN not in await r.text()
        async with session.get(f"{url}/api/status") as r:
            text = await r.text()
            status = (await r.json())["data"]
    assert TOKEN not in text
    assert status["name"] == cfg.name and status["served"]["dataset"] == 1, status


async def test_the_library_reader_reads_what_the_http_reader_reads(dataset: Path) -> None:
    async with upstream(hub_stub(dataset)) as stub, aiohttp.ClientSession() as session:
        cfg = await asyncio.to_thread(resolve, stub, REPO)
        texts: dict[str, list[list[str]]] = {}
        for reader in (FineWebReader(cfg, session), hubdataset.HubReader(cfg, session)):
            name = type(reader).__name__
            texts[name] = []
            for shard in cfg.shards:
                for row_group in range(3):
                    before = stub.range_gets()
                    texts[name].append(await reader.read_texts(shard, row_group))
                    if row_group > 0:  # footer cached: one range read per row group
                        assert stub.range_gets() == before + 1, name
            reader.close()
    assert texts["HubReader"] == texts["FineWebReader"]
    assert len(texts["HubReader"]) == 6 and all(len(t) == 30 for t in texts["HubReader"])


async def test_the_library_reader_reports_a_file_it_cannot_read(dataset: Path) -> None:
    # A 404 (the library does not retry it; a 5xx it retries with backoff for ~20 s on its own
    # thread, which the reader's timeout cuts short: docs/SERVER.md, "--data-reader").
    stub = hub_stub(dataset)
    async with upstream(stub), aiohttp.ClientSession() as session:
        cfg = await asyncio.to_thread(resolve, stub, REPO)
        reader = hubdataset.HubReader(replace(cfg, shards=("data/gone.parquet",)), session)
        with pytest.raises(UpstreamError):
            await reader.read_texts("data/gone.parquet", 0)
        reader.close()


@contextmanager
def token_env(value: str | None) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        if value is None:
            mp.delenv("HF_TOKEN", raising=False)
        else:
            mp.setenv("HF_TOKEN", value)
        yield


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    main.add_arguments(parser)
    return parser.parse_args(list(argv))


async def test_serve_resolves_the_dataset_at_start_or_stops_with_a_hint(
    dataset: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    async with upstream(hub_stub(dataset, token=TOKEN)) as stub:
        url = ("--data-url", stub.base_url)

        def run(*argv: str, env: str | None = None) -> Any:
            args = serve_args(*url, *argv)
            with token_env(env):
                return main.dataset_from_args(args, main.config_from_args(args).data)

        cfg = await asyncio.to_thread(
            run, "--dataset", f"{REPO}@v1", "--text-column", "content", "--hf-token-file",
            str(token_file), "--data-reader", "hub",
        )  # fmt: skip
        assert (cfg.name, cfg.reader, cfg.token) == (
            datanames.hub(REPO, COMMIT, "train", "content"), "hub", TOKEN,
        )  # fmt: skip
        from_env = await asyncio.to_thread(run, "--dataset", REPO, "--text-column", "content",
                                           env=TOKEN)  # fmt: skip
        assert from_env.token == TOKEN and from_env.reader == "http"
        refusals = {
            ("--dataset", REPO): "not found",
            ("--dataset", REPO, "--offline"): "hint: drop --offline",
            ("--hf-token-file", str(token_file)): "hint: add --dataset",
            ("--dataset", REPO, "--hf-token-file", str(tmp_path / "missing")): "cannot read",
            ("--dataset", "x"): "hint: give owner/name",
        }
        for argv, says in refusals.items():
            with pytest.raises(SystemExit) as info:
                await asyncio.to_thread(run, *argv)
            assert says in str(info.value) and "hint:" in str(info.value), (argv, info.value)
        assert main.dataset_from_args(serve_args(), DataConfig()) == DataConfig()


@needs_namespace
async def test_two_peers_train_on_a_hub_dataset_through_the_library_reader(dataset: Path) -> None:
    stub = hub_stub(dataset)
    async with upstream(stub):
        cfg = await asyncio.to_thread(resolve, stub, REPO)
    first, _ = await dataset_run(dataset, replace(cfg, reader="hub"), STEPS, hub_stub(dataset))
    again, _ = await dataset_run(dataset, replace(cfg, reader="hub"), STEPS, hub_stub(dataset))
    assert first == again, "the same run on the same dataset trains the same bits"


async def test_a_tokenizer_trains_on_a_hub_dataset(dataset: Path, tmp_path: Path) -> None:
    """``daisychain tokenizer --source hf:REPO`` reads the split's first row groups through the
    library (as ``serve --dataset`` resolves it) and writes a tokenizer a peer can load."""
    from daisychain.tokenizer import Tokenizer, train

    out = tmp_path / "tok.json"
    async with upstream(hub_stub(dataset)) as stub:
        parser = argparse.ArgumentParser()
        train.add_arguments(parser)
        args = parser.parse_args(
            ["--source", f"hf:{REPO}@v1", "--text-column", "content", "--data-url", stub.base_url,
             "--fineweb-row-groups", "4", "--vocab-size", "320", "--out", str(out)]
        )  # fmt: skip
        assert await asyncio.to_thread(train.run, args) == 0
        texts = await asyncio.to_thread(
            hubdataset.read_texts, await asyncio.to_thread(resolve, stub, REPO), 4
        )
        bad = parser.parse_args(
            ["--source", f"hf:{REPO}", "--text-column", "nope", "--data-url", stub.base_url,
             "--out", str(tmp_path / "x.json")]
        )  # fmt: skip
        with pytest.raises(SystemExit, match="hint: pass the text column"):
            await asyncio.to_thread(train.run, bad)
    assert len(texts) == 4 * 30 and texts[0].startswith("[10:0]"), texts[:1]
    assert Tokenizer.from_file(out).vocab_size == 320


def test_a_leader_asks_for_the_text_its_server_reads() -> None:
    """``--lead --data fineweb`` against a server that reads a Hub dataset (and ``--data
    dataset`` against a FineWeb-Edu one) is refused before joining, with the choice to make."""
    from daisychain.p2p.datafeed import FineWebFeed
    from daisychain.peer.main import lead_data_refusal

    hub = FineWebFeed("http://x", COMMIT, data_name=datanames.hub(REPO, COMMIT, "train", "text"))
    fw = FineWebFeed("http://x", COMMIT)

    def args(data: str) -> argparse.Namespace:
        return argparse.Namespace(lead=True, data=data, server="http://x")

    refused = lead_data_refusal(args("fineweb"), hub)
    assert refused is not None and "reads someone/notes (train, column text)" in refused[0]
    assert "--data dataset" in refused[1]
    refused = lead_data_refusal(args("dataset"), fw)
    assert refused is not None and "--data fineweb" in refused[1]
    assert lead_data_refusal(args("dataset"), hub) is None
    assert lead_data_refusal(args("fineweb"), fw) is None
    assert lead_data_refusal(args("builtin"), None) is None
    refused = lead_data_refusal(args("dataset"), None)
    assert refused is not None and "does not serve a dataset" in refused[0]
