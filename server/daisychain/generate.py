"""Text generation from a checkpoint under the pinned sampling rule (docs/MODEL.md, "Sampling").

``daisychain generate CHECKPOINT --prompt TEXT --seed N`` prints the prompt and its continuation;
the JavaScript twin (``static/js/model/generate.js``) and the offline inference kit produce the
same token ids for the same checkpoint, prompt, settings and seed, because every step is defined
on the contract: the logits are the contract forward's (bit-exact anywhere), the temperature is
float32 ``-`` and ``/``, the softmax uses the contract's ``exp`` with a left-to-right sum, the
candidates are ordered by (logit descending, id ascending), and the draw comes from the
contract's counter-based PRNG keyed by (seed, position). No platform random number, no platform
transcendental, no float reduction in an unspecified order.

The rule, in short (normative text in MODEL.md):
    context  = prompt ids, or [<|endoftext|>] when the prompt is empty
    per new token at sequence index pos = len(context):
        l = forward_logits(last min(len, seq_len) ids of context)[last position]    (V,)
        order = ids sorted by (l descending, id ascending); cand = order[:top_k]
        T = f32(temperature) == 0: pick cand[0]
        else: z_i = (l[cand_i] - l[cand_0]) / T; p_i = exp(z_i)
              c_i = ((0 + p_0) + p_1) + ... + p_i (float32, left to right); s = c_{k-1}
              u = uniform(key(seed, 5, pos), counter 0); r = u * s
              pick the first cand_i with r < c_i
        stop after max_tokens ids, or right after <|endoftext|> is picked
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from daisychain.model.config import ModelConfig
from daisychain.model.gpt import forward_logits
from daisychain.model.params import Params
from daisychain.numerics import exp, prng

F32 = np.float32
FloatArray = npt.NDArray[np.float32]

SAMPLE_STREAM = 5  # prng.key(seed, SAMPLE_STREAM, position) (NUMERICS.md section 7)
MAX_NEW_TOKENS = 1024  # per request: bounds the work one click or command can ask for
MAX_PROMPT_TOKENS = 4096  # the model sees only the last seq_len of them; the rest is echoed
MAX_TEMPERATURE = 100.0  # a guard against typos: 100 already flattens any trained model's logits

Stop = Literal["length", "eot"]


class GenerateError(ValueError):
    """A generation request that cannot run; the message says what to change."""


@dataclass(frozen=True)
class Settings:
    """Sampling settings, validated on construction (``GenerateError`` with a hint)."""

    temperature: float = 0.8
    top_k: int | None = 40  # None: the whole vocabulary
    seed: int = 1
    max_tokens: int = 100

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise GenerateError(
                f"temperature must be a finite number, got {t!r}; use 0 for greedy decoding"
            )
        if t < 0:
            raise GenerateError(
                f"temperature {t} is negative; use 0 for greedy decoding or a positive value "
                "such as 0.8"
            )
        if t > MAX_TEMPERATURE:
            raise GenerateError(
                f"temperature {t} is above {MAX_TEMPERATURE:g}; such a temperature samples "
                "uniformly among the top-k; lower it (1.0 samples the model's own distribution)"
            )
        for name, value, low, high in (
            ("seed", self.seed, 0, 2**32 - 1),
            ("max_tokens", self.max_tokens, 1, MAX_NEW_TOKENS),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise GenerateError(
                    f"{name} must be an integer in [{low}, {high}], got {value!r}"
                    + ("; ask for fewer tokens per request" if name == "max_tokens" else "")
                )
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise GenerateError(
                f"top_k must be a positive integer (1 = greedy) or omitted for the whole "
                f"vocabulary, got {k!r}"
            )

    @property
    def temperature_f32(self) -> np.float32:
        """The temperature as used: rounded to float32 once."""
        return F32(self.temperature)

    def top_k_for(self, vocab_size: int) -> int:
        """top_k checked against the model's vocabulary (None means all of it)."""
        if self.top_k is None:
            return vocab_size
        if self.top_k > vocab_size:
            raise GenerateError(
                f"top_k {self.top_k} exceeds the vocabulary ({vocab_size} tokens); use at most "
                f"{vocab_size} or omit it"
            )
        return self.top_k


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]  # the prompt's ids (no start token)
    ids: list[int]  # the generated ids, a final <|endoftext|> included when it stopped there
    text: str  # decoded generated ids, without a final <|endoftext|>
    stop: Stop


