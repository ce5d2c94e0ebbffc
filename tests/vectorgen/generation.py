"""The generation golden vectors' checkpoint and cases (tests/vectors/generate/cases.json).

The checkpoint is not stored: it is rebuilt from its recipe (tiny, seed 5, 24 AdamW steps on the
first characters of the built-in corpus), which the contract makes bit-exact anywhere, and its
weight hash must equal the recorded one. The cases (prompt, settings -> ids) were written by the
Python reference; pytest (tests/model/test_generate.py), Node (tests/js/generate.test.mjs) and
Chromium (tests/browser/test_browser_kit.py) check them.

    python tests/vectorgen --write generation                          # regenerate cases.json
    python tests/vectorgen --check generation                          # recompute and compare
    python -m vectorgen.generation OUT.safetensors        # the checkpoint (Node's test)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from daisychain import checkpoint, generate, training
from daisychain.corpus import load_builtin_text
from daisychain.model.config import preset
from daisychain.numerics import exp
from daisychain.optim import AdamWConfig
from daisychain.tokenizer import load_default
from vectorgen.files import SOURCE_DIR, Stale, check_texts, write_texts

FILE = "generate/cases.json"
VECTORS = SOURCE_DIR / FILE
RECIPE: dict[str, Any] = {
    "preset": "tiny",
    "seed": 5,
    "steps": 24,
    "lr": 0.01,
    "warmup_steps": 4,
    "corpus_chars": 60_000,
}
LONG_PROMPT = (
    "And it came to pass, when the evening was come, that the king rose up from his bed and "
    "walked upon the roof of the house: and from the roof he saw the city, the fields, the "
    "river and the hills beyond it, naïve café 日本語 and numbers 12345 (all of it) -- "
) * 3
# (name, prompt, temperature, top_k (None: vocabulary), seed, max_tokens)
CASES: list[tuple[str, str, float, int | None, int, int]] = [
    ("greedy", "The king said", 0.0, None, 1, 24),
    ("greedy-topk1-sampling-seed-ignored", "The king said", 0.0, 1, 99, 24),
    ("topk1-hot", "The king said", 1.5, 1, 3, 24),
    ("t08-k40-s1", "The king said", 0.8, 40, 1, 40),
    ("t08-k40-s2", "The king said", 0.8, 40, 2, 40),
    ("t08-k40-s4294967295", "The king said", 0.8, 40, 4294967295, 40),
    ("t1-vocab-s7", "The king said", 1.0, None, 7, 40),
    ("t1-k2048-s7", "The king said", 1.0, 2048, 7, 40),
    ("t03-k5-s11", "In the beginning", 0.3, 5, 11, 40),
    ("t2-k100-s12", "In the beginning", 2.0, 100, 12, 40),
    ("tiny-temperature", "In the beginning", 1e-30, None, 13, 16),
    ("empty-prompt-greedy", "", 0.0, None, 1, 20),
    ("empty-prompt-sampled", "", 0.9, 50, 21, 40),
    ("long-prompt", LONG_PROMPT, 0.8, 40, 5, 80),
    ("one-token", "x", 1.0, None, 1, 1),
]


# One position of the rule on hand-made logits (float32 bit patterns, so -0 survives):
# (name, logits, temperature, top_k, seed, position). Ties, signed zeros, weights that exp sends
# to +0, a tiny and a large temperature.
_NEG0 = 0x80000000
PICK_CASES: list[tuple[str, list[float | int], float, int, int, int]] = [
    ("tie-greedy-lowest-id", [1.0, 3.0, 3.0, 0.0, 3.0], 0.0, 5, 1, 0),
    ("tie-topk1", [1.0, 3.0, 3.0, 0.0, 3.0], 1.0, 1, 1, 0),
    ("signed-zero-tie", [_NEG0, 0.0, -1.0], 0.0, 3, 1, 0),
    ("signed-zero-topk2", [_NEG0, 0.0, -1.0], 1.0, 2, 9, 4),
    ("exp-underflow", [0.0, -200.0, -90.0, -1.0], 1.0, 4, 3, 2),
    ("tiny-temperature", [0.5, 0.25, 0.125, 0.0], 1e-30, 4, 3, 2),
    ("hot", [2.0, 1.0, 0.5, -0.5, -3.0, 1.5], 50.0, 6, 8, 17),
    *[(f"uniform-seed{s}", [0.0] * 8, 1.0, 8, s, 7) for s in range(6)],
    *[(f"peaked-pos{p}", [4.0, 3.5, 1.0, -2.0, 0.25, 3.75], 0.7, 4, 42, p) for p in range(8)],
]


def _f32_of(value: float | int) -> np.float32:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**31:
        return np.float32(np.array([value], np.uint32).view(np.float32)[0])  # a bit pattern
    return np.float32(value)


# Cases that tell the rule from a near miss (a mirror that forgot one float32 rounding, or used
# <= for <). Such a slip changes the pick only when the threshold lands within an ulp of a
# cumulative weight, so these positions are searched for: the first position (of 2^24) whose
# pick differs between the rule and the slip. (mutant, logits, temperature, top_k, seed)
_U = 2.0**-24


def _weights(row: np.ndarray, t: float, k: int, mutant: str) -> tuple[Any, Any]:
    """(candidates, cumulative weights) as the rule computes them, or as ``mutant`` would."""
    order = generate.candidate_order(row)[:k]
    top = row[order]
    if mutant == "t-unrounded":  # the temperature used as a double
        z = (np.float64(1) * (top - top[0]) / t).astype(np.float32)
    elif mutant == "z-one-rounding":  # l - l0 not rounded before the division
        z = ((top.astype(np.float64) - np.float64(top[0])) / np.float64(np.float32(t))).astype(
            np.float32
        )
    else:
        z = (top - top[0]) / np.float32(t)
    c = np.cumsum(exp(z.astype(np.float32)), dtype=np.float32)
    return order, c


def _uniforms(seed: int, start: int, n: int) -> Any:
    """uniform(key(seed, 5, pos), counter 0) for pos in [start, start + n), vectorized."""
    from daisychain.numerics import prng

    pos = np.arange(start, start + n, dtype=np.uint32)
    k5 = np.uint32(prng.key(seed, generate.SAMPLE_STREAM))
    keys = prng.mix32(k5 ^ prng.mix32(pos + np.uint32(prng.GOLDEN)))
    words = prng.mix32(prng.mix32(keys) + np.uint32(prng.GOLDEN))
    return (words >> np.uint32(8)).astype(np.float64) * _U


def find_position(row: np.ndarray, t: float, k: int, seed: int, mutant: str) -> int:
    order, c = _weights(row, t, k, "rule")
    m_order, m_c = _weights(row, t, k, mutant)
    chunk = 1 << 21
    for start in range(0, 1 << 24, chunk):
        u = _uniforms(seed, start, chunk)
        r = (u * np.float64(c[-1])).astype(np.float32)  # u and S are float32: one rounding
        rule = order[np.searchsorted(c, r, side="right")]
        if mutant == "le":
            slip = order[np.searchsorted(c, r, side="left")]
        elif mutant == "r-unrounded":
            slip = order[np.searchsorted(c.astype(np.float64), u * np.float64(c[-1]), "right")]
        else:
            m_r = (u * np.float64(m_c[-1])).astype(np.float32)
            slip = m_order[np.searchsorted(m_c, m_r, side="right")]
        hits = np.flatnonzero(rule != slip)
        if hits.size:
            return start + int(hits[0])
    raise AssertionError(f"no position tells the rule from {mutant}")


def _row(seed: int, n: int, scale: float) -> list[float | int]:
    """Logits in [-scale/16, 15 scale/16) with full mantissas and several exponents (u^4)."""
    from daisychain.numerics import prng

    u = prng.uniform(prng.key(seed, 0), n)
    v = ((u * u) * (u * u)) * np.float32(scale) - np.float32(scale / 16)
    return [float(x) for x in v.astype(np.float32)]


MUTANT_SEARCH: list[tuple[str, list[float | int], float, int, int]] = [
    ("le", [0.0] * 2048, 1.0, 2048, 3),
    ("r-unrounded", [0.0, -0.5, -1.3], 1.0, 3, 3),
    ("t-unrounded", _row(99, 256, 4.0), 1.00000006, 256, 3),
    ("z-one-rounding", _row(116, 4, 1.0), 0.7, 4, 3),
]


def pick_cases() -> list[dict[str, Any]]:
    out = []
    searched = [
        (f"kills-{m}", row, t, k, seed, find_position(np.array(row, np.float32), t, k, seed, m))
        for m, row, t, k, seed in MUTANT_SEARCH
    ]
    for name, row, temperature, top_k, seed, position in [*PICK_CASES, *searched]:
        logits = np.array([_f32_of(v) for v in row], dtype=np.float32)
        expected = generate.pick(logits, np.float32(temperature), top_k, seed, position)
        out.append(
            {
                "name": name,
                "logits_bits": [int(b) for b in logits.view(np.uint32)],
                "temperature": temperature,
                "top_k": top_k,
                "seed": seed,
                "position": position,
                "id": expected,
            }
        )
    return out


def make_checkpoint(path: Path) -> str:
    """Train the recipe and save it at ``path``; returns the weight hash."""
    tok = load_default()
    cfg = preset(str(RECIPE["preset"]))
    opt = AdamWConfig(lr=float(RECIPE["lr"]), warmup_steps=int(RECIPE["warmup_steps"]))
    tokens = np.array(tok.encode(load_builtin_text()[: int(RECIPE["corpus_chars"])]), np.int64)
    state = training.init(cfg, opt, int(RECIPE["seed"]))
    for _ in range(int(RECIPE["steps"])):
        x, y = training.next_batch(state, tokens)
        training.train_step(state, x, y)
    return checkpoint.save(path, state, tok.sha256)


_CACHE: dict[str, Path] = {}


def golden_checkpoint() -> Path:
    """The golden checkpoint, built once per process in a temporary folder (removed at exit)."""
    if "path" not in _CACHE:
        import atexit
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="dc-golden-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "golden.safetensors"
        digest = make_checkpoint(path)
        expected = json.loads(VECTORS.read_text(encoding="utf-8"))["checkpoint"]["weight_hash"]
        if digest != expected:
            raise Stale(f"the recipe rebuilt {digest}, {VECTORS} records {expected}")
        _CACHE["path"] = path
    return _CACHE["path"]


def compute_cases(path: Path) -> list[dict[str, Any]]:
    tok = load_default()
    ck = checkpoint.load(path, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size)
    out = []
    for name, prompt, temperature, top_k, seed, max_tokens in CASES:
        settings = generate.Settings(temperature, top_k, seed, max_tokens)
        g = generate.generate(ck.state.params, ck.state.cfg, tok, prompt, settings)
        out.append(
            {
                "name": name,
                "prompt": prompt,
                "settings": {
                    "temperature": temperature,
                    "top_k": top_k,
                    "seed": seed,
                    "max_tokens": max_tokens,
                },
                "prompt_ids": g.prompt_ids,
                "ids": g.ids,
                "stop": g.stop,
                "text": g.text,
            }
        )
    return out


def document(path: Path, weight_hash: str) -> dict[str, Any]:
    return {
        "format": "daisychain-generate-vectors",
        "format_version": 1,
        "contract_version": 1,
        "checkpoint": {"recipe": RECIPE, "weight_hash": weight_hash},
        "pick": pick_cases(),
        "cases": compute_cases(path),
    }


def _files() -> dict[str, str]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "golden.safetensors"
        doc = document(path, make_checkpoint(path))
    return {FILE: json.dumps(doc, indent=1, ensure_ascii=False) + "\n"}


def write(directory: Path) -> str:
    return write_texts(directory, _files())


def check(directory: Path) -> str:
    why = (
        "if sampling or training changed on purpose, run "
        "`python tests/vectorgen --write generation`"
    )
    return check_texts(directory, _files(), why)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m vectorgen.generation OUT.safetensors")
    print(make_checkpoint(Path(sys.argv[1])))
