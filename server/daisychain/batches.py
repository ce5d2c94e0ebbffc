"""Seeded batch sampling from a token stream (docs/MODEL.md, "Batches").

Every peer derives its own batch for a step from (seed, step, rank) alone, so no data needs to be
agreed on the wire beyond the token stream itself.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.numerics import prng

BATCH_STREAM = 1  # prng.key(seed, BATCH_STREAM, step, rank)

IntArray = npt.NDArray[np.int64]


def sample_offsets(
    n_tokens: int, batch: int, seq_len: int, seed: int, step: int, rank: int = 0
) -> IntArray:
    """Offsets ``prng.below(prng.key(seed, 1, step, rank), batch, n_tokens - seq_len - 1)``."""
    bound = n_tokens - seq_len - 1
    if bound < 1:
        raise ValueError(
            f"token stream of {n_tokens} tokens is too short for sequences of {seq_len} "
            f"(needs at least {seq_len + 2}); load more text or lower seq_len"
        )
    return prng.below(prng.key(seed, BATCH_STREAM, step, rank), batch, bound)


def sample_batch(
    tokens: npt.NDArray[np.integer],
    batch: int,
    seq_len: int,
    seed: int,
    step: int,
    rank: int = 0,
) -> tuple[IntArray, IntArray]:
    """(x, y), each (batch, seq_len) int64: x = tokens[o:o+T], y = tokens[o+1:o+T+1]."""
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tokens.shape}")
    offsets = sample_offsets(len(tokens), batch, seq_len, seed, step, rank)
    idx = offsets[:, None] + np.arange(seq_len + 1, dtype=np.int64)[None, :]  # (B, T + 1)
    window = tokens[idx].astype(np.int64)
    return window[:, :-1], window[:, 1:]


def builtin_tokens(max_chars: int | None = None) -> tuple[IntArray, int]:
    """Token ids of the built-in corpus (its first ``max_chars`` characters) and the vocab size.

    Uses the shipped BPE tokenizer; where this build has none (``daisychain.tokenizer`` without
    ``load_default``) it falls back to the UTF-8 bytes (vocabulary 256).
    """
    from daisychain.corpus import load_builtin_text

    text = load_builtin_text()
    if max_chars is not None:
        text = text[:max_chars]
    try:
        from daisychain.tokenizer import load_default
    except ImportError:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64), 256
    tokenizer = load_default()
    return np.asarray(tokenizer.encode(text), dtype=np.int64), int(tokenizer.vocab_size)