def candidate_order(logits: FloatArray) -> npt.NDArray[np.intp]:
    """Token ids by logit descending, equal logits by id ascending (+0 and -0 are equal)."""
    if not np.all(np.isfinite(logits)):
        raise GenerateError("the logits are not finite; the checkpoint has diverged")
    # A stable sort of the negated logits keeps equal values in id order.
    order: npt.NDArray[np.intp] = np.argsort(-logits, kind="stable")
    return order


def pick(logits: FloatArray, temperature: np.float32, top_k: int, seed: int, position: int) -> int:
    """The sampling rule for one position: the next id given the last position's logits (V,)."""
    order = candidate_order(logits)
    cand = order[:top_k]
    if temperature == 0:
        return int(cand[0])
    top = logits[cand]  # (K,) descending
    z = (top - top[0]) / temperature  # (K,) two float32 roundings per element, all <= 0
    p = exp(z.astype(np.float32))  # (K,) the contract's exp; p[0] = 1
    c = np.cumsum(p, dtype=np.float32)  # (K,) left to right: ((0 + p0) + p1) + ...
    u = prng.uniform(prng.key(seed, SAMPLE_STREAM, position), 1)[0]
    r = F32(u * c[-1])
    # r < c[-1] always (u <= 1 - 2^-24 and c[-1] >= 1), so some index qualifies.
    index = int(np.argmax(r < c))
    assert r < c[index], "the sampling threshold must fall below the total"
    return int(cand[index])


def _cumsum_is_sequential() -> bool:
    """np.cumsum on float32 must add left to right in float32 (checked once, at import)."""
    x = np.array([1.0, 2.0**-24, 2.0**-24], dtype=np.float32)
    # sequential: (1 + 2^-24) rounds to 1 (tie to even), then again -> 1.0
    return bool(np.cumsum(x, dtype=np.float32)[-1] == F32(1.0))


if not _cumsum_is_sequential():  # pragma: no cover - a numpy that reassociates cumsum
    raise ImportError("numpy's float32 cumsum is not sequential here; the sampling rule needs it")


def steps(
    params: Params,
    cfg: ModelConfig,
    context: Sequence[int],
    settings: Settings,
    eot_id: int | None,
) -> Iterator[int]:
    """Yield generated ids one by one from the context ids (the start token already in place)."""
    if not context:
        raise GenerateError("the context is empty; start from a prompt or the start token")
    top_k = settings.top_k_for(cfg.vocab_size)
    temperature = settings.temperature_f32
    seq = list(context)
    for _ in range(settings.max_tokens):
        window = np.array([seq[-cfg.seq_len :]], dtype=np.int64)  # (1, T')
        logits = forward_logits(params, cfg, window)[0, -1]  # (V,)
        token = pick(logits, temperature, top_k, settings.seed, len(seq))
        seq.append(token)
        yield token
        if token == eot_id:
            return


def start_context(prompt_ids: Sequence[int], eot_id: int | None) -> list[int]:
    """The prompt's ids, or the start token alone when the prompt is empty."""
    if len(prompt_ids) > MAX_PROMPT_TOKENS:
        raise GenerateError(
            f"the prompt is {len(prompt_ids)} tokens, above {MAX_PROMPT_TOKENS}; the model "
            "reads only its last tokens anyway: shorten it"
        )
    if prompt_ids:
        return list(prompt_ids)
    if eot_id is None:
        raise GenerateError(
            "the prompt is empty and this tokenizer has no <|endoftext|> token to start from; "
            "give a prompt"
        )
    return [eot_id]


