"""Settings of `hf-assisted` (transformers' assisted generation). Stdlib only: the CLI's parser and
the GUI's form import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine_settings import EngineSettings, option

# transformers' own defaults for an assistant (GenerationConfig._get_default_generation_params)
DEFAULT_TOKENS = 20
DEFAULT_CONFIDENCE = 0.4


@dataclass(frozen=True)
class AssistedOptions(EngineSettings):
    TITLE: ClassVar[str] = "transformers assisted generation"
    CLI_TITLE: ClassVar[str] = "hf-assisted (transformers' assisted generation)"

    assistant_tokens: int | None = option(
        None,
        label="Draft tokens",
        placeholder=f"{DEFAULT_TOKENS} (transformers' default)",
        tooltip="num_assistant_tokens: the most tokens the int8 assistant drafts before the model checks them",
        flag="--hf-assistant-tokens",
        help=f"num_assistant_tokens (default {DEFAULT_TOKENS}, transformers' own)",
    )
    assistant_confidence: float | None = option(
        None,
        label="Confidence threshold",
        placeholder=f"{DEFAULT_CONFIDENCE} (transformers' default; 0: off)",
        tooltip="assistant_confidence_threshold: the assistant stops drafting at a token it is less sure of; "
        "random weights' flat logits stop it after one token (0 turns it off)",
        flag="--hf-assistant-confidence",
        help=f"assistant_confidence_threshold (default {DEFAULT_CONFIDENCE}, transformers' own; 0: off)",
    )

    def __post_init__(self) -> None:
        for name, kind in (("assistant_tokens", int), ("assistant_confidence", float)):
            value = getattr(self, name)
            if isinstance(value, str):  # the window's form gives text
                try:
                    object.__setattr__(self, name, kind(value.strip()) if value.strip() else None)
                except ValueError:
                    pass  # problem() says so

    def problem(self) -> str:
        tokens, confidence = self.assistant_tokens, self.assistant_confidence
        if tokens is not None and not (isinstance(tokens, int) and tokens >= 1):
            return f"--hf-assistant-tokens must be a whole number >= 1, not {tokens!r}"
        if confidence is not None and not (isinstance(confidence, float | int) and 0 <= confidence < 1):
            return f"--hf-assistant-confidence must be a number from 0 to below 1, not {confidence!r}"
        return ""
