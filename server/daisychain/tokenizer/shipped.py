"""The shipped tokenizer, ``luts/tokenizer.json``: where it is and the one loaded copy of it.

Its own module so that the package's parts (the corpus cache above all) can load it without
importing the package that imports them.
"""

from __future__ import annotations

import functools

from daisychain.assets import asset_dir
from daisychain.tokenizer.bpe import Tokenizer


def default_path() -> str:
    """Path of the shipped tokenizer, ``luts/tokenizer.json``."""
    return str(asset_dir("luts") / "tokenizer.json")


@functools.cache
def load_default() -> Tokenizer:
    """The shipped tokenizer (loaded once per process)."""
    return Tokenizer.from_file(default_path())