class TextTokenizer(Protocol):
    """What generation needs from a tokenizer (daisychain.tokenizer.Tokenizer has it)."""

    vocab_size: int
    eot_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def generate(
    params: Params,
    cfg: ModelConfig,
    tokenizer: TextTokenizer,
    prompt: str,
    settings: Settings,
) -> Generation:
    """Continue ``prompt`` under ``settings``; the ids are the same in every implementation."""
    if tokenizer.vocab_size != cfg.vocab_size:
        raise GenerateError(
            f"the tokenizer has {tokenizer.vocab_size} tokens, the model {cfg.vocab_size}; "
            "use the tokenizer the checkpoint was trained with"
        )
    try:
        prompt_ids = tokenizer.encode(prompt)
    except ValueError as exc:
        raise GenerateError(str(exc)) from None
    context = start_context(prompt_ids, tokenizer.eot_id)
    ids = list(steps(params, cfg, context, settings, tokenizer.eot_id))
    stop: Stop = "eot" if ids and ids[-1] == tokenizer.eot_id else "length"
    text = tokenizer.decode(ids[:-1] if stop == "eot" else ids)
    return Generation(prompt_ids, ids, text, stop)


# ----------------------------------------------------------------------------------------------
# command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a .safetensors checkpoint")
    parser.add_argument("--prompt", default="", help="text to continue (empty: a new document)")
    parser.add_argument("--seed", type=int, default=1, help="sampling seed (uint32)")
    parser.add_argument("--max-tokens", type=int, default=100, help="ids to generate (1-1024)")
    parser.add_argument(
        "--temperature", type=float, default=0.8, help="0 = greedy; 1 = the model's distribution"
    )
    parser.add_argument(
        "--top-k", type=int, default=40, help="sample among the k most likely ids (1 = greedy)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON with the ids")


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread while generating.

    Each token's products are small (tiny: at most 64 x 64 x 2048), so BLAS threads cost more
    than they give: on the 2-core development machine under load, 150-200 tokens/s with one
    thread against 17-22 with OpenBLAS's default two. The bits do not depend on it (every product
    is exact).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def run(args: argparse.Namespace) -> int:
    from daisychain import checkpoint
    from daisychain.tokenizer import load_default

    try:
        settings = Settings(args.temperature, args.top_k, args.seed, args.max_tokens)
    except GenerateError as exc:
        print(f"daisychain generate: {exc}", file=sys.stderr)
        return 2
    tok = load_default()
    try:
        ck = checkpoint.load(
            args.checkpoint, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size
        )
    except (checkpoint.CheckpointError, FileNotFoundError) as exc:
        print(f"daisychain generate: {exc}", file=sys.stderr)
        return 2
    state = ck.state
    started = time.perf_counter()
    try:
        with _one_blas_thread():
            out = generate(state.params, state.cfg, tok, args.prompt, settings)
    except GenerateError as exc:
        print(f"daisychain generate: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    if args.json:
        record = {
            "prompt": args.prompt,
            "prompt_ids": out.prompt_ids,
            "ids": out.ids,
            "text": out.text,
            "stop": out.stop,
            "settings": {
                "temperature": settings.temperature,
                "top_k": settings.top_k_for(state.cfg.vocab_size),
                "seed": settings.seed,
                "max_tokens": settings.max_tokens,
            },
            "checkpoint": {"step": ck.step, "weight_hash": ck.weight_hash},
            "elapsed_s": round(elapsed, 4),
            "tokens_per_s": round(len(out.ids) / elapsed, 2) if elapsed > 0 else None,
        }
        print(json.dumps(record, ensure_ascii=False))
    else:
        print(args.prompt + out.text)
        print(
            f"[{len(out.ids)} tokens, stop: {out.stop}, {len(out.ids) / elapsed:.1f} tokens/s]",
            file=sys.stderr,
        )
    return 0
