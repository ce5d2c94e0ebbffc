"""Any Hugging Face parquet dataset as ``/data``'s text (``daisychain serve --dataset``), through
``huggingface_hub``.

``resolve`` turns what the operator typed - ``REPO[@REVISION]``, a split, a text column - into a
``DataConfig`` pinned to one commit: the revision (a branch, a tag or a commit) becomes the
40-hex commit the Hub names for it, the split becomes the sorted list of that commit's parquet
files that belong to it (``split_files``), and the first file's schema must hold the text column
as strings. Every answer that cannot work stops the server at start with a message and a hint
(``DatasetError``): a repository that does not exist or is private without a token, a gated one,
a revision that does not exist, a split with no parquet files (the splits there are, listed), a
column that is missing or not text (the text columns there are, listed). The run's data name is
then ``hf:REPO@COMMIT:SPLIT:COLUMN`` (``daisychain.datanames``), and the addressed windows,
budgets, caches and the worker process are FineWeb-Edu's (``datasource``).

``HubReader`` is ``parquetreader.FineWebReader`` with its range reads made by the library's file
system (``HfFileSystem.cat_file`` of ``datasets/REPO@COMMIT/PATH``, exactly the bytes asked for:
no read-ahead cache), on a thread pool of its own since the library blocks. ``daisychain bench
data`` measures both readers on the same shards (docs/BENCHMARKS.md, "data").

A token (``--hf-token-file``, or ``HF_TOKEN``) goes to the Hub's API and file requests only; it is
never part of ``/api/status``, a log line or anything a page receives.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from daisychain import datanames
from daisychain.server.config import DataConfig
from daisychain.server.parquetreader import FineWebReader, UpstreamError, byte_span

PARQUET_SUFFIX = ".parquet"


class DatasetError(Exception):
    """A dataset the server cannot serve: ``message`` and ``hint`` are printed at start."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class DatasetSpec:
    """What the operator asked for: ``REPO[@REVISION]``, a split and a text column."""

    repo: str
    revision: str | None
    split: str
    text_column: str


def parse_spec(dataset: str, split: str, text_column: str) -> DatasetSpec:
    """``--dataset REPO[@REVISION]`` with ``--split`` and ``--text-column``, checked against the
    data name's rules (``DatasetError`` with a hint)."""
    repo, _, revision = dataset.partition("@")
    if not datanames.REPO_RE.fullmatch(repo) or ".." in repo:
        raise DatasetError(
            f"--dataset {dataset[:80]!r} is not a Hub dataset id",
            "give owner/name as on huggingface.co/datasets/owner/name, optionally @REVISION "
            "(a branch, a tag or a commit)",
        )
    if "@" in dataset and not re.fullmatch(r"[\w.\-/]{1,128}", revision, re.ASCII):
        raise DatasetError(
            f"revision {revision[:80]!r} is not a branch, tag or commit name",
            "give REPO@main, REPO@v1.0 or REPO@<40-hex commit>, or leave @REVISION out (main)",
        )
    if not datanames.SPLIT_RE.fullmatch(split) or ".." in split:
        raise DatasetError(
            f"--split {split[:80]!r} is not a split name",
            "give the split as the dataset names it (train, validation, sample/10BT): letters, "
            "digits, '.', '_', '-', segments joined by '/'",
        )
    if not datanames.COLUMN_RE.fullmatch(text_column):
        raise DatasetError(
            f"--text-column {text_column[:80]!r} is not a column name",
            "give the name of the column holding the text (a letter or '_' first, at most 64)",
        )
    return DatasetSpec(repo, revision or None, split, text_column)


def split_files(paths: Sequence[str], split: str) -> list[str]:
    """The parquet files of ``paths`` that belong to ``split``, sorted: a file whose path starts
    with ``split/`` (``sample/10BT/000.parquet``), has a folder named ``split``
    (``data/train/0.parquet``, ``default/train/0000.parquet``), or whose name starts with
    ``split`` then ``-``, ``_`` or ``.`` (``data/train-00000-of-00002.parquet``): the layouts the
    Hub's dataset viewer reads as splits."""
    chosen = []
    for path in paths:
        if not path.endswith(PARQUET_SUFFIX):
            continue
        folders, _, name = path.rpartition("/")
        if (
            path.startswith(split + "/")
            or split in folders.split("/")
            or re.match(rf"{re.escape(split)}[-_.]", name)
        ):
            chosen.append(path)
    return sorted(chosen)


