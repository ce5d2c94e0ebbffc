"""The server's own text files as a run's text (``daisychain serve --text DIR``,
``server/localtext.py``): what becomes a document, the digest that names the text, every refusal
with its hint, the file reader against pyarrow reading the prepared file, and two headless peers
training on the folder over real aiortc data channels with identical hashes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from daisychain import datanames
from daisychain.server import localtext, main
from daisychain.server.config import DataConfig
from fineweb_helpers import dataset_run
from mesh_helpers import needs_namespace

STEPS = 5
WORDS = "the river carries water from the hills to the sea and every town along it drinks"


def write_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.txt").write_text("first file. " + WORDS * 40, encoding="utf-8")
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "b.md").write_text("# notes\n\n" + WORDS * 30, encoding="utf-8")
    lines = [json.dumps({"text": f"line {i}: " + WORDS * 5, "id": i}) for i in range(30)]
    (root / "c.jsonl").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    table = pa.table({"text": [f"row {i}: " + WORDS * 4 for i in range(20)], "n": list(range(20))})
    pq.write_table(table, root / "d.parquet")
    (root / ".hidden.txt").write_text("never read", encoding="utf-8")
    (root / "picture.png").write_bytes(b"\x89PNG not text")
    return root


def test_every_kind_of_file_becomes_documents_in_path_order(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "My Notes!")
    prepared = localtext.prepare(folder, tmp_path / "state")
    assert (prepared.files, prepared.skipped, prepared.documents) == (4, 1, 1 + 30 + 20 + 1)
    assert prepared.label == "My-Notes"
    assert prepared.name == datanames.local("My-Notes", prepared.digest)
    texts = pq.read_table(prepared.path).column("text").to_pylist()
    assert texts[0].startswith("first file.") and texts[1].startswith("line 0:")
    assert texts[31].startswith("row 0:") and texts[-1].startswith("# notes")  # sub/b.md last
    assert "never read" not in "".join(texts)
    assert localtext.digest_of(texts) == prepared.digest
    assert pq.ParquetFile(prepared.path).num_row_groups >= 2, "one row group is held out"


def test_the_digest_names_the_text_and_nothing_else(tmp_path: Path) -> None:
    one = localtext.prepare(write_folder(tmp_path / "x"), tmp_path / "s1")
    same = localtext.prepare(write_folder(tmp_path / "y"), tmp_path / "s2")
    assert same.digest == one.digest and same.path.read_bytes() == one.path.read_bytes()
    (tmp_path / "y" / "a.txt").write_text("first file! " + WORDS * 40, encoding="utf-8")
    assert localtext.prepare(tmp_path / "y", tmp_path / "s2").digest != one.digest
    # Moving a boundary between documents changes the name too.
    assert localtext.digest_of(["ab", "c"]) != localtext.digest_of(["a", "bc"])


def test_a_long_file_is_cut_at_blank_lines(tmp_path: Path) -> None:
    folder = tmp_path / "book"
    folder.mkdir()
    paragraphs = [f"paragraph {i}. " + WORDS * 30 for i in range(200)]
    (folder / "book.txt").write_text("\n\n".join(paragraphs), encoding="utf-8")
    prepared = localtext.prepare(folder, tmp_path / "state")
    texts = pq.read_table(prepared.path).column("text").to_pylist()
    assert len(texts) > 2 and all(len(t) <= localtext.PIECE_CHARS for t in texts)
    assert "".join(texts).replace("\n", "") == "".join(paragraphs)


@pytest.mark.parametrize(
    ("setup", "says", "hint"),
    [
        (lambda d: None, "is not a folder", ".jsonl"),
        (lambda d: (d.mkdir(), (d / "x.csv").write_text("a,b")), "holds no .txt", "hidden"),
        (lambda d: (d.mkdir(), (d / "x.txt").write_bytes(b"ok \xff\xfe")),
         "not UTF-8 text (byte 3)", "UTF-8"),
        (lambda d: (d.mkdir(), (d / "x.jsonl").write_text('{"text": "a"}\n{oops\n')),
         "x.jsonl line 2 is not JSON", "one JSON object"),
        (lambda d: (d.mkdir(), (d / "x.jsonl").write_text('{"text": "a"}\n{"body": "b"}\n')),
         "x.jsonl line 2 has no string field 'text'", "--text-column"),
        (lambda d: (d.mkdir(), pq.write_table(pa.table({"body": ["a", "b"]}), d / "x.parquet")),
         "x.parquet has no readable text column 'text'", "--text-column"),
        (lambda d: (d.mkdir(), (d / "x.txt").write_text("only one")), "1 document(s)",
         "add more text"),
    ],
)  # fmt: skip
def test_text_that_cannot_work_is_refused_with_a_hint(
    tmp_path: Path, setup: object, says: str, hint: str
) -> None:
    folder = tmp_path / "in"
    setup(folder)  # type: ignore[operator]
    with pytest.raises(localtext.TextError) as info:
        localtext.prepare(folder, tmp_path / "state")
    assert says in info.value.message and hint in info.value.hint, info.value.__dict__
    assert not (tmp_path / "state" / "text").exists() or not any(
        (tmp_path / "state" / "text").rglob("*.parquet")
    ), "nothing half-prepared is left behind"


def test_a_jsonl_and_parquet_column_can_be_named(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "x.jsonl").write_text('{"body": "one"}\n{"body": "two"}\n')
    pq.write_table(pa.table({"body": ["three"]}), folder / "y.parquet")
    prepared = localtext.prepare(folder, tmp_path / "state", column="body")
    assert pq.read_table(prepared.path).column("text").to_pylist() == ["one", "two", "three"]


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    main.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_serve_prepares_the_folder_at_start_or_stops_with_a_hint(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "notes")
    state = ("--state-dir", str(tmp_path / "state"))
    args = serve_args("--text", str(folder), *state)
    cfg = main.dataset_from_args(args, main.config_from_args(args).data)
    assert cfg.reader == "file" and cfg.source == "dataset"
    parsed = datanames.parse(cfg.name)
    assert parsed is not None and (parsed.kind, parsed.label) == ("local", "notes")
    assert parsed.revision == cfg.revision and Path(cfg.local_dir, cfg.shards[0]).is_file()
    for argv, says in {
        ("--text", str(folder), "--offline"): "hint: give one of --text, --dataset and --offline",
        ("--text", str(folder), "--dataset", "a/b"): "hint: give one of",
        ("--text", str(tmp_path / "missing")): "hint: give a folder",
    }.items():
        with pytest.raises(SystemExit) as info:
            main.dataset_from_args(serve_args(*argv, *state), DataConfig())
        assert says in str(info.value), (argv, info.value)


async def test_the_file_reader_reads_what_pyarrow_reads(tmp_path: Path) -> None:
    prepared = localtext.prepare(write_folder(tmp_path / "notes"), tmp_path / "state")
    cfg = localtext.config_for(prepared, DataConfig())
    async with aiohttp.ClientSession() as session:
        reader = localtext.FileReader(cfg, session)
        groups = pq.ParquetFile(prepared.path).num_row_groups
        got = [await reader.read_texts(localtext.SHARD, g) for g in range(groups)]
        reader.close()
    expected = [
        pq.ParquetFile(prepared.path).read_row_group(g).column("text").to_pylist()
        for g in range(groups)
    ]
    assert got == expected


@needs_namespace
async def test_two_peers_train_on_a_folder_of_text_with_identical_hashes(tmp_path: Path) -> None:
    prepared = localtext.prepare(write_folder(tmp_path / "notes"), tmp_path / "state")
    cfg = localtext.config_for(prepared, DataConfig())
    _hashes, stub = await dataset_run(tmp_path, cfg, STEPS)
    assert not stub.log, "no upstream was asked"
