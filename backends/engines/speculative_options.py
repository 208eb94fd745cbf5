"""Settings of the speculative own-runtime engines (`native-spec`, ...): which native engines are the
target and the draft, and the most tokens to draft. Stdlib only: the CLI's parser and the GUI's form
import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine_settings import EngineSettings, option, whole_number

K_LIMIT = 16  # the most drafts a verify pass checks (its sums are kept per token)


@dataclass(frozen=True)
class SpeculativeOptions(EngineSettings):
    TITLE: ClassVar[str] = "Speculative decoding"
    CLI_TITLE: ClassVar[str] = "the speculative engines (native-spec, ...)"

    target: str | None = option(
        None,
        label="Target",
        placeholder="the engine's own: e.g. native",
        tooltip="the own-runtime engine whose tokens come out (greedy: exactly its own tokens)",
        flag="--spec-target",
        help="the native engine whose output it keeps (default: the engine's own, e.g. native for native-spec)",
    )
    draft: str | None = option(
        None,
        label="Draft",
        placeholder="the engine's own: e.g. native-int8",
        tooltip="the cheaper own-runtime engine that proposes tokens",
        flag="--spec-draft",
        help="the native engine that proposes tokens (default: the engine's own, e.g. native-int8)",
    )
    draft_model: str | None = option(
        None,
        label="Draft model",
        placeholder="the session's model (e.g. distilgpt2 for gpt2)",
        tooltip="another model of the same vocabulary as the draft (a smaller one, or random weights that never "
        "agree: the engine then falls back to the target alone)",
        flag="--spec-draft-model",
        help="the draft's model, if not the session's: a hub id, a folder or random:NAME of GPT-2's vocabulary",
    )
    k: int | None = option(
        None,
        label="Most drafts",
        placeholder=f"8 (1 to {K_LIMIT}; adapts below it)",
        tooltip="the most tokens drafted before a target pass; the engine picks fewer (or none) from the "
        "acceptance and the times it measures",
        flag="--spec-k",
        help=f"the most tokens drafted per target pass, 1 to {K_LIMIT} (default 8; the engine adapts below it)",
    )

    def __post_init__(self) -> None:
        if isinstance(self.k, str):  # the window's form gives text
            object.__setattr__(self, "k", whole_number(self.k))

    def problem(self) -> str:
        if self.k is not None and not (isinstance(self.k, int) and 1 <= self.k <= K_LIMIT):
            return f"--spec-k must be a whole number from 1 to {K_LIMIT}, not {self.k!r}"
        return ""
