"""Byte-level BPE tokenizer with an ASCII-class pre-splitter (spec: docs/TOKENIZER.md).

``load_default()`` gives the shipped tokenizer (``luts/tokenizer.json``), ``Tokenizer.from_file``
any other; ``encode_corpus_cached`` tokenizes a corpus once and keeps the ids in a cache folder.
The Hugging Face ``tokenizers`` library loading the same file is the oracle this encoder matches.
"""

from __future__ import annotations

from daisychain.tokenizer.bpe import EOT_TOKEN, Tokenizer, TokenizerFileError
from daisychain.tokenizer.cache import cache_dir, encode_corpus_cached
from daisychain.tokenizer.pretokenize import SPLIT_PATTERN, split_bytes
from daisychain.tokenizer.shipped import default_path, load_default

__all__ = [
    "EOT_TOKEN",
    "SPLIT_PATTERN",
    "Tokenizer",
    "TokenizerFileError",
    "cache_dir",
    "default_path",
    "encode_corpus_cached",
    "load_default",
    "split_bytes",
]
