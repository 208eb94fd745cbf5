"""The real GPT-2 tokenizer, shipped in resources/, and incremental detokenization."""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from tokenizers import ByteLevelBPETokenizer

from ..storage.paths import TOKENIZER_DIR

EOS_ID = 50256
REPLACEMENT = "\ufffd"


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> ByteLevelBPETokenizer:
    return ByteLevelBPETokenizer(str(TOKENIZER_DIR / "vocab.json"), str(TOKENIZER_DIR / "merges.txt"))


def encode(text: str) -> list[int]:
    return gpt2_tokenizer().encode(text).ids


def decode(ids: Sequence[int]) -> str:
    return gpt2_tokenizer().decode(list(ids), skip_special_tokens=False)


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, holding back half-finished characters.

    Byte-level BPE splits one UTF-8 character over several tokens; decoding them one by one
    would print replacement characters. We decode a short window and emit only the new text
    once it no longer ends in U+FFFD (the approach of vLLM and TGI).
    """

    def __init__(self, prompt_ids: Sequence[int] = ()) -> None:
        self._ids: list[int] = list(prompt_ids[-8:])
        self._read = len(self._ids)  # ids up to here have been emitted
        self._prefix = max(0, self._read - 4)  # context kept so merges decode the same way

    def push(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        before = decode(self._ids[self._prefix : self._read])
        after = decode(self._ids[self._prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        self._trim()
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back at the end of a stream (possibly U+FFFD)."""
        before = decode(self._ids[self._prefix : self._read])
        after = decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return after[len(before) :]

    def _trim(self) -> None:
        # Keep the window short so each push costs the same at token 10 and token 1,000.
        drop = self._prefix
        if drop > 64:
            self._ids = self._ids[drop:]
            self._prefix -= drop
            self._read -= drop
