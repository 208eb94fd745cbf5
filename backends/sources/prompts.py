"""Prompts: the user's text, or the bundled text cut to an exact number of tokens."""

from __future__ import annotations

import json
import secrets
from functools import lru_cache

from ..errors import UsageError
from ..storage.paths import PROMPTS_DIR
from .tokenizer import decode, encode


@lru_cache(maxsize=1)
def _source_ids() -> tuple[int, ...]:
    return tuple(encode((PROMPTS_DIR / "bench.txt").read_text(encoding="utf-8")))


def prompt_of_length(n_tokens: int) -> list[int]:
    """The first `n_tokens` tokens of the bundled text (repeated if it is shorter)."""
    if n_tokens < 1:
        raise UsageError(f"prompt must have at least 1 token, got {n_tokens}")
    source = _source_ids()
    repeats = -(-n_tokens // len(source))
    return list((source * repeats)[:n_tokens])


def prompt_ids(text: str | None, n_tokens: int | None) -> list[int]:
    """Token ids for a bench or GUI run. Explicit text wins; otherwise the bundled text."""
    if text is not None:
        if not text.strip():
            raise UsageError("the prompt is empty")
        return encode(text)
    return prompt_of_length(n_tokens or 50)


def example_prompts() -> dict[str, str]:
    return json.loads((PROMPTS_DIR / "examples.json").read_text(encoding="utf-8"))


def example_key(name: str) -> str:
    """An example's name as the command line takes it: "Repeating code" -> "repeating-code"."""
    return "-".join(name.lower().split())


def example_prompt(key: str) -> str:
    """The bundled example prompt named `key` (as example_key writes it, or as the window shows it)."""
    examples = {example_key(name): text for name, text in example_prompts().items()}
    try:
        return examples[example_key(key)]
    except KeyError:
        raise UsageError(f"unknown example prompt {key!r}; examples: {', '.join(examples)}") from None


def prompt_text(ids: list[int]) -> str:
    return decode(ids)


UNIQUE_PREFIX_TOKENS = 2  # random token ids replacing a prompt's first ones
_PREFIX_IDS = (256, 50000)  # ordinary tokens of GPT-2's vocabulary (no byte tokens, no end-of-text)


def unique_prefix(ids: list[int], vocab_size: int) -> list[int]:
    """The prompt with its first tokens replaced by random ones: as many tokens as before, and a
    prefix no server's prefix cache has seen."""
    ids = list(ids)
    count = min(UNIQUE_PREFIX_TOKENS, len(ids))
    low, high = _PREFIX_IDS[0], min(_PREFIX_IDS[1], vocab_size - 1)
    return [low + secrets.randbelow(high - low) for _ in range(count)] + ids[count:]
