"""Our byte-level BPE encoder and decoder, in pure Python, reading ``luts/tokenizer.json``.

The contract (docs/TOKENIZER.md) is that it returns exactly the ids of the Hugging Face
``tokenizers`` library loading the same file, which the tests use as the oracle:

1. The literal text ``<|endoftext|>`` is the end-of-text token (the oracle extracts added tokens
   before anything else); the text between such occurrences is encoded as follows.
2. The UTF-8 bytes are cut by the ASCII-class pre-splitter (``pretokenize.split_bytes``).
3. Each chunk starts as one id per byte; the adjacent pair with the lowest merge rank is merged
   everywhere, left to right, until no adjacent pair has a merge.

Step 3 depends only on the chunk, so results are cached per chunk: a 10 MB text has a few
hundred thousand distinct chunks, and encoding it takes seconds.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from daisychain.tokenizer.pretokenize import SPLIT_PATTERN, split_bytes

EOT_TOKEN = "<|endoftext|>"
_EOT_BYTES = EOT_TOKEN.encode("ascii")


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (the ByteLevel alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class TokenizerFileError(ValueError):
    """``tokenizer.json`` is not a tokenizer this encoder reproduces exactly."""


class Tokenizer:
    """Byte-level BPE with the ASCII-class pre-splitter; ids identical to the ``tokenizers``
    library on the same file."""

    def __init__(self, raw: bytes, origin: str = "<bytes>") -> None:
        self.sha256: str = hashlib.sha256(raw).hexdigest()
        self.origin = origin
        spec = json.loads(raw.decode("utf-8"))
        self._check_pipeline(spec, origin)
        char_to_byte = {c: b for b, c in byte_to_unicode().items()}
        vocab: dict[str, int] = spec["model"]["vocab"]
        added = {entry["content"]: entry["id"] for entry in spec["added_tokens"]}
        size = max([*vocab.values(), *added.values()]) + 1
        token_bytes: list[bytes | None] = [None] * size
        for text, token_id in vocab.items():
            try:
                token_bytes[token_id] = bytes(char_to_byte[c] for c in text)
            except KeyError as exc:
                raise TokenizerFileError(
                    f"{origin}: vocab entry {text!r} is not in the ByteLevel alphabet"
                ) from exc
        for text, token_id in added.items():
            token_bytes[token_id] = text.encode("utf-8")
        missing = [i for i, b in enumerate(token_bytes) if b is None]
        if missing:
            raise TokenizerFileError(f"{origin}: ids {missing[:5]} have no token")
        self._token_bytes: list[bytes] = [b for b in token_bytes if b is not None]
        self.vocab_size: int = size
        self.eot_id: int | None = added.get(EOT_TOKEN)
        self._byte_ids: list[int] = []
        for b in range(256):
            byte_token = vocab.get(byte_to_unicode()[b])
            if byte_token is None:
                raise TokenizerFileError(
                    f"{origin}: byte 0x{b:02X} has no token; train with "
                    "initial_alphabet=ByteLevel.alphabet()"
                )
            self._byte_ids.append(byte_token)
        # (left id, right id) -> (rank, merged id)
        self._merges: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, merge in enumerate(spec["model"]["merges"]):
            left, right = merge.split(" ") if isinstance(merge, str) else merge
            self._merges[(vocab[left], vocab[right])] = (rank, vocab[left + right])
        self._cache: dict[bytes, tuple[int, ...]] = {}

    @staticmethod
    def _check_pipeline(spec: dict[str, Any], origin: str) -> None:
        """Refuse files whose pipeline differs from the one this encoder implements."""
        model = spec.get("model", {})
        pre = spec.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
        problems: list[str] = []
        if model.get("type") != "BPE":
            problems.append(f"model type {model.get('type')!r} is not BPE")
        if model.get("ignore_merges") or model.get("byte_fallback") or model.get("dropout"):
            problems.append("ignore_merges, byte_fallback and dropout must be off")
        if spec.get("normalizer") is not None:
            problems.append("a normalizer is set")
        if (
            len(steps) != 2
            or steps[0].get("type") != "Split"
            or steps[0].get("pattern") != {"Regex": SPLIT_PATTERN}
            or steps[0].get("behavior") != "Isolated"
            or steps[0].get("invert")
            or steps[1].get("type") != "ByteLevel"
            or steps[1].get("use_regex")
            or steps[1].get("add_prefix_space")
        ):
            problems.append("the pre-tokenizer is not Split(SPLIT_PATTERN) + ByteLevel(no regex)")
        if any(entry["content"] != EOT_TOKEN for entry in spec.get("added_tokens", [])):
            problems.append(f"added tokens other than {EOT_TOKEN} are present")
        if problems:
            raise TokenizerFileError(
                f"{origin}: {'; '.join(problems)}. Retrain it with `daisychain tokenizer`."
            )

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"tokenizer file {path} not found; train one with `daisychain tokenizer --out "
                f"{path}` or use the shipped luts/tokenizer.json"
            ) from exc
        return cls(raw, origin=str(path))

    def _bpe(self, chunk: bytes) -> tuple[int, ...]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = [self._byte_ids[b] for b in chunk]
        merges = self._merges
        while len(ids) > 1:
            best_rank = -1
            best_pair = (0, 0)
            merged = 0
            for pair in itertools.pairwise(ids):
                found = merges.get(pair)
                if found is not None and (best_rank < 0 or found[0] < best_rank):
                    best_rank, merged = found
                    best_pair = pair
            if best_rank < 0:
                break
            left, right = best_pair
            out: list[int] = []
            i = 0
            last = len(ids) - 1
            while i <= last:
                if i < last and ids[i] == left and ids[i + 1] == right:
                    out.append(merged)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        result = tuple(ids)
        if len(self._cache) < 1_000_000:
            self._cache[chunk] = result
        return result

    def _encode_plain(self, data: bytes, out: list[int]) -> None:
        for chunk in split_bytes(data):
            out.extend(self._bpe(chunk))

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids for UTF-8 ``data`` (any bytes are accepted: the splitter never decodes)."""
        out: list[int] = []
        parts = data.split(_EOT_BYTES) if self.eot_id is not None else [data]
        for index, part in enumerate(parts):
            if index and self.eot_id is not None:
                out.append(self.eot_id)
            self._encode_plain(part, out)
        return out

    def encode(self, text: str) -> list[int]:
        """Ids for ``text``; a lone surrogate raises ValueError (it has no UTF-8 form)."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"text has a lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}; "
                "it has no UTF-8 encoding (Python and JavaScript would disagree on it): "
                "repair the text first, e.g. text.encode('utf-8', 'replace').decode()"
            ) from None
        return self.encode_bytes(data)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of ``ids`` concatenated (``<|endoftext|>`` gives its literal text)."""
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = [i for i in ids if not 0 <= i < self.vocab_size]
            raise ValueError(f"ids {bad[:5]} are outside 0..{self.vocab_size - 1}")
        token_bytes = self._token_bytes
        return b"".join([token_bytes[i] for i in ids])

    def decode(self, ids: Sequence[int]) -> str:
        """Text for ``ids``; byte sequences that are not UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return self._token_bytes[token_id]

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.origin!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]})"
        )
