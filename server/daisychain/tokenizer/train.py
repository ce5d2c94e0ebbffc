"""``daisychain tokenizer``: train the byte-level BPE tokenizer and measure vocabulary sizes.

Training uses the Hugging Face ``tokenizers`` library (its BPE trainer, the pre-splitter of
``daisychain.tokenizer.pretokenize`` as a ``Split`` pre-tokenizer, then ``ByteLevel`` with its
own regex off). The saved ``luts/tokenizer.json`` is at once our encoder's input and the oracle
the tests compare it with. See docs/TOKENIZER.md for the id layout and the measurement.

    daisychain tokenizer --vocab-size 2048 --out luts/tokenizer.json   # the shipped file
    daisychain tokenizer --measure                                      # the vocabulary table

Sources: ``builtin`` (the training part of the built-in corpus, default), ``fineweb`` (a few
FineWeb-Edu row groups over HTTP; needs a connection), a path to a UTF-8 text file, a folder
of ``.txt``, ``.md``, ``.jsonl`` and ``.parquet`` files (the documents ``daisychain serve --text``
would serve: ``server/localtext.py``), or ``hf:REPO[@REVISION]``, the first row groups of a
Hugging Face parquet dataset's split (read as ``serve --dataset`` reads it). A tokenizer trained
on your own text is written where ``--out`` says (never over the shipped file, which only
``--source builtin`` rewrites), and a run uses it when every headless peer is started with
``--tokenizer PATH``: the run names it by its SHA-256 (``config.tokenizer_sha256``), and a peer
with another tokenizer refuses the run.

    daisychain tokenizer --source notes/ --vocab-size 1024 --out notes-tokenizer.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daisychain.assets import asset_dir
from daisychain.tokenizer.pretokenize import SPLIT_PATTERN

EOT_TOKEN = "<|endoftext|>"
MEASURE_SIZES = (512, 1024, 2048, 4096, 8192)

# FineWeb-Edu sample/10BT, pinned to one commit of the dataset repository.
FINEWEB_REVISION = "87f09149ef4734204d70ed1d046ddc9ca3f2b8f9"
FINEWEB_URL = (
    "https://huggingface.co/datasets/HuggingFaceFW/fineweb-edu/resolve/{revision}/"
    "sample/10BT/000_00000.parquet"
)

# The model the vocabulary is chosen for (docs/TOKENIZER.md): width 256, 4 layers.
COST_WIDTH = 256
COST_LAYERS = 4


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            "training the tokenizer needs the `tokenizers` library: pip install tokenizers"
        ) from exc
    return tokenizers


def train_tokenizer(texts: Iterator[str], vocab_size: int) -> Any:
    """Train a ``tokenizers.Tokenizer`` with ``vocab_size`` ids in all.

    Ids: 0..255 are the 256 single bytes (in the ByteLevel alphabet order the trainer assigns),
    then one id per merge in merge order, and ``vocab_size - 1`` is ``<|endoftext|>``.
    """
    if vocab_size % 64 != 0 or vocab_size < 320:
        raise ValueError(f"vocab size must be a multiple of 64 and at least 320, got {vocab_size}")
    tk = _import_tokenizers()
    models, pre_tokenizers, decoders, trainers = (
        tk.models,
        tk.pre_tokenizers,
        tk.decoders,
        tk.trainers,
    )
    tokenizer = tk.Tokenizer(models.BPE(ignore_merges=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tk.Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # the last id is left for <|endoftext|>
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    got = tokenizer.get_vocab_size()
    if got != vocab_size - 1:
        raise ValueError(
            f"the trainer produced {got} ids instead of {vocab_size - 1}: the training text is "
            "too small for this vocabulary; use more text or a smaller --vocab-size"
        )
    tokenizer.add_special_tokens([EOT_TOKEN])
    return tokenizer


def pieces(text: str, size: int = 1 << 20) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, each ending just after a newline."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def fineweb_text(url: str, row_groups: int) -> str:
    """Text of the first ``row_groups`` row groups of one FineWeb-Edu shard, over HTTP."""
    try:
        import fsspec
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise SystemExit(
            "--source fineweb needs pyarrow and fsspec (pip install pyarrow fsspec aiohttp)"
        ) from exc
    try:
        with fsspec.open(url, "rb", block_size=8 << 20) as handle:
            parquet = pq.ParquetFile(handle)
            count = min(row_groups, parquet.num_row_groups)
            texts: list[str] = []
            for index in range(count):
                table = parquet.read_row_group(index, columns=["text"])
                texts.extend(str(value) for value in table.column("text").to_pylist())
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"could not read FineWeb-Edu from {url}: {exc}\n"
            "hint: this needs a connection to huggingface.co; offline, train on the built-in "
            "corpus (--source builtin) or on a local text file (--source PATH)"
        ) from exc
    return "\n\n".join(texts)


def hub_text(dataset: str, args: argparse.Namespace) -> str:
    """The first ``--fineweb-row-groups`` row groups of a Hub dataset's split (``hf:REPO[@REV]``,
    ``--split``, ``--text-column``), resolved and read as ``serve --dataset`` reads it
    (``server/hubdataset.py``: ``huggingface_hub``, the token in ``$HF_TOKEN``)."""
    import os

    from daisychain.server import hubdataset
    from daisychain.server.config import DataConfig

    base = DataConfig(base_url=args.data_url, token=os.environ.get("HF_TOKEN") or None)
    try:
        spec = hubdataset.parse_spec(dataset, args.split, args.text_column)
        config = hubdataset.resolve(spec, base)
        texts = hubdataset.read_texts(config, args.fineweb_row_groups)
    except hubdataset.DatasetError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    print(f"read {len(texts)} documents of {config.name}", file=sys.stderr)
    return "\n\n".join(texts)


def load_source(source: str, fineweb_revision: str, row_groups: int,
                args: argparse.Namespace | None = None) -> tuple[str, str]:  # fmt: skip
    """(training text, held-out text) for ``source``; held-out is the last 5 % of the text."""
    from daisychain.corpus import load_builtin_text, split_train_val

    if source.startswith("hf:") and args is not None:
        text = hub_text(source[3:], args)
    elif source == "builtin":
        text = load_builtin_text()
    elif source == "fineweb":
        text = fineweb_text(FINEWEB_URL.format(revision=fineweb_revision), row_groups)
    else:
        path = Path(source)
        if path.is_dir():
            text = folder_text(path)
        elif path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise SystemExit(
                    f"--source {source}: not UTF-8 text (byte {exc.start})\nhint: save it as UTF-8"
                ) from None
        else:
            raise SystemExit(
                f"--source {source!r}: no such file or folder\n"
                "hint: use builtin, fineweb, a UTF-8 text file or a folder of text files"
            )
    return split_train_val(text)


def folder_text(folder: Path) -> str:
    """The documents of ``folder`` (``serve --text``'s rules), one after another."""
    from daisychain.server.localtext import TextError, read_documents

    try:
        documents, _files, _skipped = read_documents(folder)
    except TextError as exc:
        raise SystemExit(f"{exc.message}\nhint: {exc.hint}") from None
    return "\n\n".join(documents)


def flops_per_token(vocab_size: int, width: int = COST_WIDTH, layers: int = COST_LAYERS) -> int:
    """Training FLOPs per token, 6 * (12 L C^2 + C V): blocks plus the logits product."""
    return 6 * (12 * layers * width * width + width * vocab_size)


def measure(train_text: str, val_text: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """For each size: bytes per token on ``val_text`` and the training cost per byte."""
    val_bytes = len(val_text.encode("utf-8"))
    rows: list[dict[str, Any]] = []
    for size in sizes:
        started = time.perf_counter()
        tokenizer = train_tokenizer(pieces(train_text), size)
        train_ids = [enc.ids for enc in tokenizer.encode_batch(list(pieces(train_text)))]
        counts = [0] * size
        for ids in train_ids:
            for token in ids:
                counts[token] += 1
        val_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(list(pieces(val_text))))
        bytes_per_token = val_bytes / val_tokens
        flops = flops_per_token(size)
        learned = sorted(counts[256 : size - 1])  # merged tokens only (not bytes, not EOT)
        rows.append(
            {
                "vocab_size": size,
                "val_bytes_per_token": round(bytes_per_token, 4),
                "flops_per_token": flops,
                "flops_per_byte": round(flops / bytes_per_token),
                "logits_share": round(6 * COST_WIDTH * size / flops, 4),
                "train_tokens": sum(counts),
                "rarest_merged_token_count": learned[0] if learned else 0,
                "merged_tokens_seen_under_100_times": sum(1 for c in learned if c < 100),
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab-size", type=int, default=2048, help="ids in all (default 2048)")
    parser.add_argument(
        "--source",
        default="builtin",
        help="builtin (default), fineweb (needs a connection), a UTF-8 text file, a folder of "
        ".txt/.md/.jsonl/.parquet files, or hf:REPO[@REVISION], a Hugging Face parquet dataset "
        "(--split, --text-column; a few row groups: --fineweb-row-groups)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write tokenizer.json (default with --source builtin: the shipped "
        "luts/tokenizer.json; any other source needs --out)",
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="print bytes/token and cost per byte for several vocabulary sizes as JSON",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in MEASURE_SIZES),
        help="comma-separated sizes for --measure",
    )
    parser.add_argument("--fineweb-revision", default=FINEWEB_REVISION)
    parser.add_argument("--fineweb-row-groups", type=int, default=4)
    parser.add_argument("--split", default="train", help="with --source hf:...: the split")
    parser.add_argument(
        "--text-column", default="text", help="with --source hf:...: the column of the text"
    )
    parser.add_argument(
        "--data-url", default="https://huggingface.co", help="with --source hf:...: the Hub"
    )


def run(args: argparse.Namespace) -> int:
    train_text, val_text = load_source(
        args.source, args.fineweb_revision, args.fineweb_row_groups, args
    )
    if args.measure:
        sizes = tuple(int(s) for s in args.sizes.split(","))
        rows = measure(train_text, val_text, sizes)
        best = min(rows, key=lambda row: (row["flops_per_byte"], row["vocab_size"]))
        print(json.dumps({"source": args.source, "rows": rows, "cheapest": best["vocab_size"]}))
        return 0
    if args.out is None and args.source != "builtin":
        # The shipped file is every default peer's tokenizer: only the shipping recipe rewrites it.
        print(
            f"daisychain tokenizer: --source {args.source} needs --out\n"
            "hint: --out my-tokenizer.json, then start every peer of the run with "
            "--tokenizer my-tokenizer.json",
            file=sys.stderr,
        )
        return 2
    out: Path = args.out if args.out is not None else asset_dir("luts") / "tokenizer.json"
    try:
        tokenizer = train_tokenizer(pieces(train_text), args.vocab_size)
    except ValueError as exc:
        hint = "more text, or a smaller --vocab-size (a multiple of 64, at least 320)"
        print(f"daisychain tokenizer: {exc}\nhint: {hint}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tokenizer.save(str(tmp), pretty=True)
    os.replace(tmp, out)  # a crash never leaves half a tokenizer under the name
    from daisychain.tokenizer import Tokenizer

    sha = Tokenizer.from_file(out).sha256
    print(
        f"wrote {out} ({args.vocab_size} ids, trained on {args.source}; sha256 {sha})\n"
        f"use it in a run: start every headless peer with --tokenizer {out}",
        file=sys.stderr,
    )
    return 0