def split_names(paths: Sequence[str]) -> list[str]:
    """The splits a listing seems to hold, for a hint: folder names of parquet files, and file
    name prefixes before ``-`` (``train-00000-of-00001.parquet``)."""
    names: set[str] = set()
    for path in paths:
        if not path.endswith(PARQUET_SUFFIX):
            continue
        folders, _, name = path.rpartition("/")
        names.update(f for f in folders.split("/") if f and f != "data")
        if "-" in name:
            names.add(name.split("-", 1)[0])
    return sorted(names)[:20]


def resolve(spec: DatasetSpec, base: DataConfig) -> DataConfig:
    """``base`` reading ``spec``'s split of the dataset at its pinned commit (blocking: the Hub's
    API; ``DatasetError`` with a hint for every answer that cannot work)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=base.base_url, token=base.token)
    info = _call(spec, lambda: api.dataset_info(spec.repo, revision=spec.revision,
                                                files_metadata=True))  # fmt: skip
    commit = getattr(info, "sha", None)
    if not isinstance(commit, str) or not datanames.REVISION_RE.fullmatch(commit):
        raise DatasetError(
            f"the Hub named no commit for {spec.repo}@{spec.revision or 'main'}",
            "give the revision as a 40-hex commit: --dataset REPO@COMMIT",
        )
    sizes = {s.rfilename: s.size for s in (info.siblings or []) if s.size is not None}
    files = split_files(list(sizes), spec.split)
    if not files:
        found = split_names(list(sizes))
        raise DatasetError(
            f"{spec.repo} at {commit[:12]} has no parquet files for split {spec.split!r}",
            (f"its parquet files look like splits {', '.join(found)}: pass one with --split"
             if found else "this dataset has no parquet files; DaisyChain reads parquet only "
             "(the Hub converts many datasets: try REPO@refs/convert/parquet)"),
        )  # fmt: skip
    config = replace(
        base, repo=spec.repo, revision=commit, shards=tuple(files),
        sizes=tuple(int(sizes[f]) for f in files), split=spec.split,
        text_column=spec.text_column,
    )  # fmt: skip
    _check_column(config)
    return config


def _call(spec: DatasetSpec, request: Any) -> Any:
    from huggingface_hub import errors

    where = f"{spec.repo}@{spec.revision or 'main'}"
    try:
        return request()
    except errors.GatedRepoError:
        raise DatasetError(
            f"{spec.repo} is gated: its owners must grant access first",
            "accept its terms on huggingface.co, then give the server a token of that account "
            "(--hf-token-file or HF_TOKEN)",
        ) from None
    except errors.RevisionNotFoundError:
        raise DatasetError(
            f"{spec.repo} has no revision {spec.revision!r}",
            "give a branch, a tag or a commit of the dataset (its 'Files and versions' tab)",
        ) from None
    except errors.RepositoryNotFoundError:
        raise DatasetError(
            f"dataset {spec.repo} not found (or it is private and the server has no token that "
            "can read it)",
            "check the id on huggingface.co/datasets; for a private one give the server a token "
            "(--hf-token-file or HF_TOKEN)",
        ) from None
    except _library_errors() as exc:
        raise DatasetError(
            f"cannot ask the Hub about {where}: {str(exc).splitlines()[0][:200]}",
            "check the network (or --data-url), or serve without --dataset",
        ) from None


def read_texts(config: DataConfig, row_groups: int) -> list[str]:
    """The texts of the first ``row_groups`` row groups of ``config``'s files, in file order
    (blocking; ``daisychain tokenizer --source hf:...`` trains on them)."""
    import pyarrow.parquet as pq

    fs = _file_system(config)
    spec = DatasetSpec(config.repo, config.revision, config.split, config.text_column)
    texts: list[str] = []
    left = row_groups

    def read(shard: str, size: int) -> None:
        nonlocal left
        with fs.open(_path(config, shard), "rb", size=size, block_size=8 << 20) as f:
            parquet = pq.ParquetFile(f)
            for group in range(min(left, parquet.num_row_groups)):
                table = parquet.read_row_group(group, columns=[config.text_column])
                texts.extend(t for t in table.column(0).to_pylist() if isinstance(t, str))
                left -= 1

    for shard, size in zip(config.shards, config.sizes, strict=True):
        if left <= 0:
            break
        _call(spec, lambda shard=shard, size=size: read(shard, size))
    return texts


def _library_errors() -> tuple[type[Exception], ...]:
    """What the library raises for an answer it cannot use: its own errors and its HTTP
    client's (refused, timed out), whose base it re-exports as ``errors.HTTPError``."""
    from huggingface_hub import errors

    return (errors.HfHubHTTPError, getattr(errors, "HTTPError", OSError), OSError, ValueError)


