"""Text files of the server's own as ``/data``'s text (``daisychain serve --text DIR``).

``prepare`` reads every supported file under ``DIR`` (sorted by path, hidden files and folders
skipped) into documents:

- ``.txt``, ``.md``: a file is one document (UTF-8); a file over ``PIECE_CHARS`` characters is
  cut at blank lines into documents of at most about that many, so a book still spreads over
  many row groups;
- ``.jsonl``: one document per line, the line's JSON object's text field (``--text-column``,
  default ``text``); blank lines are skipped;
- ``.parquet``: one document per row of its text column.

Empty documents are dropped. The documents go into one parquet file with a single ``text``
column, in row groups of about ``ROW_GROUP_CHARS`` characters (at least two: the last one is held
out for validation, as FineWeb-Edu's), written once under the state folder
(``text/DIGEST.parquet``, atomically) and read from there by ``FileReader``: the same addressed
windows, budgets, caches and worker process as a dataset over HTTP (``datasource``), with
``os.pread`` for a range GET.

``DIGEST`` is 40 hex digits of the SHA-256 of the documents (each as its UTF-8 length, 8 bytes
little-endian, then its bytes): two servers serve the same ``local:LABEL@DIGEST`` name
(``daisychain.datanames``) only if they hold the same text, in the same order, so a run names
exactly what it trains on. ``LABEL`` is the folder's name, made to fit the name's rules.

Every input that cannot work stops the server at start with a message and a hint
(``TextError``): a folder that does not exist, no supported file in it, a file that is not
UTF-8, a JSON line that is not an object with a string text field (file and line number), a
parquet file without the text column, fewer than two documents.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import struct
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from daisychain import datanames
from daisychain.server.config import DataConfig
from daisychain.server.parquetreader import FineWebReader, UpstreamError, byte_span

SUFFIXES = (".txt", ".md", ".jsonl", ".parquet")
PIECE_CHARS = 100_000
ROW_GROUP_CHARS = 1_000_000
MAX_ROWS_PER_GROUP = 1000
SHARD = "text.parquet"  # the one shard's name inside its folder


class TextError(Exception):
    """Text the server cannot serve: ``message`` and ``hint`` are printed at start."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` made: the parquet file, its name's parts and what went into it."""

    path: Path
    label: str
    digest: str
    documents: int
    files: int
    skipped: int  # files of other kinds, not read

    @property
    def name(self) -> str:
        return datanames.local(self.label, self.digest)


