"""Settings of the managed vLLM engines: vLLM's own n-gram speculation (its speculative config).
Stdlib only: the CLI's parser and the GUI's form import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine_settings import EngineSettings, option, whole_number

NGRAM_MAX = 4  # prompt_lookup_max: the longest n-gram vLLM looks up
MAX_NGRAM_TOKENS = 32  # proposals a step: past a few dozen a typo's, not a setting (vLLM would take 10**8)


@dataclass(frozen=True)
class VllmOptions(EngineSettings):
    TITLE: ClassVar[str] = "vLLM"
    CLI_TITLE: ClassVar[str] = "the managed vLLM engines"

    ngram_tokens: int | None = option(
        None,
        label="n-gram speculation",
        placeholder="off; e.g. 4 tokens proposed per step",
        tooltip="vLLM's n-gram speculation (prompt lookup): how many tokens it proposes per step from the "
        "sequence itself (num_speculative_tokens of --speculative-config)",
        flag="--vllm-ngram-tokens",
        help="turn on vLLM's n-gram speculation, proposing this many tokens per step (its --speculative-config "
        f'{{"method": "ngram", "num_speculative_tokens": N, "prompt_lookup_max": {NGRAM_MAX}}}); default off',
    )

    def __post_init__(self) -> None:
        if isinstance(self.ngram_tokens, str):  # the window's form gives text
            object.__setattr__(self, "ngram_tokens", whole_number(self.ngram_tokens))

    def problem(self) -> str:
        if self.ngram_tokens is not None and not (
            isinstance(self.ngram_tokens, int) and 1 <= self.ngram_tokens <= MAX_NGRAM_TOKENS
        ):
            return f"--vllm-ngram-tokens must be a whole number from 1 to {MAX_NGRAM_TOKENS}, not {self.ngram_tokens!r}"
        return ""

    def speculative_config(self) -> dict | None:
        """vLLM's --speculative-config, or None (no speculation)."""
        if not self.ngram_tokens:
            return None
        return {"method": "ngram", "num_speculative_tokens": self.ngram_tokens, "prompt_lookup_max": NGRAM_MAX}