def _check_column(config: DataConfig) -> None:
    """The first file's schema holds ``config.text_column`` as text (one footer read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs = _file_system(config)
    spec = DatasetSpec(config.repo, config.revision, config.split, config.text_column)

    def schema() -> Any:
        path, size = _path(config, config.shards[0]), config.sizes[0]
        block = config.footer_probe_bytes
        with fs.open(path, "rb", size=size, cache_type="readahead", block_size=block) as f:
            return pq.ParquetFile(f).schema_arrow

    try:
        found = _call(spec, schema)
    except (pa.ArrowException, ValueError) as exc:
        raise DatasetError(
            f"{config.shards[0]} is not a readable parquet file: {exc}",
            "choose another split or revision of the dataset",
        ) from None
    is_text = (pa.types.is_string, pa.types.is_large_string)
    texts = [f.name for f in found if any(test(f.type) for test in is_text)]
    if config.text_column not in texts:
        what = "is not text" if config.text_column in found.names else "does not exist"
        raise DatasetError(
            f"column {config.text_column!r} of {config.repo} {what} (columns: "
            f"{', '.join(found.names)[:200]})",
            f"pass the text column with --text-column: {', '.join(texts)[:200]}"
            if texts
            else "this split has no text column; choose another dataset or split",
        )


def _file_system(config: DataConfig) -> Any:
    from huggingface_hub import HfFileSystem

    # skip_instance_cache: the library otherwise shares one instance per arguments and thread,
    # with its listings cached: two servers (tests, bench) must not see each other's state.
    return HfFileSystem(endpoint=config.base_url, token=config.token, skip_instance_cache=True)


def _path(config: DataConfig, shard: str) -> str:
    return f"datasets/{config.repo}@{config.revision}/{shard}"


class HubReader(FineWebReader):
    """``FineWebReader`` whose range reads go through ``huggingface_hub``'s file system."""

    def __init__(
        self,
        config: DataConfig,
        session: aiohttp.ClientSession,
        executor: Executor | None = None,
    ) -> None:
        super().__init__(config, session, executor)
        self._fs = _file_system(config)
        self._sizes = dict(zip(config.shards, config.sizes, strict=False))
        # The library blocks: its reads run here, as many at once as the upstream slots allow.
        self._pool = ThreadPoolExecutor(config.max_concurrent_reads, thread_name_prefix="hub-read")

    async def _get(self, shard: str, byte_range: str) -> tuple[bytes, int]:
        async with self._slots:
            loop = asyncio.get_running_loop()
            job = loop.run_in_executor(self._pool, self._read, shard, byte_range)
            try:
                return await asyncio.wait_for(job, self.config.timeout_s)
            except TimeoutError:
                raise UpstreamError("timed out") from None

    def _read(self, shard: str, byte_range: str) -> tuple[bytes, int]:
        try:
            size = self._sizes.get(shard)
            if size is None:
                size = int(self._fs.info(_path(self.config, shard))["size"])
                self._sizes[shard] = size
            start, end = byte_span(byte_range, size)
            data = self._fs.cat_file(
                _path(self.config, shard), start=start, end=end, cache_type="none", size=size
            )
        except _library_errors() as exc:
            raise UpstreamError(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
        return bytes(data), size

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