def label_of(folder: Path) -> str:
    """The folder's name as a data name's label: letters, digits, '.', '_', '-'; at most 48."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", folder.resolve().name).strip(".-_")[:48]
    return text if text and text[0].isalnum() else f"text{('-' + text) if text else ''}"[:48]


def _files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
        parts = path.relative_to(folder).parts
        if any(part.startswith(".") for part in parts) or not path.is_file():
            continue
        yield path


def _pieces(text: str) -> Iterator[str]:
    """``text`` cut at blank lines into pieces of at most about ``PIECE_CHARS`` characters (a
    paragraph longer than that is a piece of its own)."""
    if len(text) <= PIECE_CHARS:
        yield text
        return
    piece: list[str] = []
    size = 0
    for paragraph in re.split(r"(?<=\n)\s*\n", text):
        if piece and size + len(paragraph) > PIECE_CHARS:
            yield "".join(piece)
            piece, size = [], 0
        piece.append(paragraph)
        size += len(paragraph)
    if piece:
        yield "".join(piece)


def _read_text(path: Path, folder: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TextError(
            f"{path.relative_to(folder)} is not UTF-8 text (byte {exc.start})",
            "save it as UTF-8, or move it out of the folder",
        ) from None


def _documents_of(path: Path, folder: Path, column: str) -> Iterator[str]:
    where = path.relative_to(folder)
    if path.suffix in (".txt", ".md"):
        yield from _pieces(_read_text(path, folder))
    elif path.suffix == ".jsonl":
        for number, line in enumerate(_read_text(path, folder).splitlines(), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise TextError(
                    f"{where} line {number} is not JSON ({exc})",
                    "each line of a .jsonl file must be one JSON object",
                ) from None
            text = value.get(column) if isinstance(value, dict) else None
            if not isinstance(text, str):
                raise TextError(
                    f"{where} line {number} has no string field {column!r}",
                    f"give each line a {column!r} field, or name the field with --text-column",
                )
            yield text
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path, columns=[column])
        except (pa.ArrowException, KeyError, OSError) as exc:
            raise TextError(
                f"{where} has no readable text column {column!r} ({str(exc)[:120]})",
                "name its text column with --text-column",
            ) from None
        for text in table.column(0).to_pylist():
            if isinstance(text, str):
                yield text


def digest_of(documents: list[str]) -> str:
    """40 hex digits of the SHA-256 of ``documents`` (each: UTF-8 length, 8 bytes LE, bytes)."""
    h = hashlib.sha256()
    for doc in documents:
        raw = doc.encode("utf-8")
        h.update(struct.pack("<Q", len(raw)))
        h.update(raw)
    return h.hexdigest()[:40]


def _row_group_rows(documents: list[str]) -> int:
    """Rows per row group: about ``ROW_GROUP_CHARS`` characters each, at most
    ``MAX_ROWS_PER_GROUP`` rows, and at least two row groups."""
    total = sum(map(len, documents))
    groups = max(2, -(-total // ROW_GROUP_CHARS), -(-len(documents) // MAX_ROWS_PER_GROUP))
    return max(1, -(-len(documents) // groups))


def read_documents(folder: Path, column: str = "text") -> tuple[list[str], int, int]:
    """The documents of ``folder`` (the module's rules), the files read and the files skipped;
    ``TextError`` with a hint for what cannot work. ``daisychain tokenizer --source DIR``
    trains on the same documents."""
    if not folder.is_dir():
        raise TextError(f"--text {folder} is not a folder", "give a folder of .txt, .md, "
                        ".jsonl or .parquet files")  # fmt: skip
    documents: list[str] = []
    files = skipped = 0
    for path in _files(folder):
        if path.suffix not in SUFFIXES:
            skipped += 1
            continue
        files += 1
        documents.extend(d for d in _documents_of(path, folder, column) if d)
    if files == 0:
        raise TextError(
            f"{folder} holds no .txt, .md, .jsonl or .parquet file ({skipped} other files)",
            "put the text to train on in files of those kinds (hidden files are skipped)",
        )
    return documents, files, skipped


def prepare(folder: Path, state_dir: Path, column: str = "text") -> Prepared:
    """Read ``folder`` into documents and write (or find) their parquet file under
    ``state_dir`` (blocking; ``TextError`` with a hint for what cannot work)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    documents, files, skipped = read_documents(folder, column)
    if len(documents) < 2:
        raise TextError(
            f"{folder} holds {len(documents)} document(s); a run needs at least 2 (one part is "
            "held out for validation)",
            "add more text: another file, or more lines of a .jsonl",
        )
    digest = digest_of(documents)
    out = state_dir / "text" / digest / SHARD
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        table = pa.table({"text": pa.array(documents, pa.string())})
        pq.write_table(table, tmp, row_group_size=_row_group_rows(documents), compression="snappy")
        os.replace(tmp, out)  # atomic: a crash leaves no half-written file under the name
    return Prepared(out, label_of(folder), digest, len(documents), files, skipped)


def config_for(prepared: Prepared, base: DataConfig) -> DataConfig:
    """``base`` reading ``prepared``'s file through ``FileReader``."""
    return replace(
        base, repo="", revision=prepared.digest, shards=(SHARD,),
        sizes=(prepared.path.stat().st_size,), split="", text_column="text", reader="file",
        local_dir=str(prepared.path.parent), local_label=prepared.label,
    )  # fmt: skip


class FileReader(FineWebReader):
    """``FineWebReader`` whose range reads are ``os.pread`` of the prepared file."""

    def __init__(
        self, config: DataConfig, session: aiohttp.ClientSession, executor: Executor | None = None
    ) -> None:
        super().__init__(config, session, executor)
        self._root = Path(config.local_dir)

    async def _get(self, shard: str, byte_range: str) -> tuple[bytes, int]:
        return await asyncio.to_thread(self._read, shard, byte_range)

    def _read(self, shard: str, byte_range: str) -> tuple[bytes, int]:
        try:
            with open(self._root / shard, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start, end = byte_span(byte_range, size)
                return os.pread(f.fileno(), end - start, start), size
        except OSError as exc:
            raise UpstreamError(f"cannot read the prepared text {shard}: {exc}") from None
