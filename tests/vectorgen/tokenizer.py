"""Golden tokenizer cases (``tests/vectors/tokenizer.json``) for other implementations.

The file is a JSON list of ``{"name", "text", "ids"}`` with the ids of the shipped tokenizer
(``luts/tokenizer.json``; regenerate the file whenever that changes). The JavaScript
mirror (and any other encoder) must reproduce every case; tests/data/test_tokenizer.py regenerates
the list and compares it with the committed file, and checks it against the ``tokenizers`` oracle.

    python tests/vectorgen --write tokenizer    # rewrite tests/vectors/tokenizer.json
    python tests/vectorgen --check tokenizer    # exit 1 if the file is stale
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daisychain.tokenizer.bpe import EOT_TOKEN, Tokenizer
from vectorgen.files import SOURCE_DIR, check_texts, write_texts

FILE = "tokenizer.json"
VECTORS_PATH = SOURCE_DIR / FILE

# name -> text. Each one targets a rule of the pre-splitter or of BPE (docs/TOKENIZER.md).
CASE_TEXTS: dict[str, str] = {
    "empty": "",
    "single_space": " ",
    "single_letter": "a",
    "sentence": "The quick brown fox jumps over the lazy dog.",
    "shakespeare": "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind",
    "contraction": "I don't think it's theirs; we'll see what they've done.",
    "capitals": "HAMLET. LORD POLONIUS! Enter KING CLAUDIUS.",
    "digits_grouping": "1 12 123 1234 12345 1234567890",
    "digits_mixed": "In 1611, v2.0 cost $3.50 (about 42%) on 2024-06-01T12:30:00Z.",
    "leading_space_digits": " 7 77 777",
    "two_spaces_word": "a  b",
    "many_spaces_word": "a      b",
    "spaces_before_punct": "wait   ... what?!",
    "spaces_before_digit": "x   9",
    "trailing_spaces": "end   ",
    "newlines": "one\ntwo\n\nthree\n\n\nfour\n",
    "indent": "def f(x):\n    return x  # comment\n\tpass\n",
    "crlf": "line one\r\nline two\r\n",
    "vertical_tab_form_feed": "a\x0bb\x0cc \x0b d",
    "mixed_whitespace": " \t \n \r\n\t\t x",
    "control_chars": "\x00\x01\x02\x1b[31mred\x1b[0m\x7f\x08",
    "punctuation_run": "--- *** ::: ;;; ??? !!! ((())) [[]] {{}} <<>> @#$%^&*~`|\\",
    "quotes": "\"double\" 'single' `back`",
    "accents": "café naïve résumé Ærøskøbing Ångström façade",
    "greek_cyrillic": "Αλφάβητο και кириллица",
    "cjk": "日本語のテキストと中文文本",
    "korean": "한국어 텍스트",
    "arabic_hebrew": "مرحبا שלום",
    "emoji": "😀 👍🏽 👨‍👩‍👧 🇫🇷",
    "u0085_next_line": "a\u0085b \u0085 c",
    "u00a0_nbsp": "a\u00a0b \u00a0 c\u00a0\u00a0d",
    "ufeff_bom": "\ufeffstart \ufeff mid\ufeff",
    "unicode_spaces": "a\u2003b\u2028c\u3000d",
    "combining": "e\u0301 a\u0308 n\u0303",
    "astral": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 𝄞",
    "letters_then_nonascii": "naïve—em–en “curly” ‘quotes’",
    "eot_alone": EOT_TOKEN,
    "eot_between": f"first document.{EOT_TOKEN}Second document.",
    "eot_partial": "<|endoftext| <|endof",
    "url": "https://example.org/path?q=1&r=two#frag",
    "long_word": "Honorificabilitudinitatibus " * 3,
    "repeated_char": "a" * 100,
}


def long_text() -> str:
    """An 8,000-character mixture for implementations to check beyond the short cases."""
    parts = [text for name, text in sorted(CASE_TEXTS.items()) if name != "empty"]
    body = " ".join(parts)
    return (body * (8_000 // len(body) + 1))[:8_000]


def make_cases(tokenizer: Tokenizer | None = None) -> list[dict[str, Any]]:
    """All golden cases with the ids of ``tokenizer`` (default: the shipped one)."""
    if tokenizer is None:
        from daisychain.tokenizer import load_default

        tokenizer = load_default()
    texts = {**CASE_TEXTS, "long_mixture": long_text()}
    return [
        {"name": name, "text": text, "ids": tokenizer.encode(text)} for name, text in texts.items()
    ]


def render(cases: list[dict[str, Any]]) -> str:
    """The file's exact text: a JSON list, one case per line, ASCII only."""
    lines = [json.dumps(case, ensure_ascii=True) for case in cases]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def _files() -> dict[str, str]:
    from daisychain.tokenizer import load_default

    return {FILE: render(make_cases(load_default()))}


def write(directory: Path) -> str:
    return write_texts(directory, _files())


def check(directory: Path) -> str:
    return check_texts(directory, _files(), "run `python tests/vectorgen --write tokenizer`")
